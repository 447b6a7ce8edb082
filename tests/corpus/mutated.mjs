// The mutated-corpus proof (issue 10): a few thousand mutated request bodies for the three chat
// endpoints (and /v1/completions, /v1/embeddings), sent to a running server three times over;
// every response must be < 500, the server must stay up, and its RSS after pass 3 must be within
// 10 % of its RSS after pass 1.
// Bodies: the request fuzzer's seeds (tests/fuzz/request_seeds.py output, first byte = dialect)
// and its working corpus if present, plus deterministic JSON-aware and byte-level mutations of
// them (seeded PRNG, so a failure reproduces). Usage:
//   node tests/corpus/mutated.mjs PORT PID SEED_DIR [CORPUS_DIR] [COUNT]
// Prints one line of figures; exits 1 on any failure (the offending body saved in /tmp).
import fs from 'node:fs';
import path from 'node:path';

const [port, pid, seedDir, corpusDir, countArg] = process.argv.slice(2);
const COUNT = Number(countArg ?? 3000);
const url = `http://127.0.0.1:${port}`;
// byte 0 of a seed = dialect mod 5, as tests/fuzz/request_seeds.py writes it
const PATHS = ['/v1/chat/completions', '/v1/responses', '/v1/messages', '/v1/completions', '/v1/embeddings'];

let state = 0x9e3779b9;
const rnd = () => { state ^= state << 13; state >>>= 0; state ^= state >>> 17; state ^= state << 5; state >>>= 0; return state / 4294967296; };
const pick = (a) => a[Math.floor(rnd() * a.length)];
const int = (n) => Math.floor(rnd() * n);

function load(dir, limit) {
  if (!dir || !fs.existsSync(dir)) return [];
  return fs.readdirSync(dir).sort().slice(0, limit).map((f) => fs.readFileSync(path.join(dir, f)))
    .filter((b) => b.length > 1).map((b) => ({ d: b[0] % PATHS.length, body: b.subarray(1) }));
}

const seeds = load(seedDir, 1000);
const fuzzed = load(corpusDir, 400);
if (seeds.length === 0) { console.error('no seeds'); process.exit(1); }

const KEYS = ['stream', 'n', 'logprobs', 'top_logprobs', 'tools', 'tool_choice', 'response_format', 'regex', 'lark',
  'stop', 'stop_sequences', 'max_tokens', 'max_output_tokens', 'max_completion_tokens', 'temperature', 'top_p', 'top_k',
  'min_p', 'seed', 'reasoning_effort', 'reasoning', 'thinking', 'include', 'text', 'output_config', 'messages', 'input',
  'instructions', 'system', 'logit_bias', 'json_schema', 'grammar', 'parallel_tool_calls', 'stream_options', 'repeat_penalty',
  'presence_penalty', 'frequency_penalty', 'chat_template_kwargs', 'metadata', 'user', 'store', 'previous_response_id'];
const STR = ['', 'a', 'x'.repeat(300), '\u0000', '\ud83d\ude00', 'é', '<think>', '</think>', '<tool_call>', '</tool_call>',
  '<|im_end|>', '<|im_start|>', '{"name":"f"}', 'auto', 'required', 'none', 'any', 'json_object', 'json_schema', 'text',
  'high', 'low', 'enabled', 'function', 'user', 'assistant', 'system', 'tool', 'developer', 'image', 'input_image', '^$', 'a+',
  '(a|b)*c', 'start: "x"', 'start: <[151643]>*', 'data:image/png;base64,AA=='];
