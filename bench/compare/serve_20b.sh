#!/usr/bin/env bash
# bench/compare/serve_20b.sh [BUNDLE_DIR]: call B of the issue-16 table. Run on the GPU machine right after
# bench/compare/run_20b.sh (call A) returns: the machine stays warm ~30 s between calls and keeps /tmp, where
# call A left llama.cpp built (/tmp/llama-build) and the checkpoint in both formats (/tmp/volt-compare).
# About 7 minutes. Parts (VOLT_COMPARE_PARTS, default all, in this order):
#   serve_llama, serve_voltllm  each server started fresh, then the same `voltllm bench serve` loads (random
#       token-id prompts, ignore_eos, a seed per run (no prompt is sent twice), all sent at once under --max-concurrency C): a warm-up request;
#       output tok/s at concurrency 8, 32, 128 with 2,048-token prompts and 128 new tokens (C requests a repeat,
#       3 repeats); TTFT of 512- and 2,048-token prompts (3 runs of one request each); the peak GPU memory
#       of the whole run (nvidia-smi every 0.2 s). llama-server pinned: -ngl 99, -fa on, CUDA graphs (default),
#       -np 128 slots, one unified KV cache of 128 x 2,304 tokens (-c 294912 --kv-unified), no host-memory
#       prompt cache (--cache-ram 0; VOLT_LLAMA_CACHE_RAM=N sets it): with a unified KV cache
#       llama-server saves every idle slot to that cache whenever a task starts (--cache-idle-slots, on by
#       default), ~90 ms a 60 MiB slot in its one server loop (2026-12-06 session 8: 119 and 128 "making room
#       for prompt cache entry" lines, 11.4 and 11.6 s, right before concurrency 128's repeats 2 and 3, which
#       ran 11.1 s longer than repeat 1), and no prompt here is ever sent twice, so the cache only costs: at
#       concurrency 8, 32 and 128 its repeats 2-3 gave 7-12% less output tok/s than repeat 1 (llama.cpp's
#       default: 8192). voltllm serve:
#       --max-model-len 4096 --max-num-seqs 128 --gpu-memory-utilization 0.92.
#   kld_main, kld_demo  agreement of the logits, on the call's checkpoint (n_ctx 2,048, 2 chunks) and on the
#       demo model (assets/demo-model, converted here; n_ctx 512, 8 chunks), text: the held-out Brown texts
#       (out/compare/heldout.txt). (1) llama-perplexity writes its own KL base file from the text
#       (--kl-divergence-base L.kld: the tokens and llama.cpp's log-probabilities); (2) `voltllm logits` runs
#       each chunk's ids; (3) compare.py kld-write writes voltllm's logits in the same file format (header and
#       tokens copied, perplexity.cpp's 16-bit quantization) as V.kld; (4) llama-perplexity --kl-divergence
#       against V.kld: KL(voltllm || llama.cpp), same-top-token rate, both perplexities, by llama.cpp's own
#       code; (5) compare.py kld-check: KL(llama.cpp || voltllm) from L.kld and the same logits (the other
#       direction, and a check of the file layout: the two runs' perplexities of each engine must agree);
#       (6) demo only: transformers' perplexity on the same tokens and positions (bench/compare/tf_ppl.py).
# Output ($OUT, 2 files): compare_b.jsonl, compare_b_logs.tar.gz. Dry-run switches as run_20b.sh's, and
# VOLT_COMPARE_LOADS="C IN OUT REPS;..." (the throughput loads), VOLT_COMPARE_TTFT="512 2048".
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
B=$(cd "${1:-out/bundle-cuda13}" && pwd) || exit 1
V=$B/voltllm
OUT=${OUT:-/tmp/volt-compare-out}
W=${VOLT_COMPARE_WORK:-/tmp/volt-compare}  # run_20b.sh's
DEV=${VOLT_COMPARE_DEVICE:-cuda}
LB=${VOLT_LLAMA_BIN:-/tmp/llama-build/build/bin}
PARTS=" ${VOLT_COMPARE_PARTS:-serve_llama serve_voltllm kld_main kld_demo kld_self} "
DEADLINE=${VOLT_COMPARE_DEADLINE_S:-480}
mkdir -p "$OUT" "$W/slogs"
J=$OUT/compare_b.jsonl
# shellcheck source=bench/compare/common.sh
. bench/compare/common.sh
want() { [[ $PARTS == *" $1 "* ]]; }
M=$(cat "$W/model_dir" 2>/dev/null)
G=$(cat "$W/gguf_path" 2>/dev/null)
read -r -a LOAD <<<"$(cat "$W/load_args" 2>/dev/null)"  # run_20b.sh's: --load-format dummy for the 120b shape
need=("$M/config.json")
[ -n "$G" ] && need+=("$LB/llama-server" "$LB/llama-perplexity" "$G")
# no GGUF (the 120b shape, --load-format dummy): voltllm's serve rows only; kld_self where weights were written
if [ -z "$G" ]; then
  p=" "
  want serve_voltllm && p+="serve_voltllm "
  want kld_self && [ "${#LOAD[@]}" = 0 ] && p+="kld_self "
  PARTS=$p
