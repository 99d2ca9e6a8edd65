#!/usr/bin/env bash
# bench/compare/run_20b.sh [BUNDLE_DIR]: voltllm beside llama.cpp on the same GPU, in one call to the GPU
# machine (under 9 minutes), on the same random-weight gpt-oss-20b-shape checkpoint (issue 16, first rows).
# Run from the repository root with out/compare (bench/compare/prepare.sh) and a bundle
# (scripts/bundle.sh cuda13; default out/bundle-cuda13) carried. Steps:
#   1. llama.cpp is built for sm_90 with CUDA 13 in the background (bench/compare/build_llama.sh, 12 jobs),
#   2. meanwhile `voltllm make-model --preset 20b --seed 20261202` writes the checkpoint (published layout:
#      MXFP4 experts, bf16 rest) with the real gpt-oss tokenizer, and llama.cpp's own
#      convert_hf_to_gguf.py --outtype f16 converts it (MXFP4 experts kept, the rest f16),
#   3. the read bandwidth of this GPU now (torch: sum over 4 GiB f32, median of 20),
#   4. llama-bench -ngl 99 -fa 1 -p 512,2048 -n 128 -r 3 (its defaults otherwise: CUDA graphs on),
#   5. voltllm generate --device cuda (CUDA graphs, the default) on the safetensors checkpoint: batch-1
#      decode of 128 tokens after a 13-token prompt, 3 repeats; a 512- and a 2048-token prompt with one
#      new token (prefill time), 3 repeats each.
# Output: $OUT/compare.jsonl (one line per figure, with the command), $OUT/compare_logs.tar.gz.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
B=$(cd "${1:-out/bundle-cuda13}" && pwd)
OUT=${OUT:-/tmp/volt-compare-out}
W=/tmp/volt-compare
mkdir -p "$OUT" "$W/logs"
J=$OUT/compare.jsonl
: >"$J"
emit() { echo "$1" | tee -a "$J"; }
t0=$(date +%s)
since() { echo $(($(date +%s) - t0)); }

(VOLT_LLAMA_JOBS=12 OUT=$W/logs bash bench/compare/build_llama.sh >"$W/logs/build_llama.out" 2>&1
 echo $? >"$W/build.rc") &
tar -C "$W" -xJf out/compare/tokenizer-gptoss.tar.xz   # -> $W/models/tokenizer.json
tar -C "$W" -xJf out/compare/llama-src.tar.xz          # the converter (its own copy)
M=$W/gpt-oss-20b-random
"$B/voltllm" --log-level warning make-model --preset 20b --seed 20261202 --tokenizer-dir "$W/models" \
  --out "$M" --threads 6 >"$W/logs/make_model.log" 2>&1
emit "{\"step\": \"make_model\", \"rc\": $?, \"at_s\": $(since), \"bytes\": $(du -sb "$M" | cut -f1)}"
python3 "$W/llama.cpp/convert_hf_to_gguf.py" "$M" --outtype f16 --outfile "$W/20b-f16.gguf" \
  >"$W/logs/convert.log" 2>&1
emit "{\"step\": \"convert_hf_to_gguf\", \"rc\": $?, \"at_s\": $(since), \"bytes\": $(stat -c %s "$W/20b-f16.gguf" 2>/dev/null || echo 0)}"
wait
emit "{\"step\": \"build_llama\", \"rc\": $(cat "$W/build.rc"), \"at_s\": $(since)}"
LB=/tmp/llama-build/build/bin

BW=$(python3 scripts/gpu/read_bw.py 2>/dev/null)
emit "{\"part\": \"bandwidth\", \"read_gbps\": ${BW:-0}, \"how\": \"torch sum over 4 GiB float32, median of 20\"}"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >"$W/logs/gpu.txt" 2>&1

cmd="llama-bench -m 20b-f16.gguf -ngl 99 -fa 1 -p 512,2048 -n 128 -r 3 -o json"
timeout 150 "$LB/llama-bench" -m "$W/20b-f16.gguf" -ngl 99 -fa 1 -p 512,2048 -n 128 -r 3 -o json \
  >"$W/llama_bench.json" 2>"$W/logs/llama_bench.log"
