# Shared by the chat-rendering suites (45-chat, 46-chat-gemma4, 47-chat-qwen35): sourced, not run
# (make test runs tests/suites/*.sh only). Needs BUILD and PY.

# render_compare LABEL MIN OUT "RENDER_ARGS" FILE...: lmserve-render RENDER_ARGS < FILE against
# the Jinja2 rendering the caller wrote to OUT/ref/NAME.txt, byte for byte; fails when any
# differs or fewer than MIN conversations were compared.
render_compare() {
  local label=$1 min=$2 out=$3 args=$4 f name n=0 bad=0
  shift 4
  for f in "$@"; do
    name=$(basename "$f" .json)
    # shellcheck disable=SC2086 # RENDER_ARGS is a word list
    if ! "$BUILD/lmserve-render" $args < "$f" > "$out/$name.c"; then
      echo "FAIL $name: lmserve-render failed"; bad=$((bad + 1)); continue
    fi
    if ! cmp -s "$out/ref/$name.txt" "$out/$name.c"; then
      echo "FAIL $name: differs from the Jinja2 rendering"
      diff <(od -c "$out/ref/$name.txt") <(od -c "$out/$name.c") | head -20 || true
      bad=$((bad + 1))
    fi
    n=$((n + 1))
  done
  echo "$label: $n conversations rendered, $bad differ from Jinja2"
  [ "$n" -ge "$min" ] || { echo "FAIL: fewer than $min conversations"; return 1; }
  [ "$bad" -eq 0 ]
}

# template_fingerprint LABEL TEMPLATE SOURCE: the renderer in SOURCE knows the template it
# reproduces (chat_template_known's FNV-1a fingerprint of the template's bytes is in it).
template_fingerprint() {
  $PY - "$2" "$3" <<'PYEOF' || return 1
import sys
h = 0xcbf29ce484222325
for b in open(sys.argv[1], "rb").read():
    h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
src = open(sys.argv[2]).read()
assert "0x%016xull" % h in src, "template fingerprint 0x%016x not in %s" % (h, sys.argv[2])
PYEOF
  echo "$1: the template's fingerprint is the descriptor's"
}

# refused OUT "RENDER_ARGS" CONVERSATION: lmserve-render refuses CONVERSATION (JSON text) with a
# message on stderr.
refused() {
  # shellcheck disable=SC2086
  if echo "$3" | "$BUILD/lmserve-render" $2 2> "$1/err" > /dev/null; then
    echo "FAIL: accepted: $3"; return 1
  fi
  grep -q . "$1/err" || { echo "FAIL: no message for: $3"; return 1; }
}
