// Deterministic tokenizer test corpus (seeded PRNG; same strings on every run and machine).
//
// generate() returns [{cat, mode, bytes: Buffer, reason?}] where mode is "plain" (control tokens
// are text, as for request content) or "special" (control tokens parsed, --special). Category
// "divergence" holds the strings on which the JS port's regex semantics differ from Hugging Face's
// Rust tokenizer (Oniguruma): each carries the reason; compare.js checks that the unpatched JS
// port really differs on exactly these strings and that we follow the Rust semantics.
//
// benchText(bytes) returns an English prose + code text of about that size for the benchmark;
// benchMulti(bytes) a multilingual one (`node corpus.js bench|bench-multi BYTES` prints them).
"use strict";

function rng(seed) { // mulberry32
  let a = seed >>> 0;
  return function () {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = ("the of and to in is was that for it with as his on be at by had are but from or " +
  "have an they which one you were all we her she there would their will when who him been has " +
  "more if no out so said what up its about than into them can only other time new some could " +
  "these two may first then do any like my now over such our man me even most made after also " +
  "did many off before must well back through years much where your way down should because " +
  "long each just state people those too how little good very make world still see own men " +
  "work government another while last might great old year come since against go came right " +
  "used take three however use during without again place around American between both life " +
  "tokenizer internationalization antidisestablishmentarianism quick brown fox jumps lazy dog " +
  "naïve café résumé coöperate façade jalapeño Zürich München São Paulo Ångström").split(" ");

const CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M",
  "'LL", "'D", "'Re", "'rE", "'Ve", "'vE", "'Ll", "'lL"];

const CODE = [
  `#include <stdio.h>\n\nint main(int argc, char **argv)\n{\n\tfor (int i = 0; i < argc; i++)\n\t\tprintf("%d: %s\\n", i, argv[i]);\n\treturn 0;\n}\n`,
  `def fib(n: int) -> int:\n    """Return the n-th Fibonacci number."""\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\n\nif __name__ == "__main__":\n    print([fib(i) for i in range(20)])\n`,
  `export async function fetchJson(url, { retries = 3 } = {}) {\n  for (let i = 0; i < retries; i++) {\n    const res = await fetch(url);\n    if (res.ok) return res.json();\n  }\n  throw new Error(\`failed: \${url}\`);\n}\n`,
  `fn main() {\n    let v: Vec<u64> = (1..=10).map(|x| x * x).collect();\n    println!("{:?} sum={}", v, v.iter().sum::<u64>());\n}\n`,
  `package main\n\nimport "fmt"\n\nfunc main() {\n\tm := map[string]int{"a": 1, "b": 2}\n\tfor k, v := range m {\n\t\tfmt.Printf("%s=%d\\n", k, v)\n\t}\n}\n`,
  `SELECT u.id, u.name, COUNT(o.id) AS orders\nFROM users u LEFT JOIN orders o ON o.user_id = u.id\nWHERE u.created_at >= '2024-01-01'\nGROUP BY u.id, u.name\nHAVING COUNT(o.id) > 3\nORDER BY orders DESC;\n`,
  `<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8"><title>Test &amp; page</title></head>\n<body>\n  <div class="a b" id='x'>Hello &lt;world&gt;</div>\n</body>\n</html>\n`,
  `#!/usr/bin/env bash\nset -euo pipefail\nfor f in "$@"; do\n  [[ -f $f ]] || { echo "missing: $f" >&2; exit 1; }\n  wc -l -- "$f" | awk '{print $1}'\ndone\n`,
  `{"model": "qwen3", "messages": [{"role": "user", "content": "Hi \\u00e9\\n"}], "temperature": 0.7, "top_p": 0.8, "stream": true}\n`,
  `public class Main {\n    public static void main(String[] args) {\n        System.out.println("Hello, " + (args.length > 0 ? args[0] : "world") + "!");\n    }\n}\n`,
  `(defun fact (n)\n  (if (<= n 1) 1 (* n (fact (- n 1)))))\n;; => 3628800\n`,
  `template <typename T>\nstd::vector<T> uniq(std::vector<T> v) {\n    std::sort(v.begin(), v.end());\n    v.erase(std::unique(v.begin(), v.end()), v.end());\n    return v;\n}\n`,
  `x = [1, 2, 3]\ny = {'a': x, "b": None}\n# It's a comment, isn't it? I'M SURE it'LL work; we'd've...\n`,
  `$ curl -s http://127.0.0.1:8080/v1/models | jq '.data[0].id'\n"qwen3-0.6b"\n`,
  `  if (a&&b||!c) { x+=1; y<<=2; z>>>=3; } else if (p->q != NULL) { return ~0u; }\n`,
];

const SCRIPTS = [
  "我们今天去公园散步，天气非常好。", "人工智能正在改变世界。", "東京は日本の首都です。",
  "ひらがなとカタカナ、そして漢字。", "한국어 문장을 토큰화합니다.", "Привет, как дела? Всё хорошо!",
  "Γειά σου Κόσμε· τι κάνεις;", "مرحبا بالعالم، كيف حالك؟", "שלום עולם, מה שלומך?",
  "नमस्ते दुनिया, आप कैसे हैं?", "สวัสดีชาวโลก คุณสบายดีไหม", "გამარჯობა მსოფლიო",
  "Բարեւ աշխարհ", "ሰላም ለዓለም", "Xin chào thế giới, bạn khỏe không?", "Ελληνικά: ἀρχὴ ἥμισυ παντός",
  "தமிழ் மொழி", "বাংলা ভাষা", "ಕನ್ನಡ", "മലയാളം", "ภาษาไทย", "ᚠᚢᚦᚨᚱᚲ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙 ∀x∈ℝ: x²≥0",
  "Ünïcödé ÀÉÎÕÜ àéîõü ßẞ ĳŒœ", "fullwidth：ＡＢＣ１２３！", "½ ¾ ⅓ Ⅻ ⅻ ① ⑳", "٠١٢٣٤٥٦٧٨٩ ۰۱۲۳ ０１２３",
];

const EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷", "🇯🇵🇺🇸", "❤️", "❤️‍🔥", "1️⃣", "#️⃣",
  "🧑🏿‍💻", "👩‍❤️‍💋‍👨", "🐈‍⬛", "™", "©️", "🫠", "🤷‍♀️", "💯", "🔥🔥🔥", "🏴󠁧󠁢󠁳󠁣󠁴󠁿"];

