// Continuous-batching client for bench/batch.sh: C concurrent streamed chat completions of GEN
// tokens each (end of turn suppressed with logit_bias so every stream runs its full length), all
// sent at once. Prints JSON: aggregate tok/s (all completion tokens / wall time from the first
// send to the last end), worst and median TTFT, tokens per stream.
//   node bench/batch.mjs URL --clients C [--gen N] [--no-bias ID,ID]
const args = process.argv.slice(2);
const url = args[0];
const opt = (k, d) => { const i = args.indexOf(k); return i >= 0 ? args[i + 1] : d; };
const C = Number(opt('--clients', 4)), GEN = Number(opt('--gen', 128));
const EOG = String(opt('--no-bias', '151643,151645')).split(',').filter(Boolean);
const headers = { 'content-type': 'application/json', authorization: 'Bearer x' };
const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[Math.floor((s.length - 1) / 2)]; };

async function one(i, t0) {
  const logit_bias = Object.fromEntries(EOG.map((t) => [t, -100]));
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers,
    body: JSON.stringify({ messages: [{ role: 'user', content: `Tell me story number ${i} about a cat.` }],
      max_tokens: GEN, temperature: 0, stream: true, stream_options: { include_usage: true }, logit_bias }),
  });
  if (r.status !== 200) throw new Error(`status ${r.status}: ${await r.text()}`);
  const dec = new TextDecoder();
  let buf = '', tFirst = 0, usage = null, chunks = 0;
  for await (const part of r.body) {
    buf += dec.decode(part, { stream: true });
    let k;
    while ((k = buf.indexOf('\n\n')) >= 0) {
      const frame = buf.slice(0, k); buf = buf.slice(k + 2);
      if (!frame.startsWith('data: ') || frame === 'data: [DONE]') continue;
      const j = JSON.parse(frame.slice(6));
      if (j.usage) usage = j.usage;
      const d = j.choices?.[0]?.delta;
      if (d && (d.content || d.reasoning_content)) {
        if (!tFirst) tFirst = performance.now();
        chunks++;
      }
    }
  }
  return { ttft_ms: tFirst - t0, n: usage?.completion_tokens ?? chunks, end: performance.now() };
}

await one(-1, performance.now()); // warm-up (page in the weights)
const t0 = performance.now();
const res = await Promise.all(Array.from({ length: C }, (_, i) => one(i, t0)));
const wall = (Math.max(...res.map((r) => r.end)) - t0) / 1000;
const tokens = res.reduce((a, r) => a + r.n, 0);
console.log(JSON.stringify({ clients: C, tokens, agg_tok_s: +(tokens / wall).toFixed(1),
  worst_ttft_ms: Math.round(Math.max(...res.map((r) => r.ttft_ms))), median_ttft_ms: Math.round(median(res.map((r) => r.ttft_ms))),
  min_tokens: Math.min(...res.map((r) => r.n)) }));
