#!/usr/bin/env bash
# bench/compare/dryrun_cpu.sh BUNDLE_DIR LLAMA_BIN_DIR: the plumbing of calls A and B (run_20b.sh, serve_20b.sh)
# on this machine's CPU, with the demo model in place of the 20b checkpoint and small loads: argument spelling,
# file formats, parsing, the KL path, the table. LLAMA_BIN_DIR: llama.cpp's CPU build of the same source
# (bench/compare/README.md says how). Needs /usr/bin/python3 with numpy and torch (Debian: python3-numpy
# python3-torch python3-tqdm python3-yaml python3-sentencepiece); bench/compare/dryrun/ stands in for
# transformers, which Debian does not package (the converter's config and vocabulary reads only).
# Output: $OUT/compare_a.jsonl, compare_b.jsonl, the logs, table.md. Timings are meaningless here.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=$(cd "${1:?usage: dryrun_cpu.sh BUNDLE_DIR LLAMA_BIN_DIR}" && pwd)
LBIN=$(cd "${2:?usage: dryrun_cpu.sh BUNDLE_DIR LLAMA_BIN_DIR}" && pwd)
export OUT=${OUT:-/tmp/volt-compare-dry}
mkdir -p "$OUT" /tmp/volt-compare-dry-py
ln -sf /usr/bin/python3 /tmp/volt-compare-dry-py/python3
export PATH=/tmp/volt-compare-dry-py:$PATH PYTHONPATH=$PWD/bench/compare/dryrun
export VOLT_COMPARE_MODEL=demo VOLT_COMPARE_DEVICE=cpu VOLT_LLAMA_BIN=$LBIN
rm -f /tmp/volt-compare/demo-f16.gguf
VOLT_COMPARE_CTX="256 1024" VOLT_COMPARE_PP="128 512" VOLT_COMPARE_REPS=2 bash bench/compare/run_20b.sh "$B"
VOLT_COMPARE_LOADS="2 256 16 2;4 256 16 1" VOLT_COMPARE_TTFT="128 512" VOLT_KLD_DEMO_CHUNKS=4 \
  VOLT_COMPARE_PARTS="serve_llama serve_voltllm kld_main" bash bench/compare/serve_20b.sh "$B"
python3 bench/compare/compare.py table "$OUT/compare_a.jsonl" "$OUT/compare_b.jsonl" | tee "$OUT/table.md"
