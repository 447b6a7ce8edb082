#!/usr/bin/env bash
# --spec (R-SPEC-1, docs/speculation.md): prompt-lookup speculative decoding vs plain decoding on
# the same file and threads. Two lmserve servers run side by side (plain, and --spec $SPEC with
# --log-level debug for the per-reply acceptance line); bench/spec.mjs sends each greedy streamed
# request to both in turn: a grounded task (repeat / rewrite a given passage: text, instructions,
# code) and open chat. Prints per model and task: decode tok/s plain and spec, the speedup, the
# draft acceptance rate, tokens per verify forward, and whether every reply was byte-identical.
# Models: the committed trained demo model (a random-weights model accepts next to nothing) and
# the 0.6B-shape Q8_0 file (random weights: the cost of speculating when drafts fail).
# A benchmark: it prints figures, it never fails on them.
#   env: BENCH_MODELS (default "models/lmserve-demo-qwen3-3m-q8_0.gguf $MODELDIR/qwen3_0.6b-q8_0.gguf"),
#        THREADS (2), SPEC (8), MAX_TOKENS (128), ROUNDS (2)
set -eu
THREADS=${THREADS:-2}
SPEC=${SPEC:-8}
MODELS=${BENCH_MODELS:-models/lmserve-demo-qwen3-3m-q8_0.gguf $MODELDIR/qwen3_0.6b-q8_0.gguf}
$MAKE --no-print-directory BUILD="$BUILD" "$MODELDIR/qwen3_0.6b-q8_0.gguf" "$BUILD/lmserve" "$BUILD/lmserve-kbench" >/dev/null
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cpus, threads $THREADS, --spec $SPEC, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "bandwidth ceiling: $("$BUILD/lmserve-kbench" --bandwidth -t "$THREADS" 2>&1 | tail -1)"
freeport() { node -e "const s=require('net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})"; }
tmp=$(mktemp -d)
p1=""; p2=""
trap '[ -n "$p1" ] && kill $p1 2>/dev/null; [ -n "$p2" ] && kill $p2 2>/dev/null; rm -rf "$tmp"' EXIT
wait_health() { for _ in $(seq 1 1200); do curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }
for f in $MODELS; do
  a=$(freeport); b=$(freeport)
  "$BUILD/lmserve" "$f" --port "$a" --threads "$THREADS" --kv-slots 1 2>/dev/null & p1=$!
  "$BUILD/lmserve" "$f" --port "$b" --threads "$THREADS" --kv-slots 1 --spec "$SPEC" --log-level debug 2>"$tmp/spec.log" & p2=$!
  wait_health "$a"; wait_health "$b"
  echo "model $f:"
  node bench/spec.mjs "http://127.0.0.1:$a" "http://127.0.0.1:$b" --log "$tmp/spec.log" \
    --max-tokens "${MAX_TOKENS:-128}" --rounds "${ROUNDS:-2}" | sed 's/^/  /'
  kill $p1 $p2; wait $p1 $p2 2>/dev/null || true; p1=""; p2=""
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
