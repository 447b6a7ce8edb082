#!/usr/bin/env bash
# Load test: slow (trickling), idle, half-closed, disconnecting and stalled clients mixed with
# normal ones against the real server with its default limits (tests/load/slow-clients.mjs;
# loopback only, ~190 connections, ~20 s). Fails if a normal client is refused or times out.
set -eu
$MAKE --no-print-directory BUILD="$BUILD" "$MODELDIR/tiny-q8_0.gguf" >/dev/null
LMSERVE_BIN="$BUILD/lmserve" LMSERVE_MODEL="$MODELDIR/tiny-q8_0.gguf" node tests/load/slow-clients.mjs
