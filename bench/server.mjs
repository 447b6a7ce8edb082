// Server latency/throughput client for bench/server.sh: TTFT and decode tok/s through the HTTP
// API (streamed chat completions), single client and N concurrent clients. Prints figures as JSON.
//   node bench/server.mjs URL [--reps N] [--long-words W] [--gen N] [--clients C] [--pair]
const args = process.argv.slice(2);
const url = args[0];
const opt = (k, d) => { const i = args.indexOf(k); return i >= 0 ? Number(args[i + 1]) : d; };
const REPS = opt('--reps', 3), WORDS = opt('--long-words', 170), GEN = opt('--gen', 128), CLIENTS = opt('--clients', 4);
const PAIR = args.includes('--pair'); // one long-prompt TTFT request + one decode request only
const headers = { 'content-type': 'application/json', authorization: 'Bearer x' };
const median = (a) => { const s = [...a].sort((x, y) => x - y); return s.length ? s[Math.floor((s.length - 1) / 2)] : NaN; };

// One streamed request: ms to the first content byte, decode rate over the rest, token counts.
async function one(messages, maxTokens) {
  const t0 = performance.now();
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers,
    body: JSON.stringify({ messages, max_tokens: maxTokens, temperature: 0, stream: true, stream_options: { include_usage: true } }),
  });
  if (r.status !== 200) throw new Error(`status ${r.status}: ${await r.text()}`);
  const dec = new TextDecoder();
  let buf = '', tFirst = 0, tLast = 0, usage = null, chunks = 0;
  for await (const part of r.body) {
    buf += dec.decode(part, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const frame = buf.slice(0, i); buf = buf.slice(i + 2);
      if (!frame.startsWith('data: ') || frame === 'data: [DONE]') continue;
      const j = JSON.parse(frame.slice(6));
      if (j.usage) usage = j.usage;
      if (j.choices?.[0]?.delta?.content !== undefined || j.choices?.[0]?.delta?.reasoning_content !== undefined) {
        const now = performance.now();
        if (!tFirst) tFirst = now;
        tLast = now;
        chunks++;
      }
    }
  }
  const n = usage?.completion_tokens ?? chunks;
  return { ttft_ms: tFirst - t0, tok_s: n > 1 && tLast > tFirst ? (n - 1) / ((tLast - tFirst) / 1000) : NaN, prompt: usage?.prompt_tokens, completion: n, total_ms: performance.now() - t0 };
}

const short = [{ role: 'user', content: 'Tell me a story.' }];
const long = [{ role: 'user', content: Array.from({ length: WORDS }, (_, i) => `word${i % 97}`).join(' ') }];
const out = {};
if (PAIR) {
  const l = await one(long, 1), d = await one(short, GEN);
  console.log(JSON.stringify({ ttft_long_ms: l.ttft_ms, prompt_long: l.prompt, decode_tok_s: d.tok_s, completion: d.completion }));
  process.exit(0);
}
await one(short, 4); // warm-up
let runs = [];
for (let i = 0; i < REPS; i++) runs.push(await one(short, 1));
out.ttft_short_ms = median(runs.map((r) => r.ttft_ms));
out.prompt_short = runs[0].prompt;
runs = [];
for (let i = 0; i < REPS; i++) runs.push(await one(long, 1));
out.ttft_long_ms = median(runs.map((r) => r.ttft_ms));
out.prompt_long = runs[0].prompt;
runs = [];
for (let i = 0; i < REPS; i++) runs.push(await one(short, GEN));
out.decode_tok_s = median(runs.map((r) => r.tok_s));
out.decode_tokens = runs[0].completion;
// C concurrent clients, each GEN tokens: aggregate generated tokens / wall time
const t0 = performance.now();
const par = await Promise.all(Array.from({ length: CLIENTS }, () => one(short, GEN)));
const wall = (performance.now() - t0) / 1000;
out.clients = CLIENTS;
out.concurrent_aggregate_tok_s = par.reduce((a, r) => a + r.completion, 0) / wall;
out.concurrent_ttft_ms = par.map((r) => Math.round(r.ttft_ms)).sort((a, b) => a - b);
console.log(JSON.stringify(out));
