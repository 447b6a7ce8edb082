#!/usr/bin/env bash
# The light run path: `make run` serves the committed demo model without touching npm (a stub npm
# first on PATH records any call), `make run PORT=N` listens on N, `make run MODEL=F` serves F.
set -eu
tmp=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill -- -"$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
mkdir "$tmp/bin"
printf '#!/bin/sh\ntouch %s/npm-called\nexit 1\n' "$tmp" > "$tmp/bin/npm"
chmod +x "$tmp/bin/npm"
$MAKE --no-print-directory BUILD="$BUILD" "$BUILD/lmserve" "$MODELDIR/tiny-q8_0.gguf" >/dev/null
free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
serve() { # serve LOG MAKE-ARGS... -> pid of the make process group
  PATH="$tmp/bin:$PATH" setsid $MAKE --no-print-directory BUILD="$BUILD" run "${@:2}" >"$1" 2>&1 &
  echo $!
}
wait_ready() { # wait_ready PORT LOG
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "make run did not become ready on port $1:"; cat "$2"; exit 1
}
p1=$(free_port)
pid=$(serve "$tmp/run1.log" PORT="$p1"); pids="$pids $pid"
wait_ready "$p1" "$tmp/run1.log"
id=$(curl -s "http://127.0.0.1:$p1/v1/models" | /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin)["data"][0]; assert "random_weights" not in d, d; print(d["id"])')
case "$id" in lmserve-demo-*) ;; *) echo "make run served '$id', not the demo model"; exit 1 ;; esac
reply=$(curl -s "http://127.0.0.1:$p1/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"What does dog mean?"}],"max_tokens":40,"temperature":0}')
echo "$reply" | /usr/bin/python3 -c 'import json,sys; r=json.load(sys.stdin); assert r["choices"][0]["message"]["content"].strip(), r'
kill -- -"$pid"; wait "$pid" 2>/dev/null || true
p2=$(free_port)
pid=$(serve "$tmp/run2.log" PORT="$p2" MODEL="$MODELDIR/tiny-q8_0.gguf"); pids="$pids $pid"
wait_ready "$p2" "$tmp/run2.log"
curl -s "http://127.0.0.1:$p2/v1/models" | grep -q '"lmserve-mkmodel-tiny-q8_0-seed1"' || { echo "MODEL= not served"; exit 1; }
grep -q "RANDOM weights" "$tmp/run2.log" || { echo "no random-weights warning for the tiny model"; exit 1; }
kill -- -"$pid"; wait "$pid" 2>/dev/null || true
[ ! -e "$tmp/npm-called" ] || { echo "make run called npm"; exit 1; }
echo "make run: demo model by default ($id), PORT= and MODEL= honoured, no npm"
