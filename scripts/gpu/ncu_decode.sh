#!/usr/bin/env bash
# scripts/gpu/ncu_decode.sh BUNDLE_DIR [SHAPE]: one batch-1 decode step of the 20b (or 120b) shape, dummy
# weights, --enforce-eager, under ncu on the GPU machine (run from the repository root). Two passes:
#   (--max-num-seqs ${VOLT_NCU_SEQS:-1}: 1 is the single-stream path, which keeps the expert GEMV)
#   1. every kernel of the run with gpu__time_duration.sum and dram__bytes_read.sum (clocks and caches as
#      they are: --clock-control none --cache-control none); the kernels are split into steps at each
#      embedding launch and the 3rd decode step is summed by kernel name and grid (so the lm_head GEMV is
#      its own row): $OUT/ncu_decode.txt (us, share, GB/s of DRAM reads per kernel)
#   2. ncu --set full on one launch of each expert kernel and of the q|k|v GEMV (VOLT_NCU_FULL=0 skips):
#      $OUT/ncu_full.txt (stall reasons, issue slots, achieved occupancy)
set -u
B=$(cd "${1:?usage: scripts/gpu/ncu_decode.sh BUNDLE_DIR [20b|120b]}" && pwd)
SHAPE=${2:-20b}
OUT=${OUT:-/tmp/volt-ncu-decode}
mkdir -p "$OUT"
W=$(mktemp -d)
"$B/voltllm" --log-level warning make-model --preset "$SHAPE" --config-only --no-tokenizer --out "$W/m" >/dev/null
cp assets/demo-model/tokenizer.json "$W/m/"
export CUDA_CACHE_PATH=$W/jit
gen=("$B/voltllm" --log-level warning generate --device cuda --load-format dummy --model "$W/m"
  --prompt-ids 1,2,3,4,5,6,7,8,9,10 --max-tokens 5 --ignore-eos --temperature 0 --max-num-batched-tokens 256
  --max-model-len 4096 --kv-cache-memory-bytes 1073741824 --enforce-eager --max-num-seqs "${VOLT_NCU_SEQS:-1}")
timeout 300 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum \
  --csv "${gen[@]}" >"$W/ncu.csv" 2>"$OUT/ncu_decode.err"
echo "ncu pass 1 rc=$?"
python3 - "$W/ncu.csv" >"$OUT/ncu_decode.txt" <<'PY'
import csv, sys, collections, re
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
hdr, data = rows[0], rows[1:]
col = {n: hdr.index(n) for n in ("ID", "Kernel Name", "Grid Size", "Block Size", "Metric Name", "Metric Unit", "Metric Value")}
scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
         "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9, "B": 1.0}
k = collections.OrderedDict()
for r in data:
    i = int(r[col["ID"]])
    d = k.setdefault(i, {"name": re.sub(r"\(.*", "", r[col["Kernel Name"]]).replace("void ", "")[:60],
                         "grid": r[col["Grid Size"]], "block": r[col["Block Size"]]})
    try: v = float(r[col["Metric Value"]].replace(",", ""))
    except ValueError: continue
    u = r[col["Metric Unit"]]
    if u not in scale: print("unknown unit", u); continue
    d["us" if "duration" in r[col["Metric Name"]] else "bytes"] = v * scale[u]
steps, cur = [], []
for d in k.values():
    if "embedding" in d["name"] and cur: steps.append(cur); cur = []
    cur.append(d)
steps.append(cur)
print(f"{len(k)} kernels, {len(steps)} steps (prefill first); sizes {[len(s) for s in steps]}")
step = steps[3] if len(steps) > 3 else steps[-1]
tot = collections.OrderedDict()
for d in step:
    key = (d["name"], d["grid"], d["block"])
    t = tot.setdefault(key, [0, 0.0, 0.0]); t[0] += 1; t[1] += d.get("us", 0); t[2] += d.get("bytes", 0)
all_us = sum(t[1] for t in tot.values()); all_b = sum(t[2] for t in tot.values())
print(f"decode step: {all_us:.1f} us in {len(step)} launches, {all_b/1e9:.3f} GB read from DRAM, {all_b/all_us/1e3:.0f} GB/s")
print(f"{'us':>8} {'share':>6} {'n':>4} {'us each':>8} {'GB/s':>6} {'MB each':>8}  kernel grid block")
for (n, g, b), (c, us, by) in sorted(tot.items(), key=lambda kv: -kv[1][1]):
    print(f"{us:8.1f} {100*us/all_us:5.1f}% {c:4d} {us/c:8.2f} {by/us/1e3:6.0f} {by/c/1e6:8.2f}  {n} {g} {b}")
PY
cat "$OUT/ncu_decode.txt"
if [ "${VOLT_NCU_FULL:-1}" = 1 ]; then
  for kname in gate_up_swiglu down_residual gemv; do
    timeout 200 ncu --clock-control none --cache-control none --set full -k "regex:$kname" --launch-skip 30 \
      --launch-count 1 "${gen[@]}" >>"$OUT/ncu_full.txt" 2>&1
    echo "ncu full $kname rc=$?"
  done
  grep -E "^  [a-z_]+.*\(|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Issue Slots Busy|Registers Per|Compute \(SM\)|Theoretical Occupancy|Block Limit|Warp Cycles Per Issued|One or More Eligible|No Eligible|Stall|L1/TEX Hit|L2 Hit|Executed Ipc" "$OUT/ncu_full.txt" | head -150
fi
