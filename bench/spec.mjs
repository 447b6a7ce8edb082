// --spec benchmark client (bench/spec.sh): the same greedy streamed chat requests alternately to a
// plain server and a --spec server (both running, one request at a time, so the shared machine's
// load hits both alike). Per task: decode tok/s of each = (completion tokens - 1) / (last - first
// content chunk), summed over the task's prompts; the speedup; whether every reply was
// byte-identical; the drafts accepted / proposed and the verify forwards, from the spec server's
// debug log (--log FILE: its `spec: V verifies, A of P drafts accepted` line per reply).
//   node bench/spec.mjs PLAIN_URL SPEC_URL --log FILE [--max-tokens N] [--rounds R]
const [plainUrl, specUrl, ...rest] = process.argv.slice(2);
import fs from 'node:fs';
const opt = (k, d) => { const i = rest.indexOf(k); return i >= 0 ? Number(rest[i + 1]) : d; };
const LOG = rest[rest.indexOf('--log') + 1];
let logAt = 0;
const MAX = opt('--max-tokens', 128), ROUNDS = opt('--rounds', 2);

const PASSAGES = [
  'The lighthouse keeper climbed the spiral stairs every evening at dusk. He trimmed the wick, ' +
  'polished the great lens and wrote the weather in a leather book. Ships passed far out at sea, ' +
  'and none of them knew his name, but all of them knew his light.',
  'To install the package, run the installer and choose a directory. The installer copies the ' +
  'files, writes a configuration file and starts the service. If the service does not start, ' +
  'check the log file in the installation directory and run the installer again.',
  'def mean(values):\n    total = 0\n    for v in values:\n        total += v\n    return total / len(values)\n\n' +
  'def variance(values):\n    m = mean(values)\n    total = 0\n    for v in values:\n        total += (v - m) ** 2\n    return total / len(values)\n',
];
const TASKS = {
  grounded: PASSAGES.flatMap((p) => [
    `Repeat the following text exactly, word for word:\n\n${p}`,
    `Rewrite the following text, changing only the first word:\n\n${p}`,
  ]),
  open: ['Tell me about the sea.', 'What is a good name for a cat?', 'Write a short poem about autumn.',
    'Why is the sky blue?', 'Give me some advice for a job interview.', 'What do you know about trees?'],
};

async function stream(url, content) {
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content }], max_tokens: MAX, temperature: 0,
      stream: true, stream_options: { include_usage: true } }),
  });
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status} ${await r.text()}`);
  const dec = new TextDecoder();
  let buf = '', text = '', first = 0, last = 0, tokens = 0;
  for await (const chunk of r.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (!ev.startsWith('data: ') || ev === 'data: [DONE]') continue;
      const j = JSON.parse(ev.slice(6));
      const d = j.choices?.[0]?.delta?.content;
      if (d) {
        const t = performance.now();
        if (!first) first = t;
        last = t;
        text += d;
      }
      if (j.usage) tokens = j.usage.completion_tokens;
    }
  }
  return { text, tokens, secs: (last - first) / 1e3 };
}

const out = {};
for (const [task, prompts] of Object.entries(TASKS)) {
  const acc = { plain: { tok: 0, s: 0 }, spec: { tok: 0, s: 0 } };
  let identical = true;
  for (let r = 0; r < ROUNDS; r++) {
    for (const p of prompts) {
      // alternate which server goes first, so neither always runs right after the other
      const order = r % 2 ? [['spec', specUrl], ['plain', plainUrl]] : [['plain', plainUrl], ['spec', specUrl]];
      const res = {};
      for (const [k, u] of order) res[k] = await stream(u, p);
      identical &&= res.plain.text === res.spec.text;
      for (const k of ['plain', 'spec']) {
        acc[k].tok += Math.max(0, res[k].tokens - 1);
        acc[k].s += res[k].secs;
      }
    }
  }
  const tps = (k) => acc[k].tok / acc[k].s;
  const log = fs.readFileSync(LOG, 'utf8');
  const st = [...log.slice(logAt).matchAll(/spec: (\d+) verifies, (\d+) of (\d+) drafts accepted/g)];
  logAt = log.length;
  const sum = (i) => st.reduce((a, m) => a + Number(m[i]), 0);
  out[task] = { plain_tok_s: +tps('plain').toFixed(1), spec_tok_s: +tps('spec').toFixed(1),
    speedup: +(tps('spec') / tps('plain')).toFixed(3), tokens: acc.plain.tok, identical,
    drafts_accepted: sum(2), drafts_proposed: sum(3), acceptance: +(sum(2) / Math.max(1, sum(3))).toFixed(3),
    verifies: sum(1), tokens_per_verify_forward: +((sum(2) + sum(1)) / Math.max(1, sum(1))).toFixed(2) };
  process.stdout.write(`${task}: ${JSON.stringify(out[task])}\n`);
}
