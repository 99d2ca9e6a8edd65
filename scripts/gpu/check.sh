#!/usr/bin/env bash
# scripts/gpu/check.sh BUNDLE_DIR: the device checks of issue 13, run on the GPU machine from the
# repository root (the working tree: golden data, demo model) with a bundle made here by
# scripts/bundle.sh (volta-ptx: the exact Volta code, JIT-compiled; cuda13: sm_90 with cuBLAS 13).
# Needs python3 with numpy (and torch + transformers for the trace part), compute-sanitizer.
# Parts, each timed, each one line of $OUT/summary.json (pass / fail / skip and the numbers):
#   cuda_info      the arch probe (kernel arch: 700 in volta-ptx, 900 in cuda13), dispatch, cuBLAS
#   backend_test   cuda_backend_test: every op against the CPU twin, batch invariance (17 sequences, bitwise)
#   op_test        the op harness volt_op_test --backend cuda at edge and model shapes (skipped until bundled)
#   sanitizer_*    compute-sanitizer memcheck, racecheck, initcheck, synccheck on the edge shapes: 0 errors
#   golden_*       logits of the golden checkpoints against transformers': f32 (--dtype float, f32 KV)
#                  within 1e-3 relative; fp16 (--dtype half, f16 KV) within 2e-2 and top-1 >= 99%
#   stress_*       the fp16 stress model (tests/data/stress) against transformers' fp32 logits, as golden_*
#   trace          per-layer trace of one golden prompt against transformers' hidden states (run here)
#   ppl_*          the demo model's held-out perplexity within 0.5% of transformers': 111.8583 on the first 4
#                  windows, 138.8216 on the whole held-out set (ppl_heldout)
#   generate       voltllm generate --device cuda on the demo model (the BackendExecutor path)
# Output: $OUT/summary.json, $OUT/check.log (this script's output), $OUT/logs.tar.gz (every part's log and
# result). Exit 0 when every part passed or was skipped. VOLT_CHECK_ONLY=REGEX runs only matching parts.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
B=$(cd "${1:?usage: scripts/gpu/check.sh BUNDLE_DIR}" && pwd)
OUT=${OUT:-/tmp/volt-gpu-check-out}
W=$(mktemp -d /tmp/volt-gpu-check.XXXXXX)
L=$W/logs
R=$W/results
mkdir -p "$OUT" "$L" "$R" "$W/golden"
exec > >(tee "$OUT/check.log") 2>&1
export VOLT_SOURCE_DIR=$ROOT
export CUDA_CACHE_PATH=${CUDA_CACHE_PATH:-$W/jit-cache}  # the compute_70 PTX is JIT-compiled once, then cached for every part (a caller may share one)
PARTS=$W/parts.tsv
: >"$PARTS"
V=$B/voltllm
preset=$(sed -n 's/^preset: //p' "$B/MANIFEST" 2>/dev/null)
echo "check: bundle $B (preset ${preset:-unknown}), repository $ROOT, work $W"
cat "$B/MANIFEST" 2>/dev/null | head -4

# cuBLAS: the system's, or the one in python's wheels (the nvidia-cublas package), on LD_LIBRARY_PATH.
# shellcheck source=scripts/gpu/lib.sh
. scripts/gpu/lib.sh
volt_find_cublas check

# part NAME NOTE CMD...: runs CMD with its output in $L/NAME.log; exit 77 means skipped. With
# VOLT_CHECK_ONLY=REGEX only the parts whose name matches run (a rerun of what failed).
part() {
  local name=$1 note=$2
  shift 2
  if [ -n "${VOLT_CHECK_ONLY:-}" ] && ! [[ $name =~ $VOLT_CHECK_ONLY ]]; then
    printf '%s\t77\t0.0\t%s (not selected by VOLT_CHECK_ONLY)\n' "$name" "$note" >>"$PARTS"
    return
  fi
  local t0 t1 rc secs
  t0=$(date +%s%N)
  "$@" >"$L/$name.log" 2>&1
  rc=$?
  t1=$(date +%s%N)
  secs=$(((t1 - t0) / 100000000))
  secs="$((secs / 10)).$((secs % 10))"
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$secs" "$note" >>"$PARTS"
  printf 'check: %-22s rc %-3s %6s s  %s\n' "$name" "$rc" "$secs" "$note"
  [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || tail -25 "$L/$name.log"
}

# ---- the probe ----
cuda_info() {
  "$V" cuda-info | tee "$R/cuda_info.json" || return 1
  "$V" cuda-info --cuda-kernels sm70 | tee -a "$R/cuda_info.json" || return 1
  local arch
  arch=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["kernel_arch"])' "$R/cuda_info.json")
  case "$preset" in
    volta-ptx) [ "$arch" = 700 ] || { echo "volta-ptx must run compute_70 code, the probe read $arch"; return 1; } ;;
    cuda13) [ "$arch" = 900 ] || { echo "cuda13 must run sm_90 code, the probe read $arch"; return 1; } ;;
  esac
}
part cuda_info "kernel arch, dispatch, cuBLAS" cuda_info

