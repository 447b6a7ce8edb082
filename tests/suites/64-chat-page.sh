#!/usr/bin/env bash
# The chat page (GET /) in Debian's headless chromium via puppeteer-core (tests/page/): loads,
# streams a reply from the committed demo model, Stop cancels a generation on the server (on the
# random tiny model, which never ends a reply by itself), the API key field works.
# Screenshots: $BUILD/artifacts/chat-page*.png (kept, not committed).
set -eu
$MAKE --no-print-directory BUILD="$BUILD" "$BUILD/lmserve" "$MODELDIR/tiny-q8_0.gguf" >/dev/null
[ -x /usr/bin/chromium ] || { echo "FAIL: /usr/bin/chromium missing: run scripts/deps.sh browser"; exit 1; }
demo=$(ls models/lmserve-demo-*-q8_0.gguf)
export LMSERVE_BIN="$BUILD/lmserve" DEMO_MODEL="$demo" RANDOM_MODEL="$MODELDIR/tiny-q8_0.gguf" \
  ARTIFACTS="$BUILD/artifacts"
# a test that hangs (a stuck DevTools call) fails after 4 minutes instead of holding CI
node --test --test-concurrency=1 --test-timeout=240000 tests/page/
ls -l "$BUILD"/artifacts/chat-page*.png
