#!/bin/sh
# `voltllm serve` workers and signals (docs/parallel.md "Several processes"): a worker that is still loading
# or waiting in the rendezvous (no rank 0 here) exits 0 at once on SIGTERM instead of waiting for the
# watchdog (60 s); a serving worker whose rank 0 was SIGKILLed exits 1, as the docs say.
# Usage: multiprocess_serve_signals.sh VOLTLLM MODEL WORK_DIR
set -eu
BIN=$1 MODEL=$2 WORK=$3
mkdir -p "$WORK"
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
serve() {  # serve RANK: rank RANK of 2 (pipeline stages), in the background; $! is voltllm itself
    (exec "$BIN" serve "$MODEL" --port 0 --pipeline-parallel-size 2 --nnodes 2 --node-rank "$1" \
        --master-addr 127.0.0.1 --master-port "$PORT" --collective-timeout 60 > "$WORK/rank$1.out" \
        2> "$WORK/rank$1.err") &
}
# 1. SIGTERM during the rendezvous: out within a few seconds with 0.
serve 1
w=$!
sleep 1.5
start=$(date +%s)
kill -TERM "$w"
code=0
wait "$w" || code=$?
took=$(($(date +%s) - start))
[ "$code" -eq 0 ] || { cat "$WORK/rank1.err"; echo "a worker in the rendezvous exited $code on SIGTERM"; exit 1; }
[ "$took" -le 5 ] || { echo "a worker in the rendezvous took ${took} s to exit on SIGTERM"; exit 1; }
# 2. Rank 0 killed while the worker serves: the worker exits 1.
serve 0
r0=$!
serve 1
w=$!
i=0
until grep -q "serving rank 0's steps" "$WORK/rank1.err" 2> /dev/null; do
    i=$((i + 1))
    [ "$i" -le 600 ] || { cat "$WORK"/rank*.err; echo "the worker never joined"; kill -KILL "$r0" "$w"; exit 1; }
    sleep 0.1
done
kill -KILL "$r0"
wait "$r0" || true
code=0
wait "$w" || code=$?
[ "$code" -eq 1 ] || { cat "$WORK/rank1.err"; echo "the worker exited $code when rank 0 died (docs: 1)"; exit 1; }
grep -q "rank 0 closed its connection" "$WORK/rank1.err" || { cat "$WORK/rank1.err"; exit 1; }
echo "serve workers: SIGTERM in the rendezvous exits 0 in ${took} s; rank 0 killed: the worker exits 1"
