// Token ids of lmserve-tokenize against the @lenml/tokenizers JS port of Hugging Face tokenizers,
// loaded with Qwen3's tokenizer.json, on the corpus of corpus.js; plus the decode round trip.
//
//   node tests/tok/compare.js TOOL TOKDIR MODEL [MODEL...]
//
// Reference semantics. The JS port differs from Hugging Face's Rust tokenizer (Oniguruma regex)
// in two documented ways, and where they differ the Rust semantics are right:
//   - JS `\s` is not Unicode White_Space (it adds U+FEFF, lacks U+0085);
//   - the port rewrites `(?i:'s|...)` as `'[sS]|...`, losing Unicode case folding (U+017F;
//     no id-level effect with Qwen3's merges, but the reference follows Rust anyway).
// So the reference tokenizer is the JS port given the same tokenizer.json with its split regex
// spelled out in those Rust semantics (\s as the explicit White_Space class, 's as '[sSſ]). The
// unpatched port is run as well: it must differ from the reference on exactly the strings listed
// in corpus.js's "divergence" category (each with its reason), and on no other string.
//
// Modes: "special" strings are compared with --special against the full tokenizer (the port
// always parses added tokens). "plain" strings are compared without --special against the same
// tokenizer with its control tokens removed from added_tokens: in request content, control-token
// text must tokenize as ordinary text (user-defined added tokens such as <think> still match, as
// in Hugging Face).
//
// Other pre-tokenizers: the same corpus through Qwen3's tokenizer.json rewritten with Llama 3's
// split regex (+ ignore_merges) and with GPT-2's, without the NFC normalizer, converted by
// lmserve-tokenize from a temporary directory (hf_tokenizer -> "llama-bpe" / "gpt2").
//
// Invalid UTF-8: Hugging Face tokenizes Rust strings, so bytes are first decoded lossily; the JS
// side uses TextDecoder (WHATWG: one U+FFFD per maximal subpart, the same rule as Rust's
// String::from_utf8_lossy), and lmserve does the same in C.
"use strict";
const fs = require("fs");
const path = require("path");
const { TokenizerLoader } = require("@lenml/tokenizers");
const { generate } = require("./corpus.js");
const { rustSemantics, dropControl, dec, enc, same, show, failures, checkTool } = require("./common.js");

const [tool, tokdir, ...models] = process.argv.slice(2);
if (!tool || !tokdir || models.length === 0) {
  console.error("usage: compare.js TOOL TOKDIR MODEL [MODEL...]");
  process.exit(2);
}

const tjText = fs.readFileSync(path.join(tokdir, "tokenizer.json"), "utf8");
const config = JSON.parse(fs.readFileSync(path.join(tokdir, "tokenizer_config.json"), "utf8"));

// The other pre-tokenizers vocab supports, checked on the same vocabulary and merges: Qwen3's
// tokenizer.json with Llama 3's split regex and ignore_merges, or GPT-2's regex, and no NFC
// normalizer (GGUF's llama-bpe / gpt2 imply none). Written to a directory for lmserve-tokenize.
const VARIANT_RE = {
  llama3: "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
  gpt2: "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
};
function variantJson(variant) {
  const tj = JSON.parse(tjText);
  if (!variant) return tj;
  tj.normalizer = null;
  tj.pre_tokenizer.pretokenizers.find((p) => p.type === "Split").pattern.Regex = VARIANT_RE[variant];
  if (variant === "llama3") tj.model.ignore_merges = true;
  return tj;
}
function makeTokenizer({ rust, drop, variant }) {
  const tj = variantJson(variant);
  if (rust) {
    const split = tj.pre_tokenizer.pretokenizers.find((p) => p.type === "Split");
    split.pattern.Regex = rustSemantics(split.pattern.Regex);
  }
  if (drop) dropControl(tj);
  return TokenizerLoader.fromPreTrained({ tokenizerJSON: tj, tokenizerConfig: config });
}
const ref = { special: makeTokenizer({ rust: true }), plain: makeTokenizer({ rust: true, drop: true }) };
const js = { special: makeTokenizer({ rust: false }), plain: makeTokenizer({ rust: false, drop: true }) };

const corpus = generate();
const F = failures(), fail = F.fail;

// Reference ids and the listed divergences.
const expect = corpus.map((c) => {
  const s = dec.decode(c.bytes);
  const ids = enc(ref[c.mode], s);
  const jsIds = enc(js[c.mode], s);
  if (c.cat === "divergence") {
    if (same(ids, jsIds)) fail(`divergence case ${show(c.bytes)} does not diverge (${c.reason})`);
  } else if (!same(ids, jsIds)) {
    fail(`unlisted JS-port divergence on ${show(c.bytes)}`);
  }
  return { ids, text: Buffer.from(s.normalize("NFC"), "utf8") };
});
const divs = corpus.filter((c) => c.cat === "divergence");
console.log(`tokenizer: ${divs.length} listed JS-port divergences (Rust semantics used):`);
for (const d of divs) console.log(`  ${show(d.bytes)}: ${d.reason}`);

function check(model, expect, label, nfc) {
  const { nStrings, nTok, exactRound } = checkTool({ tool, model, corpus, expect, label, fail });
  console.log(`tokenizer: ${label}: ${nStrings} strings, ${nTok} tokens compared with the JS reference; ` +
    `decode = ${nfc ? "NFC(lossy UTF-8)" : "lossy UTF-8"} of the input for all, byte-identical to the input for ` +
    `${exactRound} (the rest are invalid UTF-8${nfc ? " or not NFC" : ""})`);
}
for (const model of models) check(model, expect, path.basename(model), true);

for (const variant of ["llama3", "gpt2"]) {
  const dir = fs.mkdtempSync(path.join(require("os").tmpdir(), `lms-tok-${variant}-`));
  try {
    fs.writeFileSync(path.join(dir, "tokenizer.json"), JSON.stringify(variantJson(variant)));
    fs.copyFileSync(path.join(tokdir, "tokenizer_config.json"), path.join(dir, "tokenizer_config.json"));
    const r = { special: makeTokenizer({ rust: true, variant }), plain: makeTokenizer({ rust: true, drop: true, variant }) };
    const exp = corpus.map((c) => {
      const s = dec.decode(c.bytes);
      return { ids: enc(r[c.mode], s), text: Buffer.from(s, "utf8") };
    });
    check(dir, exp, `${variant} pre-tokenizer (Qwen3 vocab)`, false);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
if (corpus.length < 2000) fail(`corpus has only ${corpus.length} strings`);
if (F.count) {
  console.log(`tokenizer: ${F.count} failures`);
  process.exit(1);
}
console.log("tokenizer: all ids identical to the reference");
