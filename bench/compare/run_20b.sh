#!/usr/bin/env bash
# bench/compare/run_20b.sh [BUNDLE_DIR]: call A of the issue-16 table (voltllm beside llama.cpp on the same GPU,
# the same random-weight gpt-oss-20b-shape checkpoint, in the same run). Run on the GPU machine from the
# repository root with out/compare (bench/compare/prepare.sh) and a bundle (scripts/bundle.sh cuda13; default
# out/bundle-cuda13) carried. About 7.5 minutes on 16 cores. Steps:
#   1. llama.cpp is built for sm_90 with CUDA 13 in the background (build_llama.sh, nice 10, 14 jobs; ~336 s),
#   2. meanwhile `voltllm make-model --preset 20b --seed 20261202` writes the checkpoint (MXFP4 experts, bf16
#      rest, the real gpt-oss tokenizer) and llama.cpp's own convert_hf_to_gguf.py --outtype f16 converts it,
#   3. the read bandwidth of this GPU now (scripts/gpu/read_bw.py; again at the end),
#   4. voltllm generate --device cuda, each figure one process, 3 repeats (runs while llama.cpp still compiles
#      at nice 10; the rows say so): prompts of N = 1, 512, 2048, 32768 fixed token ids with --max-tokens 1 and
#      129 (not 512): prefill_N = N / t(N, 1), decode_b1_ctx{128,2048,32768} = 128 / (t(N, 129) - t(N, 1)),
#   5. llama-bench -ngl 99 -fa 1 (CUDA graphs: its default): -p 512,2048 -n 128 -r 3 (pp512, pp2048, tg128 at
#      depth 0), then -p 0 -n 128 -d 2048,32768 -r 3 (tg128 after 2,048 and 32,768 tokens: the same decode
#      contexts), medians of llama-bench's samples.
# The whole of it does not fit one call (make-model 255 s and the llama.cpp build 336 s share the 16 cores; the
# voltllm processes load 13 GB each): run it twice on the warm machine. VOLT_COMPARE_PREP_ONLY=1 (call A1)
# builds llama.cpp (16 jobs), writes and converts the checkpoint, and stops; the second run (call A2) finds
# /tmp/llama-build built and the checkpoint written and goes straight to steps 3-5.
# Output ($OUT, 2 files): compare_a.jsonl (one line a figure: figure, engine, value = median, repeats, command,
# versions; read_bandwidth and model_config lines for the table) and compare_a_logs.tar.gz.
# Leaves for call B (serve_20b.sh, right after, the machine warm): /tmp/llama-build (built), /tmp/volt-compare
# (checkpoint, GGUF, tokenizer). Switches for a dry run elsewhere (bench/compare/dryrun_cpu.sh):
# VOLT_COMPARE_MODEL=demo (assets/demo-model, no make-model), VOLT_COMPARE_MODEL=120b (voltllm only: the 120b
# shape from `make-model --config-only` with --load-format dummy, no llama.cpp build, conversion or
# llama-bench: issue 16's 120b rows, since llama.cpp's conversion of 65 GB does not fit a call; its figures
# come from one process each with `generate --repeat REPS+1`, the first run a warm-up: one load a figure),
# VOLT_COMPARE_DEVICE=cpu, VOLT_LLAMA_BIN=DIR
# (llama.cpp already built: no build), VOLT_COMPARE_CTX="2048 32768", VOLT_COMPARE_PP="512 2048",
# VOLT_COMPARE_REPS=3, VOLT_COMPARE_DEADLINE_S=500 (parts not started by then are skipped, with a line saying so),
# VOLT_COMPARE_LLAMA_UB="1024 2048" (llama-bench's prefill at those -ub too: its figures end in _ubU),
# VOLT_COMPARE_SKIP_LLAMA=1 (no llama-bench: voltllm's rows only, e.g. the volta-ptx bundle's smoke rows on the
# checkpoint an earlier run left; its rows are labelled "voltllm (volta-ptx)"), VOLT_COMPARE_WORK=DIR (default /tmp/volt-compare; serve_20b.sh reads the same: a 120b run in its own folder can
# share a call with call A1, which uses no GPU), VOLT_COMPARE_BESIDE=TEXT (what else ran meanwhile: in each
# generate row's `ran`). A prefill length that is also a context is run once.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
B=$(cd "${1:-out/bundle-cuda13}" && pwd) || exit 1
V=$B/voltllm
OUT=${OUT:-/tmp/volt-compare-out}
W=${VOLT_COMPARE_WORK:-/tmp/volt-compare}  # a second folder lets a 120b run share the machine with call A1
DEV=${VOLT_COMPARE_DEVICE:-cuda}
MODEL=${VOLT_COMPARE_MODEL:-20b}
CTXS=${VOLT_COMPARE_CTX:-2048 32768}
PPS=${VOLT_COMPARE_PP:-512 2048}
REPS=${VOLT_COMPARE_REPS:-3}
DEADLINE=${VOLT_COMPARE_DEADLINE_S:-500}
mkdir -p "$OUT" "$W/logs"
J=$OUT/compare_a.jsonl
# shellcheck source=bench/compare/common.sh
. bench/compare/common.sh
# shellcheck source=scripts/gpu/lib.sh
. scripts/gpu/lib.sh
volt_find_cublas run_20b

