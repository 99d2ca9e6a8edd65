#!/usr/bin/env bash
# scripts/gpu/tp_recipe.sh BUNDLE: issue 17 items 8-9 in one GPU call (under 6 minutes on one H100 80 GB or
# H200), run from the repository root with a bundle from `scripts/bundle.sh cuda13 out/bundle-X` (voltllm,
# cuda_backend_test, lib/). Needs python3 (standard library only), nvidia-smi. Every rank runs on GPU 0
# (--tp-same-device): the ranks share the GPU's memory and time, so every TP number here measures the
# kernels and launches TP adds (smaller GEMVs, host barriers, event waits, the sum kernels), not a link.
# Parts, each timed, each one JSON line of $OUT/tp_recipe.jsonl (sub-runs add lines of their own); every
# log in $OUT/tp_recipe_logs.tar.gz; a part (or a sub-run) not started before the deadline (VOLT_TPR_DEADLINE
# seconds after the start, default 300) is skipped with a line saying so:
#   plan         the memory arithmetic below, computed from config.json, against this GPU's total: picks
#                the recipe's --gpu-memory-utilization (0.90 as written when it fits, else the smallest
#                that fits up to 0.97, else the recipe part is skipped with the reason)
#   allreduce    the all-reduce at decode sizes (2880 f32 x 1, 8, 32 rows) on 2, 4, 8 ranks of this GPU:
#                the same-device communicator, and the one-shot kernel of the NCCL path with every "peer"
#                buffer on this GPU (cuda_backend_test --gtest_filter='CudaCommBench.*', DISABLED_ tests
#                of tests/unit/cuda/comm_bench_test.cc): microseconds per all-reduce, one line each
#   ids          greedy ids (--temperature 0, 64 tokens, --prompt-ids, no tokenizer: ids printed) of TP 2
#                (demo model: 2 KV heads, so no TP 4) and TP 2, 4 (tests/data/golden/kv8/tiny-kv8: 8 KV
#                heads) against TP 1, --dtype half and float: SAME or DIFF per pair (DIFF at half is
#                possible: the TP sums round in another order; docs/parallel.md)
#   recipe       the V100 recipe's TP=4 line as written (docs/flags.md "The command lines users bring",
#                line 2; tests/api/vllm_cli.test.mjs "line 2"):
#                  voltllm serve --model ./gpt-oss-120b-vllm --tensor-parallel-size 4
#                    --gpu-memory-utilization 0.90 --max-model-len 2048 --enforce-eager
#                    --disable-custom-all-reduce --block-size 16 --swap-space 4 --port 8000
#                plus --device cuda --load-format dummy --tp-same-device (the model: `make-model --preset
#                120b --config-only`, named as the article's folder) and --dtype half (what auto gives on
#                the recipe's V100; the line has no --dtype); the port is a free one instead of 8000.
#                Waits for /health and /v1/models, then the watchdog's requests: the supervisor's probe
#                (src/supervisor/supervisor.cc Supervisor::probe: POST /v1/completions {"model": <id of
#                /v1/models>, "prompt": "ping", "max_tokens": 1, "temperature": 0, "priority": -1000}) and
#                the article's ({"model": "gpt-oss-120b-vllm", "prompt": "test", "max_tokens": 1}: the
#                basename of ./gpt-oss-120b-vllm, docs/flags.md "Model names"), then one short chat request
#                (16 tokens, temperature 0, logprobs). Records the ready time, the answers, finish
#                reasons, that every logprob is finite and no error came back, the engine's memory lines,
#                and the peak GPU memory: nvidia-smi memory.used (the whole GPU) and the process's
#                used_memory, polled every 0.2 s from launch to exit (pass: the process's peak within
#                utilization x total)
#   decode       batch-1 decode tok/s of the 120b shape (dummy weights, --dtype half, VOLT_TPR_TOKENS = 128
#                greedy tokens, --ignore-eos, a 13-token prompt per sequence, --kv-cache-memory-bytes 4 GiB) at
#                TP 1 and TP 4 with --enforce-eager (the eager rows, for comparison), then TP 4, TP 2 and
#                TP 1 with CUDA graphs (the default; at TP > 1 same-device one graph over every rank's
#                stream), then batch 32 at TP 1 and TP 4 with graphs while the deadline allows (each run is
#                started only when the time left exceeds 1.3 x the slowest run so far). tok/s = generated
#                tokens / seconds of generate's own "generated tok/s" line (from the first submit to the
#                last token: the prefill of 13 tokens included; the load is not); ms_per_step = 1000 x
#                batch / tok/s. The part's line gives TP k over TP 1 at batch 1, eager over eager
#                (tp_over_tp1_eager_b1) and graphs over graphs (tp_over_tp1_graphs_b1); the logs' "cuda
#                graphs:" line says which mode each run took.
# Expected time on an H100 (not yet measured: nothing here has run on a GPU): plan 1 s, allreduce ~15 s,
# ids ~25 s, recipe 60-120 s (load: see below), decode 5 x 120b loads of 20-60 s each at batch 1; batch 32
# only if time is left.
#
# Memory arithmetic of the recipe (gpt-oss-120b shape, --dtype half; the plan part recomputes it from
# config.json and prints every term):
#   experts, per layer: 128 experts x (gate_up 5760 x 2880 + down 2880 x 2880) MXFP4 at 17/32 byte per
#     value (16 B of codes + 1 B of scale per 32) = 128 x 13,219,200 B = 1,692,057,600 B, + f32 biases
#     128 x 8640 x 4 = 4,423,680 B; x 36 layers = 61.07 GB
#   attention, per layer: q/k/v (4096 + 512 + 512) x 2880 + o 2880 x 4096, f16 = 53,084,160 B; x 36 = 1.91 GB
#   router 128 x 2880 f32 x 36 = 0.05 GB; embedding + lm_head 2 x 201,088 x 2880 f16 = 2.32 GB
#   total 65.35 GB (60.9 GiB). TP = 4 splits every weight in 4 without overlap (experts in whole MXFP4 blocks:
#     23, 23, 23, 21 of the 90 blocks of 32 units; vocabulary rows 50,272 per rank; heads 16 q / 2 kv per
#     rank); only the router and the norms are replicated (+0.16 GB): per rank ~16.4 GB, 65.5 GB on GPU 0
#   KV cache (f16): 2 x 8 KV heads x 64 x 2 B x 36 layers = 73,728 B per token; one 2048-token sequence
#     151 MB
#   H100 80 GB: total 81,559 MiB = 85.52 GB; 0.90 x total = 76.97 GB. In use before the KV cache: weights
#     65.5 GB + one CUDA context (~0.6 GB; the four ranks share the process's context on GPU 0) + 4 ranks'
#     profiled activations of a 2048-token step and cuBLAS workspaces (estimate <= 0.6 GB each, 2.4 GB) =
#     ~68.5 GB; headroom max(256 MiB, 1% of the limit) = 0.77 GB; KV cache ~7.7 GB = ~104k tokens = ~50
#     sequences of 2048. It fits at 0.90 as written (about 7.7 GB to spare); an H200 (141 GB) has 60 GB more.
#   Host memory (the GPU machine has 128 GiB): the dummy model keeps one layer's host tensors (3.9 GB), but
#     sharding copies each layer's expert and o_proj slices into the shards (model/shard.cc), so TP 2 and TP
#     4 hold ~61 GB of host copies while loading and serving, + 4 x 4 GiB pinned swap space at --swap-space 4
#     (one per rank): ~82 GB. Those copies (zeroed, then copied, one thread) are most of a TP load's time.
#
# Switches (the dry run on a CPU build: VOLT_TPR_DEVICE=cpu VOLT_TPR_SHAPE='--preset tiny-chat --kv-heads 4'
# scripts/gpu/tp_recipe.sh build/tools; any directory holding voltllm is a BUNDLE there):
#   VOLT_TPR_DEVICE (cuda)     cpu: no --tp-same-device (ranks are threads), no nvidia-smi, no allreduce
#   VOLT_TPR_SHAPE ("--preset 120b")  make-model flags of the recipe and decode model
#   VOLT_TPR_PARTS ("plan allreduce ids recipe decode")
#   VOLT_TPR_DEADLINE (300)    seconds after the start past which no part or run starts (decode runs are
#                              also cut at it; the recipe stops waiting for ready at it)
#   VOLT_TPR_DECODE_LAYERS     decode: a slice of the shape (make-model --layers N; default all: 36)
#   VOLT_TPR_TOKENS (128)      decode tokens per run
#   VOLT_TPR_GPU_MIB           the GPU's total memory for the plan (default: nvidia-smi's; unset on cpu)
#   VOLT_TPR_READY_S (240)     seconds the recipe's server may take to get ready
#   VOLT_ALLREDUCE_ITERS (400) calls per all-reduce measurement
# Exit 0 when no part failed (skips do not fail).
# The part functions run through volt_part (scripts/gpu/lib.sh; shellcheck cannot see the calls):
# shellcheck disable=SC2317
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
B=$(cd "${1:?usage: scripts/gpu/tp_recipe.sh BUNDLE}" && pwd)
V=$B/voltllm
DEV=${VOLT_TPR_DEVICE:-cuda}
read -r -a SHAPE <<<"${VOLT_TPR_SHAPE:---preset 120b}"
PARTS=" ${VOLT_TPR_PARTS:-plan allreduce ids recipe decode} "
DEADLINE=${VOLT_TPR_DEADLINE:-300}
NTOK=${VOLT_TPR_TOKENS:-128}
READY_S=${VOLT_TPR_READY_S:-240}
OUT=${OUT:-/tmp/volt-tp-recipe-out}
W=$(mktemp -d /tmp/volt-tpr.XXXXXX)
L=$W/logs
mkdir -p "$OUT" "$L"
S=$OUT/tp_recipe.jsonl
: >"$S"
START=$(date +%s)
export PYTHONUNBUFFERED=1 CUDA_CACHE_PATH=$W/jit VOLT_SOURCE_DIR=$ROOT
# shellcheck source=scripts/gpu/lib.sh
. scripts/gpu/lib.sh
volt_find_cublas tp_recipe
SAME=()
[ "$DEV" = cuda ] && SAME=(--tp-same-device)
GPU_MIB=${VOLT_TPR_GPU_MIB:-}
if [ -z "$GPU_MIB" ] && [ "$DEV" = cuda ]; then
  GPU_MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1 | grep -E '^[0-9]+$')
