#!/usr/bin/env bash
# scripts/gpu/prefill.sh BUNDLE_DIR: the prompt-row GEMMs (kernels/gemm_mma.cu) on the GPU machine, from
# the repository root with a cuda13 bundle (scripts/bundle.sh). Parts (JSON lines in $OUT/prefill.jsonl,
# logs in $OUT/prefill_logs.tar.gz):
#   ops_<dtype>    volt_op_test --shapes edge on qkv_rope_kvwrite, o_proj_residual, experts_residual
#                  (the P= cases are prompt rows; against the double-precision reference)
#   bench_<dtype>  the same ops at the model shapes with --bench (T=512 / 128 prompt rows: median us)
#   backend_test   cuda_backend_test (batch invariance of prompt and generated rows, graphs, swap)
#   sanitize       compute-sanitizer memcheck and racecheck on the edge cases of the three ops
#   prefill_*      voltllm generate --load-format dummy on the 20b / 120b shapes: one prompt of N ids,
#                  --max-tokens 1, --max-num-batched-tokens 2048: prompt tok/s (time includes the one
#                  decode step and the sample), VOLT_PREFILL_REPS (3) repeats for 20b
# VOLT_PREFILL_PARTS (default "ops bench backend_test sanitize prefill") picks parts.
set -uo pipefail
cd "$(dirname "$0")/../.."
PARTS=" ${VOLT_PREFILL_PARTS:-ops bench backend_test sanitize prefill} "
want() { [[ $PARTS == *" $1 "* ]]; }
B=$(cd "${1:?usage: scripts/gpu/prefill.sh BUNDLE_DIR}" && pwd)
V=$B/voltllm
OUT=${OUT:-/tmp/volt-gpu-prefill-out}
W=$(mktemp -d /tmp/volt-gpu-prefill.XXXXXX)
mkdir -p "$OUT" "$W/logs"
S=$OUT/prefill.jsonl
: >"$S"
export CUDA_CACHE_PATH=$W/jit-cache
emit() { echo "$1" | tee -a "$S"; }
OPS=qkv_rope_kvwrite,o_proj_residual,experts_residual

if want ops; then
  for dt in half bfloat16; do
    timeout 200 "$B/volt_op_test" --backend cuda --dtype "$dt" --shapes edge --op "$OPS" >"$W/logs/ops_$dt.log" 2>&1
    rc=$?
    emit "{\"part\": \"ops_$dt\", \"pass\": $([ $rc = 0 ] && echo true || echo false), \"rc\": $rc}"
    grep -E "P=|FAIL" "$W/logs/ops_$dt.log" | head -40
  done
fi
if want bench; then
  for dt in half bfloat16; do
    timeout 240 "$B/volt_op_test" --backend cuda --dtype "$dt" --shapes model --op "$OPS" --bench --bench-iters 10 \
      >"$W/logs/bench_$dt.log" 2>&1
    rc=$?
    emit "{\"part\": \"bench_$dt\", \"pass\": $([ $rc = 0 ] && echo true || echo false), \"rc\": $rc}"
    grep -E "^BENCH|FAIL|P=" "$W/logs/bench_$dt.log" | head -40
  done
fi
if want backend_test; then
  timeout 300 "$B/cuda_backend_test" >"$W/logs/backend_test.log" 2>&1
  rc=$?
  emit "{\"part\": \"backend_test\", \"pass\": $([ $rc = 0 ] && echo true || echo false), \"rc\": $rc}"
  grep -E "FAILED|PASSED|Failure" "$W/logs/backend_test.log" | head -20
fi
if want sanitize; then
  for tool in memcheck racecheck; do
    timeout 240 compute-sanitizer --tool "$tool" --error-exitcode 3 "$B/volt_op_test" --backend cuda --dtype half \
      --shapes edge --op "$OPS" >"$W/logs/sanitize_$tool.log" 2>&1
    rc=$?
    emit "{\"part\": \"sanitize_$tool\", \"pass\": $([ $rc = 0 ] && echo true || echo false), \"rc\": $rc, \"summary\": \"$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$W/logs/sanitize_$tool.log" | tail -1)\"}"
  done
fi
if want prefill; then
  for m in 20b 120b; do
    "$V" --log-level warning make-model --preset "$m" --config-only --no-tokenizer --out "$W/$m" >/dev/null || exit 1
    cp assets/demo-model/tokenizer.json "$W/$m/"
  done
  run_prefill() {  # run_prefill MODEL N DTYPE REP
    local ids
    ids=$(python3 -c "print(','.join(str((i * 7919) % 8000) for i in range($2)))")
    timeout 200 "$V" --log-level info generate --device cuda --load-format dummy --model "$W/$1" --prompt-ids "$ids" \
      --max-tokens 1 --ignore-eos --temperature 0 --max-num-batched-tokens 2048 --max-model-len 8192 \
      --kv-cache-memory-bytes 8589934592 --dtype "$3" >"$W/logs/prefill_$1_$2_$3_$4.out" 2>"$W/logs/prefill_$1_$2_$3_$4.log"
    local rc=$? line
    line=$(grep "generated tok/s" "$W/logs/prefill_$1_$2_$3_$4.log" | tail -1)
    emit "$(python3 -c "
import json, re, sys
rc, line = int(sys.argv[1]), sys.argv[2]
m = re.search(r'(\d+) prompt tokens, (\d+) generated tokens in ([0-9.]+) s', line)
p, s = (int(m.group(1)), float(m.group(3))) if m else (None, None)
print(json.dumps({'part': 'prefill_' + sys.argv[3], 'n': int(sys.argv[4]), 'dtype': sys.argv[5], 'rep': int(sys.argv[6]),
  'pass': rc == 0, 'rc': rc, 'prompt_tokens': p, 'seconds': s, 'tok_s': (p / s if p and s else None)}))" \
      "$rc" "$line" "$1" "$2" "$3" "$4")"
  }
  for rep in $(seq 1 "${VOLT_PREFILL_REPS:-3}"); do
    for n in 512 2048; do
      for dt in auto half; do run_prefill 20b "$n" "$dt" "$rep"; done
    done
  done
  for n in 512 2048; do run_prefill 120b "$n" auto 1; done
fi
tar czf "$OUT/prefill_logs.tar.gz" -C "$W" logs
