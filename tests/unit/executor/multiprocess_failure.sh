#!/bin/sh
# The engine across processes when a worker goes away mid-run: `voltllm generate` as 2 tensor-parallel
# processes on the demo model, a long greedy run (a plain text prompt: no harmony stop token); once rank 0's engine runs, the worker is killed
# (HOW=kill: SIGKILL, its connections close) or frozen (HOW=stop: SIGSTOP, nothing closes, only the
# collective watchdog can tell), or stalls by itself (HOW=stall: the debug hook VOLT_DEBUG_STALL_RANK=1
# makes rank 1 sleep 60 s in step 2, awake and connected; what scripts/gpu/multi_gpu.sh uses on GPUs).
# Rank 0 must fail loudly (exit 1 naming the cause) within the collective timeout (--collective-timeout 3)
# plus slack, never hang. Usage: multiprocess_failure.sh VOLTLLM WORK_DIR HOW [--device cuda ...]
set -eu
BIN=$1 WORK=$2 HOW=$3
shift 3
if [ "$HOW" = stall ]; then export VOLT_DEBUG_STALL_RANK=1 VOLT_DEBUG_STALL_S=60 VOLT_DEBUG_STALL_STEP=2; fi
mkdir -p "$WORK"
rm -f "$WORK"/*.err "$WORK"/*.txt
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# Plain background commands, so that $! is voltllm itself (a function or `timeout` would put a process
# between the signal and the rank).
WORLD_SIZE=2 RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT "$BIN" --log-level info generate \
    --prompt "The old harbor town" --max-tokens 20000 --ignore-eos --max-model-len 24000 \
    --tensor-parallel-size 2 --collective-timeout 3 "$@" > "$WORK/rank1.txt" 2> "$WORK/rank1.err" &
worker=$!
start=$(date +%s)
WORLD_SIZE=2 RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT "$BIN" --log-level info generate \
    --prompt "The old harbor town" --max-tokens 20000 --ignore-eos --max-model-len 24000 \
    --tensor-parallel-size 2 --collective-timeout 3 "$@" > "$WORK/rank0.txt" 2> "$WORK/rank0.err" &
driver=$!
# Wait for rank 0's engine to start, then let it run a few steps.
i=0
until grep -q "engine: KV blocks" "$WORK/rank0.err"; do
    i=$((i + 1))
    [ "$i" -lt 600 ] || { cat "$WORK/rank0.err"; echo "rank 0 never started"; exit 1; }
    sleep 0.1
done
sleep 0.5
case "$HOW" in
kill) kill -KILL "$worker" ;;
stop) kill -STOP "$worker" ;;
stall) grep -q "VOLT_DEBUG_STALL_RANK=1: this rank will sleep 60 s before its share of step 2" "$WORK/rank1.err" ;;
*) echo "HOW: kill, stop or stall"; exit 2 ;;
esac
killed=$(date +%s)
# Rank 0 must end by itself; past 60 s it hangs (killed, and the test fails). The guard ends with rank 0.
(
    i=0
    while [ "$i" -lt 600 ] && kill -0 "$driver" 2> /dev/null; do
        sleep 0.1
        i=$((i + 1))
    done
    kill -KILL "$driver" 2> /dev/null
) > /dev/null 2>&1 &
code=0
wait "$driver" || code=$?
took=$(($(date +%s) - killed))
[ "$HOW" = kill ] || kill -KILL "$worker"
wait "$worker" 2> /dev/null || true
cat "$WORK/rank0.err" | tail -5
[ "$code" -eq 1 ] || { echo "rank 0 exited $code (want 1)"; exit 1; }
[ "$took" -le 15 ] || { echo "rank 0 took $took s to fail"; exit 1; }
if [ "$HOW" = kill ]; then
    grep -q "rank 1 closed its connection (failed or exited)" "$WORK/rank0.err"
else
    # The TCP communicator names the rank it waited for; NCCL (--device cuda) the step that did not finish.
    grep -Eq "collective watchdog: rank 0 (waited 3 s for rank 1|'s .* did not finish in 3 s)" "$WORK/rank0.err"
fi
grep -q "generate: prompt 0: " "$WORK/rank0.err"
echo "worker ${HOW}ed mid-run: rank 0 failed in $took s ($(($(date +%s) - start)) s in all), exit 1"
