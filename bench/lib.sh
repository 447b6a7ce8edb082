# Shared by the per-family benchmarks (bench/gemma4.sh, bench/ternary.sh): sourced, not run.
# Needs BUILD, MAKE, THREADS, REPS in the environment of the caller.

# rate TEST: the tok/s of row TEST (pp512, tg128, ...) in a llama-bench style markdown table on stdin
rate() { awk -F'|' -v t="$1" 'NF >= 4 { x = $(NF-2); gsub(/^ +| +$/, "", x); if (x == t) { split($(NF-1), a, " "); print a[1] } }' | tail -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else print "n/a" }'; }
bandwidth() { "$BUILD/lmserve-kbench" --bandwidth -t "$THREADS" | awk '/plain loads/ { print $(NF-4) }'; }
machine_line() {
  echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cpus, threads $THREADS, load average $(cut -d' ' -f1-3 /proc/loadavg)"
}
# decode_share WHO TOKS BYTES BW: decode's weight read rate and its fraction of the ceiling BW
# (decode reads every weight byte once a token; with a tied output projection that is the whole file)
decode_share() {
  awk -v w="$1" -v t="$2" -v b="$3" -v bw="$4" 'BEGIN { if (t > 0 && bw > 0) printf "%s decode reads %.2f GB/s of weights = %.0f %% of the %.2f GB/s ceiling\n", w, t * b / 1e9, 100 * t * b / 1e9 / bw, bw }'
}
# pp_tg FILE BW: lmserve-bench pp512 / tg128 on FILE and, when LLAMA_BENCH names a llama-bench
# binary (built elsewhere; nothing here builds it), llama.cpp on the same file and the ratios.
pp_tg() {
  local f=$1 bw=$2 bytes ours otg out ptg
  $MAKE --no-print-directory BUILD="$BUILD" "$f" >/dev/null
  bytes=$(stat -c %s "$f")
  echo "=== $f ($bytes bytes)"
  ours=$("$BUILD/lmserve-bench" "$f" -t "$THREADS" -p 512 -n 128 -r "$REPS")
  echo "lmserve:"; echo "$ours"
  otg=$(echo "$ours" | rate tg128)
  decode_share lmserve "$otg" "$bytes" "$bw"
  if [ -n "${LLAMA_BENCH:-}" ]; then
    out=$("$LLAMA_BENCH" -m "$f" -t "$THREADS" -p 512 -n 128 -r "$REPS" -o md 2>/dev/null) || out="| llama-bench failed |"
    echo "llama.cpp ($LLAMA_BENCH):"; echo "$out" | grep '|'
    ptg=$(echo "$out" | rate tg128)
    echo "ratio lmserve/llama.cpp:  pp512 $(ratio "$(echo "$ours" | rate pp512)" "$(echo "$out" | rate pp512)")  tg128 $(ratio "$otg" "$ptg")"
    decode_share llama.cpp "$ptg" "$bytes" "$bw"
  fi
}
