#!/usr/bin/env bash
# scripts/gpu/quant_decode.sh BUNDLE: issue 21's speed table in one GPU call (run from the repository root
# with a bundle made by scripts/bundle.sh). For the 20b and 120b shapes, attention + lm_head in bf16, int8
# and awq (experts MXFP4 in all three), random weights in each format from `--load-format dummy` of a
# config written by `voltllm make-model --config-only --quantization ...` (no checkpoint is written or
# converted; docs/quantization.md "Random checkpoints"):
#   decode      `voltllm generate --device cuda --load-format dummy --max-num-seqs 1 --quantization FMT`:
#               batch-1 greedy decode of 256 tokens (--ignore-eos, CUDA graphs: the default), tok/s =
#               generated tokens / wall time of the run (a 13-token prefill included, < 1%)
#   bytes       the weights' bytes read per token at batch 1, from config.json: experts of 4 of E (MXFP4,
#               17/32 byte per value), the router (f32, as docs/performance.md has always counted it),
#               attention and lm_head in the format as placed on the GPU (bf16: 2 bytes, placed f16; int8:
#               1 byte + an f16 scale per row; awq: 1/2 byte + a 4-byte scale|zero word per (row, group)).
#               KV reads (< 1% at these contexts), norms and biases are not counted.
#   read_bw     scripts/gpu/read_bw.py (torch, 4 GiB float32, median of 20) three times: before the
#               first shape, between the shapes, at the end; the fractions use the median of the three
#   fraction    tok/s x bytes per token (the format's own, smaller, bytes) / read bandwidth
#   memory      the engine's "weights placed: X MiB" (GPU memory of all weights) and the saving against
#               bf16 of the same shape; beside it the saving computed from the config (attention + lm_head)
# Lines in $OUT/quant_decode.txt (and a markdown table at its end); logs in $OUT/quant_decode_logs.tar.gz.
# About 3-4 minutes on an H100 (6 runs + 3 reads). Exit 0 when every run gave a tok/s figure.
# Switches (the dry run on a CPU build: VOLT_QD_DEVICE=cpu VOLT_QD_PRESETS=tiny-chat, any directory holding
# voltllm as BUNDLE; not tiny: the prompt goes through the demo model's tokenizer, whose ids need the gpt-oss
# vocabulary):
#   VOLT_QD_DEVICE (cuda)        --device of generate
#   VOLT_QD_PRESETS ("20b 120b") make-model presets
#   VOLT_QD_FORMATS ("bf16 int8 awq")
#   VOLT_QD_AWQ_GROUP (64)       AWQ group size: gpt-oss's hidden size 2880 is not a multiple of AutoAWQ's
#                                default 128 (make-model refuses it, as convert does); 64 is what the real
#                                checkpoints need (docs/quantization.md)
#   VOLT_QD_TOKENS (256)         generated tokens per run
#   VOLT_QD_KV_BYTES (8 GiB on cuda, 64 MiB on cpu)  --kv-cache-memory-bytes
#   VOLT_QD_TIMEOUT (150)        seconds per generate run
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
B=$(cd "${1:?usage: scripts/gpu/quant_decode.sh BUNDLE}" && pwd)
V=$B/voltllm
DEV=${VOLT_QD_DEVICE:-cuda}
PRESETS=${VOLT_QD_PRESETS:-20b 120b}
FORMATS=${VOLT_QD_FORMATS:-bf16 int8 awq}
G=${VOLT_QD_AWQ_GROUP:-64}
NTOK=${VOLT_QD_TOKENS:-256}
if [ "$DEV" = cuda ]; then KV=${VOLT_QD_KV_BYTES:-8589934592}; else KV=${VOLT_QD_KV_BYTES:-67108864}; fi
TMO=${VOLT_QD_TIMEOUT:-150}
OUT=${OUT:-/tmp/volt-quant-decode-out}
W=$(mktemp -d /tmp/volt-qd.XXXXXX)
mkdir -p "$OUT" "$W/logs"
R=$OUT/quant_decode.txt
: >"$R"
export CUDA_CACHE_PATH=$W/jit
# shellcheck source=scripts/gpu/lib.sh
. scripts/gpu/lib.sh
volt_find_cublas quant_decode
say() { echo "$1" | tee -a "$R"; }
say "bundle: $(sed -n 's/^commit: //p' "$B/MANIFEST" 2>/dev/null) $(sed -n 's/^preset: //p' "$B/MANIFEST" 2>/dev/null) device $DEV; presets $PRESETS; formats $FORMATS; awq group $G; $NTOK tokens"
[ "$DEV" = cuda ] && say "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
rc=0
echo "The harbor town number 1 was quiet in the morning." >"$W/prompt.txt"

# The weights' bytes: "PER_TOKEN ATTN_LM_PER_TOKEN" for config.json $1 (the format is the config's own).
bytes_of() {
  python3 - "$1" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
H, I, E, L, V = c["hidden_size"], c["intermediate_size"], c["num_local_experts"], c["num_hidden_layers"], c["vocab_size"]
k = c.get("num_experts_per_tok", c.get("experts_per_token"))
d, nh, nkv = c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
q = c.get("quantization_config", {})
method, g = q.get("quant_method", "mxfp4"), q.get("group_size", 0)
def dense(out, inp):  # bytes of one [out, in] weight as placed on the GPU
    if method == "int8":
        return out * inp + 2 * out
    if method == "awq":
        return out * inp // 2 + 4 * out * (inp // g)
    return 2 * out * inp
attn = dense((nh + 2 * nkv) * d, H) + dense(H, nh * d)
experts = k * (2 * I * H + H * I) * 17 / 32
router = E * H * 4
lm = dense(V, H)
print(int(L * (attn + experts + router) + lm), int(L * attn + lm))
PY
}

