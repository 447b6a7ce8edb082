// Slow and odd clients (issue 10 items 3, 6, 7; R-CONC-7): absolute head and body deadlines,
// the per-address limit, the key / route / method / Content-Length checked on the head before
// any body byte, and half-closed sockets that still get their whole reply.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { readFileSync } from 'node:fs';
import { startServer, rawRequest, parseSSE, parseReply, USER } from './harness.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const servers = [];
after(async () => {
  for (const s of servers) {
    const r = await s.stop();
    assert.equal(r.code, 0, s.log());
  }
});
async function server(args) {
  const s = await startServer(args);
  servers.push(s);
  return s;
}

// A raw connection that collects everything the server sends until it closes.
function conn(port) {
  const sock = net.connect(port, '127.0.0.1');
  const st = { sock, data: Buffer.alloc(0), closed: false, error: null };
  st.done = new Promise((resolve) => {
    sock.on('data', (d) => { st.data = Buffer.concat([st.data, d]); });
    sock.on('error', (e) => { st.error = e; });
    sock.on('close', () => { st.closed = true; resolve(st); });
  });
  st.connected = new Promise((r) => sock.on('connect', r));
  return st;
}
const statusOf = (buf) => Number((/^HTTP\/1\.[01] (\d+)/.exec(buf.toString('latin1')) || [])[1] || 0);
const bodyOf = (buf) => { const s = buf.toString('utf8'); return s.slice(s.indexOf('\r\n\r\n') + 4); };

// Sends `text` one byte every `ms` until the server closes; resolves with how many bytes went.
async function trickle(st, text, ms) {
  await st.connected;
  let sent = 0;
  while (!st.closed && sent < text.length) {
    st.sock.write(text[sent++]);
    await sleep(ms);
  }
  return sent;
}

test('a head trickled a byte at a time is cut at the absolute --header-timeout (408), not kept alive by each byte', { timeout: 60000 }, async () => {
  const s = await server(['--header-timeout', '2', '--timeout', '30']);
  // 400 bytes at one per 50 ms would take 20 s; each byte restarts an idle timeout, so only an
  // absolute deadline ends this
  const head = 'GET /health HTTP/1.1\r\nHost: x\r\n' + 'X-Pad: ' + 'a'.repeat(370) + '\r\n\r\n';
  const st = conn(s.port);
  const sent = await trickle(st, head, 50);
  await st.done;
  assert.ok(sent < head.length, `the whole head went out (${sent} bytes): never cut`);
  assert.equal(statusOf(st.data), 408);
  assert.match(JSON.parse(bodyOf(st.data)).error.message, /--header-timeout/);
  // an idle connection (sends nothing) is cut the same way
  const idle = conn(s.port);
  await idle.done;
  assert.equal(statusOf(idle.data), 408);
  assert.match(s.log(), /cut \d+ connections: request head not received in time/);
});

test('a body trickled slower than --body-min-rate is cut at its deadline (408 in the dialect)', { timeout: 60000 }, async () => {
  const s = await server(['--body-timeout', '1', '--body-min-rate', '1000']);
  const body = JSON.stringify({ model: 'm', messages: USER, max_tokens: 2, pad: 'p'.repeat(1000) });
  const st = conn(s.port);
  await st.connected;
  st.sock.write(`POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`);
  // deadline: 1 s + ~1030 bytes at 1000 B/s ≈ 2 s; at one byte per 20 ms it would take 20 s
  const sent = await trickle(st, body, 20);
  await st.done;
  assert.ok(sent < body.length, 'the whole body went out: never cut');
  assert.equal(statusOf(st.data), 408);
  const e = JSON.parse(bodyOf(st.data));
  assert.equal(e.type, 'error'); // Anthropic shape: the path was known
  assert.match(e.error.message, /--body-timeout/);
});

test('--conns-per-client: connections beyond it from one address get a prompt 503; others are served', { timeout: 60000 }, async () => {
  const s = await server(['--conns-per-client', '3']);
  const hold = [];
  for (let i = 0; i < 3; i++) {
    const c = conn(s.port);
    await c.connected;
    c.sock.write('GET /health HTTP/1.1\r\nHost: x\r\n'); // unfinished: holds a slot
    hold.push(c);
  }
  await sleep(200);
  const r = await rawRequest(s.port, `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`, { timeoutMs: 5000 });
  assert.equal(r.status, 503);
  assert.match(r.head, /retry-after: 1/i);
  assert.match(JSON.parse(r.body).error.message, /too many connections from your address \(3, --conns-per-client\)/);
  const h = await rawRequest(s.port, 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n', { timeoutMs: 5000 });
  assert.equal(h.status, 200, '/health is answered even for a refused connection');
  for (const c of hold) c.sock.destroy();
  let ok = false;
  for (let i = 0; i < 100 && !ok; i++) {
    const q = await rawRequest(s.port, 'GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', { timeoutMs: 5000 });
    ok = q.status === 200;
    if (!ok) await sleep(50);
  }
  assert.ok(ok, 'slots free again once the holders left');
});

function rssBytes(pid) {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m[1]) * 1024;
}

