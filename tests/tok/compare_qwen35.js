// Token ids of lmserve-tokenize against the @lenml/tokenizers JS port of Hugging Face tokenizers
// with Qwen3.5's pre-tokenizer: the stand-in tokenizer directory scripts/qwen35/standin_tokenizer.py
// writes (Qwen3's vocabulary and merges, Qwen3.5's split regex and NFC normalizer: no npm package
// ships Qwen3.5's own tokenizer.json), on the corpus of corpus.js plus strings built around
// combining marks (what Qwen3.5's regex changes: a letter run takes the marks after it, a
// punctuation run stops at one); and the decode round trip.
//
//   node tests/tok/compare_qwen35.js TOOL STANDIN_DIR MODEL [MODEL...]
//
// MODEL is the directory itself or a GGUF holding its conversion (tokenizer.ggml.pre "qwen35":
// lmserve-tokenize --write-gguf, or a qwen35 model lmserve-mkmodel wrote with it).
//
// Reference semantics and modes as in compare.js: the port's regex is given in Hugging Face's
// (Rust) semantics (\s = White_Space, (?i:'s) with case folding); the unpatched port must differ
// from it only on the corpus's listed "divergence" strings. "special" strings with --special
// against the full tokenizer, "plain" ones without it against the tokenizer without its control
// tokens. The same strings through Qwen2's regex must give other ids on at least 50 of them (the
// corpus exercises the difference at the level of ids), and those are counted.
"use strict";
const fs = require("fs");
const path = require("path");
const { TokenizerLoader } = require("@lenml/tokenizers");
const { generate } = require("./corpus.js");
const { markStrings } = require("./marks.js");
const { rustSemantics, dropControl, dec, enc, same, show, failures, checkTool } = require("./common.js");

const [tool, tokdir, ...models] = process.argv.slice(2);
if (!tool || !tokdir || models.length === 0) {
  console.error("usage: compare_qwen35.js TOOL STANDIN_DIR MODEL [MODEL...]");
  process.exit(2);
}
const QWEN35 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const tjText = fs.readFileSync(path.join(tokdir, "tokenizer.json"), "utf8");
const config = JSON.parse(fs.readFileSync(path.join(tokdir, "tokenizer_config.json"), "utf8"));
const split0 = JSON.parse(tjText).pre_tokenizer.pretokenizers.find((p) => p.type === "Split");
if (split0.pattern.Regex !== QWEN35 || JSON.parse(tjText).normalizer?.type !== "NFC") {
  console.log(`FAIL ${tokdir}: not Qwen3.5's split regex and NFC normalizer`);
  process.exit(1);
}
function makeTokenizer({ rust, drop, regex }) {
  const tj = JSON.parse(tjText);
  const split = tj.pre_tokenizer.pretokenizers.find((p) => p.type === "Split");
  if (regex) split.pattern.Regex = regex;
  if (rust) split.pattern.Regex = rustSemantics(split.pattern.Regex);
  if (drop) dropControl(tj);
  return TokenizerLoader.fromPreTrained({ tokenizerJSON: tj, tokenizerConfig: config });
}
const ref = { special: makeTokenizer({ rust: true }), plain: makeTokenizer({ rust: true, drop: true }) };
const js = { special: makeTokenizer({ rust: false }), plain: makeTokenizer({ rust: false, drop: true }) };
const q2 = { special: makeTokenizer({ rust: true, regex: QWEN2 }), plain: makeTokenizer({ rust: true, drop: true, regex: QWEN2 }) };

const corpus = generate();
for (const s of markStrings()) corpus.push({ cat: "marks", mode: "plain", bytes: Buffer.from(s, "utf8") });
const F = failures(), fail = F.fail;

let differQ2 = 0, differQ2Marks = 0;
const expect = corpus.map((c) => {
  const s = dec.decode(c.bytes);
  const ids = enc(ref[c.mode], s);
  const jsIds = enc(js[c.mode], s);
  if (c.cat === "divergence") {
    if (same(ids, jsIds)) fail(`divergence case ${show(c.bytes)} does not diverge (${c.reason})`);
  } else if (!same(ids, jsIds)) {
    fail(`unlisted JS-port divergence on ${show(c.bytes)}`);
  }
  if (!same(ids, enc(q2[c.mode], s))) {
    differQ2++;
    if (c.cat === "marks") differQ2Marks++;
  }
  return { ids, text: Buffer.from(s.normalize("NFC"), "utf8") };
});
console.log(`tokenizer (qwen35): ${corpus.length} strings (${corpus.filter((c) => c.cat === "marks").length} built ` +
  `around combining marks); Qwen2's regex gives other ids on ${differQ2} of them (${differQ2Marks} of the marks strings)`);
// With Qwen3's merges most letter + mark pairs tokenize the same either way (no merge crosses
// them); the strings that do differ are where a qwen2 split would give wrong ids.
if (differQ2 < 50) fail(`only ${differQ2} strings tell Qwen3.5's regex from Qwen2's by their ids`);

for (const model of models) {
  const { nStrings, nTok, exactRound } = checkTool({ tool, model, corpus, expect, label: path.basename(model), fail });
  console.log(`tokenizer (qwen35): ${path.basename(model)}: ${nStrings} strings, ${nTok} tokens compared with the JS ` +
    `reference; decode = NFC(lossy UTF-8) of the input for all, byte-identical to the input for ${exactRound}`);
}
if (F.count) {
  console.log(`tokenizer (qwen35): ${F.count} failures`);
  process.exit(1);
}
console.log("tokenizer (qwen35): all ids identical to the reference");
