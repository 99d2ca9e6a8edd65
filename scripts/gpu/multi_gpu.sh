#!/usr/bin/env bash
# scripts/gpu/multi_gpu.sh BUNDLE: issue 18, the first run on several GPUs (a machine with 2 or 4; under 8
# minutes), from the repository root with a bundle from `scripts/bundle.sh cuda13 out/bundle-X` (voltllm,
# cuda_backend_test, lib/). Needs python3 (standard library only) and nvidia-smi. NCCL_NVLS_ENABLE=0 is
# exported (NVLink multicast stays off on these machines; voltllm sets it too unless the environment has it).
# Writes $OUT/multi_gpu.json, one JSON line per part or sub-run: {"part", "pass" | "skipped", "seconds",
# numbers...}; every log in $OUT/multi_gpu_logs.tar.gz. A part not started by VOLT_MG_DEADLINE (420 s after
# the start) is skipped with a line saying so; decode runs are skipped when the slowest so far would not fit.
# Parts (VOLT_MG_PARTS; run in the order info golden text procs fault commbench decode, ttft inside decode
# after its batch-1 runs, so that the deadline cuts the larger batches first):
#   info     nvidia-smi topo -m (lines), the GPUs, libnccl's version, and from one `voltllm logits` at TP = all
#            GPUs on tiny-kv8 (log level info) the engine's own lines: "peer access: GPU i -> GPU j: ..." per
#            ordered pair (src/cuda/peer_access.cc), "custom all-reduce: on|off ...", "parallel: ...
#            communicator X" and the NCCL version code it loaded
#   golden   `voltllm logits --dtype float` of the golden checkpoints (tests/data/golden: tiny-mxfp4 and
#            tiny-bf16, 2 KV heads: TP 2; tiny-kv8, 8 KV heads: TP 2 and 4 when 4 GPUs) on the first
#            VOLT_MG_PROMPTS (2) golden prompts, TP k against TP 1, NCCL alone (--disable-custom-all-reduce)
#            and with the custom all-reduce: rel = max |TPk - TP1| / max |TP1| over the prompts, pass
#            rel <= 2e-5 (docs/parallel.md "Reduction-order tolerance"; threads measured <= 1.35e-6)
#   text     greedy text of the demo model, 64 tokens (--ignore-eos): TP 1 with CUDA graphs, TP 1
#            --enforce-eager, TP 2 with and without the custom all-reduce and with / without
#            --enforce-eager (TP > 1 across GPUs, NCCL, always runs eagerly): SAME or DIFF against TP 1 graphs
#   procs    two processes as two "nodes", one GPU each (torchrun's variables, LOCAL_RANK, 127.0.0.1): logits
#            of tiny-kv8 at TP 2 (prompt 0) against TP 1 and against TP 2 in one process with NCCL alone
#            (same all-gather + rank-order sum: expected bitwise), and the demo model's greedy text over
#            --nnodes 2 --node-rank r against TP 1
#   decode   the 120b shape (make-model --preset 120b --config-only, --load-format dummy: the same seeded
#            weights every run), --dtype half, VOLT_MG_TOKENS (64) greedy tokens, --ignore-eos: batch 1 at
#            TP 1 (graphs and eager), TP 2 (custom, NCCL alone), TP 4; then batch 32 and 8 at TP 1, 2, 4 while
#            time allows. tok/s from generate's line; the batch-1 runs print --logprobs 1, so parity120
#            lines compare TP k with TP 1 eager: ids equal up to where, max |logprob difference| there
#   ttft     a 2,048-token prompt (--prompt-ids, --max-tokens 1) on the 120b shape at TP 1, 2 (4): seconds
#            from submit to the one token (generate's line), i.e. TTFT with the prefill on k GPUs
#   commbench cuda_backend_test --gtest_also_run_disabled_tests --gtest_filter='CudaCommBench.*': the
#            same-device lines, and NCCL alone vs the custom (one-shot) all-reduce across 2 (and 4) GPUs at
#            2880 f32 x 1, 8, 32 rows (the engine's all-reduce is f32 only: no fp16 row exists)
#   fault    tests/unit/executor/multiprocess_failure.sh with HOW=stall and --device cuda: two processes,
#            VOLT_DEBUG_STALL_RANK=1 makes rank 1 sleep 60 s in step 2; rank 0 must exit 1 within the
#            --collective-timeout 3 (+ slack, at most 15 s), naming the watchdog; nothing hangs
# Switches (the dry run on a CPU build: scripts/gpu/multi_gpu_dryrun_cpu.sh):
#   VOLT_MG_DEVICE (cuda)   cpu: ranks are threads / TCP processes, no nvidia-smi, no commbench
#   VOLT_MG_GPUS            GPUs to use (default: nvidia-smi's count; 2 on cpu)
#   VOLT_MG_SHAPE ("--preset 120b")  make-model flags of the decode / ttft model; VOLT_MG_LAYERS: --layers N
#   VOLT_MG_PARTS ("info golden text procs fault commbench decode ttft"), VOLT_MG_DEADLINE (420),
#   VOLT_MG_TOKENS (64), VOLT_MG_PROMPTS (2), VOLT_MG_TTFT_TOKENS (2048), VOLT_MG_DTYPE (half; the decode model)
#   VOLT_MG_RUN_TIMEOUT (60) seconds any one run of info, golden, text, procs, commbench may take (never past
#                           VOLT_MG_DEADLINE + 30 s; none starts after it): a hang in NCCL fails that run, not the plan
# Exit 0 when no part failed (skips do not fail). Not yet run on a GPU (written 2026-12-06 without one).
# shellcheck disable=SC2317
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
ROOT=$PWD
B=$(cd "${1:?usage: scripts/gpu/multi_gpu.sh BUNDLE}" && pwd)
V=$B/voltllm
DEV=${VOLT_MG_DEVICE:-cuda}
read -r -a SHAPE <<<"${VOLT_MG_SHAPE:---preset 120b}"
PARTS=" ${VOLT_MG_PARTS:-info golden text procs fault commbench decode ttft} "
DEADLINE=${VOLT_MG_DEADLINE:-420}
NTOK=${VOLT_MG_TOKENS:-64}
NPROMPTS=${VOLT_MG_PROMPTS:-2}
TTFT_TOKENS=${VOLT_MG_TTFT_TOKENS:-2048}
DTYPE=${VOLT_MG_DTYPE:-half}
OUT=${OUT:-/tmp/volt-multi-gpu-out}
RUN_T=${VOLT_MG_RUN_TIMEOUT:-60}
W=$(mktemp -d /tmp/volt-mg.XXXXXX)
L=$W/logs
mkdir -p "$OUT" "$L"
S=$OUT/multi_gpu.json
: >"$S"
START=$(date +%s)
# The logs whatever happens next (an exit 1 below, a run that failed): written on the way out.
trap '(cd "$W" && find . -maxdepth 1 \( -name "*.txt" -o -name "*.out" \) -print0 | xargs -0 tar czf "$OUT/multi_gpu_logs.tar.gz" logs)' EXIT
export PYTHONUNBUFFERED=1 CUDA_CACHE_PATH=$W/jit VOLT_SOURCE_DIR=$ROOT NCCL_NVLS_ENABLE=0
# shellcheck source=scripts/gpu/lib.sh
. scripts/gpu/lib.sh
volt_find_cublas multi_gpu
NG=${VOLT_MG_GPUS:-}
if [ -z "$NG" ]; then
  if [ "$DEV" = cuda ]; then NG=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); else NG=2; fi
