#!/usr/bin/env bash
# Quick start, the main job: set up, build, then serve the OpenAI API on the embedded default model
# (assets/demo-model, a small GPT-OSS trained on the Brown Corpus) at http://127.0.0.1:8000. Extra
# arguments go to `voltllm serve` (e.g. a model directory, --port 9000).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec build/tools/voltllm serve "$@"
