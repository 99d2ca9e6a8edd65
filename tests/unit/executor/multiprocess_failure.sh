#!/bin/sh
# The engine across processes when a worker goes away mid-run: `voltllm generate` as 2 tensor-parallel
# processes on the demo model, a long greedy run (a plain text prompt: no harmony stop token); once rank 0's engine runs, the worker is killed
# (HOW=kill: SIGKILL, its connections close) or frozen (HOW=stop: SIGSTOP, nothing closes, only the
# collective watchdog can tell), or stalls by itself (HOW=stall: the debug hook VOLT_DEBUG_STALL_RANK=1
# makes rank 1 sleep 60 s in step 2, awake and connected; what scripts/gpu/multi_gpu.sh uses on GPUs).
# Rank 0 must fail loudly (exit 1 naming the cause) within the collective timeout (--collective-timeout 3)
# plus slack, never hang. Usage: multiprocess_failure.sh VOLTLLM WORK_DIR HOW [--device cuda ...]
#
# The worker runs in a process group of its own. A stopped process is otherwise at the mercy of whatever
# started the test: when the group it shares with ctest is orphaned (the shell that launched the suite in
# the background exits, a CI step's shell ends), the kernel sends every stopped member SIGHUP then SIGCONT
# (POSIX "orphaned process group"), and the frozen worker died of the SIGHUP with no log line: rank 0 then
# saw "rank 1 closed its connection" instead of the watchdog, and the test failed at random. In a group of
# its own, with this script (in another group of the session) as its parent, the worker's group is never
# orphaned while the script runs; if the script itself dies, the rule then ends the stopped worker.
# tests/unit/executor/orphaned_group.py checks this (generate_multiprocess_worker_stop_orphaned).
set -eu
BIN=$1 WORK=$2 HOW=$3
shift 3
if [ "$HOW" = stall ]; then export VOLT_DEBUG_STALL_RANK=1 VOLT_DEBUG_STALL_S=60 VOLT_DEBUG_STALL_STEP=2; fi
mkdir -p "$WORK"
rm -f "$WORK"/*.err "$WORK"/*.txt
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# The port was free a moment ago, not reserved: a test running beside this one (another worktree's suite)
# may draw the same. With the same model and flags its ranks would pass the handshake and join ours (its
# worker killed would look like ours gone); a secret of this run's own makes rank 0 drop them.
export VOLT_GROUP_SECRET="multiprocess-failure-$$-$PORT"
# Whatever happens, say what each process did (its exit status or signal) and how each log ends.
report() {
    echo "--- rank 0 (pid $driver): ${driver_status:-not reaped}; rank 1 (pid $worker): ${worker_status:-not reaped}"
    for r in 0 1; do
        echo "--- rank $r's log, last lines:"
        tail -n 8 "$WORK/rank$r.err" 2> /dev/null || true
    done
}
describe() {  # a wait status as words
    if [ "$1" -gt 128 ]; then echo "killed by signal $(($1 - 128)) ($(kill -l "$(($1 - 128))" 2> /dev/null || echo '?'))"; else echo "exit $1"; fi
}
fail() {
    echo "FAIL: $*"
    report
    exit 1
}
# Background commands that exec voltllm itself, so that $! is the rank (a function or `timeout` would put
# a process between the signal and the rank); the worker through a one-line exec that first moves it to a
# process group of its own (see above).
WORLD_SIZE=2 RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT python3 -c \
    'import os, sys; os.setpgid(0, 0); os.execv(sys.argv[1], sys.argv[1:])' "$BIN" --log-level info generate \
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
    [ "$i" -lt 600 ] || { kill -KILL "$driver" "$worker" 2> /dev/null || true; fail "rank 0 never started"; }
    sleep 0.1
done
sleep 0.5
# The worker must still run here (and be in its own group): a worker gone already is the failure to explain.
[ "$(cut -d' ' -f5 "/proc/$worker/stat" 2> /dev/null)" = "$worker" ] || {
    kill -KILL "$driver" 2> /dev/null || true
    s=0
    wait "$worker" 2> /dev/null || s=$?
    worker_status=$(describe "$s")
    fail "rank 1 was gone (or not in a process group of its own) before it was ${HOW}ped"
}
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
driver_status=$(describe "$code")
# A stopped or stalled worker must still be there (stopped: state T) for the test to mean anything.
worker_state=$(cut -d' ' -f3 "/proc/$worker/stat" 2> /dev/null || echo gone)
[ "$HOW" = kill ] || kill -KILL "$worker" 2> /dev/null || true
s=0
wait "$worker" 2> /dev/null || s=$?
worker_status=$(describe "$s")
case "$HOW:$worker_state" in
kill:* | stop:T | stall:[RSD]) ;;
*) fail "rank 1 did not stay ${HOW}ped until rank 0 ended (its state then: $worker_state)" ;;
esac
cat "$WORK/rank0.err" | tail -5
[ "$code" -eq 1 ] || fail "rank 0 exited $code (want 1)"
[ "$took" -le 15 ] || fail "rank 0 took $took s to fail"
if [ "$HOW" = kill ]; then
    grep -q "rank 1 closed its connection (failed or exited)" "$WORK/rank0.err" ||
        fail "rank 0 did not report rank 1's closed connection"
else
    # The TCP communicator names the rank it waited for; NCCL (--device cuda) the step that did not finish.
    grep -Eq "collective watchdog: rank 0 (waited 3 s for rank 1|'s .* did not finish in 3 s)" "$WORK/rank0.err" ||
        fail "rank 0 did not report the watchdog (a frozen worker must not look like a closed connection)"
fi
grep -q "generate: prompt 0: " "$WORK/rank0.err" || fail "rank 0 did not report the prompt's failure"
echo "worker ${HOW}ed mid-run: rank 0 failed in $took s ($(($(date +%s) - start)) s in all), exit 1"
