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
// Invalid UTF-8: Hugging Face tokenizes Rust strings, so bytes are first decoded lossily; the JS
// side uses TextDecoder (WHATWG: one U+FFFD per maximal subpart, the same rule as Rust's
// String::from_utf8_lossy), and lmserve does the same in C.
"use strict";
const fs = require("fs");
const path = require("path");
const { spawnSync } = require("child_process");
const { TokenizerLoader } = require("@lenml/tokenizers");
const { generate } = require("./corpus.js");

const [tool, tokdir, ...models] = process.argv.slice(2);
if (!tool || !tokdir || models.length === 0) {
  console.error("usage: compare.js TOOL TOKDIR MODEL [MODEL...]");
  process.exit(2);
}

const WS = "\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
function rustSemantics(re) {
  const ci = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
  if (!re.includes(ci)) throw new Error("unexpected split regex: " + re);
  return re.replace(ci, "(?:'[sS\\u017f]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])")
    .replaceAll("[^\\s", "[^" + WS)
    .replaceAll("\\s", "[" + WS + "]")
    .replaceAll("\\S", "[^" + WS + "]");
}

const tjText = fs.readFileSync(path.join(tokdir, "tokenizer.json"), "utf8");
const config = JSON.parse(fs.readFileSync(path.join(tokdir, "tokenizer_config.json"), "utf8"));
function makeTokenizer({ rust, dropControl }) {
  const tj = JSON.parse(tjText);
  if (rust) {
    const split = tj.pre_tokenizer.pretokenizers.find((p) => p.type === "Split");
    split.pattern.Regex = rustSemantics(split.pattern.Regex);
  }
  if (dropControl) // control = HF special, or looks like <|...|> (llama.cpp's convert rule)
    tj.added_tokens = tj.added_tokens.filter((t) => !(t.special || /^<\|.*\|>$/.test(t.content)));
  return TokenizerLoader.fromPreTrained({ tokenizerJSON: tj, tokenizerConfig: config });
}
const ref = { special: makeTokenizer({ rust: true }), plain: makeTokenizer({ rust: true, dropControl: true }) };
const js = { special: makeTokenizer({ rust: false }), plain: makeTokenizer({ rust: false, dropControl: true }) };

const corpus = generate();
const dec = new TextDecoder("utf-8", { ignoreBOM: true }); // U+FFFD per maximal subpart; keeps U+FEFF
const enc = (t, s) => Array.from(t.encode(s, { add_special_tokens: false }));
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

let failures = 0;
const fail = (msg) => { failures++; if (failures <= 40) console.log("FAIL " + msg); };
const esc = (s) => JSON.stringify(s).replace(/[^\x20-\x7e]/gu, (c) => {
  const cp = c.codePointAt(0);
  return cp < 0x10000 ? "\\u" + cp.toString(16).padStart(4, "0") : c;
});
const show = (b) => esc(b.toString("utf8")).slice(0, 160);

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

for (const model of models) {
  let nTok = 0, exactRound = 0, nStrings = 0;
  for (const mode of ["plain", "special"]) {
    const idx = corpus.map((c, i) => (c.mode === mode ? i : -1)).filter((i) => i >= 0);
    const input = idx.map((i) => corpus[i].bytes.toString("hex")).join("\n") + "\n";
    const args = [model, "--lines-hex"].concat(mode === "special" ? ["--special"] : []);
    const r = spawnSync(tool, args, { input, maxBuffer: 1 << 30 });
    if (r.status !== 0) {
      fail(`${tool} ${args.join(" ")} exited ${r.status}: ${r.stderr}`);
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
  console.log(`tokenizer: ${path.basename(model)}: ${nStrings} strings, ${nTok} tokens compared with the JS reference; ` +
    `decode = NFC(lossy UTF-8) of the input for all, byte-identical to the input for ${exactRound} ` +
    `(the rest are invalid UTF-8 or not NFC)`);
}
if (corpus.length < 2000) fail(`corpus has only ${corpus.length} strings`);
if (failures) {
  console.log(`tokenizer: ${failures} failures`);
  process.exit(1);
}
console.log("tokenizer: all ids identical to the reference");