# ---- ops and batch invariance ----
backend_test() {
  "$B/cuda_backend_test" --gtest_color=no || return 1
  # On the GPU machine nothing may skip (a skip means no backend was made).
  ! grep -q '^\[  SKIPPED \]' "$L/backend_test.log" || { echo "tests were skipped on a GPU machine"; return 1; }
}
part backend_test "ops vs CPU twin, batch of 17 bitwise" backend_test

op_test() {
  [ -x "$B/volt_op_test" ] || { echo "volt_op_test is not in the bundle yet (tests/kernels): skipped"; return 77; }
  local shapes=()
  "$B/volt_op_test" --help 2>&1 | grep -q -- '--shapes' && shapes=(edge model)
  # --dtype half: the V100's operands (what auto gives under the Volta kernels); float: no rounding.
  local rc=0 dt s
  for dt in half float; do
    for s in "${shapes[@]:-edge}"; do
      echo "== volt_op_test --backend cuda --dtype $dt --shapes $s"
      "$B/volt_op_test" --backend cuda --dtype "$dt" --shapes "$s" || rc=1
    done
  done
  return $rc
}
part op_test "harness, edge and model shapes, --dtype half and float" op_test

# ---- compute-sanitizer on the edge shapes ----
sanitize() {
  local tool=$1
  local cs
  cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
  [ -n "$cs" ] && "$cs" --version &>/dev/null || { echo "no working compute-sanitizer: skipped"; return 77; }
  local target=("$B/cuda_backend_test" --gtest_color=no --gtest_filter='CudaOps.*')
  if [ -x "$B/volt_op_test" ]; then
    # The Volta variants (no cuBLAS: its Hopper kernels store through paths initcheck does not track, and
    # they are not ours to check) at the V100's operand dtype.
    target=("$B/volt_op_test" --backend cuda --cuda-kernels sm70 --dtype half)
    "$B/volt_op_test" --help 2>&1 | grep -q -- '--shapes' && target+=(--shapes edge)
  fi
  # The Volta kernels only (VOLT_CUDA_TEST_KERNELS=sm70): cuBLAS's own kernels are not ours to check.
  VOLT_CUDA_EDGE_ONLY=1 VOLT_CUDA_TEST_KERNELS=sm70 "$cs" --tool "$tool" --error-exitcode 99 --print-limit 30 "${target[@]}"
  local rc=$?
  grep -q '^\[  SKIPPED \]' "$L/sanitizer_$tool.log" && { echo "tests were skipped under the sanitizer"; rc=1; }
  grep -h "ERROR SUMMARY" "$L/sanitizer_$tool.log" 2>/dev/null | tail -1
  return $rc
}
for tool in memcheck racecheck initcheck synccheck; do
  part "sanitizer_$tool" "0 errors on the edge shapes" sanitize "$tool"
done

