#!/usr/bin/env bash
# scripts/v100-check.sh [OUTDIR]: what a V100 (or any NVIDIA GPU) owner runs from the repository root to
# give us the same JSON as our GPU machine's scripts: builds the `volta` preset (Debian's CUDA 11.8 or any
# CUDA 11.x/12.x on PATH as nvcc: sm_70 SASS, scripts/setup-cuda.sh installs it), bundles it, then runs
# scripts/gpu/check.sh (every device check: the probe, cuda_backend_test, the op harness, the sanitizers,
# golden logits, perplexity) and scripts/gpu/bench.sh (the op benchmarks beside a read-bandwidth reference).
# Output under OUTDIR (default out/v100-check): check/summary.json, check/check.log, bench/bench.jsonl,
# bench/summary.json, bench/bench.log, nvidia-smi.txt. Send us the whole OUTDIR (tar czf).
# Needs: cmake >= 3.24, ninja, g++-11 (nvcc's host compiler), python3 with numpy (torch + transformers
# only for the trace part, which skips without them), compute-sanitizer for the sanitizer parts.
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(mkdir -p "${1:-out/v100-check}" && cd "${1:-out/v100-check}" && pwd)
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || echo "v100-check: nvidia-smi failed (no driver?)"
nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.max.memory --format=csv >>"$out/nvidia-smi.txt" 2>&1
[ -f build-volta/build.ninja ] || cmake --preset volta || exit 1
scripts/bundle.sh volta out/bundle-volta || exit 1
rc=0
OUT=$out/check scripts/gpu/check.sh out/bundle-volta || rc=1
OUT=$out/bench scripts/gpu/bench.sh out/bundle-volta || rc=1
echo "v100-check: results in $out (check/summary.json, bench/bench.jsonl); exit $rc"
exit $rc
