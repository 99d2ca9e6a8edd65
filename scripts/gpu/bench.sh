#!/usr/bin/env bash
# scripts/gpu/bench.sh BUNDLE_DIR: the op benchmarks of issue 14 on the GPU machine, from the repository
# root with a bundle made here by scripts/bundle.sh (volta-ptx: the Volta kernels JIT-compiled, a smoke
# check off sm_70; cuda13: sm_90). Runs volt_op_test --bench (tests/kernels/cases_bench.cc and the
# model-shape sample cases): every line is checked against the double reference where that is quick, and
# timed back to back over copies of its data (working set >= 4x L2) beside a read-bandwidth reference
# measured in the same process (a 1 GiB 128-bit-load pass). Runs:
#   fast    --dtype half, the dispatch table's choice (issue 14's kernels)
#   basic   the same ops with --cuda-kernels basic (issue 13's kernels): the speedup, and the isolation of
#           a failing fast kernel
#   sample  the sample op at 1 and 64 rows of 201,088 (model shapes)
# Output: $OUT/bench.jsonl (one JSON object per line: {"run","preset","bench":op,"shape",...,"gbps",
# "read_gbps","fraction",...}), $OUT/bench.log, $OUT/summary.json (each run: rc, seconds). Under 6 min.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=$(cd "${1:?usage: scripts/gpu/bench.sh BUNDLE_DIR}" && pwd)
OUT=${OUT:-/tmp/volt-gpu-bench-out}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/volt-gpu-bench.XXXXXX)
exec > >(tee "$OUT/bench.log") 2>&1
export CUDA_CACHE_PATH=$W/jit-cache
preset=$(sed -n 's/^preset: //p' "$B/MANIFEST" 2>/dev/null)
preset=${preset:-unknown}
T=$B/volt_op_test
echo "bench: bundle $B (preset $preset), work $W"
head -4 "$B/MANIFEST" 2>/dev/null
[ -x "$T" ] || { echo "bench: no volt_op_test in the bundle"; exit 1; }
"$B/voltllm" cuda-info | tee "$W/cuda_info.json"
: >"$OUT/bench.jsonl"
runs=()

# run NAME LIMIT_S ARGS...: one volt_op_test run; its JSON lines tagged with the run and the preset.
run() {
  local name=$1 limit=$2
  shift 2
  local t0 rc
  t0=$(date +%s)
  echo "bench: run $name: volt_op_test $*"
  timeout "$limit" "$T" --backend cuda "$@" >"$W/$name.log" 2>&1
  rc=$?
  grep -v '^{' "$W/$name.log" | grep -E 'BENCH|FAIL|volt_op_test:' | head -80
  grep '^{"bench"' "$W/$name.log" |
    sed "s/^{\"bench\"/{\"run\":\"$name\",\"preset\":\"$preset\",\"bench\"/" >>"$OUT/bench.jsonl"
  cp "$W/$name.log" "$OUT/$name.log"
  runs+=("{\"run\":\"$name\",\"rc\":$rc,\"seconds\":$(($(date +%s) - t0))}")
  echo "bench: run $name rc $rc in $(($(date +%s) - t0)) s"
}

run fast 170 --dtype half --kv f16 --shapes bench --bench --bench-iters 10
run basic 150 --dtype half --kv f16 --shapes bench --bench --bench-iters 5 --cuda-kernels basic \
  --op experts_residual,linear,final_logits,attention
run sample 40 --dtype half --shapes model --bench --bench-iters 10 --op sample

{
  printf '{"preset":"%s","bundle":"%s","runs":[' "$preset" "$B"
  (IFS=,; printf '%s' "${runs[*]}")
  printf '],"lines":%s}\n' "$(wc -l <"$OUT/bench.jsonl")"
} >"$OUT/summary.json"
cat "$OUT/summary.json"
# The table: op, shape, GB/s, fraction of the read bandwidth.
python3 - "$OUT/bench.jsonl" <<'PY' || true
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    if j.get("bench") == "read_bandwidth":
        print(f'{j["run"]:6} read bandwidth {j["gbps"]:.0f} GB/s')
        continue
    print(f'{j["run"]:6} {j["bench"]:17} {j["shape"][:70]:70} {j["median_us"]:10.1f} us {j["gbps"]:7.0f} GB/s '
          f'{j["fraction"]:.3f} {"PASS" if j["pass"] else "FAIL"}')
PY
grep -q '"rc":[1-9]' "$OUT/summary.json" && exit 1
exit 0
