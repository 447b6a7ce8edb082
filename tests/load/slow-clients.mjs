// Load test (issue 10, R-CONC-7): slow, idle, half-closed, disconnecting and stalled clients mixed
// with normal ones, against the real server on loopback with its default limits. Bounded: about
// 230 connections, about 20 s. Prints what each class received and the normal clients' latency;
// exits 1 if any normal client is refused or times out, or the liveness checks fail: while 16
// trickling and 100 idle connections are open, a normal chat request is answered within 1 s and
// /health within 100 ms (generous functional deadlines; the measured figures are printed).
// Env: LMSERVE_BIN, LMSERVE_MODEL (see tests/e2e/harness.mjs).
import net from 'node:net';
import { startServer, parseReply, USER } from '../e2e/harness.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const N = { trickleHead: 8, trickleBody: 8, idle: 100, flood: 20, halfClosed: 4, disconnecting: 4, stalled: 2, normal: 24 };
const PER_CLIENT = 128; // the server's default --conns-per-client
const WINDOW_MS = 6000;        // normal traffic runs while the slow ones are held open
const NORMAL_TIMEOUT_MS = 10000;

// Loopback has a whole /8: the slow clients come from 127.0.0.2, the odd ones from 127.0.0.3,
// the normal ones and the /health probes from 127.0.0.1, so each class is its own client address
// as in real life (--conns-per-client counts per address).
const SLOW = '127.0.0.2', ODD = '127.0.0.3', NORMAL = '127.0.0.1';
function open(port, from = NORMAL) {
  const sock = net.connect({ port, host: '127.0.0.1', localAddress: from });
  const st = { sock, data: Buffer.alloc(0), closed: false, t0: performance.now(), tClose: 0, err: null };
  st.done = new Promise((resolve) => {
    sock.on('data', (d) => { st.data = Buffer.concat([st.data, d]); });
    sock.on('error', (e) => { st.err = e.code; });
    sock.on('close', () => { st.closed = true; st.tClose = performance.now(); resolve(st); });
  });
  st.connected = new Promise((r) => sock.on('connect', r));
  return st;
}
const head = (path, len, extra = '') =>
  `POST ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${len}\r\n${extra}\r\n`;
const body = (o) => Buffer.from(JSON.stringify(o));
const status = (st) => Number((/^HTTP\/1\.[01] (\d+)/.exec(st.data.toString('latin1')) || [])[1] || 0);

// One request on a fresh connection; resolves { status, ms, complete } once the reply is whole.
function request(port, text, timeoutMs = NORMAL_TIMEOUT_MS) {
  return new Promise((resolve) => {
    const st = open(port);
    const t0 = performance.now();
    let over = false;
    const finish = (why) => {
      if (over) return;
      over = true;
      clearTimeout(timer);
      st.sock.destroy();
      const r = parseReply(st.data);
      resolve({ status: r.status, ms: performance.now() - t0, why, complete: why === 'complete' });
    };
    const timer = setTimeout(() => finish('timeout'), timeoutMs);
    st.sock.on('data', () => {
      const s = st.data.toString('latin1');
      const i = s.indexOf('\r\n\r\n');
      if (i < 0) return;
      const cl = /content-length: *(\d+)/i.exec(s.slice(0, i));
      if (cl && st.data.length >= i + 4 + Number(cl[1])) finish('complete');
      else if (/transfer-encoding: *chunked/i.test(s.slice(0, i)) && s.endsWith('0\r\n\r\n')) finish('complete');
    });
    st.done.then(() => finish(st.data.length ? 'closed' : 'refused'));
    st.sock.write(text);
  });
}

const pct = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s.length ? s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] : NaN; };
const fmt = (xs) => `n=${xs.length} p50=${pct(xs, 50).toFixed(1)} p99=${pct(xs, 99).toFixed(1)} max=${Math.max(...xs).toFixed(1)} ms`;
function tally(list, f) {
  const m = {};
  for (const x of list) { const k = f(x); m[k] = (m[k] || 0) + 1; }
  return Object.entries(m).map(([k, v]) => `${k}×${v}`).join(' ');
}