# ---- golden logits against transformers ----
# Modes: f32 = --dtype float + f32 KV (1e-3); fp16 = --dtype half + f16 KV (2e-2, top-1 99%); in builds
# that run native code, fp16-sm70 forces the Volta kernels too.
modes=(f32 fp16)
[ "$preset" != volta-ptx ] && modes+=(fp16-sm70)
mode_flags() {
  case "$1" in
    f32) echo "--dtype float" ;;
    fp16) echo "--dtype half --kv-cache-f16" ;;
    fp16-sm70) echo "--dtype half --kv-cache-f16 --cuda-kernels sm70" ;;
  esac
}
python3 scripts/gpu/compare.py prompts tests/data/golden/golden.json >"$W/prompts.txt"
golden() {
  local ckpt=$1 mode=$2 i start ids
  # shellcheck disable=SC2046
  while read -r i start ids; do
    "$V" --log-level warning logits --device cuda $(mode_flags "$mode") --model "tests/data/golden/$ckpt" \
      --prompt-ids "$ids" --start-pos "$start" --out "$W/golden/$ckpt.$mode.$i.npy" || return 1
  done <"$W/prompts.txt"
  # f32: every row within 1e-3. fp16: top-1 >= 99% over all prompts and each prompt's rows within 2e-2,
  # where up to 5% of a prompt's rows may exceed it: on the random tiny models any 1e-3 perturbation flips
  # the router's top-k at a few tokens of the 300-token prompt (docs/cuda.md, "fp16 and routing flips"),
  # and those rows then differ by far more; "strict" in the result says whether every row was within.
  local rel=2e-2 top1=0.99 rows=0.95 ref=()
  [ "$mode" = f32 ] && rel=1e-3 && rows=1
  if [ "$ckpt" = tiny-bf16 ] && [ "$mode" != f32 ]; then
    # --dtype half quantizes bf16-layout experts to MXFP4 at load (with a notice): transformers' bf16
    # logits are then not the reference; the CPU on the same checkpoint converted by `voltllm convert`
    # (the same quantizer, bit for bit) is. transformers is reported beside it.
    if [ ! -d "$W/tiny-bf16-mxfp4" ]; then
      "$V" --log-level warning convert --in tests/data/golden/tiny-bf16 --out "$W/tiny-bf16-mxfp4" || return 1
      while read -r i start ids; do
        "$V" --log-level warning logits --device cpu --model "$W/tiny-bf16-mxfp4" --prompt-ids "$ids" \
          --start-pos "$start" --out "$W/golden/tiny-bf16.ref.$i.npy" || return 1
      done <"$W/prompts.txt"
    fi
    ref=("$W/golden")
    python3 scripts/gpu/compare.py logits tests/data/golden tiny-bf16 "$mode" "$W/golden" 1 0 0 |
      sed 's/"pass": [a-z]*/"pass": true, "informational": "vs transformers bf16, before quantization"/' >>"$R/golden_${ckpt}_$mode.json"
  fi
  python3 scripts/gpu/compare.py logits tests/data/golden "$ckpt" "$mode" "$W/golden" "$rel" "$top1" "$rows" "${ref[@]}" \
    | tee -a "$R/golden_${ckpt}_$mode.json" | grep -q '"pass": true'
}
for ckpt in tiny-mxfp4 tiny-bf16; do
  for mode in "${modes[@]}"; do
    part "golden_${ckpt}_$mode" "$(mode_flags "$mode")" golden "$ckpt" "$mode"
  done
done

# ---- the fp16 stress model (issue 15): f32 residual past 1e5, every op output inside fp16 ----
# transformers in fp16 gives non-finite logits on every prompt (golden.json's fp16_control, the negative
# control); ours at --dtype half with an f16 KV cache must be finite and within the fp16 rule of
# transformers' fp32 logits, and --dtype float within 1e-3.
python3 scripts/gpu/compare.py prompts tests/data/stress/golden.json >"$W/stress_prompts.txt"
stress() {
  local mode=$1 i start ids rel=2e-2 rows=0.95
  [ "$mode" = f32 ] && rel=1e-3 && rows=1
  mkdir -p "$W/stress"
  # shellcheck disable=SC2046
  while read -r i start ids; do
    "$V" --log-level warning logits --device cuda $(mode_flags "$mode") --model tests/data/stress/stress-36l \
      --prompt-ids "$ids" --start-pos "$start" --out "$W/stress/stress-36l.$mode.$i.npy" || return 1
  done <"$W/stress_prompts.txt"
  python3 scripts/gpu/compare.py logits tests/data/stress stress-36l "$mode" "$W/stress" "$rel" 0.99 "$rows" |
    tee "$R/stress_$mode.json" | grep -q '"pass": true'
}
for mode in "${modes[@]}"; do
  part "stress_$mode" "stress-36l vs transformers fp32: $(mode_flags "$mode")" stress "$mode"
done