fi
TPS=(2)
[ "$NG" -ge 4 ] && TPS=(2 4)
echo "multi_gpu: bundle $B ($(sed -n 's/^preset: //p;s/^commit: //p' "$B/MANIFEST" 2>/dev/null | tr '\n' ' ')); device $DEV, $NG GPUs, TP ${TPS[*]}; parts$PARTS; deadline ${DEADLINE}s; work $W"

DEADLINE_VAR=VOLT_MG_DEADLINE  # the part runner: scripts/gpu/lib.sh volt_part
# vt CMD...: CMD bounded by VOLT_MG_RUN_TIMEOUT and by the deadline + 30 s; past that not started (124).
vt() {
  local t=$(($(volt_left) + 30))
  if [ "$t" -le 0 ]; then
    echo "multi_gpu: past VOLT_MG_DEADLINE + 30 s, not started: $*" >&2
    return 124
  fi
  [ "$t" -gt "$RUN_T" ] && t=$RUN_T
  timeout -k 5 "$t" "$@"
}
# volt_py's helpers (scripts/gpu/lib.sh) here: npy, msg, rel.
VOLT_PY_DEFS="import struct, array
def npy(path):
    # float32 [T, V] .npy (format 1.0 / 2.0), without numpy
    b = open(path, 'rb').read()
    assert b[:6] == b'\x93NUMPY', path
    n, off = (struct.unpack('<H', b[8:10])[0], 10) if b[6] == 1 else (struct.unpack('<I', b[8:12])[0], 12)
    head = b[off:off + n].decode()
    assert \"'<f4'\" in head, head
    a = array.array('f'); a.frombytes(b[off + n:])
    return a
