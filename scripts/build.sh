#!/usr/bin/env bash
# Configures and builds the CPU preset into build/ (incremental). Extra arguments go to cmake --build.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/build.ninja ] || cmake --preset cpu >/dev/null
cmake --build build "$@"
