#!/usr/bin/env bash
# scripts/gpu/offload.sh BUNDLE_DIR: CPU expert offload on the GPU machine (issue 22), run from the
# repository root with a bundle from `scripts/bundle.sh cuda13 out/bundle-cuda13` (or volta-ptx); under 6
# minutes. Needs python3 (no numpy), curl, nvidia-smi. One JSON line per part in $OUT/offload.jsonl, logs
# in $OUT/offload_logs.tar.gz:
#   logits_*    voltllm logits --device cuda on the demo model (assets/demo-model, MXFP4 experts) with
#               --cpu-offload-experts 1 / all / 0,2 vs without: --dtype float (both sides f32; pass: max
#               |diff| <= 1e-3 x max |logit|, the GPU's and the CPU kernel's f32 summation orders) and
#               --dtype auto (informational: the GPU's half-precision experts vs the CPU's f32 ones)
#   serve_120b  the 120b shape, dummy weights, --gpu-memory-utilization U (0.12 of an H200, 0.21 of an H100: ~16.9 GB; the
#               non-offloaded model does not fit) --cpu-offload-gb 50 (the experts of the last 32 layers):
#               a chat request must answer 200 with finish_reason stop/length (a NaN would end it with
#               an error), and the process's GPU memory (nvidia-smi, every 0.2 s) stay <= U x total
#   decode_*    voltllm generate --device cuda on the 20b shape, dummy weights, batch 1, 128 greedy tokens
#               with the experts of 0, 4, 12, 24 layers offloaded: tok/s, the host's read bandwidth the
#               process measured at start, and the fraction of it the offloaded experts' bytes per token x
#               tok/s are (the dummy model's layers share one host copy of the experts: 423 MB, far past
#               the CPU caches, so every token still reads from memory)
#   prefill_*   voltllm generate --device cuda on the 20b shape, dummy weights: one prompt of 2,048 fixed
#               ids, --max-tokens 1, --max-num-batched-tokens 2048, with the experts of 0, 4, 12, 24 layers
#               offloaded: prompt tok/s = 2048 / the generate call's time (one step: the prompt rows of the
#               offloaded layers run on the GPU from the staging, their experts uploaded each layer), and
#               the runner's own totals (rows, experts and GB uploaded). The dummy model's layers share one
#               host copy of the experts, but every layer uploads its experts again (nothing is reused
#               across layers), so the copies are the real model's.
#   llama_*     when a llama-bench binary (${LLAMA_BIN:-/tmp/llama-build/bin, else
#               /tmp/llama-build/build/bin}/llama-bench) and a GGUF (${VOLT_GGUF:-/tmp/volt-compare/*.gguf};
#               bench/compare/run_20b.sh leaves both) exist: llama-bench -ngl 99 -fa 1 -ncmoe 0,4,12,24 -p 512
#               -n 128 -r 2 -o jsonl (llama.cpp's --n-cpu-moe keeps the experts of the FIRST N layers on the
#               CPU, ours the last N: the same shapes), one row per N and test beside ours; skipped with a
#               line saying so otherwise.
# VOLT_OFFLOAD_PARTS="logits serve_120b decode prefill llama" (the default: all) picks parts. All parts: about
# 5.5 minutes on the H200 machine (llama about 2 of them); "prefill llama" alone about 3.
set -uo pipefail
cd "$(dirname "$0")/../.."
PARTS=" ${VOLT_OFFLOAD_PARTS:-logits serve_120b decode prefill llama} "
want() { [[ $PARTS == *" $1 "* ]]; }
B=$(cd "${1:?usage: scripts/gpu/offload.sh BUNDLE_DIR}" && pwd)
V=$B/voltllm
OUT=${OUT:-/tmp/volt-gpu-offload-out}
W=$(mktemp -d /tmp/volt-gpu-offload.XXXXXX)
mkdir -p "$OUT" "$W/logs"
S=$OUT/offload.jsonl
: >"$S"
export PYTHONUNBUFFERED=1 CUDA_CACHE_PATH=$W/jit-cache
echo "offload: bundle $B ($(sed -n 's/^preset: //p' "$B/MANIFEST" 2>/dev/null))"
# shellcheck source=scripts/gpu/lib.sh
. scripts/gpu/lib.sh
volt_find_cublas
emit() { echo "$1" | tee -a "$S"; }
nproc_host=$(nproc)
TOTAL_MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)

