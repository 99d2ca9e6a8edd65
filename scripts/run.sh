#!/usr/bin/env bash
# Quick start, the main job: set up, build, then run voltllm on its embedded default model
# (tiny-chat: random weights with the real gpt-oss tokenizer, created on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec build/tools/voltllm generate --max-tokens 32 "$@"
