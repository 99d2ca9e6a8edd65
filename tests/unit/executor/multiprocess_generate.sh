#!/bin/sh
# The engine across processes (docs/parallel.md "Several processes"): `voltllm generate` started as TP x PP
# processes, one rank each, rank 0 running the engine and sending every step to the others over TCP. Its
# greedy text and logprobs (--logprobs: %.9g, every bit) must equal, byte for byte, the same split run as
# threads of one process (both communicators add the ranks' partial sums in rank order); and equal TP 1:
# the text always (as parallel_test asserts for threads), the logprobs too where the split changes no
# arithmetic (pipeline stages alone: WANT=all); WANT=threads compares with threads only (a sampled draw
# may differ from TP 1's where the tensor-parallel sums differ in their last bits). LAUNCH=env starts the ranks with torchrun's variables,
# LAUNCH=flags with --nnodes / --node-rank / --master-addr / --master-port.
# MICRO_BATCHES=M (environment): the threads and the processes run with --pipeline-micro-batches M, and
# the processes' output must also equal, byte for byte, threads at --pipeline-micro-batches 1 (the step whole).
# Usage: multiprocess_generate.sh VOLTLLM WORK_DIR TP PP LAUNCH WANT [generate flags ...]
set -eu
BIN=$1 WORK=$2 TP=$3 PP=$4 LAUNCH=$5 WANT=$6
shift 6
MB=${MICRO_BATCHES:-}
[ -z "$MB" ] || set -- "$@" --pipeline-micro-batches "$MB"
WORLD=$((TP * PP))
mkdir -p "$WORK"
rm -f "$WORK"/*.txt "$WORK"/*.err
"$BIN" --log-level warning generate "$@" --logprobs 3 > "$WORK/tp1.txt"
"$BIN" --log-level warning generate "$@" --logprobs 3 --tensor-parallel-size "$TP" \
    --pipeline-parallel-size "$PP" > "$WORK/threads.txt"
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# A test beside this one that draws the same free port (same model and split: the same handshake) must not
# join these ranks: a secret of this run's own (multiprocess_failure.sh says more).
export VOLT_GROUP_SECRET="multiprocess-generate-$$-$PORT"
pids=""
r=0
while [ "$r" -lt "$WORLD" ]; do
    if [ "$LAUNCH" = env ]; then
        WORLD_SIZE=$WORLD RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT timeout 300 "$BIN" --log-level warning \
            generate "$@" --logprobs 3 --tensor-parallel-size "$TP" --pipeline-parallel-size "$PP" \
            > "$WORK/rank$r.txt" 2> "$WORK/rank$r.err" &
    else
        timeout 300 "$BIN" --log-level warning generate "$@" --logprobs 3 --tensor-parallel-size "$TP" \
            --pipeline-parallel-size "$PP" --nnodes "$WORLD" --node-rank "$r" --master-addr 127.0.0.1 \
            --master-port "$PORT" > "$WORK/rank$r.txt" 2> "$WORK/rank$r.err" &
    fi
    pids="$pids $!"
    r=$((r + 1))
done
status=0
for p in $pids; do wait "$p" || status=1; done
[ "$status" -eq 0 ] || { cat "$WORK"/rank*.err; echo "a rank failed"; exit 1; }
r=1
while [ "$r" -lt "$WORLD" ]; do
    grep -q "rank $r of $WORLD: done" "$WORK/rank$r.err" || { cat "$WORK/rank$r.err"; exit 1; }
    [ ! -s "$WORK/rank$r.txt" ] || { echo "rank $r printed output"; exit 1; }
    r=$((r + 1))
done
grep -q '^\[logprob\] ' "$WORK/rank0.txt" || { echo "no logprobs printed"; exit 1; }
cmp "$WORK/threads.txt" "$WORK/rank0.txt"
if [ -n "$MB" ]; then
    # The same run with each step whole: the flag's last occurrence is dropped and 1 given instead.
    n=$#
    i=0
    for a in "$@"; do
        i=$((i + 1))
        [ "$i" -le $((n - 2)) ] && set -- "$@" "$a"
    done
    shift "$n"
    "$BIN" --log-level warning generate "$@" --logprobs 3 --tensor-parallel-size "$TP" \
        --pipeline-parallel-size "$PP" --pipeline-micro-batches 1 > "$WORK/threads_mb1.txt"
    cmp "$WORK/threads_mb1.txt" "$WORK/rank0.txt"
    echo "micro-batches $MB across processes: byte-equal to threads with each step whole"
fi
if [ "$WANT" = threads ]; then
    echo "tp $TP pp $PP: $WORLD processes ($LAUNCH) generate the threads' text and logprobs byte for byte"
    exit 0
fi
grep -v '^\[logprob\] ' "$WORK/tp1.txt" > "$WORK/tp1.text.txt"
grep -v '^\[logprob\] ' "$WORK/rank0.txt" > "$WORK/rank0.text.txt"
cmp "$WORK/tp1.text.txt" "$WORK/rank0.text.txt"
[ "$WANT" != all ] || cmp "$WORK/tp1.txt" "$WORK/rank0.txt"
echo "tp $TP pp $PP: $WORLD processes ($LAUNCH) generate the threads' text and logprobs byte for byte," \
    "and TP 1's $([ "$WANT" = all ] && echo "text and logprobs" || echo text)"
