// By hand, not part of make test: lmserve's qwen35 tokenizer (tokenizer.ggml.pre "qwen35")
// against llama.cpp's on the same GGUF, over the plain strings of the tokenizer corpus
// (tests/tok/corpus.js) and the combining-mark strings (tests/tok/marks.js). Start a llama.cpp
// server on the file first (a build outside the repo), then:
//
//   llama-server -m build/models/qwen35_tiny-q8_0.gguf --port 18933 -t 1 -c 512 &
//   node scripts/qwen35/tokenizer_llamacpp_check.mjs build/models/qwen35_tiny-q8_0.gguf http://127.0.0.1:18933
//
// llama.cpp does not apply the NFC normalizer of Hugging Face's tokenizer.json (GGUF does not
// record one) and tokenizes invalid UTF-8 its own way, so strings that are not valid NFC text
// are counted apart; on the others the ids must agree. The reference of the test suite is
// Hugging Face's tokenizer (tests/suites/42-tokenizer-qwen35.sh); this is a second opinion.
import { createRequire } from 'node:module';
import { spawnSync } from 'node:child_process';

const require = createRequire(import.meta.url);
const { generate } = require('../../tests/tok/corpus.js');
const { markStrings } = require('../../tests/tok/marks.js');
const [model, url, tool = 'build/lmserve-tokenize'] = process.argv.slice(2);
if (!model || !url) {
  console.error('usage: tokenizer_llamacpp_check.mjs MODEL.gguf LLAMA_SERVER_URL [lmserve-tokenize]');
  process.exit(2);
}
const corpus = generate().filter((c) => c.mode === 'plain')
  .concat(markStrings().map((s) => ({ cat: 'marks', bytes: Buffer.from(s, 'utf8') })));
const dec = new TextDecoder('utf-8', { ignoreBOM: true, fatal: false });
const input = corpus.map((c) => c.bytes.toString('hex')).join('\n') + '\n';
const r = spawnSync(tool, [model, '--lines-hex'], { input, maxBuffer: 1 << 30 });
if (r.status !== 0) throw new Error(`${tool} failed: ${r.stderr}`);
const ours = r.stdout.toString().split('\n');
let diff = 0, nfcText = 0, other = 0, otherDiff = 0;
for (let i = 0; i < corpus.length; i++) {
  const content = dec.decode(corpus[i].bytes);
  const clean = Buffer.from(content, 'utf8').equals(corpus[i].bytes) && content === content.normalize('NFC');
  const res = await fetch(`${url}/tokenize`, { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ content, add_special: false, parse_special: false }) });
  const theirs = (await res.json()).tokens;
  const mine = (ours[i].split('\t')[0] || '').split(',').filter((x) => x !== '').map(Number);
  const same = JSON.stringify(mine) === JSON.stringify(theirs);
  if (!clean) {
    other++;
    if (!same) otherDiff++;
    continue;
  }
  nfcText++;
  if (!same && ++diff <= 5)
    console.log(`differ [${corpus[i].cat}] ${JSON.stringify(content).slice(0, 80)}: ours ${mine.slice(0, 8)} llama.cpp ${(theirs || []).slice(0, 8)}`);
}
console.log(`llama.cpp vs lmserve (${model}): ${nfcText} valid NFC strings, ${diff} differ; ` +
  `${other} others (not NFC or invalid UTF-8), ${otherDiff} of them differ`);
process.exit(diff ? 1 : 0);
