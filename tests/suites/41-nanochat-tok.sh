#!/usr/bin/env bash
# nanochat tokenizer (docs/nanochat.md, "The tokenizer file"): token ids of lmserve-tokenize on a
# nanochat tokenizer file identical to tests/ref/nanochat_tok.py (a tiktoken-semantics BPE in
# Python, from the ranks) on the tokenizer corpus (tests/tok/corpus.js, 2,500+ strings) plus
# strings with nanochat's own special tokens, in plain mode (request content: specials are text,
# as nanochat's encode_ordinary) and special mode (parsed, as encode(allowed_special="all")); the
# decode round trip; then malformed files, each a clear error naming the field.
# The ranks come from a BPE of 4,000 merges trained here by the same script on the corpus module's
# benchmark texts (deterministic), so no vocabulary is shipped.
set -eu
TOOL="$BUILD/lmserve-tokenize"
PY=/usr/bin/python3 # Debian's, with python3-regex
REF=tests/ref/nanochat_tok.py
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

{ node tests/tok/corpus.js bench 150000; node tests/tok/corpus.js bench-multi 100000; } > "$t/train.txt"
$PY $REF train "$t/train.txt" "$t/tok.json" 4000
node - > "$t/corpus.tsv" <<'EOF'
const { generate } = require("./tests/tok/corpus.js");
for (const c of generate()) console.log(c.mode + "\t" + c.bytes.toString("hex"));
const extra = ["<|bos|><|user_start|>hi<|user_end|><|assistant_start|>", "<|bos|", "|>", "<|",
  "x<|python_start|>2+2<|python_end|><|output_start|>4<|output_end|><|assistant_end|>",
  "<|user_start|><|user_start|>", "<|bos|><|bos|>a", "it's IT'S it'\u017f we'Ll 'VE",
  "12345 1,234,567.89 \u0663\u0664\u0665", "a\r\n\r\n  b \n\n\n c\t\t", "<|output_end|>\u00e9"];
for (const s of extra)
  for (const m of ["plain", "special"]) console.log(m + "\t" + Buffer.from(s).toString("hex"));
EOF
n_all=0
for m in plain special; do
  grep "^$m	" "$t/corpus.tsv" > "$t/$m.tsv" || true
  cut -f2 "$t/$m.tsv" > "$t/$m.hex"
  flag=""; [ "$m" = special ] && flag=--special
  "$TOOL" "$t/tok.json" --lines-hex $flag < "$t/$m.hex" > "$t/$m.ours" || fail "lmserve-tokenize $m exited $?"
  $PY $REF encode "$t/tok.json" < "$t/$m.tsv" > "$t/$m.ref"
  n=$(wc -l < "$t/$m.tsv")
  [ "$(wc -l < "$t/$m.ours")" = "$n" ] || fail "$m: $(wc -l < "$t/$m.ours") lines for $n strings"
  if ! cmp -s "$t/$m.ours" "$t/$m.ref"; then
    paste -d'\n' "$t/$m.ours" "$t/$m.ref" | paste - - | awk -F'\t' '$1 != $3 || $2 != $4' | head -3 | cut -c1-400
    fail "$m: ids or decode differ from the reference"
  fi
  n_all=$((n_all + n))
done
[ "$n_all" -ge 2500 ] || fail "only $n_all strings"
# The special mode really parsed nanochat's specials and the plain mode did not.
bos=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["special_tokens"]["<|bos|>"])' "$t/tok.json")
got=$(printf '<|bos|>' | "$TOOL" "$t/tok.json" --special)
[ "$got" = "$bos" ] || fail "<|bos|> with --special: got $got, want $bos"
got=$(printf '<|bos|>' | "$TOOL" "$t/tok.json")
case ",$got," in *,"$bos",*) fail "<|bos|> parsed without --special: $got";; esac
# The checkpoint directory form finds the file by its name.
mkdir "$t/ckpt" && cp "$t/tok.json" "$t/ckpt/tokenizer.json"
[ "$(printf 'hello world' | "$TOOL" "$t/ckpt")" = "$(printf 'hello world' | "$TOOL" "$t/tok.json")" ] ||
  fail "directory form differs"
echo "nanochat tokenizer: $n_all strings id-identical to the Python reference (plain + special), decode = lossy UTF-8 of the input"

# Malformed files: a clear error naming the field, never a crash.
bad() { # bad NAME EXPECTED-SUBSTRING PYTHON-EDIT-OF-d
  $PY - "$t/tok.json" "$t/bad-$1.json" "$3" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
exec(sys.argv[3])
open(sys.argv[2], "w").write(d if isinstance(d, str) else json.dumps(d))
EOF
  if out=$(printf 'x' | "$TOOL" "$t/bad-$1.json" 2>&1); then fail "$1: accepted"; fi
  case "$out" in *"$2"*) ;; *) fail "$1: error does not name '$2': $out";; esac
}
bad format '"format"' 'd["format"] = "tiktoken"'
bad version '"format_version"' 'd["format_version"] = 2'
bad pattern '"pattern"' 'd["pattern"] = d["pattern"].replace("{1,2}", "{1,3}")'
bad nopattern '"pattern"' 'del d["pattern"]'
bad ranks '"mergeable_ranks"' 'd["mergeable_ranks"] = d["mergeable_ranks"][:100]'
bad b64 'mergeable_ranks[300]' 'd["mergeable_ranks"][300] = "a*=="'
bad b64len 'mergeable_ranks[7]' 'd["mergeable_ranks"][7] = "abc"'
bad b64pad 'mergeable_ranks[8]' 'd["mergeable_ranks"][8] = "a=bc"'
bad dup 'mergeable_ranks[400] repeats' 'd["mergeable_ranks"][400] = d["mergeable_ranks"][399]'
bad nobyte 'byte 0x41' 'd["mergeable_ranks"][0x41] = "QUE="'
bad notstr 'mergeable_ranks[9]' 'd["mergeable_ranks"][9] = 9'
bad special '<|python_end|>' 'del d["special_tokens"]["<|python_end|>"]'
bad specialid 'special_tokens["<|bos|>"]' 'd["special_tokens"]["<|bos|>"] = 5'
bad specialdup 'two tokens' 'd["special_tokens"]["<|bos|>"] = d["special_tokens"]["<|user_end|>"]'
bad notjson 'not JSON' 'd = "{\"format\": "'
if out=$("$TOOL" "$t/missing.json" </dev/null 2>&1); then fail "missing file accepted"; fi
case "$out" in *missing.json*) ;; *) fail "missing file: $out";; esac
echo "nanochat tokenizer: malformed files refused with the field named"
