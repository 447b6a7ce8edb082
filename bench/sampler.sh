#!/usr/bin/env bash
# Sampler step cost on a 151936-token vocabulary (Qwen3), one core: figures, not pass/fail.
set -eu
"$BUILD/lmserve-samplerbench" --vocab 151936 --steps 300