# ---- 1. llama.cpp, in the background (or VOLT_LLAMA_BIN) ----
if [ "$MODEL" = 120b ] || [ "${VOLT_COMPARE_SKIP_LLAMA:-0}" = 1 ]; then
  LB=/nonexistent  # voltllm only
  echo 0 >"$W/build.rc"
  BUILD_PID=
elif [ -n "${VOLT_LLAMA_BIN:-}" ]; then
  LB=$VOLT_LLAMA_BIN
  echo 0 >"$W/build.rc"
  BUILD_PID=
elif [ -x /tmp/llama-build/build/bin/llama-bench ] && [ -x /tmp/llama-build/build/bin/llama-server ] &&
  [ -x /tmp/llama-build/build/bin/llama-perplexity ]; then
  LB=/tmp/llama-build/build/bin  # built by an earlier call on this (warm) machine
  echo 0 >"$W/build.rc"
  BUILD_PID=
  emit "{\"step\": \"build_llama\", \"reused\": \"/tmp/llama-build\", \"at_s\": $(since)}"
else
  LB=/tmp/llama-build/build/bin
  jobs=14
  [ "${VOLT_COMPARE_PREP_ONLY:-0}" = 1 ] && jobs=16
  (VOLT_LLAMA_JOBS=$jobs OUT=$W/logs nice -n 10 bash bench/compare/build_llama.sh >"$W/logs/build_llama.out" 2>&1
   echo $? >"$W/build.rc") &
  BUILD_PID=$!
fi
rm -rf "$W/llama.cpp" "$W/models"
tar -C "$W" -xJf out/compare/tokenizer-gptoss.tar.xz   # -> $W/models/tokenizer.json
tar -C "$W" -xJf out/compare/llama-src.tar.xz          # the converter and gguf-py (its own copy)
LLAMA_SRC=$(cat "$W/llama.cpp/VOLT_SOURCE")
VVER="voltllm $(sed -n 's/^commit: //p' "$B/MANIFEST" 2>/dev/null | cut -c1-12) $(sed -n 's/^preset: //p' "$B/MANIFEST" 2>/dev/null) --device $DEV"

# ---- 2. the checkpoint, both formats ----
if [ "$MODEL" = demo ]; then
  M=$ROOT/assets/demo-model
  G=$W/demo-f16.gguf
  pre=(--pre-tokenizer gpt-4o)
