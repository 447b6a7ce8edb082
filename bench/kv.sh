#!/usr/bin/env bash
# KV reuse across requests (issue 11, docs/kv-cache.md): cold TTFT, follow-up-turn TTFT and
# second-conversation TTFT (same system prompt) for a ~2,500-token and a ~27k-token system prompt
# (bench/kv.mjs), on lmserve and, if LLAMA_SERVER names a llama.cpp llama-server binary (built
# elsewhere), on llama-server with the same file and threads at its defaults (prompt cache on,
# --cache-reuse off), on loopback. Each server is started fresh per prompt size.
# A benchmark: it prints figures, it never fails on them.
#   env: BENCH_MODEL (default qwen3_0.6b-q8_0), THREADS (2), SIZES ("2500 27000"), CTX (32768)
set -eu
THREADS=${THREADS:-2}
SIZES=${SIZES:-2500 27000}
CTX=${CTX:-32768}
M=${BENCH_MODEL:-qwen3_0.6b-q8_0}
f="$MODELDIR/$M.gguf"
$MAKE --no-print-directory BUILD="$BUILD" "$f" "$BUILD/lmserve" "$BUILD/lmserve-tokenize" "$BUILD/lmserve-kbench" >/dev/null
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cpus, threads $THREADS, model $f, ctx $CTX"
echo "bandwidth ceiling: $("$BUILD/lmserve-kbench" --bandwidth -t "$THREADS" 2>&1 | tail -1)"
freeport() { node -e "const s=require('net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})"; }
pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null || true' EXIT
wait_health() { for _ in $(seq 1 1200); do curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }
for n in $SIZES; do
  port=$(freeport)
  "$BUILD/lmserve" "$f" --port "$port" --threads "$THREADS" --ctx "$CTX" 2>/dev/null &
  pid=$!
  wait_health "$port"
  echo "lmserve ~$n: $(node bench/kv.mjs "http://127.0.0.1:$port" --tokens "$n" --tokenize "$BUILD/lmserve-tokenize $f --special")"
  kill $pid; wait $pid 2>/dev/null || true; pid=""
  if [ -n "${LLAMA_SERVER:-}" ]; then
    port=$(freeport)
    "$LLAMA_SERVER" -m "$f" --host 127.0.0.1 --port "$port" -t "$THREADS" -c "$CTX" >/dev/null 2>&1 &
    pid=$!
    wait_health "$port"
    echo "llama-server ~$n: $(node bench/kv.mjs "http://127.0.0.1:$port" --tokens "$n" --tokenize "$BUILD/lmserve-tokenize $f --special")"
    kill $pid; wait $pid 2>/dev/null || true; pid=""
  fi
done
