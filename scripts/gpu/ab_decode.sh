#!/usr/bin/env bash
# scripts/gpu/ab_decode.sh OLD_BUNDLE NEW_BUNDLE: a kernel change judged on the GPU machine in one call (run
# from the repository root; bundles made here by scripts/bundle.sh). Parts, each a line of $OUT/ab.txt:
#   same_*      greedy token ids of both bundles, byte for byte: the demo model (17 prompts x 64 tokens) under
#               --dtype half, float and bfloat16, and the 20b shape with dummy weights (4 prompts x 48
#               tokens). A change meant to keep the arithmetic bitwise must print SAME everywhere; one that
#               changes rounding prints DIFFERENT and must then pass scripts/gpu/check.sh (tolerances).
#   decode_*    batch-1 and batch-32 decode tok/s of the 20b shape (256 tokens, CUDA graphs, --max-num-seqs the
#               batch: 1 takes the expert GEMV, 32 the tensor-core expert kernel) and batch-1 of
#               the 120b shape, old then new, beside the read bandwidth measured in the same call (torch).
#   ncu         scripts/gpu/ncu_decode.sh of each bundle (20b): $OUT/ncu_old.txt, $OUT/ncu_new.txt
#               (per-kernel time and DRAM bytes of one decode step). VOLT_AB_NCU=0 skips.
# About 3 minutes on an H200. Exit 0 when every part ran (SAME or not is for the reader to judge).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OLD=$(cd "${1:?usage: scripts/gpu/ab_decode.sh OLD_BUNDLE NEW_BUNDLE}" && pwd)
NEW=$(cd "${2:?usage: scripts/gpu/ab_decode.sh OLD_BUNDLE NEW_BUNDLE}" && pwd)
OUT=${OUT:-/tmp/volt-ab-out}
W=$(mktemp -d /tmp/volt-ab.XXXXXX)
mkdir -p "$OUT"
R=$OUT/ab.txt
: >"$R"
export CUDA_CACHE_PATH=$W/jit
# shellcheck source=scripts/gpu/lib.sh
. scripts/gpu/lib.sh
volt_find_cublas ab
say() { echo "$1" | tee -a "$R"; }
say "old: $(sed -n 's/^commit: //p' "$OLD/MANIFEST") new: $(sed -n 's/^commit: //p' "$NEW/MANIFEST")"
rc=0

for i in $(seq 1 17); do echo "Story $i: the lighthouse keeper counted the ships at dawn and"; done >"$W/p17.txt"
head -4 "$W/p17.txt" >"$W/p4.txt"
for m in 20b 120b; do
  "$NEW/voltllm" --log-level warning make-model --preset "$m" --config-only --no-tokenizer --out "$W/$m" >/dev/null || exit 1
  cp assets/demo-model/tokenizer.json "$W/$m/"
done

# ---- greedy ids, byte for byte ----
same() {  # same NAME ARGS...: run both bundles' generate with ARGS, compare stdout
  local name=$1 b
  shift
  for b in OLD NEW; do
    timeout 150 "${!b}/voltllm" --log-level warning generate --device cuda --temperature 0 --ignore-eos "$@" \
      >"$W/$name.$b.out" 2>"$W/$name.$b.log" || { say "$name: $b failed (rc $?)"; tail -3 "$W/$name.$b.log" | tee -a "$R"; rc=1; return; }
  done
  if cmp -s "$W/$name.OLD.out" "$W/$name.NEW.out"; then say "$name: SAME"; else
    say "$name: DIFFERENT"
    diff "$W/$name.OLD.out" "$W/$name.NEW.out" | head -6 | tee -a "$R"
  fi
}
for dt in half float bfloat16; do
  same "same_demo_$dt" --dtype "$dt" --model assets/demo-model --prompts-file "$W/p17.txt" --max-tokens 64
done
same same_20b_dummy --load-format dummy --model "$W/20b" --prompts-file "$W/p4.txt" --max-tokens 48 \
  --kv-cache-memory-bytes 4294967296

# ---- decode tok/s, old and new, beside the read bandwidth ----
BW=$(python3 scripts/gpu/read_bw.py 2>/dev/null)
say "read bandwidth (torch, 4 GiB float32, median of 20): ${BW:-?} GB/s"
decode() {  # decode NAME MODEL BATCH
  local name=$1 m=$2 n=$3 b i line
  : >"$W/prompts_$n.txt"
  for i in $(seq 1 "$n"); do echo "The harbor town number $i was quiet in the morning." >>"$W/prompts_$n.txt"; done
  for b in OLD NEW; do
    line=$(timeout 150 "${!b}/voltllm" --log-level info generate --device cuda --load-format dummy --model "$W/$m" \
      --prompts-file "$W/prompts_$n.txt" --max-tokens 256 --ignore-eos --temperature 0 --max-num-seqs "$n" \
      --kv-cache-memory-bytes 8589934592 2>&1 >/dev/null | grep "generated tok/s" | tail -1)
    say "$name $b: ${line:-failed}"
    [ -n "$line" ] || rc=1
  done
}
decode decode_20b_b1 20b 1
decode decode_20b_b32 20b 32
decode decode_120b_b1 120b 1

# ---- one decode step by kernel, both bundles ----
if [ "${VOLT_AB_NCU:-1}" = 1 ]; then
  for b in OLD NEW; do
    lower=$(echo "$b" | tr 'A-Z' 'a-z')
    VOLT_NCU_FULL=0 OUT=$W/ncu_$lower timeout 150 scripts/gpu/ncu_decode.sh "${!b}" 20b >/dev/null 2>&1
    cp "$W/ncu_$lower/ncu_decode.txt" "$OUT/ncu_$lower.txt" 2>/dev/null || { say "ncu $b: failed"; rc=1; }
    grep "decode step" "$OUT/ncu_$lower.txt" 2>/dev/null | head -1 | sed "s/^/ncu $b: /" | tee -a "$R"
  done
fi
exit $rc