# ---- per-layer trace against transformers (run here, on this machine's CPU, fp32) ----
trace() {
  python3 -c 'import torch, transformers' 2>/dev/null || { echo "no torch/transformers here: skipped"; return 77; }
  # Both golden checkpoints with --trace: the named intermediates the CPU golden test compares with
  # (tests/data/golden/<name>.trace/), brought back in $OUT/hf_golden.tar.gz to be committed.
  PYTHONUNBUFFERED=1 python3 tools/golden/transformers_logits.py --out "$W/hf" --vocab-size 1000 --trace \
    tests/data/golden/tiny-mxfp4 tests/data/golden/tiny-bf16 2>&1 | tail -3 || return 1
  tar czf "$OUT/hf_golden.tar.gz" -C "$W/hf" . || return 1
  [ -d "$W/hf" ] || mkdir -p "$W/hf"
  local ids start layers
  read -r _ start ids < <(sed -n 2p "$W/prompts.txt")  # prompt 1: the trace prompt of transformers_logits.py
  layers=$(python3 -c 'import json; print(json.load(open("tests/data/golden/tiny-mxfp4/config.json"))["num_hidden_layers"])')
  local ok=0 mode
  for mode in f32 fp16; do
    # shellcheck disable=SC2046
    "$V" --log-level warning logits --device cuda $(mode_flags "$mode") --model tests/data/golden/tiny-mxfp4 \
      --prompt-ids "$ids" --start-pos "$start" --out "$W/trace_$mode.npy" --trace "$W/trace_$mode" || return 1
    local tol=1e-3
    [ "$mode" = fp16 ] && tol=2e-2
    python3 scripts/gpu/compare.py trace "$W/hf/tiny-mxfp4.hidden.npy" "$W/trace_$mode" "$layers" "$tol" |
      sed "s/^{/{\"mode\": \"$mode\", /" | tee -a "$R/trace.json" | grep -q '"pass": true' || ok=1
  done
  return $ok
}
mkdir -p "$W/hf"
part trace "tiny-mxfp4 prompt 1, every layer, f32 and fp16" trace

# ---- the demo model's held-out perplexity ----
ppl() {
  local name=$1 chunks=tests/data/demo/heldout_first4_chunks.json ref=tests/data/demo/transformers_pins.json
  shift
  if [ "$1" = --whole ]; then  # the whole held-out set (312 windows, 148,699 predicted tokens)
    chunks=tests/data/demo/heldout_chunks.json ref=tools/demo_model/run/results.json
    shift
  fi
  "$V" --log-level warning perplexity --device cuda --model assets/demo-model \
    --chunks "$chunks" "$@" >"$W/$name.out" || return 1
  cat "$W/$name.out"
  python3 scripts/gpu/compare.py ppl "$W/$name.out" "$ref" 0.005 |
    tee "$R/$name.json" | grep -q '"pass": true'
}
part ppl_f32 "--dtype float, f32 KV" ppl ppl_f32 --dtype float
part ppl_fp16 "--dtype half, f16 KV" ppl ppl_fp16 --dtype half --kv-cache-f16
part ppl_engine "--engine (BackendExecutor), --dtype half, f16 KV" ppl ppl_engine --engine --dtype half
part ppl_heldout "whole held-out set, --engine, --dtype half: transformers 138.8216" ppl ppl_heldout --whole --engine --dtype half
if [ "$preset" != volta-ptx ]; then
  part ppl_fp16_sm70 "--dtype half, f16 KV, --cuda-kernels sm70" ppl ppl_fp16_sm70 --dtype half --kv-cache-f16 --cuda-kernels sm70
fi

# ---- generate through the engine on the GPU ----
gen() {
  "$V" --log-level info generate --device cuda --model assets/demo-model --max-tokens 48 \
    --chat "Tell me about the old harbor town." || return 1
}
part generate "demo model, greedy, --device cuda" gen

# ---- summary ----
python3 scripts/gpu/compare.py summary "$PARTS" "$R" "$OUT/summary.json"
rc=$?
cp "$PARTS" "$R/"
tar czf "$OUT/logs.tar.gz" -C "$W" logs results prompts.txt 2>/dev/null
echo "check: $OUT/summary.json, $OUT/check.log, $OUT/logs.tar.gz"
exit $rc
