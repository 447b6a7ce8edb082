#!/usr/bin/env bash
# Installs what lmserve needs to build and test on Debian, only when something is missing.
# Idempotent and quiet when everything is present. Called by `make` (C deps) and `make test` (npm).
# gcc-aarch64-linux-gnu + libc6-dev-arm64-cross + qemu-user: the NEON kernels are cross-built
# (static) and run under qemu-aarch64 by tests/suites/15-neon.sh.
set -eu
what=${1:-c}
if [ "$what" = c ] || [ "$what" = all ]; then
  pkgs="gcc make pkg-config libmicrohttpd-dev libjansson-dev libpcre2-dev libutf8proc-dev libcriterion-dev python3 python3-numpy python3-jinja2 nodejs npm clang libclang-rt-14-dev curl gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user"
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
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing >/dev/null
  fi
fi
if [ "$what" = npm ] || [ "$what" = all ]; then
  here=$(cd "$(dirname "$0")/.." && pwd)
  stamp="$here/node_modules/.lmserve-lock-stamp"
  if [ ! -f "$stamp" ] || [ "$here/package-lock.json" -nt "$stamp" ]; then
    echo "deps: npm ci (end-to-end clients, tokenizer files)" >&2
    (cd "$here" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
    touch "$stamp"
  fi
fi