fi
GPU_NAME=
[ -n "$GPU_MIB" ] && GPU_NAME=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
echo "tp_recipe: bundle $B ($(sed -n 's/^preset: //p;s/^commit: //p' "$B/MANIFEST" 2>/dev/null | tr '\n' ' ' || true)); device $DEV ${GPU_NAME:+($GPU_NAME, $GPU_MIB MiB)}; shape ${SHAPE[*]}; parts$PARTS; deadline ${DEADLINE}s; work $W"

DEADLINE_VAR=VOLT_TPR_DEADLINE  # the part runner: scripts/gpu/lib.sh volt_part

# Models: the recipe's (the article's folder name) and the decode one: configs only, the demo tokenizer
# (its ids are valid gpt-oss ids; make-model's default tokenizer lives in node_modules, absent there).
mkdir -p "$W/recipe"
"$V" --log-level warning make-model "${SHAPE[@]}" --config-only --no-tokenizer --out "$W/recipe/gpt-oss-120b-vllm" \
  >"$L/make_model.log" 2>&1 || { cat "$L/make_model.log"; exit 1; }
cp assets/demo-model/tokenizer.json assets/demo-model/tokenizer_config.json "$W/recipe/gpt-oss-120b-vllm/"
DLAYERS=()
[ -n "${VOLT_TPR_DECODE_LAYERS:-}" ] && DLAYERS=(--layers "$VOLT_TPR_DECODE_LAYERS")
"$V" --log-level warning make-model "${SHAPE[@]}" "${DLAYERS[@]}" --config-only --no-tokenizer --out "$W/decode_model" \
  >>"$L/make_model.log" 2>&1 || exit 1
