#!/usr/bin/env bash
# Server overhead (issue 4): TTFT and decode tok/s through the HTTP API (streamed chat
# completions, bench/server.mjs) vs the engine benchmark (lmserve-bench) on the same model and
# threads; then 4 concurrent clients. If LLAMA_SERVER names a llama.cpp llama-server binary
# (built elsewhere), the same client runs against it on the same file.
# A benchmark: it prints figures, it never fails on them.
#   env: BENCH_MODEL (default qwen3_0.6b-q8_0), THREADS (2), REPS (3), GEN (128), CLIENTS (4),
#        PAIRS (5): rounds of the paired decode comparison (below)
# Decode overhead and added TTFT are also measured in PAIRS rounds: one lmserve-bench run (pp of
# the long prompt's length, tg GEN) right before one long-prompt request and one GEN-token
# request, so slow minutes of a shared machine hit both sides of a pair; it prints the medians of
# the per-round ratios/differences, client-side (the client's chunk timestamps) and server-side
# (the figures in the server's request log line).
set -eu
THREADS=${THREADS:-2}
REPS=${REPS:-3}
GEN=${GEN:-128}
CLIENTS=${CLIENTS:-4}
M=${BENCH_MODEL:-qwen3_0.6b-q8_0}
f="$MODELDIR/$M.gguf"
$MAKE --no-print-directory BUILD="$BUILD" "$f" >/dev/null
# "tg128" -> t/s from lmserve-bench's table on stdin; jget FIELD -> a field of the JSON on stdin
rate() { awk -F'|' -v t="$1" '$0 ~ "\\| *"t" *\\|" { split($(NF-1), a, " "); print a[1] }'; }
jget() { node -e "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>console.log(JSON.parse(s).$1))"; }
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cpus, threads $THREADS, model $f"

port=$(node -e "const s=require('net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})")
slog=$(mktemp)
"$BUILD/lmserve" "$f" --port "$port" --threads "$THREADS" 2>"$slog" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break; sleep 0.1; done
# the prompt sizes the API client sends, so the engine bench prefills the same number of tokens
api=$(node bench/server.mjs "http://127.0.0.1:$port" --reps "$REPS" --gen "$GEN" --clients "$CLIENTS")
PAIRS=${PAIRS:-5}
plong=$(echo "$api" | jget prompt_long)
pairs=""
for _ in $(seq 1 "$PAIRS"); do
  eng=$("$BUILD/lmserve-bench" "$f" -t "$THREADS" -p "$plong" -n "$GEN" -r 1)
  epp=$(echo "$eng" | rate "pp$plong")
  etg=$(echo "$eng" | rate "tg$GEN")
  c=$(node bench/server.mjs "http://127.0.0.1:$port" --gen "$GEN" --long-words 170 --pair | node -e "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>{const j=JSON.parse(s);console.log(j.ttft_long_ms, j.decode_tok_s)})")
  lines=$(grep -o 'completion=[0-9]* .*tok_s=[0-9.]*' "$slog" | tail -2)
  sttft=$(echo "$lines" | head -1 | sed 's/.*ttft_ms=\([0-9.]*\).*/\1/')
  stok=$(echo "$lines" | tail -1 | sed 's/.*tok_s=//')
  pairs="$pairs $epp $etg $c $sttft $stok"
done
# The same decode pairing with curl as the client: node's own CPU (event loop, JSON.parse per
# chunk, JIT/GC threads of a fresh process) competes with the two compute threads on a 2-core
# machine; curl reads the stream with next to none, so this isolates the server's own cost.
pshort=$(echo "$api" | jget prompt_short)
cpairs=""
body='{"messages":[{"role":"user","content":"Tell me a story."}],"max_tokens":'"$GEN"',"temperature":0,"stream":true}'
for _ in $(seq 1 "$PAIRS"); do
  etg=$("$BUILD/lmserve-bench" "$f" -t "$THREADS" -p "$pshort" -n "$GEN" -r 1 | rate "tg$GEN")
  curl -s "http://127.0.0.1:$port/v1/chat/completions" -H 'content-type: application/json' -d "$body" >/dev/null
  stok=$(grep -o 'completion=[0-9]* .*tok_s=[0-9.]*' "$slog" | tail -1 | sed 's/.*tok_s=//')
  cpairs="$cpairs $etg $stok"
