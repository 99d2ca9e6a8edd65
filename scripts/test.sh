#!/usr/bin/env bash
# Runs every test that needs no GPU: setup, build, the CUDA compile and resource check
# (scripts/cuda-check.sh; VOLT_SETUP_CUDA=0 skips it), then CTest (unit, golden, api labels; the `cuda`
# label needs a GPU: scripts/gpu/check.sh runs it on the GPU machine), then the fuzzers (scripts/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
if command -v clang-format >/dev/null; then
  files=$(git ls-files 'src/*.h' 'src/*.cc' 'src/*.cu' 'src/*.cuh' 'tools/*.cc' 'tools/*.h' 'tests/*.cc' 'tests/*.h' 'bench/*.cc' 2>/dev/null || true)
  if [ -n "$files" ]; then
    echo "$files" | xargs clang-format --dry-run --Werror
  fi
fi
if [ "${VOLT_SETUP_CUDA:-1}" != "0" ]; then
  scripts/cuda-check.sh
fi
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
# The libFuzzer harnesses (clang, ASan + UBSan): replay the corpus, then VOLT_FUZZ_SECONDS (20) each.
# VOLT_FUZZ=0 skips them.
if [ "${VOLT_FUZZ:-1}" != "0" ]; then
  scripts/fuzz.sh
fi