cp assets/demo-model/tokenizer.json "$W/decode_model/"
"$V" --log-level warning make-model --preset 120b --config-only --no-tokenizer --out "$W/plan_120b" \
  >>"$L/make_model.log" 2>&1 || exit 1

# ---- plan: the memory arithmetic from config.json ----
UTIL=0.90
cat >"$W/plan.py" <<'PY'
import json, sys
def plan(path, tp, total_mib, util):
    c = json.load(open(path))
    H, I, E, L, V = c["hidden_size"], c["intermediate_size"], c["num_local_experts"], c["num_hidden_layers"], c["vocab_size"]
    d, nh, nkv = c["head_dim"], c["num_attention_heads"], c["num_key_value_heads"]
    blocks = -(-I // 32)
    per = -(-blocks // tp)
    units = [max(0, min(I, (r + 1) * per * 32) - min(I, r * per * 32)) for r in range(tp)]
    vocab = [max(0, min(V, (r + 1) * -(-V // tp)) - min(V, r * -(-V // tp))) for r in range(tp)]
    ranks = []
    for r in range(tp):
        u = units[r]
        experts = E * (2 * u * H + H * u) * 17 // 32 + E * (2 * u + (H if r == 0 else 0)) * 4
        attn = ((nh + 2 * nkv) // tp * d) * H * 2 + H * (nh // tp * d) * 2
        router = E * H * 4 + E * 4
        norms = 2 * H * 4
        lm = 2 * vocab[r] * H * 2
        ranks.append(L * (experts + attn + router + norms) + lm + H * 4)
    kv_tok = 2 * nkv * d * 2 * L
    out = {"config": path.split("/")[-2], "tp": tp, "layers": L, "experts": E,
           "weights_bytes": sum(ranks), "weights_per_rank_bytes": ranks,
           "kv_bytes_per_token": kv_tok, "kv_bytes_2048_seq": kv_tok * 2048}
    if total_mib:
        total = int(total_mib * 1048576)
        context, act = 600 * 2**20, 600 * 2**20 * tp  # estimates: one CUDA context, per-rank activations
        used = sum(ranks) + context + act
        limit = int(util * total)
        headroom = max(256 * 2**20, limit // 100)
        kv = limit - used - headroom
        need = (used + 4 * kv_tok * 2048) / total  # the weights, the estimates and 4 sequences of 2048
        out.update({"total_bytes": total, "utilization": util, "limit_bytes": limit,
                    "context_estimate_bytes": context, "activations_estimate_bytes": act,
                    "headroom_bytes": headroom, "kv_cache_bytes": kv,
                    "kv_tokens": kv // kv_tok if kv > 0 else 0, "fits": kv >= 4 * kv_tok * 2048,
                    "min_utilization": round(need + 0.01, 2)})
    return out
path, tp, total, util = sys.argv[1], int(sys.argv[2]), float(sys.argv[3] or 0), float(sys.argv[4])
print(json.dumps(plan(path, tp, total, util)))
PY
plan() {
  local r120 rcfg
  r120=$(python3 "$W/plan.py" "$W/plan_120b/config.json" 4 "$GPU_MIB" "$UTIL") || return 1
  rcfg=$(python3 "$W/plan.py" "$W/recipe/gpt-oss-120b-vllm/config.json" 4 "$GPU_MIB" "$UTIL") || return 1
  echo "120b at TP 4: $r120"
  echo "this run's shape at TP 4: $rcfg"
  volt_py '
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
gb = lambda x: round(x / 1e9, 2)
d = {"gpu_mib": int(float(sys.argv[3])) if sys.argv[3] else None,
     "plan_120b_tp4": {k: (gb(v) if k.endswith("_bytes") and isinstance(v, int) else [gb(x) for x in v] if k.endswith("_bytes") else v) for k, v in a.items()},
     "shape": b["config"], "shape_weights_gb": gb(b["weights_bytes"]), "units": "GB = 1e9 bytes"}
util = 0.90
if "fits" in b:
    if b["fits"]: d["recipe_utilization"] = 0.90; d["recipe_note"] = "fits at 0.90 as written"
    elif b["min_utilization"] <= 0.97:
        util = b["min_utilization"]; d["recipe_utilization"] = util
        d["recipe_note"] = "does not fit at 0.90 on this GPU: the recipe runs at %.2f" % util
    else:
        d["recipe_utilization"] = None
        d["recipe_note"] = "does not fit this GPU even at 0.97 (needs %.2f of it): recipe skipped" % b["min_utilization"]
else:
    d["recipe_utilization"] = 0.90; d["recipe_note"] = "no GPU total (--device cpu): as written, unchecked"
print(json.dumps(d))' "$r120" "$rcfg" "$GPU_MIB" >"$W/plan.json"
}
volt_part plan plan
UTIL=$(volt_py 'r = json.load(open(sys.argv[1])); u = r.get("recipe_utilization", 0.90); print("none" if u is None else "%.2f" % u)' "$W/plan.json" 2>/dev/null || echo 0.90)
RECIPE_NOTE=$(volt_py 'print(json.load(open(sys.argv[1])).get("recipe_note", ""))' "$W/plan.json" 2>/dev/null)

# ---- allreduce: microseconds per all-reduce at decode sizes ----
allreduce() {
  if [ "$DEV" != cuda ]; then
    echo '{"skipped": "--device cpu: the CUDA communicators need a GPU"}' >"$W/allreduce.json"
    return 77
  fi
  [ -x "$B/cuda_backend_test" ] || { echo '{"skipped": "no cuda_backend_test in the bundle"}' >"$W/allreduce.json"; return 77; }
  timeout "$(($(volt_left) < 120 ? ($(volt_left) > 1 ? $(volt_left) : 1) : 120))" "$B/cuda_backend_test" --gtest_color=no \
    --gtest_also_run_disabled_tests --gtest_filter='CudaCommBench.*' >"$W/allreduce.out" 2>&1
  local rc=$?
  cat "$W/allreduce.out"
  volt_py '
rows = [json.loads(l.split(" ", 1)[1]) for l in open(sys.argv[1]) if l.startswith("ALLREDUCE ")]
for r in rows:
    r["part"] = "allreduce_%s_%s_tp%d_rows%d" % (r.pop("comm"), r["mode"], r["ranks"], r["rows"])
    print(json.dumps(r))
table = {}
for r in rows: table.setdefault(r["part"].rsplit("_rows", 1)[0], {})[r["rows"]] = r["us_per_allreduce"]
print(json.dumps({"pass": int(sys.argv[2]) == 0 and bool(rows), "measurements": len(rows),
                  "us_per_allreduce_by_rows_1_8_32": {k: [v.get(1), v.get(8), v.get(32)] for k, v in table.items()},
                  "note": "same-device ranks: host barriers and event waits on one GPU, not a link"}))' \
    "$W/allreduce.out" "$rc" >"$W/allreduce.lines"
  sed '$d' "$W/allreduce.lines" >>"$S"
  tail -1 "$W/allreduce.lines" >"$W/allreduce.json"
  return "$rc"
}
volt_part allreduce allreduce

# ---- ids: greedy ids of TP 2 / 4 against TP 1 ----
ids() {
  local dtypes=(half float) model name tp dt rc=0 tps res=()
  [ "$DEV" = cuda ] || dtypes=(float)
  # The demo model without its tokenizer, so that generate prints ids.
  mkdir -p "$W/demo-ids"
  for f in config.json generation_config.json model.safetensors.index.json model-00000-of-00000.safetensors; do
    ln -sf "$ROOT/assets/demo-model/$f" "$W/demo-ids/$f"
  done
  local prompt
  prompt=$(volt_py 'print(",".join(str((i * 37 + 11) % 997) for i in range(24)))')
  for model in demo-ids tests/data/golden/kv8/tiny-kv8; do
    name=$(basename "$model")
    [ "$name" = demo-ids ] && { model=$W/demo-ids; name=demo; tps="2"; } || tps="2 4"
    for dt in "${dtypes[@]}"; do
      for tp in 1 $tps; do
        local extra=()
        [ "$tp" -gt 1 ] && extra=(--tensor-parallel-size "$tp" "${SAME[@]}")
        timeout 60 "$V" --log-level warning generate --device "$DEV" --dtype "$dt" --model "$model" \
          --prompt-ids "$prompt" --max-tokens 64 --temperature 0 --ignore-eos "${extra[@]}" \
          >"$L/ids_${name}_${dt}_tp$tp.out" 2>"$L/ids_${name}_${dt}_tp$tp.log" || rc=1
      done
      for tp in $tps; do
        local same=DIFF
        if [ -s "$L/ids_${name}_${dt}_tp$tp.out" ] && cmp -s "$L/ids_${name}_${dt}_tp1.out" "$L/ids_${name}_${dt}_tp$tp.out"; then
          same=SAME
        fi
        echo "ids $name --dtype $dt TP $tp vs TP 1: $same"
        res+=("$name $dt $tp $same")
      done
    done
  done
  printf '%s\n' "${res[@]}" | volt_py '
r = {}
for l in sys.stdin:
    m, dt, tp, s = l.split()
    r["%s_%s_tp%s" % (m, dt, tp)] = s
print(json.dumps({"pass": int(sys.argv[1]) == 0, "vs_tp1": r, "tokens": 64,
                  "note": "greedy ids byte for byte; DIFF at --dtype half can be the sums order (docs/parallel.md)"}))' "$rc" >"$W/ids.json"
  return "$rc"
}
volt_part ids ids

# ---- recipe: the V100 recipe's TP=4 serve line on one GPU ----
recipe() {
  if [ "$UTIL" = none ]; then
    volt_py 'print(json.dumps({"skipped": sys.argv[1]}))' "$RECIPE_NOTE" >"$W/recipe.json"
    return 77
  fi
  local port log=$L/recipe_serve.log pid mon up=0 t0 t_ready=0 rc
  port=$(volt_py 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  local line=(--model ./gpt-oss-120b-vllm --tensor-parallel-size 4 --gpu-memory-utilization "$UTIL"
    --max-model-len 2048 --enforce-eager --disable-custom-all-reduce --block-size 16 --swap-space 4 --port "$port")
  local ours=(--device "$DEV" --load-format dummy "${SAME[@]}" --dtype half)
  echo "cd $W/recipe && voltllm serve ${line[*]} ${ours[*]}" | tee "$W/recipe_cmd.txt"
  t0=$(date +%s.%N)
  (cd "$W/recipe" && exec "$V" serve "${line[@]}" "${ours[@]}") >"$log" 2>&1 &
  pid=$!
  if command -v nvidia-smi >/dev/null 2>&1; then
    (while kill -0 "$pid" 2>/dev/null; do
      echo "$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1)" \
        "$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null |
          awk -F', ' -v p="$pid" '$1 == p {print $2}')"
      sleep 0.2
    done) >"$L/recipe_mem.txt" &
    mon=$!
  fi
  local i
  for i in $(seq 1 $((READY_S * 5))); do
    if volt_py '
import urllib.request
for path in ("/health", "/v1/models"):
    urllib.request.urlopen("http://127.0.0.1:%s%s" % (sys.argv[1], path), timeout=2).read()' "$port" 2>/dev/null; then
      up=1
      break
    fi
    kill -0 "$pid" 2>/dev/null || break
    [ "$(volt_left)" -gt 0 ] || break
    sleep 0.2
  done
  [ "$up" = 1 ] && t_ready=$(volt_py 'import time; print(round(time.time() - float(sys.argv[1]), 1))' "$t0")
  echo "ready: $up after ${t_ready} s"
  if [ "$up" = 1 ]; then
    volt_py '
import urllib.request, time
base = "http://127.0.0.1:%s" % sys.argv[1]
def post(path, body, timeout=60):
    t = time.time()
    req = urllib.request.Request(base + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r: status, text = r.status, r.read().decode()
    except urllib.error.HTTPError as e: status, text = e.code, e.read().decode()
    except Exception as e: status, text = None, str(e)
    try: j = json.loads(text)
    except ValueError: j = {"raw": text[:300]}
    return status, j, round(time.time() - t, 3)
model_id = json.load(urllib.request.urlopen(base + "/v1/models", timeout=5))["data"][0]["id"]
out = {"served_model_id": model_id}
# The supervisor probe (Supervisor::probe), then the article watchdog.
for key, body in (("watchdog_supervise", {"model": model_id, "prompt": "ping", "max_tokens": 1, "temperature": 0, "priority": -1000}),
                  ("watchdog_article", {"model": "gpt-oss-120b-vllm", "prompt": "test", "max_tokens": 1})):
    s, j, t = post("/v1/completions", body)
    ch = (j.get("choices") or [{}])[0]
    out[key] = {"status": s, "seconds": t, "text": ch.get("text"), "finish_reason": ch.get("finish_reason"),
                "completion_tokens": (j.get("usage") or {}).get("completion_tokens"), "error": j.get("error")}
s, j, t = post("/v1/chat/completions", {"model": model_id, "messages": [{"role": "user", "content": "Tell me about the old harbor town."}],
                                         "max_tokens": 16, "temperature": 0, "logprobs": True, "top_logprobs": 1})
ch = (j.get("choices") or [{}])[0]
msg = ch.get("message") or {}
lps = [c.get("logprob") for c in ((ch.get("logprobs") or {}).get("content") or [])]
finite = bool(lps) and all(isinstance(v, (int, float)) and math.isfinite(v) for v in lps)
out["chat"] = {"status": s, "seconds": t, "content": msg.get("content"), "reasoning": (msg.get("reasoning_content") or "")[:200],
               "finish_reason": ch.get("finish_reason"), "usage": j.get("usage"), "logprobs": len(lps),
               "logprobs_finite": finite, "error": j.get("error")}
ok = all(out[k]["status"] == 200 and out[k]["error"] is None for k in ("watchdog_supervise", "watchdog_article", "chat"))
ok = ok and out["watchdog_supervise"]["completion_tokens"] == 1 and out["chat"]["finish_reason"] in ("stop", "length") and finite
out["requests_ok"] = ok
print(json.dumps(out))' "$port" >"$W/recipe_requests.json" 2>"$L/recipe_client.log"
    cat "$W/recipe_requests.json"
  fi
  kill -TERM "$pid" 2>/dev/null
  for i in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done  # 30 s to shut down
  kill -0 "$pid" 2>/dev/null && { echo "serve did not exit 30 s after SIGTERM: killed"; kill -KILL "$pid"; }
  wait "$pid" 2>/dev/null
  rc=$?
  [ -n "${mon:-}" ] && { kill "$mon" 2>/dev/null; wait "$mon" 2>/dev/null; }
  grep -E "memory:|KV blocks|parallel:|weights placed|cuda graphs|dummy|max-model-len|error|Error" "$log" | head -30
  volt_py '
try: req = json.load(open(sys.argv[1]))
except Exception: req = {}
gpu = proc = 0
try:
    for l in open(sys.argv[2]):
        p = l.split()
        if p and p[0].isdigit(): gpu = max(gpu, int(p[0]))
        if len(p) > 1 and p[1].isdigit(): proc = max(proc, int(p[1]))
except OSError: pass
log = open(sys.argv[3], errors="replace").read()
total = float(sys.argv[6] or 0)
util = float(sys.argv[7])
budget = util * total if total and sys.argv[10] == "cuda" else None  # no GPU memory to read on --device cpu
up = sys.argv[4] == "1"
d = {"pass": up and req.get("requests_ok", False) and (budget is None or 0 < proc <= budget),
     "ready": up, "ready_s": float(sys.argv[5]) if up else None, "utilization": util, "note": sys.argv[9],
     "peak_gpu_memory_used_mib": gpu or None, "peak_process_mib": proc or None,
     "budget_mib": round(budget) if budget else None, "server_exit": int(sys.argv[8]),
     "engine_lines": [l.split("] ", 1)[-1] for l in log.splitlines() if re.search(r"memory:|KV blocks|parallel:|weights placed", l)][:12],
     "errors": [l for l in log.splitlines() if re.search(r"error|nan|non-finite", l, re.I)][:5]}
d.update(req)
print(json.dumps(d))' "$W/recipe_requests.json" "$L/recipe_mem.txt" "$log" "$up" "$t_ready" "${GPU_MIB:-}" "$UTIL" "$rc" "$RECIPE_NOTE" "$DEV" >"$W/recipe.json"
  volt_py 'sys.exit(0 if json.load(open(sys.argv[1]))["pass"] else 1)' "$W/recipe.json"
}
volt_part recipe recipe

# ---- decode: tok/s of the 120b shape at TP 1, 2, 4 on one GPU ----
decode() {
  local slowest=0 rc=0 n tp eager name
  echo "same-device TP: the ranks share one GPU; the differences are TP's kernels and launches, not a link"
  for run in "1 1 eager" "4 1 eager" "4 1 graphs" "2 1 graphs" "1 1 graphs" "1 32 graphs" "4 32 graphs"; do
    read -r tp n eager <<<"$run"
    name=decode_tp${tp}_b${n}_$eager
    local need=$((slowest * 13 / 10))
    if [ "$(volt_left)" -le "$need" ]; then
      volt_emit "{\"part\": \"$name\", \"skipped\": \"deadline: $(volt_left) s left, the slowest run so far took $slowest s\"}"
      continue
    fi
    local extra=()
    [ "$tp" -gt 1 ] && extra=(--tensor-parallel-size "$tp" "${SAME[@]}")
    [ "$eager" = eager ] && extra+=(--enforce-eager)
    local t0 t1 r i
    for ((i = 0; i < n; i++)); do echo "The harbor town number $i was quiet in the morning."; done >"$W/prompts_$n.txt"
    t0=$(date +%s)
    timeout "$(volt_left)" "$V" --log-level info generate --device "$DEV" --dtype half --load-format dummy \
      --model "$W/decode_model" --prompts-file "$W/prompts_$n.txt" --max-tokens "$NTOK" --ignore-eos \
      --temperature 0 --max-num-seqs "$n" --kv-cache-memory-bytes 4294967296 "${extra[@]}" \
      >"$W/$name.out" 2>"$L/$name.log"
    r=$?
    t1=$(date +%s)
    [ $((t1 - t0)) -gt "$slowest" ] && slowest=$((t1 - t0))
    [ "$r" -eq 0 ] || rc=1
    volt_emit "$(volt_py '
log = open(sys.argv[1], errors="replace").read()
m = re.search(r"(\d+) prompt tokens, (\d+) generated tokens in ([0-9.]+) s: ([0-9.]+) generated tok/s", log)
tps = float(m.group(4)) if m else None
n = int(sys.argv[5])
# A graphs run whose capture failed runs eagerly ("cuda graphs off, steps run eagerly"): not a graphs row.
fell_back = "cuda graphs off, steps run eagerly" in log
d = {"part": sys.argv[2], "pass": int(sys.argv[3]) == 0 and bool(tps) and not (sys.argv[6] == "graphs" and fell_back),
     "rc": int(sys.argv[3]), "tp": int(sys.argv[4]),
     "batch": n, "graphs": sys.argv[6] == "graphs" and not fell_back, "graphs_fell_back": fell_back, "tok_s": tps,
     "ms_per_step": round(1000 * n / tps, 3) if tps else None,
     "generated": int(m.group(2)) if m else None, "gen_seconds": float(m.group(3)) if m else None,
     "wall_s": int(sys.argv[7]), "weights_placed": re.findall(r"weights placed: ([0-9.]+) MiB", log)[:8],
     "note": "same-device TP: kernel and launch overhead of TP on one GPU, no link"}
print(json.dumps(d))' "$L/$name.log" "$name" "$r" "$tp" "$n" "$eager" "$((t1 - t0))")"
  done
  # The summary: TP k over TP 1 at batch 1, eager over eager and graphs over graphs.
  volt_py '
rows = {}
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("part", "").startswith("decode_tp") and r.get("tok_s") and not r.get("graphs_fell_back"): rows[r["part"]] = r["tok_s"]
def over(mode):
    base = rows.get("decode_tp1_b1_" + mode)
    return {k: round(v / base, 3) for k, v in rows.items() if base and k.endswith("_b1_" + mode)}
d = {"pass": int(sys.argv[2]) == 0, "tok_s": rows,
     "tp_over_tp1_eager_b1": over("eager"), "tp_over_tp1_graphs_b1": over("graphs"),
     "note": "same-device TP measures the kernel and launch overhead of TP (no link)"}
print(json.dumps(d))' "$S" "$rc" >"$W/decode.json"
  return "$rc"
}
volt_part decode decode

tar czf "$OUT/tp_recipe_logs.tar.gz" -C "$W" logs plan.json recipe_cmd.txt 2>/dev/null ||
  tar czf "$OUT/tp_recipe_logs.tar.gz" -C "$W" logs
volt_py '
rows = [json.loads(l) for l in open(sys.argv[1])]
bad = [r["part"] for r in rows if r.get("pass") is False]
print("tp_recipe: %d lines, failed: %s, skipped: %s; %s s" % (len(rows), bad or "none",
      [r["part"] for r in rows if "skipped" in r] or "none", sys.argv[2]))
sys.exit(1 if bad else 0)' "$S" "$(volt_elapsed)"
rc=$?
echo "tp_recipe: $S, $OUT/tp_recipe_logs.tar.gz"
rm -rf "$W"
exit $rc