const SPACES = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", " \n", "\n ",
  " \t ", "\u00a0", "\u3000", "\u2003", "\u2009", "\u202f", "\u205f", "\u2028", "\u2029", "\r",
  "\x0b", "\x0c", "        ", "\n\n\n\n", " \r\n \r\n"];

// Control / added token text (Qwen3).
const SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
  "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
  "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
  "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
  "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
  "<think>", "</think>"];

// Characters whose treatment differs between the JS port and HF's Rust tokenizer; kept out of
// the random categories so that every divergence is a listed one. (U+017F also differs at the
// regex level -- (?i)'s matches it by case folding in Rust, not in the port's '[sS] -- but no
// Qwen3 merge joins it with what follows, so the ids agree; the edge cases below include it.)
const DIVERGENT = /[\ufeff\u0085]/u;

function pick(r, a) { return a[Math.floor(r() * a.length)]; }
function int(r, lo, hi) { return lo + Math.floor(r() * (hi - lo + 1)); }

function sentence(r) {
  const n = int(r, 3, 18);
  const w = [];
  for (let i = 0; i < n; i++) {
    let x = pick(r, WORDS);
    if (i === 0) x = x[0].toUpperCase() + x.slice(1);
    const k = r();
    if (k < 0.08) x += pick(r, CONTRACTIONS);
    else if (k < 0.12) x += ",";
    else if (k < 0.14) x = String(int(r, 0, 100000));
    else if (k < 0.16) x = x.toUpperCase();
    else if (k < 0.17) x = `"${x}"`;
    else if (k < 0.18) x = `(${x})`;
    w.push(x);
  }
  return w.join(" ") + pick(r, [".", ".", ".", "!", "?", "...", ";", ":", " —", ""]);
}