fi
for f in "${need[@]}"; do
  [ -e "$f" ] || { emit "{\"error\": \"${f:-model} missing: run bench/compare/run_20b.sh first on this (warm) machine\"}"; exit 2; }
done
# shellcheck source=scripts/gpu/lib.sh
. scripts/gpu/lib.sh
volt_find_cublas serve_20b
LLAMA_SRC=$(cat "$W/llama.cpp/VOLT_SOURCE" 2>/dev/null)
LVER="$LLAMA_SRC; $("$LB/llama-server" --version 2>&1 | grep -m1 '^version' | tr -d '"')"
VVER="voltllm $(sed -n 's/^commit: //p' "$B/MANIFEST" 2>/dev/null | cut -c1-12) $(sed -n 's/^preset: //p' "$B/MANIFEST" 2>/dev/null) --device $DEV"
PORT=18431

watch_mem() {  # the peak GPU memory (MiB, the whole GPU) while $1 runs
  local peak=0 m
  while kill -0 "$1" 2>/dev/null; do
    m=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)
    [[ $m =~ ^[0-9]+$ ]] && [ "$m" -gt "$peak" ] && peak=$m
    echo "$peak" >"$W/peak_mib"
    sleep 0.2
  done
}
wait_ready() {  # wait_ready PID URL SECONDS
  local i
  for i in $(seq 1 "$(($3 * 2))"); do
    kill -0 "$1" 2>/dev/null || return 1
    curl -sf "$2" >/dev/null 2>&1 && return 0
    [ "$i" -gt 0 ] && sleep 0.5
  done
  return 1
}
# bench serve's random prompts draw ids below 199,998 (gpt-oss's ordinary ids); a model with a smaller
# vocabulary (the demo model of the dry run) gets a dataset of the same shape with ids 10..99 instead.
VOCAB=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$M/config.json")
bench() {  # bench NAME C IN OUT N SEED: one voltllm bench serve run; the result JSON is $W/slogs/NAME.json.
  # Every run has a seed of its own, so no prompt repeats one sent before (as a prefix either: the prompts of
  # one seed are a prefix of a longer list with the same seed): llama-server caches each slot's last prompt
  # (cache_prompt, on by default) and voltllm has no prefix cache, so a repeated prompt measured llama.cpp's
  # cache hits, not its prefill (the second set of 2026-12-06: TTFT 169.6 ms, then 30.8 ms twice).
  local src=(--random-input-len "$3" --random-output-len "$4" --seed "$6") i
  if [ "$VOCAB" -lt 199998 ]; then
    for i in $(seq 1 "$5"); do echo "{\"prompt\": [$(cpy ids "$3" "$(($6 * 1000 + i))")], \"output_len\": $4}"; done >"$W/slogs/$1.dataset.jsonl"
    src=(--dataset-path "$W/slogs/$1.dataset.jsonl")
  fi
  rm -f "$W/slogs/$1.json"  # no result of an earlier call can stand in for this run's
  timeout "$(left)" "$V" --log-level warning bench serve --port "$PORT" --endpoint /v1/completions --num-prompts "$5" \
    --max-concurrency "$2" "${src[@]}" --save-result --result-filename "$W/slogs/$1.json" >"$W/slogs/$1.log" 2>&1
}