done
kill $pid; wait $pid 2>/dev/null || true
rm -f "$slog"
trap - EXIT
eng=$("$BUILD/lmserve-bench" "$f" -t "$THREADS" -p "$plong" -n "$GEN" -r "$REPS")
echo "engine (lmserve-bench):"; echo "$eng" | grep '|'
echo "api (bench/server.mjs): $api"
pp=$(echo "$eng" | rate "pp$plong")
tg=$(echo "$eng" | rate "tg$GEN")
echo "$api" | node -e "
let s='';process.stdin.on('data',d=>s+=d).on('end',()=>{
  const a=JSON.parse(s), pp=$pp, tg=$tg;
  // engine time to a first token for the same prompt: the prefill (its logits give the token)
  const eng_ttft = a.prompt_long/pp*1000;
  console.log('decode: api %s tok/s vs engine %s tok/s -> overhead %s%%', a.decode_tok_s.toFixed(2), tg.toFixed(2), ((1-a.decode_tok_s/tg)*100).toFixed(2));
  console.log('TTFT (%d-token prompt): api %s ms vs engine prefill %s ms -> added %s ms', a.prompt_long, a.ttft_long_ms.toFixed(1), eng_ttft.toFixed(1), (a.ttft_long_ms-eng_ttft).toFixed(1));
  console.log('TTFT (%d-token prompt): api %s ms', a.prompt_short, a.ttft_short_ms.toFixed(1));
  console.log('%d concurrent clients x %d tokens: aggregate %s tok/s, TTFTs %s ms', a.clients, a.decode_tokens, a.concurrent_aggregate_tok_s.toFixed(2), a.concurrent_ttft_ms.join(' '));
});"
echo "$pairs" | node -e "
let s='';process.stdin.on('data',d=>s+=d).on('end',()=>{
  const v=s.trim().split(/\s+/).map(Number), rows=[], P=$plong;
  for (let i=0;i+5<v.length;i+=6) rows.push({pp:v[i],tg:v[i+1],cttft:v[i+2],ctok:v[i+3],sttft:v[i+4],stok:v[i+5]});
  const med=(a)=>{const t=[...a].sort((x,y)=>x-y);return t[Math.floor((t.length-1)/2)];};
  console.log('paired rounds (engine pp%d ms, api TTFT client/server ms | engine tg, api decode client/server tok/s):', P);
  for (const r of rows) console.log('  %s, %s / %s | %s, %s / %s', (P/r.pp*1000).toFixed(1), r.cttft.toFixed(1), r.sttft.toFixed(1), r.tg.toFixed(2), r.ctok.toFixed(2), r.stok.toFixed(1));
  console.log('paired, median over %d rounds: decode overhead client-side %s%%, server-side %s%%; added TTFT client-side %s ms, server-side %s ms',
    rows.length, ((1-med(rows.map(r=>r.ctok/r.tg)))*100).toFixed(2), ((1-med(rows.map(r=>r.stok/r.tg)))*100).toFixed(2),
    med(rows.map(r=>r.cttft-P/r.pp*1000)).toFixed(1), med(rows.map(r=>r.sttft-P/r.pp*1000)).toFixed(1));
});"


echo "$cpairs" | node -e "
let s='';process.stdin.on('data',d=>s+=d).on('end',()=>{
  const v=s.trim().split(/\s+/).map(Number), r=[];
  for (let i=0;i+1<v.length;i+=2) r.push(v[i+1]/v[i]);
  const t=[...r].sort((x,y)=>x-y), m=t[Math.floor((t.length-1)/2)];
  console.log('paired decode with curl as the client (%d rounds, api/engine): %s -> median overhead %s%%', r.length, r.map(x=>x.toFixed(3)).join(' '), ((1-m)*100).toFixed(2));
});"

if [ -n "${LLAMA_SERVER:-}" ]; then
  lport=$((port + 1))
  "$LLAMA_SERVER" -m "$f" --port "$lport" -t "$THREADS" -c 4096 >/dev/null 2>&1 &
  lpid=$!
  trap 'kill $lpid 2>/dev/null || true' EXIT
  for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$lport/health" >/dev/null 2>&1 && break; sleep 0.1; done
  echo "llama-server ($LLAMA_SERVER): $(node bench/server.mjs "http://127.0.0.1:$lport" --reps "$REPS" --gen "$GEN" --clients "$CLIENTS")"
  kill $lpid; wait $lpid 2>/dev/null || true
fi
