#!/usr/bin/env bash
# Agent clients: Claude Code (print mode, /v1/messages) and Codex CLI (exec, a custom Responses
# provider) complete sessions against the real server on the tiny generated model, with no API
# error (tests/agents/agents.test.mjs; docs/tools.md says how to run both by hand). The clients
# are devDependencies in tests/agents/package-lock.json (scripts/deps.sh agents; native binaries
# via optional packages), apart from the end-to-end packages so `make run` needs neither. Kept
# out of 60-e2e: each Claude Code turn prefills ~12k prompt tokens.
set -eu
$MAKE --no-print-directory BUILD="$BUILD" "$BUILD/lmserve" "$MODELDIR/tiny-q8_0.gguf" >/dev/null
export LMSERVE_BIN="$BUILD/lmserve" LMSERVE_MODEL="$MODELDIR/tiny-q8_0.gguf"
for b in tests/agents/node_modules/.bin/claude tests/agents/node_modules/.bin/codex; do
  [ -x "$b" ] || { echo "FAIL: $b missing: run scripts/deps.sh agents"; exit 1; }
done
node --test --test-concurrency=1 tests/agents/
