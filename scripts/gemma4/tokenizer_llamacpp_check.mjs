// By hand, not part of make test: lmserve's gemma4 tokenizer against llama.cpp's on the same
// GGUF, over the plain strings of the tokenizer corpus (tests/tok/corpus.js). Start a llama.cpp
// server on the file first (a build outside the repo), then:
//
//   llama-server -m build/models/gemma4_tiny-q8_0.gguf --port 18932 -t 1 -c 512 &
//   node scripts/gemma4/tokenizer_llamacpp_check.mjs build/models/gemma4_tiny-q8_0.gguf http://127.0.0.1:18932
//
// Prints how many strings get different ids (llama.cpp's /tokenize, add_special and
// parse_special off) and the first few. The reference of the test suite is Hugging Face's
// tokenizer (tests/suites/41-tokenizer-gemma.sh); this is a second opinion.
import { createRequire } from 'node:module';
import { spawnSync } from 'node:child_process';

const require = createRequire(import.meta.url);
const { generate } = require('../../tests/tok/corpus.js');
const [model, url, tool = 'build/lmserve-tokenize'] = process.argv.slice(2);
if (!model || !url) {
  console.error('usage: tokenizer_llamacpp_check.mjs MODEL.gguf LLAMA_SERVER_URL [lmserve-tokenize]');
  process.exit(2);
}
const corpus = generate().filter((c) => c.mode === 'plain');
const dec = new TextDecoder('utf-8', { ignoreBOM: true });
const input = corpus.map((c) => c.bytes.toString('hex')).join('\n') + '\n';
const r = spawnSync(tool, [model, '--lines-hex'], { input, maxBuffer: 1 << 30 });
if (r.status !== 0) throw new Error(`${tool} failed: ${r.stderr}`);
const ours = r.stdout.toString().split('\n');
let diff = 0;
for (let i = 0; i < corpus.length; i++) {
  const content = dec.decode(corpus[i].bytes);
  const res = await fetch(`${url}/tokenize`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ content, add_special: false, parse_special: false }) });
  const theirs = (await res.json()).tokens;
  const mine = (ours[i].split('\t')[0] || '').split(',').filter((x) => x !== '').map(Number);
  if (JSON.stringify(mine) !== JSON.stringify(theirs)) {
    if (++diff <= 5) console.log(`differ [${corpus[i].cat}] ${JSON.stringify(content).slice(0, 80)}: ours ${mine.slice(0, 8)} llama.cpp ${(theirs || []).slice(0, 8)}`);
  }
}
console.log(`llama.cpp vs lmserve (${model}): ${corpus.length} plain corpus strings, ${diff} differ`);
process.exit(diff ? 1 : 0);
