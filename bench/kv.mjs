// KV reuse benchmark client (issue 11, docs/kv-cache.md): TTFT of a cold request, of the
// follow-up turn of the same conversation and of a second conversation with the same system
// prompt, for a ~2,500-token system prompt and a ~27k-token (Claude-Code-sized) one, against any
// OpenAI-compatible server at URL. TTFT = the wall time of a non-streamed chat completion of
// max_tokens 1 (prefill + one sampled token; the same for every server). Prints one JSON object.
//   node bench/kv.mjs URL --tokenize "CMD" [--long]
// The prompts are built to a token count measured with the server's tokenizer command (stdin ->
// ids), so both servers get the same text.
import { execSync } from 'node:child_process';
import http from 'node:http';

const args = process.argv.slice(2);
const url = args[0];
const opt = (k, d) => { const i = args.indexOf(k); return i >= 0 ? args[i + 1] : d; };
const tokenize = opt('--tokenize');
const target = Number(opt('--tokens', '2500'));

const count = (text) => execSync(tokenize, { input: text }).toString().trim().split(',').length;
function systemPrompt(n) {
  // varied words (a repeated phrase would tokenize into long merges): numbered rules
  const parts = ['You are a coding assistant working in a large repository. Rules:'];
  let i = 0, text = parts[0];
  for (;;) {
    const chunk = [];
    for (let k = 0; k < 50; k++, i++) chunk.push(`rule ${i}: when file ${i % 97} changes, check module ${(i * 7) % 131} and test ${(i * 13) % 89}.`);
    const next = `${text} ${chunk.join(' ')}`;
    if (count(next) > n) break;
    text = next;
  }
  return text;
}

async function ask(messages) {
  const t0 = performance.now();
  // node:http, not fetch: fetch's undici agent gives up after 300 s without response headers,
  // and a cold ~27k-token prefill on 2 threads can take longer than that
  const u = new URL(`${url}/v1/chat/completions`);
  const body = JSON.stringify({ model: 'm', messages, max_tokens: 1, temperature: 0, cache_prompt: true,
    chat_template_kwargs: { enable_thinking: false } });
  const r = await new Promise((resolve, reject) => {
    const req = http.request({ hostname: u.hostname, port: u.port, path: u.pathname, method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (c) => { data += c; });
      res.on('end', () => resolve({ status: res.statusCode, text: data }));
    });
    req.on('error', reject);
    req.end(body);
  });
  const j = JSON.parse(r.text);
  const ms = performance.now() - t0;
  if (r.status !== 200) throw new Error(`${r.status} ${JSON.stringify(j)}`);
  return { ms: Math.round(ms), prompt: j.usage?.prompt_tokens, cached: j.usage?.prompt_tokens_details?.cached_tokens ?? null,
    computed: j.timings?.prompt_n ?? null, text: j.choices[0].message.content ?? '' };
}

const sys = systemPrompt(target);
// warm-up: an unrelated short request first, so the cold figure is a prefill, not the first
// page-in of the weights (the same for every server)
await ask([{ role: 'user', content: 'warm-up' }]);
const A1 = [{ role: 'system', content: sys }, { role: 'user', content: 'Which module should I check for file 12?' }];
const cold = await ask(A1);
const A2 = [...A1, { role: 'assistant', content: cold.text || 'Module 84.' }, { role: 'user', content: 'And which test covers it?' }];
const follow = await ask(A2);
const B1 = [{ role: 'system', content: sys }, { role: 'user', content: 'List the rules about file 40.' }];
const second = await ask(B1);
const r = (x) => Math.round((x + Number.EPSILON) * 1000) / 1000;
console.log(JSON.stringify({ system_tokens: count(sys), cold, follow, second,
  follow_over_cold: r(follow.ms / cold.ms), second_over_cold: r(second.ms / cold.ms) }));