run_engine() {  # run_engine NAME START_COMMAND...
  local name=$1 startcmd
  shift
  startcmd="$*"
  startcmd=${startcmd//$W\//}
  late "serve $name" && return
  "$@" >"$W/slogs/$name.server.log" 2>&1 &
  local pid=$! ts
  ts=$(date +%s)
  echo 0 >"$W/peak_mib"
  watch_mem "$pid" &
  local wpid=$!
  # /health: 200 once the model is loaded, 503 while loading (both servers; voltllm's /v1/models already
  # answered 200 while it loaded, and the first run of this script sent every load into its 503s)
  if ! wait_ready "$pid" "http://127.0.0.1:$PORT/health" 240; then
    emit "{\"engine\": \"$name\", \"error\": \"server did not come up in 240 s\", \"command\": \"$startcmd\"}"
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; kill "$wpid" 2>/dev/null
    tail -20 "$W/slogs/$name.server.log"
    return
  fi
  emit "{\"step\": \"$name up\", \"startup_s\": $(($(date +%s) - ts)), \"at_s\": $(since)}"
  bench "$name.warmup" 1 2048 8 1 7
  local loads load c in out reps r files dead=0
  gone() {  # true (with a row saying so, once) when the server has exited: no row from a run against it,
    # and the remaining loads are skipped
    [ "$dead" = 1 ] && return 0
    kill -0 "$pid" 2>/dev/null && return 1
    dead=1
    emit "{\"engine\": \"$name\", \"error\": \"the server exited during $1; its later loads were skipped (log: slogs/$name.server.log)\", \"at_s\": $(since)}"
    return 0
  }
  for in in ${VOLT_COMPARE_TTFT:-512 2048}; do
    late "$name ttft $in" && break
    files=()
    for r in 1 2 3; do  # a process a request: no HTTP connection is reused (a stale keep-alive one failed once)
      bench "$name.ttft$in.r$r" 1 "$in" 1 1 "$((100000 + 10 * in + r))"
      gone "ttft$in.r$r" && break 2
      files+=("$W/slogs/$name.ttft$in.r$r.json")
    done
    cpy serve "${files[@]}" --engine "$name" --figure "ttft_$in" --field ttft \
      --versions "$([ "$name" = voltllm ] && echo "$VVER" || echo "$LVER")" \
      --command "voltllm bench serve --max-concurrency 1 --num-prompts 3 --random-input-len $in --random-output-len 1 --seed 100000+10*$in+r (r = 1..3; one run a request, a prompt of its own) against: $startcmd" | tee -a "$J"
  done
  IFS=';' read -r -a loads <<<"${VOLT_COMPARE_LOADS:-8 2048 128 3;32 2048 128 3;128 2048 128 3}"
  for load in "${loads[@]}"; do
    read -r c in out reps <<<"$load"
    late "$name c$c" && break
    gone "c$c" && break
    files=()
    for r in $(seq 1 "$reps"); do
      bench "$name.c$c.r$r" "$c" "$in" "$out" "$c" "$((1000 * c + r))"
      gone "c$c.r$r" && break
      files+=("$W/slogs/$name.c$c.r$r.json")
    done
    [ "$dead" = 1 ] && break  # the server died in this load: no row from a partial set
    cpy serve "${files[@]}" --engine "$name" --figure "serve_c${c}_out" --versions "$([ "$name" = voltllm ] && echo "$VVER" || echo "$LVER")" \
      --command "voltllm bench serve --max-concurrency $c --num-prompts $c --random-input-len $in --random-output-len $out --seed 1000*$c+r (r = 1..$reps: no prompt sent twice) against: $startcmd" | tee -a "$J"
  done
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  kill "$wpid" 2>/dev/null
  wait "$wpid" 2>/dev/null
  emit "{\"figure\": \"gpu_mem_peak\", \"engine\": \"$name\", \"value\": $(cat "$W/peak_mib"), \"unit\": \"MiB\", \"repeats\": [$(cat "$W/peak_mib")], \"command\": \"nvidia-smi memory.used (whole GPU) every 0.2 s, the peak over start-up and every load above: $startcmd\", \"versions\": \"$([ "$name" = voltllm ] && echo "$VVER" || echo "$LVER")\"}"
  sleep 3  # the GPU memory is given back before the next engine starts
}

if want serve_llama; then
  run_engine llama.cpp "$LB/llama-server" -m "$G" -ngl 99 -fa on -np 128 -c 294912 --kv-unified \
    --cache-ram "${VOLT_LLAMA_CACHE_RAM:-0}" \
    --host 127.0.0.1 --port "$PORT"
fi
if want serve_voltllm; then
  run_engine voltllm "$V" --log-level info serve --device "$DEV" --model "$M" "${LOAD[@]}" --host 127.0.0.1 --port "$PORT" \
    --max-model-len 4096 --max-num-seqs 128 --gpu-memory-utilization 0.92
fi

# ---- agreement of the logits (see the header) ----
emit_self() {  # emit_self KLD_NPY_JSON FIGURE_STEM COMMAND: compare.py kld-npy's numbers as rows
  [ -n "$1" ] || return
  emit "$(python3 -c "
import json, sys
c = json.loads(sys.argv[1])
for k, u in (('mean_kld', 'nats'), ('median_kld', 'nats'), ('max_kld', 'nats'), ('same_top', 'fraction'), ('ppl_model', 'ppl'), ('ppl_base', 'ppl')):
    print(json.dumps({'figure': f'agree_{sys.argv[2]}_{k}', 'engine': 'voltllm', 'value': c[k], 'unit': u, 'repeats': [c[k]],
        'base': 'voltllm --dtype float', 'count': c['count'], 'command': sys.argv[3], 'versions': sys.argv[4]}))
" "$1" "$2" "$3" "$VVER")"
}
llama_kl() {  # llama_kl FIGURE_NAME BASE_LABEL FILE_STEM DESCRIPTION NPY...: inside kld() (its K, g, n_ctx, ngl,
  # name): voltllm's logits (NPY..., one per chunk) written as a llama.cpp base file K/FILE_STEM.kld, then
  # llama-perplexity --kl-divergence against it: KL(that voltllm run || llama.cpp), same-top rate and both
  # perplexities by llama.cpp's own code, as rows agree_FIGURE_NAME_*
  local fig=$1 base=$2 stem=$3 desc=$4
  shift 4
  cpy kld-write --model-logits "$@" --tokens-from "$K/L.kld" --out "$K/$stem.kld" | tee -a "$W/slogs/kld_$name.write.log"
  timeout "$(left)" "$LB/llama-perplexity" -m "$g" -c "$n_ctx" -b "$n_ctx" "${ngl[@]}" --kl-divergence-base "$K/$stem.kld" \
    --kl-divergence >"$W/slogs/kld_$fig.$stem.log" 2>&1
  emit "{\"step\": \"kld_$fig llama.cpp vs $base\", \"rc\": $?, \"at_s\": $(since)}"
  cpy kld-parse "$W/slogs/kld_$fig.$stem.log" --model "$fig" --engine llama.cpp --base "$base" \
    --command "llama-perplexity -m <gguf> -c $n_ctx -b $n_ctx ${ngl[*]} --kl-divergence-base $stem.kld --kl-divergence ($desc)" \
    --versions "$LVER; $VVER" | tee -a "$J"
}
kld() {  # kld NAME SAFETENSORS_DIR GGUF N_CTX N_CHUNKS TF(0|1) [REF(0|1)]
  # REF=1: also against voltllm --dtype float (f32 operands and KV, the golden tests' reference): llama.cpp's
  # KL from it (llama-perplexity on a base file of voltllm's f32 logits) beside voltllm's own at 16 bits
  # (compare.py kld-npy), on the same tokens: how close each engine comes to f32 on this checkpoint.
  local name=$1 m=$2 g=$3 n_ctx=$4 n_chunk=$5 tf=$6 ref=${7:-0} k bos ngl=() npys=() wins=()
  late "kld $name" && return
  local K=$W/kld_$name
  rm -rf "$K" && mkdir -p "$K"
  [ "$DEV" = cuda ] && ngl=(-ngl 99 -fa on)
  timeout "$(left)" "$LB/llama-perplexity" -m "$g" -f out/compare/heldout.txt -c "$n_ctx" -b "$n_ctx" --chunks "$n_chunk" \
    "${ngl[@]}" --kl-divergence-base "$K/L.kld" >"$W/slogs/kld_$name.base.log" 2>&1
  emit "{\"step\": \"kld_$name llama.cpp base\", \"rc\": $?, \"at_s\": $(since)}"
  read -r add bos <<<"$(cpy gguf-bos "$g" "$W/llama.cpp/gguf-py" 2>/dev/null)"
  [ "${add:-}" = 1 ] || bos=-
  for k in $(seq 0 $((n_chunk - 1))); do
    wins+=("$(cpy kld-tokens "$K/L.kld" "$k" "$bos")")  # chunk k's ids, read once: every run below and windows.json reuse them
    timeout "$(left)" "$V" --log-level warning logits --device "$DEV" --model "$m" --kv-cache-f16 \
      --prompt-ids "${wins[$k]}" --out "$K/v$k.npy" >>"$W/slogs/kld_$name.voltllm.log" 2>&1
    npys+=("$K/v$k.npy")
  done
  llama_kl "$name" voltllm V \
    "V.kld: voltllm logits --kv-cache-f16 of the $n_chunk chunks of L.kld = llama-perplexity -f out/compare/heldout.txt -c $n_ctx --chunks $n_chunk --kl-divergence-base L.kld" \
    "${npys[@]}"
  local chk
  chk=$(cpy kld-check "$K/L.kld" "${npys[@]}")
  emit "$(python3 -c "
import json, sys
c = json.loads(sys.argv[1]); n = sys.argv[2]
for k, u in (('mean_kld', 'nats'), ('same_top', 'fraction'), ('ppl_model', 'ppl'), ('ppl_base', 'ppl')):
    print(json.dumps({'figure': f'agree_{n}_reverse_{k}', 'engine': 'voltllm', 'value': c[k], 'unit': u, 'repeats': [c[k]],
        'base': 'llama.cpp', 'count': c['count'], 'command': 'bench/compare/compare.py kld-check L.kld <voltllm logits> (KL(llama.cpp || voltllm), numpy, as perplexity.cpp)', 'versions': sys.argv[3]}))
" "$chk" "$name" "$LVER; $VVER")"
  if [ "$ref" = 1 ] && ! late "kld $name f32 reference"; then
    local f32=() half=() dt
    for k in $(seq 0 $((n_chunk - 1))); do
      for dt in float half; do
        local kv=(--kv-cache-f16)
        [ "$dt" = float ] && kv=()
        timeout "$(left)" "$V" --log-level warning logits --device "$DEV" --model "$m" --dtype "$dt" "${kv[@]}" \
          --prompt-ids "${wins[$k]}" --out "$K/$dt$k.npy" >>"$W/slogs/kld_$name.voltllm.log" 2>&1
      done
      f32+=("$K/float$k.npy")
      half+=("$K/half$k.npy")
    done
    llama_kl "${name}_f32ref" "voltllm --dtype float" V32 \
      "V32.kld: voltllm logits --dtype float, f32 KV, of the $n_chunk chunks of L.kld" "${f32[@]}"
    local dtn files
    # the windows' ids, as voltllm ran them (kld-npy scores the same positions as perplexity.cpp)
    printf '%s\n' "${wins[@]}" |
      python3 -c "import json, sys; json.dump([[int(t) for t in l.split(',')] for l in sys.stdin.read().split()], open(sys.argv[1], 'w'))" "$K/windows.json"
    for dtn in auto half; do
      if [ "$dtn" = auto ]; then files=("${npys[@]}"); else files=("${half[@]}"); fi
      emit_self "$(cpy kld-npy --base "${f32[@]}" --model "${files[@]}" --ids "$K/windows.json")" "${name}_f32ref_voltllm_$dtn" \
        "voltllm logits --dtype $dtn (f16 KV) vs --dtype float (f32 KV), the $n_chunk chunks of L.kld; compare.py kld-npy"
    done
  fi
  if [ "$tf" = 1 ]; then
    local tfo
    tfo=$(timeout "$(left)" python3 bench/compare/tf_ppl.py "$m" "$K/L.kld" 2>"$W/slogs/kld_$name.tf.log" | tail -1)
    emit "{\"figure\": \"agree_${name}_transformers_ppl\", \"engine\": \"transformers\", \"value\": $(echo "${tfo:-{\}}" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin).get("tf_ppl")))'), \"unit\": \"ppl\", \"detail\": ${tfo:-null}, \"command\": \"bench/compare/tf_ppl.py (fp32, eager, the same tokens and positions)\"}"
  fi
  rm -f "$K"/*.npy "$K"/*.kld
}
N_MAIN=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['num_hidden_layers'])" "$M/config.json")
if want kld_main; then
  if [ "$M" = "$ROOT/assets/demo-model" ]; then
    kld demo "$M" "$G" 512 "${VOLT_KLD_DEMO_CHUNKS:-8}" 1
  else
    kld "20b" "$M" "$G" "${VOLT_KLD_CTX:-2048}" "${VOLT_KLD_CHUNKS:-2}" 0 1
  fi
fi
if want kld_demo && [ "$M" != "$ROOT/assets/demo-model" ]; then
  DG=$W/demo-f16.gguf
  [ -s "$DG" ] || python3 bench/compare/convert.py "$W/llama.cpp" --pre-tokenizer gpt-4o -- assets/demo-model \
    --outtype f16 --outfile "$DG" >"$W/slogs/convert_demo.log" 2>&1
  kld demo "$ROOT/assets/demo-model" "$DG" 512 "${VOLT_KLD_DEMO_CHUNKS:-8}" 1
fi
# ---- kld_self: how far precision alone moves this checkpoint's logits (voltllm against itself) ----
# voltllm --dtype float (f32 operands, f32 KV: the reference the golden tests hold to transformers' fp32) against
# the default dtype (bf16 here; f16 KV as in kld_main) and --dtype half (f16 operands and KV, llama.cpp's f16
# GGUF's precision), on the same held-out windows (voltllm's tokenizer: the checkpoint's tokenizer.json). A
# random-weight checkpoint can amplify rounding through its layers; kld_main's disagreement is read against this.
if want kld_self && ! late kld_self; then
  K=$W/kld_self
  rm -rf "$K" && mkdir -p "$K"
  n_ctx=${VOLT_KLD_CTX:-2048}
  n_chunk=${VOLT_KLD_CHUNKS:-2}
  [ "$M" = "$ROOT/assets/demo-model" ] && n_ctx=512 && n_chunk=${VOLT_KLD_DEMO_CHUNKS:-8}
  "$V" --log-level warning tokenize --model "$M" --file out/compare/heldout.txt --no-special >"$K/all.json" 2>"$W/slogs/kld_self.log"
  cpy windows "$K/all.json" "$n_ctx" "$n_chunk" "$K/windows.json" >>"$W/slogs/kld_self.log" 2>&1
  for dt in float auto half; do
    kv=(--kv-cache-f16)
    [ "$dt" = float ] && kv=()
    for k in $(seq 0 $((n_chunk - 1))); do
      ids=$(python3 -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))[int(sys.argv[2])])))" "$K/windows.json" "$k")
      timeout "$(left)" "$V" --log-level warning logits --device "$DEV" --model "$M" "${LOAD[@]}" --dtype "$dt" "${kv[@]}" \
        --prompt-ids "$ids" --out "$K/$dt$k.npy" >>"$W/slogs/kld_self.log" 2>&1
    done
  done
  for dt in auto half; do
    base=() model=()
    for k in $(seq 0 $((n_chunk - 1))); do base+=("$K/float$k.npy"); model+=("$K/$dt$k.npy"); done  # window order
    emit_self "$(cpy kld-npy --base "${base[@]}" --model "${model[@]}" --ids "$K/windows.json" 2>>"$W/slogs/kld_self.log")" \
      "self_$dt" "voltllm logits --dtype $dt (f16 KV) vs --dtype float (f32 KV), $n_chunk windows of $n_ctx held-out ids; compare.py kld-npy"
  done
  rm -f "$K"/*.npy
fi
emit "{\"step\": \"done\", \"at_s\": $(since), \"layers\": $N_MAIN}"
tar -C "$W" -czf "$OUT/compare_b_logs.tar.gz" slogs