test('the key, route, method and Content-Length are checked on the head: 12 keyless 8 MB bodies get 401 before the body, memory does not grow', { timeout: 60000 }, async () => {
  const KEY = 'sk-head-first';
  const s = await server(['--api-key', KEY]);
  const before = rssBytes(s.proc.pid);
  const LEN = 8_000_000;
  const chunk = Buffer.alloc(64 * 1024, 0x20);
  const clients = [];
  for (let i = 0; i < 12; i++) {
    const c = conn(s.port);
    await c.connected;
    c.sock.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${LEN}\r\n\r\n`);
    clients.push(c);
  }
  // each keeps sending its body (up to 4 MB) until it has an answer; a server that reads bodies
  // before the key would hold 12 × 4 MB and answer none of them
  let maxRss = before;
  await Promise.all(clients.map(async (c) => {
    for (let sent = 0; sent < LEN / 2 && !c.data.length && !c.closed; sent += chunk.length) {
      if (!c.sock.write(chunk)) await Promise.race([new Promise((r) => c.sock.once('drain', r)), sleep(100)]);
      maxRss = Math.max(maxRss, rssBytes(s.proc.pid));
    }
    for (let i = 0; i < 500 && !c.data.length && !c.closed; i++) await sleep(10);
    c.sock.destroy();
  }));
  for (const c of clients) {
    assert.equal(statusOf(c.data), 401, `got: ${c.data.toString('latin1').slice(0, 80)}`);
    assert.equal(JSON.parse(bodyOf(c.data)).error.type, 'authentication_error');
  }
  const grew = maxRss - before;
  console.log(`# RSS before ${(before / 1e6).toFixed(1)} MB, max while 12 keyless 8 MB bodies were sent ${(maxRss / 1e6).toFixed(1)} MB`);
  assert.ok(grew < 24e6, `RSS grew by ${(grew / 1e6).toFixed(1)} MB`);
  // with the key: a Content-Length over --max-body is a 413 from the head alone; wrong route
  // and method are answered from the head too (none of these send a body byte)
  const auth = `Authorization: Bearer ${KEY}\r\n`;
  const headOnly = async (line, extra = '') => {
    const c = conn(s.port);
    await c.connected;
    c.sock.write(`${line}\r\nHost: x\r\n${auth}Content-Type: application/json\r\nContent-Length: ${LEN * 2}\r\n${extra}\r\n`);
    for (let i = 0; i < 500 && !c.data.length; i++) await sleep(10);
    c.sock.destroy();
    return c;
  };
  const big = await headOnly('POST /v1/messages HTTP/1.1');
  assert.equal(statusOf(big.data), 413);
  assert.equal(JSON.parse(bodyOf(big.data)).error.type, 'request_too_large');
  assert.equal(statusOf((await headOnly('POST /v1/nothing-here HTTP/1.1')).data), 404);
  assert.equal(statusOf((await headOnly('PUT /v1/chat/completions HTTP/1.1')).data), 405);
  // Expect: 100-continue gets the refusal instead of a 100
  const ex = await headOnly('POST /v1/chat/completions HTTP/1.1', 'Expect: 100-continue\r\n');
  assert.equal(statusOf(ex.data), 413);
});

// A request written whole, then shutdown(SHUT_WR) (sock.end()); collects the reply.
function halfClosed(port, path, body) {
  const st = conn(port);
  const b = Buffer.from(JSON.stringify(body));
  st.sock.write(`POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${b.length}\r\nConnection: close\r\n\r\n`);
  st.sock.end(b);
  return st;
}
test('a half-closed client (shutdown(SHUT_WR) after its request) still gets its whole reply: stream, non-stream, queued', { timeout: 60000 }, async () => {
  const s = await server([]);
  const a = halfClosed(s.port, '/v1/chat/completions', { messages: USER, max_tokens: 200, stream: true, temperature: 0 });
  const b = halfClosed(s.port, '/v1/messages', { model: 'm', messages: USER, max_tokens: 20, temperature: 0 });
  const c = halfClosed(s.port, '/v1/responses', { model: 'm', input: 'hi', max_output_tokens: 16, stream: true });
  await Promise.all([a.done, b.done, c.done]);
  const ra = parseReply(a.data), rb = parseReply(b.data), rc = parseReply(c.data);
  assert.equal(ra.status, 200, a.data.toString().slice(0, 200));
  assert.equal(ra.terminated, true);
  const ev = parseSSE(ra.body);
  assert.equal(ev.at(-1).data, '[DONE]');
  assert.equal(ev.at(-2).data.choices[0].finish_reason, 'length');
  assert.equal(rb.status, 200);
  assert.equal(JSON.parse(rb.body).usage.output_tokens, 20);
  assert.equal(rc.status, 200);
  assert.equal(parseSSE(rc.body).at(-1).event, 'response.incomplete');
  const lines = s.log().split('\n').filter((l) => / 499 /.test(l));
  assert.equal(lines.length, 0, `cancelled as a disconnect: ${lines.join('\n')}`);
});

test('a client that closes for good while queued is still cancelled (the 100-continue probe draws its reset)', { timeout: 60000 }, async () => {
  const s = await server(['--queue', '2', '--batch', '1', '--max-tokens', '40000']);
  const long = conn(s.port);
  const lb = Buffer.from(JSON.stringify({ messages: USER, max_tokens: 3000, stream: true, temperature: 0 }));
  long.sock.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${lb.length}\r\n\r\n`);
  long.sock.write(lb);
  for (let i = 0; i < 500 && !long.data.length; i++) await sleep(10);
  const q = conn(s.port);
  const qb = Buffer.from(JSON.stringify({ messages: USER, max_tokens: 7 }));
  q.sock.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${qb.length}\r\n\r\n`);
  q.sock.write(qb);
  const health = async () => (await fetch(`${s.url}/health`)).json();
  for (let i = 0; i < 500 && (await health()).queued !== 1; i++) await sleep(10);
  assert.equal((await health()).queued, 1);
  q.sock.destroy(); // a full close: FIN, then a reset once the server writes
  let queued = 1;
  for (let i = 0; i < 500 && queued; i++) { queued = (await health()).queued; await sleep(10); }
  assert.equal(queued, 0, 'the closed client\'s job left the queue');
  assert.equal((await health()).busy, true, 'the long stream still runs');
  long.sock.destroy();
});
