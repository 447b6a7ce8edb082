// Strings built around combining marks (\p{M}): what Qwen3.5's pre-tokenizer splits differently
// from Qwen2's (a letter run takes the marks after it, a punctuation run stops at one). Marks that
// NFC leaves alone (no precomposed form), after letters, digits, spaces, punctuation, at the
// start, in runs; scripts whose vowel signs are marks; U+FE0F / U+20E3. Used by
// tests/tok/compare_qwen35.js and scripts/qwen35/tokenizer_llamacpp_check.mjs.
"use strict";
const MARKS = ["\u0301", "\u0308", "\u0327", "\u0336", "\u20d7", "\u0903", "\u093f", "\u094d",
  "\u05b7", "\u05bc", "\u064e", "\u0651", "\u0e34", "\u0e48", "\u1ab0", "\ufe0f", "\u20e3", "\u0489"];
const BASES = ["q", "x", "Z", "ω", "Ж", "क", "ש", "ب", "ก", "7", " ", "!", "-", "'", "\n", "(", "", "中", "😀"];
function markStrings() {
  const out = [];
  let k = 0;
  for (const b of BASES)
    for (const m of MARKS) {
      const m2 = MARKS[(k++ * 7) % MARKS.length];
      out.push(b + m, b + m + m2 + "abc", "ab" + b + m + " cd", "..." + m + "x", "x" + m + "!" + m2,
        "12" + m + "34", " " + m + b);
    }
  out.push("naïve cafe\u0301 fiance\u0301e", "हिन्दी में लिखा", "ภาษาไทย ที่นี่", "שָׁלוֹם עוֹלָם",
    "مَرْحَبًا بِكُمْ", "❤️ ✌️ 1️⃣ #️⃣", "Zalgo: Z\u0351\u0346a\u0352l\u0357g\u0359o\u035b",
    "\u0301\u0302\u0303", "a\u0301'\u0301s", "don\u0301't", "e\u0301\u0301\u0301\u0301\u0301");
  return out;
}

module.exports = { markStrings };
