#!/usr/bin/env bash
# Installs what lmserve needs to build and test on Debian, only when something is missing.
# Idempotent and quiet when everything is present. Called by `make` (C deps) and `make test` (npm).
# gcc-aarch64-linux-gnu + libc6-dev-arm64-cross + qemu-user: the NEON kernels are cross-built
# (static) and run under qemu-aarch64 by tests/suites/15-neon.sh.
set -eu
what=${1:-c}
# apt_need PKG...: installs those of PKG... that are not installed yet.
apt_need() {
  missing=""
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
  done
  missing=$(echo $missing)
  if [ -n "$missing" ]; then
    echo "deps: installing Debian packages: $missing" >&2
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 update -q >/dev/null
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends $missing >/dev/null
  fi
}
# train: the demo model's corpus sources and trainer (scripts/demo/*; never part of `make test`).
# libopenblas0-pthread matters: without it Debian's torch calls the reference BLAS (~20x slower).
if [ "$what" = train ]; then
  apt_need python3 python3-numpy python3-torch libopenblas0-pthread \
    python3-regex wordnet-base fortunes-min fortunes python3-doc
fi
# browser: the chat page's test drives Debian's chromium headless (tests/suites/62-chat-page.sh).
if [ "$what" = browser ] || [ "$what" = all ]; then
  apt_need chromium
fi
# build: what `make run` needs (the server's C build only)
if [ "$what" = build ]; then
  apt_need gcc make pkg-config libmicrohttpd-dev libjansson-dev libpcre2-dev libutf8proc-dev
fi
if [ "$what" = c ] || [ "$what" = all ]; then
  pkgs="gcc make pkg-config libmicrohttpd-dev libjansson-dev libpcre2-dev libutf8proc-dev libcriterion-dev python3 python3-numpy python3-jinja2 python3-regex python3-torch libopenblas0-pthread nodejs npm clang libclang-rt-14-dev curl gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user"
  missing=""
  for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="$missing $p"
  done
  # nodejs/npm may come from outside Debian's packages: accept them when on PATH.
  if command -v node >/dev/null 2>&1; then missing=$(echo "$missing" | sed 's/\bnodejs\b//; s/\bnpm\b//'); fi
  missing=$(echo $missing)
  if [ -n "$missing" ]; then
    echo "deps: installing Debian packages: $missing" >&2
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 update -q >/dev/null
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends $missing >/dev/null
  fi
fi
# npm: the end-to-end packages (SDKs, Qwen3 tokenizer files, puppeteer-core) from package-lock.json;
# agents: the agent CLIs (Claude Code, Codex; ~840 MB) from tests/agents/package-lock.json.
# Only `make test` / `make bench` install them: `make run` needs no npm package.
npm_ci() { # npm_ci DIR WHAT
  stamp="$1/node_modules/.lmserve-lock-stamp"
  if [ ! -f "$stamp" ] || [ "$1/package-lock.json" -nt "$stamp" ]; then
    echo "deps: npm ci in $1 ($2)" >&2
    (cd "$1" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    touch "$stamp"
  fi
}
here=$(cd "$(dirname "$0")/.." && pwd)
if [ "$what" = npm ] || [ "$what" = all ]; then
  npm_ci "$here" "end-to-end clients, tokenizer files, puppeteer-core"
fi
if [ "$what" = agents ] || [ "$what" = all ]; then
  npm_ci "$here/tests/agents" "agent CLIs"
fi
