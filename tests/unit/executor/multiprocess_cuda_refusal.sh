#!/bin/sh
# --device cuda across processes passes flag validation now (one GPU per process, collectives on NCCL:
# docs/parallel.md "GPU ranks in processes"). Where there is no GPU to take (a build without CUDA, or no
# driver / device: CI), every rank must exit 1 within seconds naming the reason, never hang in the
# rendezvous. Skipped (exit 77) where `voltllm cuda-info` finds a GPU. Usage: VOLTLLM MODEL_DIR WORK_DIR
set -eu
BIN=$1 MODEL=$2 WORK=$3
if "$BIN" cuda-info > /dev/null 2>&1; then echo "this build sees a GPU: not the case tested here"; exit 77; fi
mkdir -p "$WORK"
PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for r in 0 1; do
    WORLD_SIZE=2 RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT timeout 60 "$BIN" --log-level warning generate \
        --model "$MODEL" --prompt "Hello" --max-tokens 4 --device cuda --tensor-parallel-size 2 \
        --collective-timeout 5 > "$WORK/rank$r.txt" 2> "$WORK/rank$r.err" &
    eval "pid$r=\$!"
done
for r in 0 1; do
    code=0
    eval "wait \$pid$r" || code=$?
    cat "$WORK/rank$r.err"
    [ "$code" -eq 1 ] || { echo "rank $r exited $code (want 1; 124: it hung)"; exit 1; }
    grep -Eq "this voltllm was built without CUDA|this process sees no GPU" "$WORK/rank$r.err" ||
        { echo "rank $r: not the expected reason"; exit 1; }
    if grep -q "GPU ranks run in one process" "$WORK/rank$r.err"; then echo "the old refusal"; exit 1; fi
done
echo "--device cuda across processes without a GPU: both ranks exit 1 with the reason"