def msg(line):
    # a log line without its level and time stamp
    return re.sub(r'^[DIWE] [^ ]+ [^ ]+ ', '', line)
def rel(a, b):
    if len(a) != len(b) or not b: return float('inf')  # another shape: not comparable (zip would truncate)
    scale = max(abs(x) for x in b)
    return max(abs(x - y) for x, y in zip(a, b)) / scale if scale > 0 else float('inf')"

# ar MODE: the flags of an all-reduce mode (nccl: NCCL alone; custom: the default, the one-shot kernel when
# the peer probe passes). On the CPU both are the threads communicator (the flag is accepted, unused).
AR=()
ar() {
  AR=()
  [ "$1" = nccl ] && AR=(--disable-custom-all-reduce)
  return 0
}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# ---- info: topology, NCCL, the engine's probe and communicator lines ----
info() {
  local topo=/dev/null kv=tests/data/golden/kv8/tiny-kv8 tp=$NG
  [ "$tp" -gt 8 ] && tp=8
  if [ "$DEV" = cuda ]; then
    nvidia-smi topo -m >"$W/topo.txt" 2>&1
    nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,driver_version --format=csv,noheader >"$W/gpus.txt" 2>&1
    topo=$W/topo.txt
  fi
  vt "$V" --log-level info logits --device "$DEV" --dtype float --model "$kv" --prompt-ids 1,2,3 \
    --tensor-parallel-size "$tp" --out "$W/info.npy" >"$W/info_run.log" 2>&1
  local rc=$?
  cat "$W/info_run.log"
  volt_py '
log = open(sys.argv[1], errors="replace").read()
lines = lambda pat: [msg(l) for l in log.splitlines() if re.search(pat, l)]
nccl = None
for lib in ("/usr/local/cuda/lib64", "/usr/lib/x86_64-linux-gnu", os.path.join(sys.argv[5], "lib")):
    for f in (os.listdir(lib) if os.path.isdir(lib) else []):
        if f.startswith("libnccl.so."): nccl = nccl or os.path.join(lib, f)
m = re.search(r"NCCL version code (\d+)", log)
d = {"pass": int(sys.argv[2]) == 0, "gpus": open(sys.argv[4]).read().splitlines() if os.path.exists(sys.argv[4]) else [],
     "topo": open(sys.argv[3]).read().splitlines() if sys.argv[3] != "/dev/null" else [],
     "nccl_version_code": int(m.group(1)) if m else None, "nccl_file": nccl,
     "peer_access": lines(r"peer access: "), "custom_all_reduce": lines(r"custom all-reduce: "),
     "communicator": lines(r"parallel: .*communicator"), "nvls": lines(r"NCCL_NVLS_ENABLE"), "tp": int(sys.argv[6])}
print(json.dumps(d))' "$W/info_run.log" "$rc" "$topo" "$W/gpus.txt" "$B" "$tp" >"$W/info.json"
  return "$rc"
}
volt_part info info

# ---- golden: logits parity TP k vs TP 1 on the golden checkpoints ----
volt_py 'g = json.load(open(sys.argv[1]))
for i, p in enumerate(g["prompts"][: int(sys.argv[2])]): print(i, p["start_pos"], ",".join(map(str, p["ids"])))' \
  tests/data/golden/golden.json "$NPROMPTS" >"$W/prompts.txt"
