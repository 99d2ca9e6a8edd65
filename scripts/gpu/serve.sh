#!/usr/bin/env bash
# scripts/gpu/serve.sh BUNDLE_DIR: GPU serving checks of issue 15, run on the GPU machine from the
# repository root with a bundle made by scripts/bundle.sh (volta-ptx or cuda13). Needs python3 with
# requests (and torch for the read-bandwidth figure), nvidia-smi. Parts (one JSON line each in
# $OUT/serve.jsonl; logs in $OUT/serve_logs.tar.gz):
#   bandwidth   read bandwidth of this GPU measured now (torch: sum over 4 GiB of float32, 20 runs, median)
#   decode_*    voltllm generate --device cuda --load-format dummy on the gpt-oss-20b (and -120b) shapes:
#               greedy, --ignore-eos, 256 new tokens per prompt at batch 1 and 32; tok/s and the fraction
#               of the read bandwidth that tok/s x bytes read per token is (weights: experts of 4 of E,
#               attention, router, lm_head; the KV bytes at these contexts are < 1%); CUDA graphs (the
#               default) and --enforce-eager (the *_eager rows)
#   serve_demo  voltllm serve --device cuda on the demo model, then serve_client.py (chat, tool call,
#               streaming, n=2, logprobs, 2k prompt logprobs, 64 streams, disconnect frees the KV cache)
#   memory_20b  the 20b shape served at --gpu-memory-utilization U --max-model-len 8192, the embedding in
#               host memory, --max-num-batched-tokens 512, U = a V100-16GB's budget at 0.9 (14,544 MiB) as
#               this GPU's share (0.10 of an H200, 0.17 of an H100): the process's peak GPU memory, read by
#               nvidia-smi from outside every 0.2 s during start-up and requests, must stay within U x total
#   long_120b   the 120b shape, dummy weights: a 2,000-token prompt and 500 greedy decode steps; generate
#               exits non-zero if any logits were non-finite (the engine fails the request)
# VOLT_SERVE_PARTS="decode serve_demo memory_20b long_120b" (the default: all) picks parts.
set -uo pipefail
cd "$(dirname "$0")/../.."
PARTS=" ${VOLT_SERVE_PARTS:-decode serve_demo memory_20b long_120b} "
want() { [[ $PARTS == *" $1 "* ]]; }
B=$(cd "${1:?usage: scripts/gpu/serve.sh BUNDLE_DIR}" && pwd)
V=$B/voltllm
OUT=${OUT:-/tmp/volt-gpu-serve-out}
W=$(mktemp -d /tmp/volt-gpu-serve.XXXXXX)
mkdir -p "$OUT" "$W/logs"
S=$OUT/serve.jsonl
: >"$S"
export PYTHONUNBUFFERED=1 CUDA_CACHE_PATH=${CUDA_CACHE_PATH:-$W/jit-cache}  # a caller may share one JIT cache
preset=$(sed -n 's/^preset: //p' "$B/MANIFEST" 2>/dev/null)
echo "serve: bundle $B (${preset:-unknown})"
# shellcheck source=scripts/gpu/lib.sh
. scripts/gpu/lib.sh
volt_find_cublas
emit() { echo "$1" | tee -a "$S"; }

# ---- read bandwidth, measured in this run ----
BW=$(python3 scripts/gpu/read_bw.py 2>/dev/null)
BW=${BW:-0}
emit "{\"part\": \"bandwidth\", \"read_gbps\": $BW, \"how\": \"torch sum over 4 GiB float32, median of 20\"}"
TOTAL_MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)

# ---- model shapes: config only (dummy weights), the demo tokenizer (its ids are valid gpt-oss ids) ----
for m in 20b 120b; do
  "$V" --log-level warning make-model --preset "$m" --config-only --no-tokenizer --out "$W/$m" >/dev/null || exit 1
  cp assets/demo-model/tokenizer.json "$W/$m/"
done
# Bytes read per decoded token at batch 1 (weights; f16 dense, MXFP4 experts = 17/32 byte per value).
bytes_per_token() {
  python3 - "$W/$1/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
H, I, E, k, L, V = c["hidden_size"], c["intermediate_size"], c["num_local_experts"], c["experts_per_token"] if "experts_per_token" in c else c["num_experts_per_tok"], c["num_hidden_layers"], c["vocab_size"]
d, nh, nkv = c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
attn = (H * (nh + 2 * nkv) * d + nh * d * H) * 2
experts = k * (2 * I * H + H * I) * 17 / 32
router = E * H * 4
print(int(L * (attn + experts + router) + V * H * 2))
PY
}

decode() {  # decode NAME MODEL BATCH [FLAGS...] (e.g. --enforce-eager)
  local name=$1 m=$2 n=$3 i
  shift 3
  : >"$W/prompts_$n.txt"
  for i in $(seq 1 "$n"); do echo "The harbor town number $i was quiet in the morning." >>"$W/prompts_$n.txt"; done
  local t0 t1
  t0=$(date +%s.%N)
  timeout 240 "$V" --log-level info generate --device cuda --load-format dummy --model "$W/$m" \
    --prompts-file "$W/prompts_$n.txt" --max-tokens 256 --ignore-eos --temperature 0 --max-num-seqs 64 \
    --kv-cache-memory-bytes 8589934592 "$@" >"$W/logs/$name.out" 2>"$W/logs/$name.log"
  local rc=$?
  t1=$(date +%s.%N)
  local line tps bpt
  line=$(grep "generated tok/s" "$W/logs/$name.log" | tail -1)
  tps=$(echo "$line" | sed -n 's/.*: \([0-9.]*\) generated tok\/s.*/\1/p')
  bpt=$(bytes_per_token "$m")
  emit "$(python3 -c "
import json,sys
tps=float('${tps:-0}' or 0); bpt=$bpt; bw=float('$BW') or 0
frac = (tps*bpt/1e9/bw) if ($n==1 and bw>0) else None
print(json.dumps({'part':'$name','pass':$rc==0,'rc':$rc,'batch':$n,'tok_s':tps,'bytes_per_token':bpt,
 'fraction_of_read_bw': frac, 'wall_s': round($t1-$t0,1), 'line': '''$line'''}))")"
}
if want decode; then
  decode decode_20b_b1 20b 1
  decode decode_20b_b1_eager 20b 1 --enforce-eager
  decode decode_20b_b32 20b 32
  decode decode_20b_b32_eager 20b 32 --enforce-eager
  decode decode_120b_b1 120b 1
