#!/usr/bin/env bash
# bench/compare/serve_20b.sh [BUNDLE_DIR]: llama-server beside voltllm serve on the same GPU, the same
# checkpoint and the same loads (issue 16: output tok/s at concurrency 1, 8, 32, 128 at a 2k context, TTFT
# of 512- and 2,048-token prompts, GPU memory). The second call of a pair: run it on the GPU machine right
# after bench/compare/run_20b.sh returns (the machine stays warm ~30 s between calls and keeps /tmp), which
# left llama.cpp built in /tmp/llama-build and the checkpoint (safetensors + GGUF) in /tmp/volt-compare.
# Both servers get the same requests from `voltllm bench serve` (random token-id prompts of
# --random-input-len tokens, --random-output-len tokens each with ignore_eos, all sent at once under
# --max-concurrency C, 2 C requests, seed 0), one engine at a time, each started fresh.
# llama-server, pinned: -ngl 99, flash attention on, CUDA graphs (its default), -np 128 slots with a
# unified KV cache of 128 x 2,304 tokens (-c 294912 --kv-unified).
# voltllm serve: --max-model-len 4096 --max-num-seqs 128 --gpu-memory-utilization 0.92 (defaults otherwise).
# Output: $OUT/serve_compare.jsonl (one line per figure: engine, load, tok/s, TTFT, peak GPU MiB, command)
# and $OUT/serve_compare_logs.tar.gz. About 5 minutes. For a dry run of the plumbing elsewhere:
# VOLT_COMPARE_LOADS="C IN OUT;..." (the loads), VOLT_COMPARE_DEVICE=cpu (voltllm's device).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
B=$(cd "${1:-out/bundle-cuda13}" && pwd)
V=$B/voltllm
OUT=${OUT:-/tmp/volt-compare-out}
W=/tmp/volt-compare
LB=/tmp/llama-build/build/bin
M=$W/gpt-oss-20b-random
G=$W/20b-f16.gguf
mkdir -p "$OUT" "$W/slogs"
J=$OUT/serve_compare.jsonl
: >"$J"
emit() { echo "$1" | tee -a "$J"; }
for f in "$LB/llama-server" "$G" "$M/config.json"; do
  [ -e "$f" ] || { emit "{\"error\": \"$f missing: run bench/compare/run_20b.sh first on this (warm) machine\"}"; exit 2; }
done
PORT=18431
# shellcheck source=scripts/gpu/lib.sh
. scripts/gpu/lib.sh
volt_find_cublas serve_compare

# Peak GPU memory of the run, read from outside (nvidia-smi every 0.2 s) while $1 runs in the background.
watch_mem() {
  local peak=0 m
  while kill -0 "$1" 2>/dev/null; do
    m=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
    [[ $m =~ ^[0-9]+$ ]] && [ "$m" -gt "$peak" ] && peak=$m
    echo "$peak" >"$W/peak_mib"
    sleep 0.2
  done
}
wait_ready() {  # wait_ready URL SECONDS
  for _ in $(seq 1 "$(($2 * 2))"); do
    curl -sf "$1" >/dev/null 2>&1 && return 0
    python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=1)" "$1" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  return 1
}

# One engine: start it, run the loads, stop it.
run_engine() {  # run_engine NAME START_COMMAND...
  local name=$1
  shift
  "$@" >"$W/slogs/$name.server.log" 2>&1 &
  local pid=$!
  echo 0 >"$W/peak_mib"
  watch_mem "$pid" &
  local wpid=$!
  if ! wait_ready "http://127.0.0.1:$PORT/v1/models" 180; then
    emit "{\"engine\": \"$name\", \"error\": \"server did not come up in 180 s\", \"command\": \"$*\"}"
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; kill "$wpid" 2>/dev/null
    tail -20 "$W/slogs/$name.server.log"
    return
  fi
  local c in out n
  local loads
  IFS=';' read -r -a loads <<<"${VOLT_COMPARE_LOADS:-1 2048 128;8 2048 128;32 2048 128;128 2048 128;1 512 1;1 2048 1}"
  for load in "${loads[@]}"; do
    read -r c in out <<<"$load"
    n=$((2 * c))
    [ "$c" = 1 ] && n=5
    local res=$W/slogs/$name.c$c.in$in.out$out.json
    timeout 240 "$V" --log-level warning bench serve --port "$PORT" --endpoint /v1/completions \
      --num-prompts "$n" --max-concurrency "$c" --random-input-len "$in" --random-output-len "$out" --seed 0 \
      --save-result --result-filename "$res" >"$W/slogs/$name.c$c.in$in.out$out.log" 2>&1
    local rc=$?
    emit "$(python3 - "$res" "$name" "$c" "$in" "$out" "$rc" "$(cat "$W/peak_mib")" <<'PY'
import json, sys
res, name, c, i, o, rc, peak = sys.argv[1:8]
try:
    r = json.load(open(res))
except Exception as e:
    print(json.dumps({"engine": name, "concurrency": int(c), "input_len": int(i), "output_len": int(o), "rc": int(rc), "error": str(e)})); sys.exit()
print(json.dumps({"engine": name, "concurrency": int(c), "input_len": int(i), "output_len": int(o), "rc": int(rc),
                  "completed": r.get("completed"), "output_tok_s": r.get("output_throughput"),
                  "median_ttft_ms": r.get("median_ttft_ms"), "median_tpot_ms": r.get("median_tpot_ms"),
                  "peak_gpu_mib_so_far": int(peak),
                  "command": f"voltllm bench serve --max-concurrency {c} --num-prompts {2 * int(c) if c != '1' else 5} --random-input-len {i} --random-output-len {o}"}))
PY
)"
  done
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  kill "$wpid" 2>/dev/null
  emit "{\"engine\": \"$name\", \"peak_gpu_mib\": $(cat "$W/peak_mib"), \"start_command\": \"$*\"}"
  sleep 3  # the GPU memory is given back before the next engine starts
}

# Flash attention: "-fa on" where the flag takes a value (2025+ releases), the bare "-fa" before.
fa=(-fa)
"$LB/llama-server" --help 2>&1 | grep -E -- "-fa, --flash-attn" | grep -q "on" && fa=(-fa on)
run_engine llama.cpp "$LB/llama-server" -m "$G" -ngl 99 "${fa[@]}" -np 128 -c 294912 --kv-unified \
  --host 127.0.0.1 --port "$PORT"
run_engine voltllm "$V" --log-level info serve --device "${VOLT_COMPARE_DEVICE:-cuda}" --model "$M" --host 127.0.0.1 --port "$PORT" \
  --max-model-len 4096 --max-num-seqs 128 --gpu-memory-utilization 0.92
"$LB/llama-server" --version >"$W/slogs/llama_version.txt" 2>&1
tar -C "$W" -czf "$OUT/serve_compare_logs.tar.gz" slogs