const srv = await startServer([]);
const P = srv.port;
const failures = [];
try {
  // --- the slow ones, held open through the window ---
  const trickHead = [], trickBody = [], idle = [];
  for (let i = 0; i < N.trickleHead; i++) trickHead.push(open(P, SLOW));
  const tb = body({ messages: USER, max_tokens: 4, pad: 'p'.repeat(900) });
  for (let i = 0; i < N.trickleBody; i++) {
    const st = open(P, SLOW);
    st.sock.write(head('/v1/chat/completions', tb.length));
    trickBody.push(st);
  }
  for (let i = 0; i < N.idle; i++) idle.push(open(P, SLOW));
  await Promise.all([...trickHead, ...trickBody, ...idle].map((s) => s.connected));
  // the same address opens more than --conns-per-client allows: the excess is refused at once
  const flood = [];
  for (let i = 0; i < N.flood; i++) flood.push(open(P, SLOW));
  await Promise.all(flood.map((s) => s.connected));
  for (const st of flood) st.sock.write('GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n');
  const headText = 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ' + 'z'.repeat(200);
  let trickling = true;
  const trickler = (async () => { // one byte per second on each trickling connection
    for (let k = 0; trickling && k < 200; k++) {
      for (const st of trickHead) if (!st.closed) st.sock.write(headText[k]);
      for (const st of trickBody) if (!st.closed) st.sock.write(tb.subarray(k, k + 1));
      await sleep(1000);
    }
  })();
  await sleep(300);

  // --- the proof: one chat request and /health with 16 trickling + 100 idle open ---
  const chatReq = (n) => { const b = body({ messages: USER, max_tokens: n, temperature: 0 }); return head('/v1/chat/completions', b.length) + b; };
  const healthReq = 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
  // up to 3 tries each: the machine running the suite may be shared, and one scheduling hiccup
  // is not what this checks (a server that makes them wait for a slot fails all three)
  const tries = async (text, ms) => {
    const out = [];
    for (let i = 0; i < 3; i++) {
      const r = await request(P, text);
      out.push(r);
      if (r.status === 200 && r.ms < ms) break;
    }
    return out;
  };
  const proofHealth = await tries(healthReq, 100);
  const proofChat = await tries(chatReq(8), 1000);
  const open16 = [...trickHead, ...trickBody].filter((s) => !s.closed).length, open100 = idle.filter((s) => !s.closed).length;
  const show = (rs) => rs.map((r) => `${r.status} in ${r.ms.toFixed(1)} ms`).join(', ');
  console.log(`proof (with ${open16} trickling + ${open100} idle open): /health ${show(proofHealth)}; chat ${show(proofChat)}`);
  if (open16 !== 16 || open100 !== 100) failures.push(`the slow connections were not all open during the proof (${open16}, ${open100})`);
  const ok = (rs, ms) => rs.some((r) => r.status === 200 && r.ms < ms);
  if (!ok(proofHealth, 100)) failures.push('proof: /health not answered within 100 ms');
  if (!ok(proofChat, 1000)) failures.push('proof: chat not answered within 1 s');

  // --- the odd ones ---
  const half = [], disc = [], stalled = [];
  for (let i = 0; i < N.halfClosed; i++) {
    const st = open(P, ODD);
    const b = body({ model: 'm', messages: USER, max_tokens: 12, stream: i % 2 === 0 });
    st.sock.write(head('/v1/messages', b.length));
    st.sock.end(b); // shutdown(SHUT_WR): still wants the reply
    half.push(st);
  }
  for (let i = 0; i < N.disconnecting; i++) {
    const st = open(P, ODD);
    const b = body({ messages: USER, max_tokens: 2000, stream: true });
    st.sock.write(head('/v1/chat/completions', b.length));
    st.sock.write(b);
    setTimeout(() => st.sock.destroy(), 50 + 250 * i); // some while queued, some mid-stream
    disc.push(st);
  }
  for (let i = 0; i < N.stalled; i++) {
    const st = open(P, ODD);
    const b = body({ messages: USER, max_tokens: 60, stream: true, logprobs: true, top_logprobs: 20 });
    st.sock.write(head('/v1/chat/completions', b.length));
    st.sock.write(b);
    st.sock.pause(); // reads nothing until the end
    stalled.push(st);
  }

  // --- normal traffic and /health probes through the window ---
  const normal = [], health = [];
  const tEnd = performance.now() + WINDOW_MS;
  const prober = (async () => {
    while (performance.now() < tEnd) { health.push(await request(P, healthReq, 5000)); await sleep(100); }
  })();
  const worker = async (w) => {
    for (let i = w; i < N.normal; i += 2) {
      const stream = i % 3 === 2;
      const b = i % 2 ? body({ model: 'm', messages: USER, max_tokens: 8, stream }) : body({ messages: USER, max_tokens: 8, stream });
      normal.push(await request(P, head(i % 2 ? '/v1/messages' : '/v1/chat/completions', b.length) + b));
      await sleep(150);
    }
  };
  await Promise.all([worker(0), worker(1), prober]);

  // --- let the slow ones meet their deadlines (header / body deadline 10 s) and wrap up ---
  for (const st of stalled) st.sock.resume();
  const slow = [...trickHead, ...trickBody, ...idle];
  await Promise.race([Promise.all(slow.map((s) => s.done)), sleep(8000)]);
  trickling = false;
  await trickler;
  await Promise.race([Promise.all([...half, ...stalled].map((s) => s.done)), sleep(5000)]);

  const cls = (name, list, f) => console.log(`${name.padEnd(14)} ${String(list.length).padStart(3)}: ${tally(list, f)}`);
  const ended = (s) => !s.closed ? 'still-open' : `${status(s) || 'no-reply'}`;
  cls('trickle-head', trickHead, (s) => `${ended(s)}@${s.closed ? ((s.tClose - s.t0) / 1e3).toFixed(0) + 's' : '-'}`);
  cls('trickle-body', trickBody, (s) => `${ended(s)}@${s.closed ? ((s.tClose - s.t0) / 1e3).toFixed(0) + 's' : '-'}`);
  cls('idle', idle, (s) => `${ended(s)}@${s.closed ? ((s.tClose - s.t0) / 1e3).toFixed(0) + 's' : '-'}`);
  cls('flood', flood, (s) => `${ended(s)}@${s.closed ? ((s.tClose - s.t0) / 1e3).toFixed(0) + 's' : '-'}`);
  const wholeReply = (s) => { const r = parseReply(s.data); return `${r.status}${r.terminated === false ? '-unterminated' : ''}`; };
  cls('half-closed', half, wholeReply);
  cls('disconnecting', disc, (s) => `${status(s) || 'none-yet'}`);
  cls('stalled', stalled, (s) => `${wholeReply(s)}(${(s.data.length / 1e6).toFixed(1)}MB)`);
  cls('normal', normal, (r) => `${r.status}-${r.why}`);
  cls('health', health, (r) => `${r.status}-${r.why}`);
  console.log(`normal latency: ${fmt(normal.map((r) => r.ms))}`);
  console.log(`health latency: ${fmt(health.map((r) => r.ms))}`);
  if (process.env.LOAD_LOG) console.log(srv.log().split('\n').filter((l) => /total_ms=\d{4}/.test(l) || /completions 499|messages 499/.test(l)).join('\n'));

  const bad = normal.filter((r) => r.status !== 200 || !r.complete);
  if (bad.length) failures.push(`${bad.length} normal requests refused / timed out / incomplete`);
  if (health.some((r) => r.status !== 200 || !r.complete)) failures.push('a /health probe failed');
  if (half.some((s) => { const r = parseReply(s.data); return r.status !== 200 || r.terminated === false; })) failures.push('a half-closed client lost its reply');
  if (stalled.some((s) => { const r = parseReply(s.data); return r.status !== 200 || r.terminated !== true; })) failures.push('a stalled client lost its stream');
  if (slow.some((s) => !s.closed)) failures.push('a slow connection outlived its deadline');
  // the slow address holds 116 slots; of the flood, the connections past --conns-per-client are
  // refused with a 503, the others are served (their keep-alive then idles out)
  const refused = flood.filter((s) => status(s) === 503).length;
  const want = N.trickleHead + N.trickleBody + N.idle + N.flood - PER_CLIENT;
  if (refused !== want) failures.push(`flood: ${refused} refused, expected ${want} (--conns-per-client ${PER_CLIENT})`);
  for (const s of [...trickHead, ...trickBody, ...idle, ...flood, ...half, ...disc, ...stalled]) s.sock.destroy();
} finally {
  const r = await srv.stop('SIGTERM');
  if (r.code !== 0) failures.push(`server exit ${r.code} ${r.sig}`);
}
if (failures.length) {
  console.log(`FAIL:\n  ${failures.join('\n  ')}`);
  process.exit(1);
}
console.log('load test passed');
