#!/bin/sh
# Tensor / pipeline parallelism across processes on one host, launched the torchrun way (WORLD_SIZE, RANK,
# MASTER_ADDR, MASTER_PORT; the same command line in every process): the output rank's logits must equal,
# byte for byte, the same split run as threads of one process (both communicators add the ranks' partial
# sums in rank order, so the bits agree). Usage: multiprocess_logits.sh VOLTLLM MODEL_DIR WORK_DIR TP PP.
set -eu
BIN=$1 MODEL=$2 WORK=$3 TP=$4 PP=$5
WORLD=$((TP * PP))
IDS=17,3,999,250,4,86,512,77,1,640,33,408,9,700,123,56,811,2,300,45
mkdir -p "$WORK"
rm -f "$WORK/threads.npy" "$WORK/processes.npy"
"$BIN" --log-level warning logits --model "$MODEL" --prompt-ids $IDS --out "$WORK/threads.npy" \
    --tensor-parallel-size "$TP" --pipeline-parallel-size "$PP"
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pids=""
r=0
while [ "$r" -lt "$WORLD" ]; do
    WORLD_SIZE=$WORLD RANK=$r MASTER_ADDR=localhost MASTER_PORT=$PORT "$BIN" --log-level warning logits \
        --model "$MODEL" --prompt-ids $IDS --out "$WORK/processes.npy" --tensor-parallel-size "$TP" \
        --pipeline-parallel-size "$PP" &
    pids="$pids $!"
    r=$((r + 1))
done
status=0
for p in $pids; do wait "$p" || status=1; done
[ "$status" -eq 0 ] || { echo "a rank failed"; exit 1; }
cmp "$WORK/threads.npy" "$WORK/processes.npy"
echo "tp $TP pp $PP: $WORLD processes give the threads' logits bit for bit"