function prose(r) {
  const n = int(r, 1, 6), s = [];
  for (let i = 0; i < n; i++) s.push(sentence(r));
  return s.join(pick(r, [" ", " ", "  ", "\n", "\n\n"]));
}

// A random string mixing every class of character the regex distinguishes.
function mixed(r) {
  const parts = [];
  const n = int(r, 1, 30);
  for (let i = 0; i < n; i++) {
    const k = r();
    if (k < 0.2) parts.push(pick(r, WORDS));
    else if (k < 0.3) parts.push(pick(r, SPACES));
    else if (k < 0.4) parts.push(String(int(r, 0, 1e9)));
    else if (k < 0.5) parts.push(pick(r, SCRIPTS).slice(0, int(r, 1, 8)));
    else if (k < 0.57) parts.push(pick(r, EMOJI));
    else if (k < 0.67) parts.push(pick(r, ["!", "?", ".", ",", "'", "\"", "(", ")", "{", "}", "[",
      "]", "<", ">", "/", "\\", "#", "$", "%", "^", "&", "*", "-", "_", "=", "+", "~", "`", "|",
      ";", ":", "@", "—", "…", "«", "»", "¿", "¡", "§", "€", "£", "¥", "°"]));
    else if (k < 0.75) parts.push(pick(r, CONTRACTIONS));
    else if (k < 0.8) parts.push(String.fromCodePoint(int(r, 0x20, 0x7e)));
    else if (k < 0.85) parts.push(String.fromCodePoint(pick(r, [0x301, 0x308, 0x327, 0x30a, 0x303,
      0x1100, 0x1161, 0x11a8, 0x200d, 0xfe0f, 0x200b, 0x2060])));
    else if (k < 0.9) parts.push(String.fromCodePoint(int(r, 0xa0, 0x24f)));
    else parts.push(String.fromCodePoint(int(r, 0x4e00, 0x9fff)));
  }
  return parts.join("");
}

function invalidUtf8(r) {
  const bad = [[0x80], [0xbf], [0xc0, 0x80], [0xc1, 0xbf], [0xe0, 0x80, 0x80], [0xed, 0xa0, 0x80],
    [0xed, 0xbf, 0xbf], [0xf4, 0x90, 0x80, 0x80], [0xf5], [0xff], [0xfe], [0xe2, 0x82],
    [0xf0, 0x9f, 0x98], [0xf0, 0x9f], [0xc3], [0xe4, 0xb8], [0xf8, 0x88, 0x80, 0x80, 0x80],
    [0xc3, 0x28], [0xe2, 0x28, 0xa1], [0xf0, 0x28, 0x8c, 0x28]];
  const parts = [];
  const n = int(r, 1, 8);
  for (let i = 0; i < n; i++) {
    if (r() < 0.5) parts.push(Buffer.from(pick(r, bad)));
    else parts.push(Buffer.from(r() < 0.5 ? pick(r, WORDS) : mixed(r).slice(0, 12), "utf8"));
    if (r() < 0.3) parts.push(Buffer.from(pick(r, SPACES), "utf8"));
  }
  return Buffer.concat(parts);
}

