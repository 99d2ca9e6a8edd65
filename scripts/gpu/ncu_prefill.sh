#!/usr/bin/env bash
# scripts/gpu/ncu_prefill.sh: one 512-token prefill step of the 20b shape (dummy weights, --enforce-eager)
# under ncu (gpu__time_duration per kernel, clocks and caches as they are), summed by kernel name. Run on
# the GPU machine from the repository root with out/bundle-cuda13 unpacked; writes $OUT/ncu.csv.
set -u
B=out/bundle-cuda13
W=$(mktemp -d)
$B/voltllm --log-level warning make-model --preset 20b --config-only --no-tokenizer --out $W/20b >/dev/null
cp assets/demo-model/tokenizer.json $W/20b/
ids=$(python3 -c "print(','.join(str((i * 7919) % 8000) for i in range(512)))")
export CUDA_CACHE_PATH=$W/jit
timeout 300 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
  $B/voltllm --log-level warning generate --device cuda --load-format dummy --model $W/20b --prompt-ids "$ids" \
  --max-tokens 1 --ignore-eos --temperature 0 --max-num-batched-tokens 2048 --max-model-len 8192 \
  --kv-cache-memory-bytes 8589934592 --enforce-eager > $OUT/ncu.csv 2> $OUT/ncu.err
echo ncu rc=$?
python3 - $OUT/ncu.csv <<'PY'
import csv, sys, collections, re
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr = rows[0]; data = rows[1:]
ki = hdr.index("Kernel Name"); vi = hdr.index("Metric Value"); ui = hdr.index("Metric Unit")
tot = collections.Counter(); cnt = collections.Counter()
for r in data:
    try: v = float(r[vi].replace(",", ""))
    except: continue
    unit = r[ui]  # ncu writes ns / us / ms (older versions nsecond / usecond / msecond)
    v *= {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}[unit]
    name = re.sub(r"\(.*", "", r[ki])[:70]
    tot[name] += v; cnt[name] += 1
all_us = sum(tot.values())
print(f"total {all_us:.0f} us over {sum(cnt.values())} kernels")
for n, v in tot.most_common(25): print(f"{v:9.1f} us {100*v/all_us:5.1f}% x{cnt[n]:4d} {n}")
PY
