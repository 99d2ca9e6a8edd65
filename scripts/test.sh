#!/usr/bin/env bash
# Runs every test that needs no GPU: setup, build, then CTest (unit, golden, api labels).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
if command -v clang-format >/dev/null; then
  files=$(git ls-files 'src/*.h' 'src/*.cc' 'tools/*.cc' 'tools/*.h' 'tests/*.cc' 'tests/*.h' 'bench/*.cc' 2>/dev/null || true)
  if [ -n "$files" ]; then
    echo "$files" | xargs clang-format --dry-run --Werror
  fi
fi
ctest --test-dir build --output-on-failure -j "$(nproc)" "$@"