function generate() {
  const r = rng(20260401);
  const out = [];
  const add = (cat, s, mode = "plain", reason) => {
    const bytes = Buffer.isBuffer(s) ? s : Buffer.from(s, "utf8");
    if (cat !== "divergence" && DIVERGENT.test(bytes.toString("utf8")))
      throw new Error("corpus: divergent character outside the divergence category");
    out.push({ cat, mode, bytes, reason });
  };
  // Fixed edge cases.
  for (const s of ["", " ", "a", "\n", "  ", "\t", "'", "'s", "'S", "0", "00", "1234567890",
    "Hello", " Hello", "Hello world", "hello  world", "x\r\ny", "a\n\n\nb", "   leading",
    "trailing   ", "\n\n\n", " \n \n ", "e\u0301", "\u1100\u1161\u11a8", "Å", "A\u030a",
    "\u212b", "ﬁ", "\u0000", "\u0000x\u0001", "\x7f", "\u200b", "\u200d", "é".repeat(50),
    "I'm you're we've they'll she'd it's can't", "I'M YOU'RE WE'VE THEY'LL SHE'D IT'S CAN'T",
    "'''", "''s", "'s's", "don't'", " 's", "\n's", "it'\u017ftill", "THAT'\u017f ok", "'\u017f"])
    add("edge", s);
  // All single bytes 0x00..0x7f and every valid 2-byte lead with one continuation.
  for (let b = 0; b < 0x80; b++) add("byte", Buffer.from([b]));
  for (let b = 0xc2; b <= 0xdf; b++) add("byte", Buffer.from([b, 0x80 + (b & 0x3f)]));
  for (let i = 0; i < 400; i++) add("prose", prose(r));
  for (let i = 0; i < 250; i++) {
    let c = pick(r, CODE);
    const k = r();
    if (k < 0.3) c = c.replace(/ {4}/g, "\t");
    else if (k < 0.5) c = c.replace(/\n/g, "\r\n");
    else if (k < 0.6) c = c.replace(/\t/g, "  ");
    const a = int(r, 0, c.length - 1), b = int(r, a + 1, c.length);
    add("code", r() < 0.5 ? c : c.slice(a, b));
  }
  for (let i = 0; i < 200; i++) {
    const n = int(r, 1, 4), s = [];
    for (let j = 0; j < n; j++) s.push(pick(r, SCRIPTS));
    add("scripts", s.join(pick(r, ["", " ", "\n", "、", ". "])));
  }
  for (let i = 0; i < 150; i++) {
    const n = int(r, 1, 6), s = [];
    for (let j = 0; j < n; j++) s.push(r() < 0.6 ? pick(r, EMOJI) : pick(r, WORDS));
    add("emoji", s.join(pick(r, ["", " ", "  ", "\n"])));
  }
  for (let i = 0; i < 120; i++) {
    let d = "";
    const n = int(r, 1, 200);
    for (let j = 0; j < n; j++) d += String(int(r, 0, 9));
    const k = r();
    if (k < 0.2) d = d.replace(/(\d{3})(?=\d)/g, "$1,");
    else if (k < 0.3) d = d.slice(0, n >> 1) + "." + d.slice(n >> 1);
    else if (k < 0.4) d = "v" + d + "x" + d;
    else if (k < 0.5) d = " " + d + " ";
    add("digits", d);
  }
  for (let i = 0; i < 200; i++) {
    const n = int(r, 1, 12), s = [];
    for (let j = 0; j < n; j++) s.push(r() < 0.5 ? pick(r, SPACES) : pick(r, WORDS));
    add("whitespace", s.join(""));
  }
  for (let i = 0; i < 100; i++) {
    const n = int(r, 1, 8), s = [];
    for (let j = 0; j < n; j++) {
      const w = pick(r, WORDS);
      const c = pick(r, CONTRACTIONS);
      s.push(r() < 0.5 ? w + c : (w + c).toUpperCase());
    }
    add("contractions", s.join(pick(r, [" ", "  ", "\n", ", "])));
  }
  for (let i = 0; i < 350; i++) add("mixed", mixed(r));
  for (let i = 0; i < 150; i++) add("invalid-utf8", invalidUtf8(r));
  // Special-token text: in --special mode (the JS port always parses it) and in plain mode
  // (compared against the same tokenizer with control tokens removed: they must be plain text).
  for (let i = 0; i < 150; i++) {
    const n = int(r, 1, 8), s = [];
    for (let j = 0; j < n; j++) {
      const k = r();
      if (k < 0.4) s.push(pick(r, SPECIALS));
      else if (k < 0.5) s.push(pick(r, SPECIALS).slice(0, int(r, 1, 8))); // partial
      else if (k < 0.6) s.push(pick(r, ["system", "user", "assistant", "tool"]) + "\n");
      else s.push(r() < 0.5 ? sentence(r) : pick(r, SPACES));
    }
    const str = s.join("");
    add("special", str, "special");
    add("special-as-text", str, "plain");
  }
  for (const s of SPECIALS) {
    add("special", s, "special");
    add("special-as-text", s, "plain");
    add("special", `<|im_start|>user\n${s}<|im_end|>\n<|im_start|>assistant\n`, "special");
    add("special-as-text", `<|im_start|>user\n${s}<|im_end|>`, "plain");
  }
  // Long inputs: no quadratic blow-up, cache eviction, long pieces.
  add("long", "a".repeat(20000));
  add("long", "ab".repeat(10000));
  add("long", "9".repeat(5000));
  add("long", " ".repeat(5000) + "x");
  add("long", "\n".repeat(3000));
  add("long", "!?".repeat(4000));
  add("long", "我".repeat(3000));
  add("long", "😀".repeat(1000));
  add("long", (() => { let s = ""; for (let i = 0; i < 300; i++) s += prose(r) + "\n"; return s; })());
  add("long", (() => { let s = ""; for (let i = 0; i < 3000; i++) s += pick(r, WORDS); return s; })());
  // Listed divergences between the JS port and Hugging Face's Rust tokenizer.
  const FEFF = "U+FEFF: JS \\s matches it, Unicode White_Space (\\s in HF's Rust/Oniguruma regex) does not";
  const NEL = "U+0085 (NEL): Unicode White_Space (\\s in HF's Rust/Oniguruma regex), but not JS \\s";
  const DIV = [
    [" \ufeffa", FEFF], ["  \ufeff", FEFF], ["x \ufeffthe", FEFF], ["  \ufeff\ufeff\n", FEFF],
    ["  \ufeff\r\n", FEFF], ["Hello \ufeffworld", FEFF],
    [" \u0085a", NEL], [" \u0085hello", NEL], [" \u0085the", NEL], ["end \u0085!", NEL],
    ["\t\u0085\u0085 \u0085\u00e9", NEL],
  ];
  for (const [s, why] of DIV) add("divergence", s, "plain", why);
  return out;
}

