#!/usr/bin/env bash
# scripts/gpu/multi_gpu_dryrun_cpu.sh [BIN_DIR]: the plumbing of scripts/gpu/multi_gpu.sh on this machine's
# CPU (a CPU build's build/tools by default): every part that has a --device cpu twin (ranks as threads, and
# as TCP processes for procs and fault), a tiny-chat shape with 4 KV heads for decode / ttft, short runs.
# No GPU number means anything here; commbench skips. Output: $OUT/multi_gpu.json (default
# /tmp/volt-multi-gpu-dry).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build/tools}
OUT=${OUT:-/tmp/volt-multi-gpu-dry} VOLT_MG_DEVICE=cpu VOLT_MG_GPUS=${VOLT_MG_GPUS:-2} \
  VOLT_MG_SHAPE='--preset tiny-chat --kv-heads 4' VOLT_MG_TTFT_TOKENS=256 VOLT_MG_TOKENS=16 VOLT_MG_DTYPE=float \
  bash scripts/gpu/multi_gpu.sh "$B"