function value(depth = 0) {
  switch (int(depth > 3 ? 7 : 11)) {
    case 0: return null;
    case 1: return rnd() < 0.5;
    case 2: return pick([0, 1, -1, 2, 7, 64, 1e6, 2 ** 31, 2 ** 53, -(2 ** 63), 0.5, 1e308, -0.0]);
    case 3: case 4: return pick(STR);
    case 5: return int(100000);
    case 6: return rnd() * 4 - 1;
    case 7: return Array.from({ length: int(4) }, () => value(depth + 1));
    case 8: { const o = {}; for (let i = int(4); i > 0; i--) o[pick(KEYS.concat(['type', 'role', 'content', 'name', 'schema', 'parameters', 'function', 'text', 'arguments']))] = value(depth + 1); return o; }
    case 9: return { type: pick(['text', 'image_url', 'input_text', 'input_image', 'image', 'tool_use', 'tool_result', 'thinking', 'function_call', 'json_schema']), text: pick(STR) };
    default: return { role: pick(['user', 'assistant', 'system', 'tool', 'developer']), content: rnd() < 0.5 ? pick(STR) : [value(depth + 1)] };
  }
}
function paths(o, pre = [], out = []) {
  if (o && typeof o === 'object') for (const k of Object.keys(o)) { out.push([...pre, k]); paths(o[k], [...pre, k], out); }
  return out;
}
function mutateJSON(buf) {
  let o;
  try { o = JSON.parse(buf.toString('utf8')); } catch { return null; }
  for (let m = 1 + int(3); m > 0; m--) {
    const ps = paths(o);
    const r = rnd();
    if (r < 0.3 || ps.length === 0) { if (o && typeof o === 'object' && !Array.isArray(o)) o[pick(KEYS)] = value(); continue; }
    const p = pick(ps);
    let parent = o;
    for (const k of p.slice(0, -1)) parent = parent[k];
    const k = p.at(-1);
    if (r < 0.5) { if (Array.isArray(parent)) parent.splice(Number(k), 1); else delete parent[k]; }
    else if (r < 0.8) parent[k] = value();
    else if (r < 0.9 && Array.isArray(parent[k])) parent[k] = parent[k].concat(parent[k]);
    else { let v = parent[k]; for (let i = 0; i < 1 + int(40); i++) v = [v]; parent[k] = v; }
  }
  return Buffer.from(JSON.stringify(o));
}
function mutateBytes(buf) {
  const b = Buffer.from(buf);
  const r = rnd();
  if (r < 0.3) return b.subarray(0, int(b.length + 1));
  if (r < 0.6) { for (let i = 1 + int(4); i > 0; i--) b[int(b.length)] = int(256); return b; }
  if (r < 0.8) { const i = int(b.length); return Buffer.concat([b.subarray(0, i), Buffer.from(pick(['\\u0000', '\xff\xfe', '"', ',', '{', ']', '\\ud800', '1e999', '-'])), b.subarray(i)]); }
  const i = int(b.length), j = int(b.length); return Buffer.concat([b.subarray(0, Math.min(i, j)), b.subarray(Math.max(i, j))]);
}

const corpus = [];
for (const s of seeds.concat(fuzzed)) corpus.push(s);
while (corpus.length < COUNT) {
  const s = pick(seeds.concat(fuzzed));
  const j = rnd() < 0.75 ? mutateJSON(s.body) : null;
  const body = j ?? mutateBytes(s.body);
  corpus.push({ d: rnd() < 0.9 ? s.d : int(PATHS.length), body });
}

function rss() {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m[1]);
}

async function send(c) {
  const ctl = new AbortController();
  const t = setTimeout(() => ctl.abort(), 60000);
  try {
    const r = await fetch(url + PATHS[c.d], { method: 'POST', headers: { 'content-type': 'application/json' },
      body: c.body, signal: ctl.signal });
    await r.arrayBuffer(); // the whole reply, streams included
    return r.status;
  } finally { clearTimeout(t); }
}

const statuses = {};
const t0 = Date.now();
const rss0 = rss();
const rssAfter = [];
for (let pass = 1; pass <= 3; pass++) {
  let next = 0;
  const worker = async () => {
    while (next < corpus.length) {
      const c = corpus[next++];
      let st;
      try { st = await send(c); } catch (e) {
        const f = `/tmp/lmserve-mutated-fail-${process.pid}.json`;
        fs.writeFileSync(f, c.body);
        console.error(`request failed (${e.message}) on ${PATHS[c.d]}; body in ${f}`);
        process.exit(1);
      }
      statuses[st] = (statuses[st] ?? 0) + 1;
      if (st >= 500) {
        const f = `/tmp/lmserve-mutated-5xx-${process.pid}.json`;
        fs.writeFileSync(f, c.body);
        console.error(`status ${st} on ${PATHS[c.d]}; body in ${f}`);
        process.exit(1);
      }
    }
  };
  await Promise.all([worker(), worker()]);
  rssAfter.push(rss());
}
const growth = (rssAfter[2] - rssAfter[0]) / rssAfter[0];
console.log(`mutated corpus: ${corpus.length} bodies (${seeds.length} seeds, ${fuzzed.length} fuzz corpus) x 3 passes in ${((Date.now() - t0) / 1000).toFixed(1)} s; ` +
  `statuses ${JSON.stringify(statuses)}; RSS before ${(rss0 / 1024).toFixed(1)}, after passes ${rssAfter.map((k) => (k / 1024).toFixed(1)).join(' / ')} MiB (growth ${(growth * 100).toFixed(1)} %)`);
if (growth >= 0.10) { console.error('RSS grew by 10 % or more between pass 1 and pass 3'); process.exit(1); }