elif [ "$MODEL" = 120b ]; then
  M=$W/gpt-oss-120b-dummy
  G=
  [ -f "$M/config.json" ] || "$V" --log-level warning make-model --preset "${VOLT_COMPARE_PRESET:-120b}" --config-only \
    --tokenizer-dir "$W/models" --out "$M" >"$W/logs/make_model.log" 2>&1
else
  M=$W/gpt-oss-20b-random
  G=$W/20b-f16.gguf
  pre=()
  if [ ! -f "$M/config.json" ]; then
    "$V" --log-level warning make-model --preset 20b --seed 20261202 --tokenizer-dir "$W/models" \
      --out "$M" --threads "$([ "${VOLT_COMPARE_PREP_ONLY:-0}" = 1 ] && echo 16 || echo 6)" >"$W/logs/make_model.log" 2>&1
    emit "{\"step\": \"make_model\", \"rc\": $?, \"at_s\": $(since), \"bytes\": $(du -sb "$M" | cut -f1)}"
  fi
fi
LOAD=()
[ "$MODEL" = 120b ] && LOAD=(--load-format dummy)
echo "${LOAD[*]}" >"$W/load_args"
if [ -n "$G" ] && [ ! -s "$G" ] && [ "${VOLT_COMPARE_SKIP_LLAMA:-0}" != 1 ]; then
  python3 bench/compare/convert.py "$W/llama.cpp" "${pre[@]}" -- "$M" --outtype f16 --outfile "$G" \
    >"$W/logs/convert.log" 2>&1
  emit "{\"step\": \"convert_hf_to_gguf\", \"rc\": $?, \"at_s\": $(since), \"bytes\": $(stat -c %s "$G" 2>/dev/null || echo 0)}"
fi
echo "$M" >"$W/model_dir"
echo "$G" >"$W/gguf_path"
emit "{\"figure\": \"model_config\", \"engine\": \"-\", \"model\": \"$MODEL\", \"config\": $(tr -d '\n' <"$M/config.json")}"
if [ "${VOLT_COMPARE_PREP_ONLY:-0}" = 1 ]; then  # call A1: the build and the checkpoint only
  if [ -n "$BUILD_PID" ]; then
    while kill -0 "$BUILD_PID" 2>/dev/null && [ "$(since)" -lt "$DEADLINE" ]; do sleep 2; done
    kill -0 "$BUILD_PID" 2>/dev/null && echo 124 >"$W/build.rc"
  fi
  emit "{\"step\": \"build_llama\", \"rc\": $(cat "$W/build.rc"), \"at_s\": $(since)}"
  emit "{\"step\": \"prep_only_done\", \"at_s\": $(since)}"
  tar -C "$W" -czf "$OUT/compare_a_logs.tar.gz" logs
  exit 0
fi

# ---- 3. read bandwidth ----
bandwidth() {
  local bw
  bw=$([ "$DEV" = cuda ] && python3 scripts/gpu/read_bw.py 2>/dev/null)
  emit "{\"figure\": \"read_bandwidth\", \"engine\": \"gpu\", \"value\": ${bw:-null}, \"unit\": \"GB/s\", \"at_s\": $(since), \"command\": \"python3 scripts/gpu/read_bw.py (torch sum over 4 GiB float32, median of 20)\"}"
}
bandwidth
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader \
  >"$W/logs/gpu.txt" 2>&1
emit "{\"figure\": \"versions\", \"engine\": \"-\", \"gpu\": \"$(head -1 "$W/logs/gpu.txt" | tr -d '"')\", \"voltllm\": \"$VVER\", \"llama.cpp\": \"$LLAMA_SRC\"}"