rc=$?
python3 - "$W/llama_bench.json" "$rc" "$cmd" <<'PY' | tee -a "$J"
import json, sys
rc, cmd = int(sys.argv[2]), sys.argv[3]
try:
    rows = json.load(open(sys.argv[1]))
except Exception as e:
    print(json.dumps({"engine": "llama.cpp", "rc": rc, "error": str(e), "command": cmd})); sys.exit()
for r in rows:
    test = f"pp{r['n_prompt']}" if r.get("n_gen", 0) == 0 else f"tg{r['n_gen']}"
    print(json.dumps({"engine": "llama.cpp", "test": test, "tok_s": r.get("avg_ts"), "stddev": r.get("stddev_ts"),
                      "samples": r.get("samples_ts"), "build": r.get("build_commit"), "command": cmd}))
PY

# voltllm: the safetensors checkpoint (MXFP4 experts, bf16 dense -> f16 at load on this GPU: --dtype auto
# is bfloat16 at cc 9.0; --dtype half is what a V100 runs). Each figure is one process; 3 repeats.
prompt_of() {  # prompt_of N: a text of about N tokens of the gpt-oss tokenizer
  python3 -c "
import sys
words = ('the harbor town was quiet in the morning and the boats came back with the tide '
         'while children ran along the old stone wall ').split()
n = int(sys.argv[1]); print(' '.join(words[i % len(words)] for i in range(n)))" "$1"
}
prompt_of 12 >"$W/p13.txt"
prompt_of 505 >"$W/p512.txt"
prompt_of 2030 >"$W/p2048.txt"
vgen() {  # vgen NAME PROMPTFILE MAXTOKENS [FLAGS]
  local name=$1 pf=$2 n=$3
  shift 3
  "$B/voltllm" --log-level info generate --device cuda --model "$M" --prompts-file "$pf" --max-tokens "$n" \
    --ignore-eos --temperature 0 --max-num-seqs 8 --max-model-len 8192 "$@" >"$W/logs/$name.out" 2>"$W/logs/$name.log"
  local rc=$?
  local line
  line=$(grep "generated tok/s" "$W/logs/$name.log" | tail -1)
  echo "$rc|$line"
}
for rep in 1 2 3; do
  for dt in auto half; do
    r=$(vgen "decode_${dt}_$rep" "$W/p13.txt" 128 --dtype "$dt")
    emit "$(python3 -c "
import json, re, sys
rc, line = sys.argv[1].split('|', 1)
m = re.search(r'(\d+) prompt tokens, (\d+) generated tokens in ([0-9.]+) s: ([0-9.]+) generated tok/s', line)
print(json.dumps({'engine': 'voltllm', 'test': 'decode_b1_128', 'dtype': sys.argv[2], 'rep': int(sys.argv[3]), 'rc': int(rc),
  'tok_s': float(m.group(4)) if m else None, 'prompt_tokens': int(m.group(1)) if m else None,
  'command': 'voltllm generate --device cuda --dtype ' + sys.argv[2] + ' --max-tokens 128 --ignore-eos --temperature 0'}))" "$r" "$dt" "$rep")"
  done
  for n in 512 2048; do
    r=$(vgen "prefill_${n}_$rep" "$W/p$n.txt" 1 --max-num-batched-tokens 2048)
    emit "$(python3 -c "
import json, re, sys
rc, line = sys.argv[1].split('|', 1)
m = re.search(r'(\d+) prompt tokens, (\d+) generated tokens in ([0-9.]+) s', line)
p, s = (int(m.group(1)), float(m.group(3))) if m else (None, None)
print(json.dumps({'engine': 'voltllm', 'test': 'prefill_' + sys.argv[2], 'rep': int(sys.argv[3]), 'rc': int(rc), 'prompt_tokens': p,
  'seconds': s, 'tok_s': (p / s if p and s else None),
  'command': 'voltllm generate --device cuda --max-tokens 1 --max-num-batched-tokens 2048 (time includes the one decode step)'}))" "$r" "$n" "$rep")"
  done
done
emit "{\"step\": \"done\", \"at_s\": $(since)}"
cp "$W/llama_bench.json" "$W/logs/" 2>/dev/null
tail -5 "$W/logs/convert.log" >"$W/logs/convert_tail.log" 2>/dev/null
tar -C "$W" -czf "$OUT/compare_logs.tar.gz" logs