// ~n bytes of English prose and code (the benchmark corpus), deterministic.
function benchText(n) {
  const r = rng(7);
  const parts = [];
  let len = 0;
  while (len < n) {
    const s = r() < 0.6 ? prose(r) + "\n\n" : pick(r, CODE) + "\n";
    parts.push(s);
    len += Buffer.byteLength(s);
  }
  const b = Buffer.from(parts.join(""), "utf8");
  return b.subarray(0, b.lastIndexOf(10, n) + 1); // whole lines: never cut a UTF-8 sequence
}

// ~n bytes of multilingual text (CJK and other scripts, emoji, prose), deterministic.
function benchMulti(n) {
  const r = rng(11);
  const parts = [];
  let len = 0;
  while (len < n) {
    const k = r();
    const s = (k < 0.5 ? pick(r, SCRIPTS) + pick(r, SCRIPTS) : k < 0.7 ? mixed(r) : k < 0.8 ?
      pick(r, EMOJI) + " " + sentence(r) : prose(r)) + "\n";
    parts.push(s);
    len += Buffer.byteLength(s);
  }
  const b = Buffer.from(parts.join(""), "utf8");
  return b.subarray(0, b.lastIndexOf(10, n) + 1);
}

module.exports = { generate, benchText, benchMulti, SPECIALS };

if (require.main === module) {
  const [, , what, arg] = process.argv;
  if (what === "bench") process.stdout.write(benchText(parseInt(arg || "1048576", 10)));
  else if (what === "bench-multi") process.stdout.write(benchMulti(parseInt(arg || "1048576", 10)));
  else {
    const c = generate();
    const cats = {};
    for (const x of c) cats[x.cat] = (cats[x.cat] || 0) + 1;
    console.log(c.length, JSON.stringify(cats));
  }
}
