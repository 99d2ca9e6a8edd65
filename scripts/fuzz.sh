#!/usr/bin/env bash
# The libFuzzer harnesses (tests/fuzz) under ASan + UBSan with Debian's clang: configures and builds
# build-fuzz, replays each harness's corpus (tests/fuzz/<harness>/), then fuzzes each for
# VOLT_FUZZ_SECONDS (default 20; 0: replay only). New inputs go to build-fuzz/corpus/<harness>/ (the
# committed corpus is only read); a crash leaves its input in build-fuzz/crashes/ and fails the script.
# Usage: scripts/fuzz.sh [harness ...] (default: all).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${VOLT_FUZZ_SECONDS:-20}"
if [ ! -f build-fuzz/build.ninja ]; then
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DVOLT_FUZZ=ON -DVOLT_BUILD_TESTS=OFF \
    -DVOLT_BUILD_BENCH=OFF -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" \
    -DCMAKE_C_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" >/dev/null
fi
cmake --build build-fuzz --target volt_fuzzers -j "${VOLT_FUZZ_JOBS:-$(nproc)}"
harnesses=("$@")
if [ ${#harnesses[@]} -eq 0 ]; then
  harnesses=(chat_request_fuzz completion_request_fuzz tokenize_request_fuzz detokenize_request_fuzz
             harmony_parser_fuzz tokenizer_fuzz safetensors_fuzz config_fuzz)
fi
mkdir -p build-fuzz/crashes
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
for h in "${harnesses[@]}"; do
  corpus="tests/fuzz/$h"
  work="build-fuzz/corpus/$h"
  mkdir -p "$work" "$corpus"
  echo "fuzz: $h: replaying $(ls "$corpus" | wc -l) corpus inputs"
  "build-fuzz/tests/fuzz/$h" -runs=0 "$corpus" >"build-fuzz/$h.replay.log" 2>&1 ||
    { tail -40 "build-fuzz/$h.replay.log"; echo "fuzz: $h: the corpus replay failed"; exit 1; }
  if [ "$secs" != "0" ]; then
    "build-fuzz/tests/fuzz/$h" -max_total_time="$secs" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix=build-fuzz/crashes/"$h"- "$work" "$corpus" >"build-fuzz/$h.fuzz.log" 2>&1 ||
      { tail -60 "build-fuzz/$h.fuzz.log"; echo "fuzz: $h: crashed (input in build-fuzz/crashes/)"; exit 1; }
    grep -E "^#[0-9]+.*DONE|Done [0-9]+ runs" "build-fuzz/$h.fuzz.log" | tail -1 | sed "s/^/fuzz: $h: /"
  fi
done
echo "fuzz: all harnesses passed"
