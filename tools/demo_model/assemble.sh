#!/usr/bin/env bash
# Assembles the bf16 checkpoint (transformers save_pretrained layout) from what train.py wrote to $OUT on
# the GPU machine, then converts it to the published MXFP4 layout in assets/demo-model/.
# Usage: tools/demo_model/assemble.sh DEVICE_OUT_DIR   (run from the repository root, after scripts/build.sh)
set -euo pipefail
src=$1
bf16=out/demo-bf16
rm -rf "$bf16" && mkdir -p "$bf16"
tar -xf "$src/extras.tar" -C "$bf16" --strip-components=1 checkpoint
cp "$src"/model-*.safetensors "$src/tokenizer.json" "$bf16/"
# The hub's generation_config (bos, eos = <|return|> <|endoftext|> <|call|>, pad) and a tokenizer_config for
# transformers' AutoTokenizer, with the demo tokenizer's ids.
cp tools/demo_model/extra_files/generation_config.json tools/demo_model/extra_files/tokenizer_config.json "$bf16/"
chmod u+w "$bf16"/*
rm -rf assets/demo-model
build/tools/voltllm convert --in "$bf16" --out assets/demo-model
ls -l assets/demo-model