BW=()
read_bw() {
  local bw
  if [ "$DEV" = cuda ]; then bw=$(python3 scripts/gpu/read_bw.py 2>/dev/null); fi
  if [ "$DEV" != cuda ]; then
    say "read_bw: skipped (--device $DEV)"
    return
  fi
  bw=${bw:-0}
  BW+=("$bw")
  say "read_bw_${#BW[@]}: $bw GB/s (torch sum over 4 GiB float32, median of 20)"
}

# run SHAPE FMT: one batch-1 decode; appends "SHAPE FMT TOK_S BYTES ATTN_LM MIB" to $W/rows
run() {
  local m=$1 f=$2 dir=$W/$1-$2 qflags=() mkflags=() line tps mib log
  [ "$f" = bf16 ] || { qflags=(--quantization "$f"); mkflags=(--quantization "$f" --awq-group-size "$G"); }
  if ! "$V" --log-level warning make-model --preset "$m" --config-only --no-tokenizer "${mkflags[@]}" \
    --out "$dir" >"$W/logs/make_$m-$f.log" 2>&1; then
    say "$m $f: make-model failed: $(tail -1 "$W/logs/make_$m-$f.log")"
    rc=1
    return
  fi
  cp assets/demo-model/tokenizer.json "$dir/"
  log=$W/logs/decode_$m-$f.log
  timeout "$TMO" "$V" --log-level info generate --device "$DEV" --load-format dummy --model "$dir" "${qflags[@]}" \
    --prompts-file "$W/prompt.txt" --max-tokens "$NTOK" --ignore-eos --temperature 0 --max-num-seqs 1 \
    --kv-cache-memory-bytes "$KV" >"$W/logs/decode_$m-$f.out" 2>"$log"
  local r=$?
  line=$(grep "generated tok/s" "$log" | tail -1)
  tps=$(echo "$line" | sed -n 's/.*: \([0-9.]*\) generated tok\/s.*/\1/p')
  mib=$(sed -n 's/.*weights placed: \([0-9.]*\) MiB.*/\1/p' "$log" | tail -1)
  read -r bpt alm <<<"$(bytes_of "$dir/config.json")"
  if [ -z "$tps" ]; then
    say "$m $f: failed (rc $r): $(grep -iE "error|fail|refuse" "$log" | tail -2 | tr '\n' ' ')"
    rc=1
  fi
  echo "$m $f ${tps:-0} $bpt $alm ${mib:-?} $r" >>"$W/rows"
  say "$m $f: ${tps:-?} tok/s; dummy $(grep -o 'attention + lm_head [^)]*' "$log" | head -1); $(grep -o 'weights placed: .*' "$log" | tail -1)"
}

read_bw
n=0
for m in $PRESETS; do
  [ $n -eq 1 ] && read_bw  # between the first and the second shape
  n=$((n + 1))
  for f in $FORMATS; do run "$m" "$f"; done
done
read_bw

# ---- per-run lines, then the table ----
python3 - "$W/rows" "${BW[@]}" <<'PY' | tee -a "$R"
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
bws = [float(b) for b in sys.argv[2:]]
bw = statistics.median(bws) if bws else 0.0
print(f"read bandwidth: median {bw:.1f} GB/s of {', '.join(f'{b:.1f}' for b in bws)}" if bws else "read bandwidth: not measured")
base = {m: (float(t), int(a), mib) for m, f, t, bpt, a, mib, r in rows if f == "bf16"}
table = []
for m, f, tps, bpt, alm, mib, r in rows:
    tps, bpt, alm = float(tps), int(bpt), int(alm)
    limit = bw * 1e9 / bpt if bw > 0 else 0.0
    frac = f"{tps / limit:.3f}" if limit > 0 and tps > 0 else "-"
    lim = f"{limit:.1f}" if limit > 0 else "-"
    b = base.get(m) if f != "bf16" else None
    vs = f"{tps / b[0]:.2f}x" if b and b[0] > 0 and tps > 0 else "-"
    saved_c = f"{(b[1] - alm) / 1048576:.1f}" if b else "-"
    saved_p = f"{float(b[2]) - float(mib):.1f}" if b and "?" not in (mib, b[2]) else "-"
    print(f"{m}_{f}: tok_s={tps:.1f} bytes_per_token={bpt} attn_lm_bytes={alm} limit_tok_s={lim} "
          f"fraction={frac} weights_placed_mib={mib} saved_placed_mib={saved_p} saved_computed_mib={saved_c} rc={r}")
    table.append(f"| {m} | {f} | {tps:.1f} | {vs} | {bpt / 1e9:.3f} ({alm / 1e9:.3f}) | {lim} | {frac} "
                 f"| {mib} | {saved_p} / {saved_c} |")
print("| shape | attention + lm_head | tok/s | vs bf16 | GB read / token (attention + lm_head) | limit tok/s "
      "| fraction of the limit | weights placed, MiB | saved vs bf16, MiB (placed / computed) |")
print("|---|---|---|---|---|---|---|---|---|")
print("\n".join(table))
PY
tar -C "$W" -czf "$OUT/quant_decode_logs.tar.gz" logs 2>/dev/null
rm -rf "$W"
exit $rc
