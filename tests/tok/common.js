// What the three tokenizer comparisons (compare.js: Qwen3, compare_gemma.js: Gemma 4's stand-in,
// compare_qwen35.js: Qwen3.5's stand-in) share: Rust-semantics regex rewriting, string helpers,
// a failure counter, and the loop that feeds a corpus to `lmserve-tokenize --lines-hex` and
// compares its ids and decode with the reference, reporting the first differing position.
"use strict";
const { spawnSync } = require("child_process");

// Hugging Face's tokenizers run the split regex with Oniguruma: \s is Unicode White_Space (the JS
// port's \s adds U+FEFF and lacks U+0085) and (?i:'s) folds case (U+017F). The reference spells
// those semantics out.
const WS = "\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";
function rustSemantics(re) {
  const ci = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
  return re.replace(ci, "(?:'[sS\\u017f]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])")
    .replaceAll("[^\\s", "[^" + WS)
    .replaceAll("\\s", "[" + WS + "]")
    .replaceAll("\\S", "[^" + WS + "]");
}

// Control tokens: HF special, or looking like <|...|> (llama.cpp's convert rule).
const dropControl = (tj) => {
  tj.added_tokens = tj.added_tokens.filter((t) => !(t.special || /^<\|.*\|>$/.test(t.content)));
  return tj;
};

const dec = new TextDecoder("utf-8", { ignoreBOM: true }); // U+FFFD per maximal subpart; keeps U+FEFF
const enc = (t, s) => Array.from(t.encode(s, { add_special_tokens: false }));
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const esc = (s) => JSON.stringify(s).replace(/[^\x20-\x7e]/gu, (c) => {
  const cp = c.codePointAt(0);
  return cp < 0x10000 ? "\\u" + cp.toString(16).padStart(4, "0") : c;
});
const show = (b) => esc(b.toString("utf8")).slice(0, 160);

// The first 40 failures are printed; `count` is what the script exits on.
function failures() {
  const f = { count: 0 };
  f.fail = (msg) => { f.count++; if (f.count <= 40) console.log("FAIL " + msg); };
  return f;
}

// Feeds corpus[i].bytes (mode "plain" without --special, "special" with it) to TOOL MODEL
// --lines-hex and checks each line's ids against expect[i].ids and its decode against
// expect[i].text. Returns the counts the scripts print.
function checkTool({ tool, model, corpus, expect, label, fail }) {
  let nTok = 0, exactRound = 0, nStrings = 0;
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
    if (lines.length !== idx.length + 1) fail(`${label} ${mode}: ${lines.length - 1} lines for ${idx.length} strings`);
    idx.forEach((ci, k) => {
      const [idsText, hex] = (lines[k] || "").split("\t");
      const ids = idsText ? idsText.split(",").map(Number) : [];
      const c = corpus[ci], want = expect[ci];
      nStrings++;
      nTok += ids.length;
      if (!same(ids, want.ids)) {
        let d = 0;
        while (d < ids.length && ids[d] === want.ids[d]) d++;
        fail(`${label} ${mode} [${c.cat}] ${show(c.bytes)}: ids differ at ${d}: ` +
          `ours ${ids.slice(d, d + 6)} ref ${want.ids.slice(d, d + 6)}`);
      }
      const back = Buffer.from(hex || "", "hex");
      if (!back.equals(want.text)) fail(`${label} ${mode} [${c.cat}] ${show(c.bytes)}: decode gives ${show(back)}`);
      if (back.equals(c.bytes)) exactRound++;
    });
  }
  return { nStrings, nTok, exactRound };
}

module.exports = { WS, rustSemantics, dropControl, dec, enc, same, esc, show, failures, checkTool };