fi

# ---- serving: a server in the background, nvidia-smi sampling its memory ----
start_server() {  # start_server NAME ARGS...: sets PID, PORT; waits for /health
  local name=$1
  shift
  PORT=$((8100 + RANDOM % 800))
  "$V" serve "$@" --device cuda --port "$PORT" >"$W/logs/$name.log" 2>&1 &
  PID=$!
  (while kill -0 "$PID" 2>/dev/null; do
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
      awk -F', ' -v p="$PID" '$1 == p {print $2}'
    sleep 0.2
  done) >"$W/logs/$name.mem" &
  local i
  for i in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && return 0
    kill -0 "$PID" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}
stop_server() {  # sets SRV_RC: the server's exit status after SIGTERM (0: drained and exited cleanly)
  kill -TERM "$PID" 2>/dev/null
  wait "$PID" 2>/dev/null
  SRV_RC=$?
  sleep 0.3
}

if ! want serve_demo; then
  :
elif start_server serve_demo assets/demo-model --max-num-seqs 64; then
  timeout 240 python3 scripts/gpu/serve_client.py "http://127.0.0.1:$PORT" assets/demo-model >"$W/logs/serve_demo.client" 2>&1
  rc=$?
  cat "$W/logs/serve_demo.client"
  stop_server
  src=$SRV_RC
  emit "{\"part\": \"serve_demo\", \"pass\": $([ $rc = 0 ] && [ "$src" = 0 ] && echo true || echo false), \"client_rc\": $rc, \"server_exit\": $src}"
else
  emit '{"part": "serve_demo", "pass": false, "error": "server did not start"}'
  tail -20 "$W/logs/serve_demo.log"
fi

# A V100-16GB's budget at --gpu-memory-utilization 0.9 (16,160 MiB x 0.9 = 14,544 MiB) as this GPU's share,
# rounded down: 0.10 of an H200 (14,377 MiB), 0.17 of an H100 80GB (13,865 MiB). (A fixed 0.10 left an H100
# 7.9 GiB, less than the 20b shape's 12 GiB of weights: the run of 2026-12-06 session 5 failed there.)
MEM_U=$(volt_card_share 14544 "$TOTAL_MIB")
if ! want memory_20b; then
  :
elif start_server memory_20b "$W/20b" --load-format dummy --gpu-memory-utilization "$MEM_U" --max-model-len 8192 \
  --embedding-in-host-memory \
  --max-num-seqs 16 --max-num-batched-tokens 512; then
  timeout 200 python3 scripts/gpu/serve_client.py "http://127.0.0.1:$PORT" "$W/20b" --quick >"$W/logs/memory_20b.client" 2>&1
  rc=$?
  cat "$W/logs/memory_20b.client"
  stop_server
  src=$SRV_RC
  peak=$(sort -n "$W/logs/memory_20b.mem" | tail -1)
  emit "$(python3 -c "
import json
peak=int('${peak:-0}' or 0); total=$TOTAL_MIB; budget=$MEM_U*total
print(json.dumps({'part':'memory_20b','pass': $rc==0 and $src==0 and 0<peak<=budget,'peak_mib':peak,'utilization':$MEM_U,
 'budget_mib':round(budget),'total_mib':total,'client_rc':$rc,'server_exit':$src}))")"
  grep -h "memory:\|KV blocks" "$W/logs/memory_20b.log" | head -4
else
  emit '{"part": "memory_20b", "pass": false, "error": "server did not start"}'
  tail -20 "$W/logs/memory_20b.log"
fi

# ---- 120b shape: a 2,000-token prompt and 500 decode steps without non-finite logits ----
ids=$(python3 -c 'print(",".join(str((i * 7919) % 8000) for i in range(2000)))')  # demo tokenizer: 8,192 ids
want long_120b && {
t0=$(date +%s)
timeout 300 "$V" --log-level info generate --device cuda --load-format dummy --model "$W/120b" --prompt-ids "$ids" \
  --max-tokens 500 --ignore-eos --temperature 0 --kv-cache-memory-bytes 8589934592 >"$W/logs/long_120b.out" 2>"$W/logs/long_120b.log"
rc=$?
emit "{\"part\": \"long_120b\", \"pass\": $([ $rc = 0 ] && echo true || echo false), \"rc\": $rc, \"seconds\": $(($(date +%s) - t0)), \"line\": \"$(grep 'tok/s' "$W/logs/long_120b.log" | tail -1)\"}"
tail -3 "$W/logs/long_120b.log"
}

tar czf "$OUT/serve_logs.tar.gz" -C "$W" logs
python3 -c "
import json,sys
rows=[json.loads(l) for l in open('$S')]
bad=[r['part'] for r in rows if r.get('pass') is False]
print('serve: failed parts:', bad if bad else 'none')
sys.exit(1 if bad else 0)"
