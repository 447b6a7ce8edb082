#!/usr/bin/env bash
# The mutated-corpus proof (issue 10): an ASan + UBSan server (leak check at exit) gets a few
# thousand mutated request bodies for the three endpoints, three times over
# (tests/corpus/mutated.mjs): 0 crashes, 0 responses >= 500, RSS after pass 3 within 10 % of pass 1,
# and a clean exit 0 on SIGTERM (no leak, no UB). MUTATED_COUNT sets the corpus size (default 1000:
# 3000 requests). ASan's quarantine is capped at 16 MiB so RSS measures the server, not it.
set -eu
count=${MUTATED_COUNT:-1000}
$MAKE --no-print-directory BUILD="$BUILD" "$MODELDIR/tiny-q8_0.gguf" >/dev/null
$MAKE --no-print-directory BUILD="$ASAN_BUILD" OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer" "$ASAN_BUILD/lmserve" >/dev/null
work="$BUILD/mutated"
rm -rf "$work"
mkdir -p "$work/seeds"
/usr/bin/python3 tests/fuzz/request_seeds.py "$work/seeds"
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
ASAN_OPTIONS=detect_leaks=1:quarantine_size_mb=16 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  "$ASAN_BUILD/lmserve" "$MODELDIR/tiny-q8_0.gguf" --host 127.0.0.1 --port "$port" --threads 2 \
  --max-tokens 3 --ctx 2048 --log-level warn >"$work/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 $pid 2>/dev/null || { cat "$work/server.log"; echo "mutated corpus: server did not start"; exit 1; }
  sleep 0.1
done
rc=0
node tests/corpus/mutated.mjs "$port" "$pid" "$work/seeds" "$BUILD/fuzz/request-corpus" "$count" || rc=1
if ! kill -0 $pid 2>/dev/null; then echo "mutated corpus: the server died"; rc=1; fi
kill -TERM $pid 2>/dev/null || true
wait $pid || { echo "mutated corpus: server exit status $? (crash, leak or UB; log below)"; rc=1; }
if [ $rc -ne 0 ]; then tail -n 60 "$work/server.log"; exit 1; fi
echo "mutated corpus: clean"
