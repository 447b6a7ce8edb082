#!/usr/bin/env bash
# Continuous batching (issue 12 items 1-2, docs/batching.md): aggregate tok/s and worst TTFT for
# 1, 2, 4, 8 concurrent 128-token streams (bench/batch.mjs) on lmserve --batch N and --batch 1,
# and, if LLAMA_SERVER names a llama.cpp llama-server binary (built elsewhere), on llama-server
# -np N (continuous batching on) with the same file, threads and per-slot context. Each server is
# started fresh per N. The bandwidth ceiling is printed first (the machine may be shared).
# A benchmark: it prints figures, it never fails on them.
#   env: BENCH_MODEL (default qwen3_0.6b-q8_0), THREADS (2), CLIENTS ("1 2 4 8"), GEN (128),
#        CTX (per-slot context, 1024), SOLO ("2 4 8": the client counts also run on --batch 1),
#        ROUNDS (1: how many times the whole sequence runs)
set -eu
THREADS=${THREADS:-2}
CLIENTS=${CLIENTS:-1 2 4 8}
GEN=${GEN:-128}
CTX=${CTX:-1024}
SOLO=${SOLO-2 4 8}
ROUNDS=${ROUNDS:-1}
M=${BENCH_MODEL:-qwen3_0.6b-q8_0}
f="$MODELDIR/$M.gguf"
$MAKE --no-print-directory BUILD="$BUILD" "$f" "$BUILD/lmserve" "$BUILD/lmserve-kbench" >/dev/null
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cpus, threads $THREADS, model $f, $GEN tokens a stream"
echo "bandwidth ceiling: $("$BUILD/lmserve-kbench" --bandwidth -t "$THREADS" 2>&1 | tail -1)"
freeport() { node -e "const s=require('net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})"; }
pid=""
trap '[ -n "$pid" ] && kill $pid 2>/dev/null || true' EXIT
wait_health() { for _ in $(seq 1 1200); do curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }
run() { # label, then the server command line (its port goes last)
  local label=$1 n=$2; shift 2
  local port; port=$(freeport)
  "$@" --port "$port" >/dev/null 2>&1 &
  pid=$!
  wait_health "$port"
  echo "$label: $(node bench/batch.mjs "http://127.0.0.1:$port" --clients "$n" --gen "$GEN")"
  kill $pid; wait $pid 2>/dev/null || true; pid=""
}
for round in $(seq 1 "$ROUNDS"); do # rounds alternate the servers: a shared machine's load drifts
[ "$ROUNDS" -gt 1 ] && echo "round $round"
for n in $CLIENTS; do
  run "lmserve --batch $n" "$n" "$BUILD/lmserve" "$f" --threads "$THREADS" --ctx "$CTX" --batch "$n" --queue 64
  case " $SOLO " in *" $n "*) run "lmserve --batch 1 ($n clients)" "$n" "$BUILD/lmserve" "$f" --threads "$THREADS" --ctx "$CTX" --batch 1 --queue 64 ;; esac
  if [ -n "${LLAMA_SERVER:-}" ]; then
    # --ignore-eos: llama.cpp also ends a Qwen vocabulary's reply on <|fim_pad|>, <|repo_name|> ...,
    # which the client's logit_bias does not list; every stream runs its GEN tokens on both sides
    run "llama-server -np $n" "$n" "$LLAMA_SERVER" -m "$f" --host 127.0.0.1 -t "$THREADS" -c $((CTX * n)) -np "$n" --ignore-eos
  fi
done
done