golden() {
  local rc=0 ckpt tp mode i start ids name heads
  mkdir -p "$W/golden"
  for ckpt in tiny-mxfp4 tiny-bf16 kv8/tiny-kv8; do
    name=$(basename "$ckpt")
    heads=$(volt_py 'print(json.load(open(sys.argv[1]))["num_key_value_heads"])' "tests/data/golden/$ckpt/config.json")
    for cfg in "1 nccl" $(for tp in "${TPS[@]}"; do [ $((heads % tp)) -eq 0 ] && echo "$tp:nccl $tp:custom"; done); do
      tp=${cfg%%[: ]*}
      mode=${cfg##*[: ]}
      ar "$mode"
      while read -r i start ids; do
        vt "$V" --log-level warning logits --device "$DEV" --dtype float --model "tests/data/golden/$ckpt" \
          --prompt-ids "$ids" --start-pos "$start" --tensor-parallel-size "$tp" "${AR[@]}" \
          --out "$W/golden/$name.tp$tp.$mode.$i.npy" || rc=1
      done <"$W/prompts.txt"
      [ "$tp" -eq 1 ] && continue
      volt_emit "$(volt_py '
n, d = int(sys.argv[4]), sys.argv[1]
r = max(rel(npy(f"{d}/{sys.argv[2]}.tp{sys.argv[3]}.{sys.argv[5]}.{i}.npy"), npy(f"{d}/{sys.argv[2]}.tp1.nccl.{i}.npy")) for i in range(n))
print(json.dumps({"part": f"golden_{sys.argv[2]}_tp{sys.argv[3]}_{sys.argv[5]}", "pass": r <= 2e-5, "rel_vs_tp1": r,
                  "tolerance": 2e-5, "prompts": n, "dtype": "float"}))' "$W/golden" "$name" "$tp" "$NPROMPTS" "$mode" 2>&1)" ||
        rc=1
    done
  done
  grep -q '"part": "golden_.*"pass": false' "$S" && rc=1
  return "$rc"
}
volt_part golden golden

# ---- text: greedy text of the demo model, TP 2 vs TP 1 ----
text() {
  local rc=0 run tp mode eager name
  for run in "1 nccl graphs" "1 nccl eager" "2 custom graphs" "2 custom eager" "2 nccl graphs" "2 nccl eager"; do
    read -r tp mode eager <<<"$run"
    name=text_tp${tp}_${mode}_$eager
    local extra=()
    ar "$mode"
    [ "$tp" -gt 1 ] && extra=(--tensor-parallel-size "$tp" "${AR[@]}")
    [ "$eager" = eager ] && extra+=(--enforce-eager)
    vt "$V" --log-level info generate --device "$DEV" --model assets/demo-model --prompt "The old harbor town" \
      --max-tokens 64 --ignore-eos --temperature 0 "${extra[@]}" >"$W/$name.txt" 2>"$L/$name.log" || rc=1
  done
  volt_py '
d = sys.argv[1]
ref = open(f"{d}/text_tp1_nccl_graphs.txt").read()
res = {n: ("SAME" if open(f"{d}/{n}.txt").read() == ref else "DIFF") for n in
       ["text_tp1_nccl_eager", "text_tp2_custom_graphs", "text_tp2_custom_eager", "text_tp2_nccl_graphs", "text_tp2_nccl_eager"]}
print(json.dumps({"pass": all(v == "SAME" for v in res.values()) and len(ref) > 0, "vs_tp1_graphs": res,
                  "tokens": 64, "text_tp1": ref[:200]}))' "$W" >"$W/text.json"
  volt_py 'sys.exit(0 if json.load(open(sys.argv[1]))["pass"] else 1)' "$W/text.json" || rc=1
  return "$rc"
}
volt_part text text

# ---- procs: two processes as two nodes, one GPU each ----
procs() {
  local rc=0 r port pids kv=tests/data/golden/kv8/tiny-kv8 ids
  ids=$(sed -n '1p' "$W/prompts.txt" | cut -d' ' -f3)
  vt "$V" --log-level warning logits --device "$DEV" --dtype float --model "$kv" --prompt-ids "$ids" --out "$W/procs_tp1.npy" || rc=1
  vt "$V" --log-level warning logits --device "$DEV" --dtype float --model "$kv" --prompt-ids "$ids" --tensor-parallel-size 2 \
    --disable-custom-all-reduce --out "$W/procs_threads.npy" || rc=1
  port=$(free_port)
  pids=()
  for r in 0 1; do
    WORLD_SIZE=2 RANK=$r LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      vt "$V" --log-level info logits --device "$DEV" --dtype float --model "$kv" --prompt-ids "$ids" \
      --tensor-parallel-size 2 --out "$W/procs_tp2.npy" >"$L/procs_logits_rank$r.log" 2>&1 &
    pids+=($!)
  done
  for r in 0 1; do wait "${pids[$r]}" || rc=1; done
  vt "$V" --log-level warning generate --device "$DEV" --model assets/demo-model --prompt "The old harbor town" \
    --max-tokens 64 --ignore-eos --temperature 0 >"$W/procs_text_tp1.txt" || rc=1
  port=$(free_port)
  pids=()
  for r in 0 1; do
    vt "$V" --log-level info generate --device "$DEV" --model assets/demo-model --prompt "The old harbor town" \
      --max-tokens 64 --ignore-eos --temperature 0 --tensor-parallel-size 2 --nnodes 2 --node-rank "$r" \
      --master-addr 127.0.0.1 --master-port "$port" >"$W/procs_text_rank$r.txt" 2>"$L/procs_generate_rank$r.log" &
    pids+=($!)
  done
  for r in 0 1; do wait "${pids[$r]}" || rc=1; done
  volt_py '
d, rc = sys.argv[1], int(sys.argv[2])
ok = lambda f: os.path.exists(f) and os.path.getsize(f) > 0
r = {"pass": False, "rc": rc}
if ok(f"{d}/procs_tp2.npy") and ok(f"{d}/procs_tp1.npy") and ok(f"{d}/procs_threads.npy"):
    p, t1, th = npy(f"{d}/procs_tp2.npy"), npy(f"{d}/procs_tp1.npy"), npy(f"{d}/procs_threads.npy")
    r.update({"logits_rel_vs_tp1": rel(p, t1), "logits_bitwise_vs_one_process_nccl": list(p) == list(th)})
text0 = open(f"{d}/procs_text_rank0.txt").read() if ok(f"{d}/procs_text_rank0.txt") else ""
r["text_vs_tp1"] = "SAME" if text0 and text0 == open(f"{d}/procs_text_tp1.txt").read() else "DIFF"
gpus = []
for f in sorted(os.listdir(sys.argv[3])):
    if f.startswith("procs_"):
        gpus += [msg(l.rstrip()) for l in open(os.path.join(sys.argv[3], f), errors="replace") if "takes GPU" in l or "NCCL id" in l]
r["launch_lines"] = gpus
r["pass"] = (rc == 0 and r.get("logits_rel_vs_tp1", 1) <= 2e-5 and r.get("logits_bitwise_vs_one_process_nccl", False)
             and r["text_vs_tp1"] == "SAME")
print(json.dumps(r))' "$W" "$rc" "$L" >"$W/procs.json"
  volt_py 'sys.exit(0 if json.load(open(sys.argv[1]))["pass"] else 1)' "$W/procs.json"
}
volt_part procs procs

# ---- fault: a stalled rank across processes fails the group within --collective-timeout ----
fault() {
  sh tests/unit/executor/multiprocess_failure.sh "$V" "$W/fault" stall --device "$DEV"
  local rc=$?
  volt_py '
import glob
err = open(os.path.join(sys.argv[1], "rank0.err"), errors="replace").read() if os.path.exists(os.path.join(sys.argv[1], "rank0.err")) else ""
w = [msg(l) for l in err.splitlines() if "watchdog" in l][:2]
print(json.dumps({"pass": int(sys.argv[2]) == 0, "watchdog_lines": w, "timeout_s": 3}))' "$W/fault" "$rc" >"$W/fault.json"
  cp "$W/fault"/*.err "$L/" 2>/dev/null
  return "$rc"
}
volt_part fault fault

# ---- commbench: NCCL vs the custom all-reduce across GPUs, and the same-device lines ----
commbench() {
  if [ "$DEV" != cuda ] || [ ! -x "$B/cuda_backend_test" ]; then
    echo '{"skipped": "needs --device cuda and the bundle'"'"'s cuda_backend_test"}' >"$W/commbench.json"
    return 77
  fi
  vt "$B/cuda_backend_test" --gtest_also_run_disabled_tests --gtest_filter='CudaCommBench.*' >"$W/commbench.txt" 2>&1
  local rc=$?
  cat "$W/commbench.txt"
  # The cross-GPU case skips itself (GTEST_SKIP: fewer than 2 GPUs, no libnccl.so.2) and gtest still exits 0.
  if [ "$NG" -ge 2 ] && ! grep -q '^ALLREDUCE {"comm": "nccl"' "$W/commbench.txt"; then
    echo "commbench: no NCCL line across GPUs (DISABLED_NcclAndOneShotAcrossGpus skipped?)"
    rc=1
  fi
  sed -n 's/^ALLREDUCE //p' "$W/commbench.txt" | while read -r line; do volt_emit "$(volt_py '
d = json.loads(sys.argv[1]); d = {"part": "allreduce_" + d["comm"] + "_r" + str(d["ranks"]) + "_" + str(d["rows"]) + "_" + d["mode"], "pass": True, **d}
print(json.dumps(d))' "$line")"; done
  return "$rc"
}
volt_part commbench commbench

# ---- the 120b-shape model (configs only; dummy weights) ----
LAYERS=()
[ -n "${VOLT_MG_LAYERS:-}" ] && LAYERS=(--layers "$VOLT_MG_LAYERS")
timeout 60 "$V" --log-level warning make-model "${SHAPE[@]}" "${LAYERS[@]}" --config-only --no-tokenizer --out "$W/big" \
  >"$L/make_model.log" 2>&1 || { cat "$L/make_model.log"; exit 1; }
cp assets/demo-model/tokenizer.json "$W/big/"

# run_big NAME TP BATCH MODE EAGER [ARGS...]: one generate on the 120b shape; emits its line.
SLOWEST=0
run_big() {
  local name=$1 tp=$2 n=$3 mode=$4 eager=$5
  shift 5
  local need=$((SLOWEST * 13 / 10))
  if [ "$(volt_left)" -le "$need" ]; then
    volt_emit "{\"part\": \"$name\", \"skipped\": \"deadline: $(volt_left) s left, the slowest run so far took $SLOWEST s\"}"
    return 0
  fi
  local extra=() i t0 t1 r
  ar "$mode"
  [ "$tp" -gt 1 ] && extra=(--tensor-parallel-size "$tp" "${AR[@]}")
  [ "$eager" = eager ] && extra+=(--enforce-eager)
  for ((i = 0; i < n; i++)); do echo "The harbor town number $i was quiet in the morning."; done >"$W/prompts_$n.txt"
  t0=$(date +%s)
  timeout "$(volt_left)" "$V" --log-level info generate --device "$DEV" --dtype "$DTYPE" --load-format dummy \
    --model "$W/big" --temperature 0 --max-num-seqs "$n" --kv-cache-memory-bytes 4294967296 "${extra[@]}" "$@" \
    >"$W/$name.out" 2>"$L/$name.log"
  r=$?
  t1=$(date +%s)
  [ $((t1 - t0)) -gt "$SLOWEST" ] && SLOWEST=$((t1 - t0))
  volt_emit "$(volt_py '
log = open(sys.argv[1], errors="replace").read()
m = re.search(r"(\d+) prompt tokens, (\d+) generated tokens in ([0-9.]+) s: ([0-9.]+) generated tok/s", log)
tps = float(m.group(4)) if m else None
n = int(sys.argv[5])
d = {"part": sys.argv[2], "pass": int(sys.argv[3]) == 0 and bool(tps), "rc": int(sys.argv[3]), "tp": int(sys.argv[4]),
     "batch": n, "allreduce": sys.argv[6], "eager": sys.argv[7] == "eager", "tok_s": tps,
     "ms_per_step": round(1000 * n / tps, 3) if tps else None, "prompt_tokens": int(m.group(1)) if m else None,
     "generated": int(m.group(2)) if m else None, "gen_seconds": float(m.group(3)) if m else None,
     "wall_s": int(sys.argv[8]), "custom_all_reduce": [msg(l) for l in log.splitlines() if "custom all-reduce:" in l][:1]}
if sys.argv[2].startswith("ttft"): d["ttft_s"] = d["gen_seconds"]  # one token: submit to the first token
print(json.dumps(d))' "$L/$name.log" "$name" "$r" "$tp" "$n" "$mode" "$eager" "$((t1 - t0))")"
}

# ---- ttft: a 2,048-token prompt, one token ----
ttft_runs() {
  local ids tp
  # Ids below 7,000: the demo tokenizer that the model directory carries bounds the prompt's ids.
  ids=$(volt_py 'print(",".join(str(13 + (i * 7919) % 7000) for i in range(int(sys.argv[1]))))' "$TTFT_TOKENS")
  echo "$ids" >"$W/ttft_ids.txt"
  for tp in 1 "${TPS[@]}"; do
    run_big "ttft_tp${tp}_${TTFT_TOKENS}" "$tp" 1 custom eager --prompt-ids "$ids" --max-tokens 1 \
      --max-model-len $((TTFT_TOKENS + 64)) --max-num-batched-tokens "$TTFT_TOKENS"
  done
}

# ---- decode: tok/s of the 120b shape at TP 1, 2, 4; batch-1 parity; TTFT; then batch 32 and 8 ----
decode() {
  local tp n
  local b1=("1 nccl graphs" "1 nccl eager")
  for tp in "${TPS[@]}"; do b1+=("$tp custom eager" "$tp nccl eager"); done
  for run in "${b1[@]}"; do
    read -r tp mode eager <<<"$run"
    run_big "decode_tp${tp}_b1_${mode}_$eager" "$tp" 1 "$mode" "$eager" --prompts-file "$W/prompts_1.txt" \
      --max-tokens "$NTOK" --ignore-eos --logprobs 1
  done
  # parity120: TP k against TP 1 eager at batch 1 (the same dummy weights: the loader's fixed seed).
  for run in "${b1[@]:2}"; do
    read -r tp mode eager <<<"$run"
    volt_emit "$(volt_py '
def read(f):
    ids, lps = [], []
    for l in (open(f, errors="replace") if os.path.exists(f) else []):
        m = re.match(r"\[logprob\] (\d+) (\S+)", l)
        if m: ids.append(int(m.group(1))); lps.append(float(m.group(2)))
    return ids, lps
if not (os.path.exists(sys.argv[1]) and os.path.exists(sys.argv[2])):
    print(json.dumps({"part": sys.argv[3], "skipped": "a run it compares did not run (deadline)"})); sys.exit()
a, b = read(sys.argv[1]), read(sys.argv[2])
same = 0
while same < min(len(a[0]), len(b[0])) and a[0][same] == b[0][same]: same += 1
dl = max([abs(x - y) for x, y in zip(a[1][:same], b[1][:same])] or [None]) if same else None
print(json.dumps({"part": sys.argv[3], "informational": True, "ids_equal_for": same, "logprob_lines": [len(a[0]), len(b[0])],
                  "tokens": len(b[0]), "max_abs_dlogprob_common": dl, "dtype": sys.argv[4],
                  "note": "informational at half: the TP sums round in another order; random dummy weights give flat logits"}))' \
      "$W/decode_tp${tp}_b1_${mode}_$eager.out" "$W/decode_tp1_b1_nccl_eager.out" "parity120_tp${tp}_$mode" "$DTYPE")"
  done
  # TTFT before the larger batches: the deadline cuts from the end.
  [[ $PARTS == *" ttft "* ]] && ttft_runs
  for n in 32 8; do
    run_big "decode_tp1_b${n}_nccl_graphs" 1 "$n" nccl graphs --prompts-file "$W/prompts_$n.txt" --max-tokens "$NTOK" --ignore-eos
    for tp in "${TPS[@]}"; do
      run_big "decode_tp${tp}_b${n}_custom_eager" "$tp" "$n" custom eager --prompts-file "$W/prompts_$n.txt" \
        --max-tokens "$NTOK" --ignore-eos
    done
  done
  ! grep -Eq '"part": "(decode|ttft)_.*"pass": false' "$S"
}
[[ $PARTS == *" decode "* ]] || [[ $PARTS != *" ttft "* ]] || PARTS="$PARTS decode "  # ttft runs inside decode
volt_part decode decode




echo "multi_gpu: $(volt_elapsed) s; $(grep -c '"pass": true' "$S") passed, $(grep -c '"pass": false' "$S") failed, $(grep -c '"skipped"' "$S") skipped -> $S"
! grep -q '"pass": false' "$S"
