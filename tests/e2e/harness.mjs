// Starts the real lmserve binary on a generated model and a free port; used by every e2e test.
// Env: LMSERVE_BIN (default build/lmserve), LMSERVE_MODEL (default build/models/tiny-q8_0.gguf).
import { spawn } from 'node:child_process';
import net from 'node:net';

export const BIN = process.env.LMSERVE_BIN ?? 'build/lmserve';
export const MODEL = process.env.LMSERVE_MODEL ?? 'build/models/tiny-q8_0.gguf';

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Returns { url, port, proc, log(), stop(signal) -> exit code }. opts.model overrides MODEL.
// The server caps every reply at --max-tokens (default 1024): a test whose long stream must outlast
// other steps passes '--max-tokens', '40000', since 1,024 tiny-model tokens take ~1 s here and far
// less on a fast machine.
export async function startServer(extraArgs = [], { model = MODEL } = {}) {
  for (let attempt = 0; attempt < 5; attempt++) {
    const port = await freePort();
    const proc = spawn(BIN, [model, '--host', '127.0.0.1', '--port', String(port), ...extraArgs], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let log = '';
    proc.stdout.on('data', (d) => (log += d));
    proc.stderr.on('data', (d) => (log += d));
    let exited = null;
    const exitP = new Promise((r) => proc.on('exit', (code, sig) => { exited = { code, sig }; r(exited); }));
    const url = `http://127.0.0.1:${port}`;
    for (let i = 0; i < 300 && !exited; i++) {
      try {
        const r = await fetch(`${url}/health`);
        if (r.status === 200) {
          return {
            url, port, proc,
            log: () => log,
            exited: () => exited,
            async stop(signal = 'SIGTERM') {
              if (!exited) proc.kill(signal);
              const res = await exitP;
              return res;
            },
          };
        }
      } catch { /* not listening yet */ }
      await sleep(50);
    }
    if (!exited) proc.kill('SIGKILL');
    await exitP;
    if (!/cannot listen/.test(log)) throw new Error(`lmserve did not become ready:\n${log}`);
  }
  throw new Error('no free port for lmserve');
}

// Raw HTTP/1.1 exchange on a fresh socket; resolves { status, headers, body } when the server
// closes or the body is complete (Content-Length or chunked terminator).
export function rawRequest(port, text, { timeoutMs = 30000 } = {}) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    let buf = Buffer.alloc(0);
    const timer = setTimeout(() => { sock.destroy(); reject(new Error('raw request timed out')); }, timeoutMs);
    const finish = () => {
      clearTimeout(timer);
      const s = buf.toString('latin1');
      const i = s.indexOf('\r\n\r\n');
      const head = i >= 0 ? s.slice(0, i) : s;
      const m = /^HTTP\/1\.[01] (\d+)/.exec(head);
      resolve({ status: m ? Number(m[1]) : 0, head, body: i >= 0 ? buf.subarray(i + 4).toString('utf8') : '' });
    };
    sock.on('data', (d) => {
      buf = Buffer.concat([buf, d]);
      const s = buf.toString('latin1');
      const i = s.indexOf('\r\n\r\n');
      if (i < 0) return;
      const cl = /content-length: *(\d+)/i.exec(s.slice(0, i));
      if (cl && buf.length >= i + 4 + Number(cl[1])) { sock.end(); finish(); sock.destroy(); }
      else if (/transfer-encoding: *chunked/i.test(s.slice(0, i)) && s.endsWith('0\r\n\r\n')) { sock.destroy(); finish(); }
    });
    sock.on('end', () => { if (!sock.destroyed) sock.destroy(); finish(); });
    sock.on('error', (e) => { clearTimeout(timer); reject(e); });
    sock.write(text);
  });
}

export function postRaw(port, path, body, headers = {}) {
  const b = Buffer.from(body);
  const h = { Host: '127.0.0.1', 'Content-Type': 'application/json', 'Content-Length': b.length, Connection: 'close', ...headers };
  const head = `POST ${path} HTTP/1.1\r\n` + Object.entries(h).filter(([, v]) => v !== null).map(([k, v]) => `${k}: ${v}`).join('\r\n') + '\r\n\r\n';
  return rawRequest(port, Buffer.concat([Buffer.from(head), b]));
}

// Parses an SSE body into [{event, data}] (data JSON-parsed unless [DONE]).
export function parseSSE(text) {
  const out = [];
  for (const block of text.split('\n\n')) {
    if (!block.trim()) continue;
    let event = null, data = '';
    for (const line of block.split('\n')) {
      if (line.startsWith('event: ')) event = line.slice(7);
      else if (line.startsWith('data: ')) data += line.slice(6);
    }
    out.push({ event, data: data === '[DONE]' ? data : JSON.parse(data) });
  }
  return out;
}

export const USER = [{ role: 'user', content: 'Tell me a story about a cat.' }];

// A whole raw HTTP/1.1 reply: skips interim 1xx responses, then { status, head, body (de-chunked),
// terminated: true/false for a chunked body (saw the final 0-chunk), null otherwise }.
export function parseReply(buf) {
  let s = buf.toString('latin1');
  while (/^HTTP\/1\.1 1\d\d /.test(s)) s = s.slice(s.indexOf('\r\n\r\n') + 4);
  const i = s.indexOf('\r\n\r\n');
  const head = s.slice(0, i);
  let raw = Buffer.from(s.slice(i + 4), 'latin1');
  let body = raw, terminated = null;
  if (/transfer-encoding: *chunked/i.test(head)) {
    const parts = [];
    let at = 0;
    terminated = false;
    for (;;) {
      const nl = raw.indexOf('\r\n', at);
      if (nl < 0) break;
      const n = parseInt(raw.subarray(at, nl).toString('latin1'), 16);
      if (Number.isNaN(n)) break;
      if (n === 0) { terminated = raw.subarray(nl, nl + 4).toString() === '\r\n\r\n'; break; }
      parts.push(raw.subarray(nl + 2, nl + 2 + n));
      at = nl + 2 + n + 2;
    }
    body = Buffer.concat(parts);
  }
  return { status: Number(/^HTTP\/1\.[01] (\d+)/.exec(head)?.[1] ?? 0), head, body: body.toString('utf8'), terminated };
}

// A streaming request on a raw socket (so the test controls reading); resolves once the head
// and the first body bytes arrived.
export function rawStream(port, body) {
  const sock = net.connect(port, '127.0.0.1');
  const payload = Buffer.from(JSON.stringify(body));
  sock.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${payload.length}\r\nConnection: close\r\n\r\n`);
  sock.write(payload);
  const st = { sock, data: Buffer.alloc(0), ended: false };
  sock.on('data', (d) => { st.data = Buffer.concat([st.data, d]); });
  sock.on('end', () => { st.ended = true; });
  sock.on('close', () => { st.ended = true; });
  sock.on('error', () => {});
  return st;
}

// Whitespace runs outside the JSON strings of text, each as [run, the character before it]
// (the tidy-JSON checks: grammar.test.mjs, demo-tidy.test.mjs).
export function jsonGaps(text) {
  const out = [];
  let inStr = false, esc = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (inStr) {
      if (esc) esc = false; else if (ch === '\\') esc = true; else if (ch === '"') inStr = false;
      continue;
    }
    if (ch === '"') { inStr = true; continue; }
    if (/\s/.test(ch)) {
      let j = i;
      while (j < text.length && /\s/.test(text[j])) j++;
      out.push([text.slice(i, j), text[i - 1]]);
      i = j - 1;
    }
  }
  return out;
}
