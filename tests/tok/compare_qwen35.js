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
const { spawnSync } = require("child_process");
const { TokenizerLoader } = require("@lenml/tokenizers");
const { generate } = require("./corpus.js");
const { markStrings } = require("./marks.js");

const [tool, tokdir, ...models] = process.argv.slice(2);
if (!tool || !tokdir || models.length === 0) {
  console.error("usage: compare_qwen35.js TOOL STANDIN_DIR MODEL [MODEL...]");
  process.exit(2);
}
const QWEN35 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const WS = "\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
function rustSemantics(re) {
  const ci = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
  return re.replace(ci, "(?:'[sS\\u017f]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])")
    .replaceAll("[^\\s", "[^" + WS)
    .replaceAll("\\s", "[" + WS + "]")
    .replaceAll("\\S", "[^" + WS + "]");
}

const tjText = fs.readFileSync(path.join(tokdir, "tokenizer.json"), "utf8");
const config = JSON.parse(fs.readFileSync(path.join(tokdir, "tokenizer_config.json"), "utf8"));
const split0 = JSON.parse(tjText).pre_tokenizer.pretokenizers.find((p) => p.type === "Split");
if (split0.pattern.Regex !== QWEN35 || JSON.parse(tjText).normalizer?.type !== "NFC") {
  console.log(`FAIL ${tokdir}: not Qwen3.5's split regex and NFC normalizer`);
  process.exit(1);
}
function makeTokenizer({ rust, dropControl, regex }) {
  const tj = JSON.parse(tjText);
  const split = tj.pre_tokenizer.pretokenizers.find((p) => p.type === "Split");
  if (regex) split.pattern.Regex = regex;
  if (rust) split.pattern.Regex = rustSemantics(split.pattern.Regex);
  if (dropControl) // control = HF special, or looks like <|...|> (llama.cpp's convert rule)
    tj.added_tokens = tj.added_tokens.filter((t) => !(t.special || /^<\|.*\|>$/.test(t.content)));
  return TokenizerLoader.fromPreTrained({ tokenizerJSON: tj, tokenizerConfig: config });
}
const ref = { special: makeTokenizer({ rust: true }), plain: makeTokenizer({ rust: true, dropControl: true }) };
const js = { special: makeTokenizer({ rust: false }), plain: makeTokenizer({ rust: false, dropControl: true }) };
const q2 = { special: makeTokenizer({ rust: true, regex: QWEN2 }), plain: makeTokenizer({ rust: true, dropControl: true, regex: QWEN2 }) };

const corpus = generate();
for (const s of markStrings()) corpus.push({ cat: "marks", mode: "plain", bytes: Buffer.from(s, "utf8") });
const dec = new TextDecoder("utf-8", { ignoreBOM: true });
const enc = (t, s) => Array.from(t.encode(s, { add_special_tokens: false }));
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

let failures = 0;
const fail = (msg) => { failures++; if (failures <= 40) console.log("FAIL " + msg); };
const esc = (s) => JSON.stringify(s).replace(/[^\x20-\x7e]/gu, (c) => {
  const cp = c.codePointAt(0);
  return cp < 0x10000 ? "\\u" + cp.toString(16).padStart(4, "0") : c;
});
const show = (b) => esc(b.toString("utf8")).slice(0, 160);

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
  let nTok = 0, nStrings = 0, exactRound = 0;
  for (const mode of ["plain", "special"]) {
    const idx = corpus.map((c, i) => (c.mode === mode ? i : -1)).filter((i) => i >= 0);
    const input = idx.map((i) => corpus[i].bytes.toString("hex")).join("\n") + "\n";
    const argv = [model, "--lines-hex"].concat(mode === "special" ? ["--special"] : []);
    const r = spawnSync(tool, argv, { input, maxBuffer: 1 << 30 });
    if (r.status !== 0) {
      fail(`${tool} ${argv.join(" ")} exited ${r.status}: ${r.stderr}`);
      continue;
    }
    const lines = r.stdout.toString("utf8").split("\n");
    if (lines.length !== idx.length + 1) fail(`${model} ${mode}: ${lines.length - 1} lines for ${idx.length} strings`);
    idx.forEach((ci, k) => {
      const [idsText, hex] = (lines[k] || "").split("\t");
      const ids = idsText ? idsText.split(",").map(Number) : [];
      const c = corpus[ci], want = expect[ci];
      nStrings++;
      nTok += ids.length;
      if (!same(ids, want.ids)) {
        let d = 0;
        while (d < ids.length && ids[d] === want.ids[d]) d++;
        fail(`${path.basename(model)} ${mode} [${c.cat}] ${show(c.bytes)}: ids differ at ${d}: ` +
          `ours ${ids.slice(d, d + 6)} ref ${want.ids.slice(d, d + 6)}`);
      }
      const back = Buffer.from(hex || "", "hex");
      if (!back.equals(want.text)) fail(`${path.basename(model)} ${mode} [${c.cat}] ${show(c.bytes)}: decode gives ${show(back)}`);
      if (back.equals(c.bytes)) exactRound++;
    });
  }
  console.log(`tokenizer (qwen35): ${path.basename(model)}: ${nStrings} strings, ${nTok} tokens compared with the JS ` +
    `reference; decode = NFC(lossy UTF-8) of the input for all, byte-identical to the input for ${exactRound}`);
}
if (failures) {
  console.log(`tokenizer (qwen35): ${failures} failures`);
  process.exit(1);
}
console.log("tokenizer (qwen35): all ids identical to the reference");