# ---- (a) logits with offload vs without (demo model) ----
cat >"$W/cmp.py" <<'PY'
import json, struct, sys
def load(path):  # a float32 .npy (voltllm logits writes little-endian '<f4', C order)
    b = open(path, "rb").read()
    n = struct.unpack("<H", b[8:10])[0]
    hdr = b[10:10 + n].decode()
    assert "'<f4'" in hdr and "False" in hdr, hdr
    data = b[10 + n:]
    return struct.unpack("<%df" % (len(data) // 4), data)
a, r = load(sys.argv[1]), load(sys.argv[2])
scale = max(abs(v) for v in r)
worst = max(abs(x - y) for x, y in zip(a, r))
bad = sum(1 for v in a if v != v or v in (float("inf"), float("-inf")))
print(json.dumps({"max_abs_diff": worst, "max_abs_logit": scale, "rel": worst / scale if scale else None,
                  "non_finite": bad}))
PY
if want logits; then
  ids=$(python3 -c 'print(",".join(str((i * 37 + 11) % 8000) for i in range(48)))')
  for dt in float auto; do
    timeout 60 "$V" logits --device cuda --dtype "$dt" --model assets/demo-model --prompt-ids "$ids" \
      --out "$W/ref_$dt.npy" >"$W/logs/logits_ref_$dt.log" 2>&1 || { emit "{\"part\": \"logits_ref_$dt\", \"pass\": false}"; continue; }
    for spec in 1 all 0,2; do
      name="logits_${dt}_${spec//,/_}"
      timeout 60 "$V" logits --device cuda --dtype "$dt" --model assets/demo-model --prompt-ids "$ids" \
        --cpu-offload-experts "$spec" --out "$W/$name.npy" >"$W/logs/$name.log" 2>&1
      rc=$?
      r=$([ $rc = 0 ] && python3 "$W/cmp.py" "$W/$name.npy" "$W/ref_$dt.npy" || echo '{}')
      emit "$(python3 -c "
import json; r=json.loads('''$r'''); dt='$dt'
ok = $rc == 0 and r.get('non_finite') == 0 and (dt != 'float' or (r.get('rel') is not None and r['rel'] <= 1e-3))
d = {'part': '$name', 'pass': ok, 'rc': $rc, 'offload': '$spec', 'dtype': dt}
d.update(r)
print(json.dumps(d))")"
    done
  done
fi

# ---- model shapes, config only; the demo tokenizer (its ids are valid gpt-oss ids) ----
for m in 20b 120b; do
  "$V" --log-level warning make-model --preset "$m" --config-only --no-tokenizer --out "$W/$m" >/dev/null || exit 1
  cp assets/demo-model/tokenizer.json "$W/$m/"
done

# ---- (b) the 120b shape under about a 16 GB card's memory, most experts on the host ----
# U: the H200's 0.12 (0.12 x 143,771 = 17,252.5 MiB) as this GPU's share, rounded down (0.21 of an H100 80GB:
# 17,127 MiB), so the cap is the same card size on either machine. 17,253, not 17,252: the truncated product
# gave 0.11 on the H200 itself (17,252 / 143,771 = 0.11999...).
U120=$(volt_card_share 17253 "$TOTAL_MIB")
if want serve_120b; then
  PORT=$((8100 + RANDOM % 800))
  "$V" serve "$W/120b" --device cuda --load-format dummy --gpu-memory-utilization "$U120" --cpu-offload-gb 50 \
    --max-model-len 4096 --max-num-seqs 4 --max-num-batched-tokens 512 --port "$PORT" >"$W/logs/serve_120b.log" 2>&1 &
  PID=$!
  (while kill -0 "$PID" 2>/dev/null; do
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
      awk -F', ' -v p="$PID" '$1 == p {print $2}'
    sleep 0.2
  done) >"$W/logs/serve_120b.mem" &
  up=0
  for i in $(seq 1 750); do
    curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && { up=1; break; }
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.2
  done
  if [ $up = 1 ]; then
    t0=$(date +%s.%N)
    curl -s -m 90 "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
      -d '{"model": "120b", "messages": [{"role": "user", "content": "Tell me about the old harbor town."}], "max_tokens": 32, "temperature": 0}' \
      >"$W/logs/serve_120b.json"
    t1=$(date +%s.%N)
  fi
  kill -TERM "$PID" 2>/dev/null
  wait "$PID" 2>/dev/null
  src=$?
  sleep 0.3
  peak=$(sort -n "$W/logs/serve_120b.mem" 2>/dev/null | tail -1)
  emit "$(python3 -c "
import json
try: r = json.load(open('$W/logs/serve_120b.json'))
except Exception: r = {}
ch = (r.get('choices') or [{}])[0]
fin = ch.get('finish_reason'); usage = r.get('usage', {})
peak = int('${peak:-0}' or 0); budget = $U120 * $TOTAL_MIB
ok = $up == 1 and fin in ('stop', 'length') and 0 < peak <= budget
print(json.dumps({'part': 'serve_120b', 'pass': ok, 'started': $up == 1, 'finish_reason': fin,
  'completion_tokens': usage.get('completion_tokens'), 'request_s': round(${t1:-0} - ${t0:-0}, 2),
  'peak_mib': peak, 'budget_mib': round(budget), 'utilization': $U120, 'server_exit': $src, 'error': r.get('error')}))")"
  grep -h "offload:\|memory:\|KV blocks\|max-model-len" "$W/logs/serve_120b.log" | head -8
fi

# ---- (c) decode tok/s vs offloaded layers, 20b shape ----
if want decode; then
  echo "The harbor town was quiet in the morning." >"$W/prompt.txt"
  for n in 0 4 12 24; do
    name=decode_20b_off$n
    t0=$(date +%s.%N)
    timeout 120 "$V" --log-level info generate --device cuda --load-format dummy --model "$W/20b" \
      --prompts-file "$W/prompt.txt" --max-tokens 128 --ignore-eos --temperature 0 --max-num-seqs 1 \
      --kv-cache-memory-bytes 4294967296 --cpu-offload-experts $n >"$W/logs/$name.out" 2>"$W/logs/$name.log"
    rc=$?
    t1=$(date +%s.%N)
    line=$(grep "generated tok/s" "$W/logs/$name.log" | tail -1)
    tps=$(echo "$line" | sed -n 's/.*: \([0-9.]*\) generated tok\/s.*/\1/p')
    bw=$(sed -n 's/.*host read bandwidth \([0-9.]*\) GB\/s.*/\1/p' "$W/logs/$name.log" | head -1)
    cpu=$(grep -h "experts calls, rows on the CPU" "$W/logs/$name.log" | tail -1)
    emit "$(python3 -c "
import json
tps = float('${tps:-0}' or 0); bw = float('${bw:-0}' or 0); n = $n
per_expert = 2880 * 5760 * 17 / 32 + 2880 * 2880 * 17 / 32 + (5760 + 2880) * 2  # codes + scales + bf16 bias
off_bytes = n * 4 * per_expert  # per token at batch 1: 4 experts in each offloaded layer
print(json.dumps({'part': '$name', 'pass': $rc == 0 and tps > 0, 'rc': $rc, 'offloaded_layers': n,
  'tok_s': tps, 'host_read_gbps': bw or None, 'host_cores': $nproc_host,
  'offloaded_bytes_per_token': int(off_bytes),
  'fraction_of_host_bw': (tps * off_bytes / 1e9 / bw) if (bw and n) else None,
  'wall_s': round($t1 - $t0, 1), 'line': '''$line''', 'cpu_stats': '''$cpu'''}))")"
  done
fi

# ---- (d) prompt (prefill) tok/s vs offloaded layers, 20b shape ----
if want prefill; then
  ids=$(python3 -c 'print(",".join(str((i * 7919) % 8000) for i in range(2048)))')
  for n in 0 4 12 24; do
    name=prefill_20b_off$n
    timeout 150 "$V" --log-level info generate --device cuda --load-format dummy --model "$W/20b" \
      --prompt-ids "$ids" --max-tokens 1 --ignore-eos --temperature 0 --max-num-seqs 1 \
      --max-num-batched-tokens 2048 --max-model-len 4096 --kv-cache-memory-bytes 4294967296 \
      --cpu-offload-experts $n >"$W/logs/$name.out" 2>"$W/logs/$name.log"
    rc=$?
    line=$(grep "generated tok/s" "$W/logs/$name.log" | tail -1)
    path=$(grep -h "offload: prompt rows of offloaded layers" "$W/logs/$name.log" | head -1)
    cpu=$(grep -h "experts calls, rows on the CPU" "$W/logs/$name.log" | tail -1)
    emit "$(python3 -c "
import json, re, sys
rc, line, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
m = re.search(r'(\d+) prompt tokens, (\d+) generated tokens in ([0-9.]+) s', line)
p, s = (int(m.group(1)), float(m.group(3))) if m else (None, None)
u = re.search(r'prompt rows on the device in (\d+) calls \((\d+) rows, (\d+) experts, ([0-9.]+) GB uploaded\)', sys.argv[5])
print(json.dumps({'part': 'prefill_20b_off%d' % n, 'pass': rc == 0 and bool(p) and (n == 0 or bool(u)), 'rc': rc,
  'offloaded_layers': n, 'prompt_tokens': p, 'seconds': s, 'prompt_tok_s': round(p / s, 1) if p and s else None,
  'staged_calls': int(u.group(1)) if u else None, 'staged_experts': int(u.group(3)) if u else None,
  'uploaded_gb': float(u.group(4)) if u else None, 'upload_gbps': round(float(u.group(4)) / s, 1) if u and s else None,
  'prompt_path': sys.argv[4]}))" "$rc" "$line" "$n" "$path" "$cpu")"
  done
fi

# ---- (e) llama.cpp's llama-bench with --n-cpu-moe, beside (c) and (d) ----
if want llama; then
  LBIN=${LLAMA_BIN:-}
  if [ -z "$LBIN" ]; then
    for d in /tmp/llama-build/bin /tmp/llama-build/build/bin; do [ -x "$d/llama-bench" ] && { LBIN=$d; break; }; done
  fi
  GGUF=${VOLT_GGUF:-}
  if [ -z "$GGUF" ]; then
    for g in /tmp/volt-compare/*.gguf; do [[ -f $g && $g != *demo* ]] && { GGUF=$g; break; }; done
  fi
  if [ -z "$LBIN" ] || [ ! -x "$LBIN/llama-bench" ] || [ -z "$GGUF" ] || [ ! -f "$GGUF" ]; then
    emit "{\"part\": \"llama\", \"skipped\": \"no llama-bench (LLAMA_BIN=${LBIN:-unset}) or no GGUF (VOLT_GGUF=${GGUF:-unset}): bench/compare/run_20b.sh leaves both\"}"
  else
    timeout 200 "$LBIN/llama-bench" -m "$GGUF" -ngl 99 -fa 1 -ncmoe 0,4,12,24 -p 512 -n 128 -r 2 -o jsonl \
      >"$W/logs/llama_bench.jsonl" 2>"$W/logs/llama_bench.log"
    rc=$?
    python3 - "$W/logs/llama_bench.jsonl" "$rc" "$GGUF" <<'PY' | while read -r l; do emit "$l"; done
import json, sys
rows = []
for l in open(sys.argv[1]):
    try: rows.append(json.loads(l))
    except ValueError: pass
for r in rows:
    test = 'pp%d' % r['n_prompt'] if r.get('n_prompt') else 'tg%d' % r.get('n_gen', 0)
    print(json.dumps({'part': 'llama_%s_ncmoe%d' % (test, r.get('n_cpu_moe', 0)), 'pass': True, 'engine': 'llama.cpp',
                      'n_cpu_moe': r.get('n_cpu_moe'), 'test': test, 'tok_s': round(r.get('avg_ts', 0), 1),
                      'stddev': round(r.get('stddev_ts', 0), 1), 'build': r.get('build_commit'), 'model': sys.argv[3]}))
if not rows:
    print(json.dumps({'part': 'llama', 'pass': False, 'rc': int(sys.argv[2]), 'error': 'no rows (llama_bench.log)'}))
PY
  fi
fi

# ---- side by side: tok/s vs offloaded layers ----
python3 - "$S" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {r['part']: r for r in rows}
print('offloaded layers | voltllm prompt tok/s (2048) | voltllm decode tok/s (b1) | llama.cpp pp512 | llama.cpp tg128')
for n in (0, 4, 12, 24):
    f = lambda k, key: (by.get(k) or {}).get(key)
    print('%16d | %27s | %25s | %15s | %15s' % (n, f('prefill_20b_off%d' % n, 'prompt_tok_s'), f('decode_20b_off%d' % n, 'tok_s'),
          f('llama_pp512_ncmoe%d' % n, 'tok_s'), f('llama_tg128_ncmoe%d' % n, 'tok_s')))
PY

tar czf "$OUT/offload_logs.tar.gz" -C "$W" logs
python3 -c "
import json, sys
rows = [json.loads(l) for l in open('$S')]
bad = [r['part'] for r in rows if r.get('pass') is False and not r['part'].startswith('logits_auto')]
print('offload: failed parts:', bad if bad else 'none')
sys.exit(1 if bad else 0)"