# ---- 4. voltllm generate: one process a figure, 3 repeats; --max-num-seqs 1, the single-stream setup that
# llama-bench's batch-1 rows measure (it also picks the expert GEMV: docs/cuda.md) ----
T=$W/gen_times.tsv
: >"$T"
maxlen=$((${CTXS##* } + 1024))
[ "$maxlen" -lt 4096 ] && maxlen=4096
run_gen() {  # run_gen NAME N MAX_TOKENS [EXTRA ARGS...]: one voltllm generate process, its output in
  # $W/logs/NAME.{out,log}; returns its exit code
  local name=$1 n=$2 mt=$3 ids
  shift 3
  ids=$(cpy ids "$n" 0)
  timeout "$(left)" "$V" --log-level info generate --device "$DEV" --model "$M" "${LOAD[@]}" --prompt-ids "$ids" --max-tokens "$mt" \
    --ignore-eos --temperature 0 --max-num-seqs 1 --max-model-len "$maxlen" --max-num-batched-tokens 2048 "$@" \
    >"$W/logs/$name.out" 2>"$W/logs/$name.log"
}
gen() {  # gen N MAX_TOKENS REP
  local name="gen_n$1_m$2_r$3" rc
  run_gen "$name" "$1" "$2"
  rc=$?
  printf '%s %s %s %s %s\n' "$1" "$2" "$3" "$(cpy gen-seconds "$W/logs/$name.log")" "$rc" | tee -a "$T"
}
genr() {  # genr N MAX_TOKENS: one process, --repeat REPS + 1 on one load, the first run a warm-up; a line of
  # $T per later run (rep 1..REPS). For the 120b shape, whose dummy load takes ~30-60 s: one process a
  # figure and repeat would be 8 x 3 loads, more than a call.
  local name="gen_n$1_m$2_repeat" rc rep=0 s g st
  run_gen "$name" "$1" "$2" --repeat $((REPS + 1))
  rc=$?
  # Each run prints its line when it ends, also a run that failed (the process then exits 1 at the end). A run
  # counts only if it generated all MAX_TOKENS tokens and the process either succeeded or was stopped by a
  # timeout (124, or 137 / 143 killed) after it: a process stopped at the call's hard limit keeps the runs it
  # finished, and a step line says so.
  while read -r s g; do
    st=1
    case $rc in 0 | 124 | 137 | 143) [ "$g" = "$2" ] && st=0 ;; esac
    [ "$rep" -gt 0 ] && printf '%s %s %s %s %s\n' "$1" "$2" "$rep" "$s" "$st" | tee -a "$T"
    rep=$((rep + 1))
  done < <(cpy gen-seconds-runs "$W/logs/$name.log")
  [ "$rc" = 0 ] || emit "{\"step\": \"$name\", \"rc\": $rc, \"runs_ended_warmup_included\": $rep, \"at_s\": $(since)}"
}
if grep -q '^preset: volta-ptx' "$B/MANIFEST" 2>/dev/null; then
  # compute_70 PTX only: the driver JIT-compiles every kernel on the first load (cached in $CUDA_CACHE_PATH);
  # one untimed process first, so that no row times the compiler
  run_gen jit_warmup 1 1
  emit "{\"step\": \"jit_warmup\", \"rc\": $?, \"at_s\": $(since)}"
fi
busy=$([ -n "$BUILD_PID" ] && kill -0 "$BUILD_PID" 2>/dev/null && echo "while llama.cpp compiled at nice 10" || echo "alone")
busy="$busy${VOLT_COMPARE_BESIDE:+, beside $VOLT_COMPARE_BESIDE}"
how="one process a figure and repeat (CUDA graphs: default)"
if [ "$MODEL" = 120b ]; then
  how="one process a figure, --repeat $((REPS + 1)), the first run a warm-up (CUDA graphs: default)"
  late "voltllm generate" || { genr 1 1; genr 1 129
    for n in $PPS; do [[ " $CTXS " == *" $n "* ]] || late "prefill $n" || genr "$n" 1; done
    for n in $CTXS; do late "context $n" || { genr "$n" 1; genr "$n" 129; }; done; }
else
  for rep in $(seq 1 "$REPS"); do
    late "voltllm generate rep $rep" && break
    gen 1 1 "$rep"; gen 1 129 "$rep"
    for n in $PPS; do [[ " $CTXS " == *" $n "* ]] || gen "$n" 1 "$rep"; done  # a context's run is its prefill too
    for n in $CTXS; do gen "$n" 1 "$rep"; gen "$n" 129 "$rep"; done
  done
fi
cpy gen "$T" "voltllm generate --device $DEV --model <checkpoint> ${LOAD[*]:+${LOAD[*]} }--prompt-ids <{N} ids> --max-tokens {M} --ignore-eos --temperature 0 --max-num-seqs 1 --max-model-len $maxlen --max-num-batched-tokens 2048 ($how)" \
  "$VVER" | python3 -c "
import json, sys
for l in sys.stdin:
    r = json.loads(l); r['ran'] = sys.argv[1]; print(json.dumps(r))" "$busy" | tee -a "$J"

# ---- 5. llama-bench (after the build) ----
if [ -n "$BUILD_PID" ]; then
  while kill -0 "$BUILD_PID" 2>/dev/null && [ "$(since)" -lt "$DEADLINE" ]; do sleep 2; done
  kill -0 "$BUILD_PID" 2>/dev/null && echo 124 >"$W/build.rc"  # still compiling at the deadline: no llama-bench
fi
emit "{\"step\": \"build_llama\", \"rc\": $(cat "$W/build.rc"), \"at_s\": $(since)}"
LVER="$LLAMA_SRC; $("$LB/llama-server" --version 2>&1 | grep -m1 '^version' | tr -d '"')"
lbench() {  # lbench NAME ARGS...; LBENCH_TAG=ubatch: figures named by -ub (compare.py llama-bench)
  local name=$1
  shift
  [ -z "$G" ] && return  # voltllm only (120b)
  [ "${VOLT_COMPARE_SKIP_LLAMA:-0}" = 1 ] && return  # voltllm's rows only (a second bundle, e.g. volta-ptx)
  late "llama-bench $name" && return
  timeout "$(left)" "$LB/llama-bench" -m "$G" -ngl 99 -fa 1 -r "$REPS" -o json "$@" >"$W/logs/llama_bench_$name.json" \
    2>"$W/logs/llama_bench_$name.log"
  emit "{\"step\": \"llama_bench_$name\", \"rc\": $?, \"at_s\": $(since)}"
  cpy llama-bench "$W/logs/llama_bench_$name.json" "llama-bench -m <gguf> -ngl 99 -fa 1 -r $REPS $*" "$LVER" ${LBENCH_TAG:+"$LBENCH_TAG"} | tee -a "$J"
}
pcsv=$(echo "$PPS" | tr ' ' ',')
dcsv=$(echo "$CTXS" | tr ' ' ',')
lbench d0 -p "$pcsv" -n 128
lbench depth -p 0 -n 128 -d "$dcsv"
# Is llama.cpp's default micro-batch (-ub 512) its best prefill on this MoE? VOLT_COMPARE_LLAMA_UB="1024 2048":
# pp rows at those -ub beside the default's (figures prefill_N_ubU); a faster one is then pinned for the table.
if [ -n "${VOLT_COMPARE_LLAMA_UB:-}" ]; then
  read -r -a ubs <<<"512 $VOLT_COMPARE_LLAMA_UB"
  LBENCH_TAG=ubatch lbench ubatch -p "$pcsv" -n 0 -b 2048 -ub "$(IFS=,; echo "${ubs[*]}")"
fi
bandwidth
emit "{\"step\": \"done\", \"at_s\": $(since)}"
tail -5 "$W/logs/convert.log" >"$W/logs/convert_tail.log" 2>/dev/null
rm -f "$W/logs/convert.log"
tar -C "$W" -czf "$OUT/compare_a_logs.tar.gz" logs gen_times.tsv
