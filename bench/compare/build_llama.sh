#!/usr/bin/env bash
# bench/compare/build_llama.sh: run on the GPU machine (16 cores, CUDA 13, cmake, ninja, g++ 13) from the
# repository root with out/compare/llama-src.tar.xz carried (bench/compare/prepare.sh). Builds llama.cpp
# for sm_90 with CUDA 13 and its best defaults (GGML_CUDA on, CUDA graphs on by default, flash attention
# kernels built), the four tools the comparison runs, into /tmp/llama-build, and packs the stripped
# binaries and their shared libraries (rpath $ORIGIN) into $OUT/llama-bin-cuda13.tar.xz, which later runs
# carry as out/compare/llama-bin-cuda13.tar.xz (VOLT_LLAMA_PACK=1; 44 MB: too large to carry beside a
# bundle, so the comparison rebuilds it in its own call). ~5 minutes on 16 cores. VOLT_LLAMA_JOBS: -j.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/volt-compare-out}
mkdir -p "$OUT"
W=/tmp/llama-build
rm -rf "$W" && mkdir -p "$W"
tar -C "$W" -xJf out/compare/llama-src.tar.xz
cat "$W/llama.cpp/VOLT_SOURCE"
# The one local patch (its docstring says why): llama-server 500s on a random model's malformed UTF-8.
python3 bench/compare/patch_llama.py "$W/llama.cpp"
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
# shellcheck disable=SC2016  # $ORIGIN is for the linker, not the shell
cmake -S "$W/llama.cpp" -B "$W/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_SERVER=ON -DCMAKE_BUILD_RPATH='$ORIGIN' \
  -DCMAKE_INSTALL_RPATH='$ORIGIN' >"$OUT/llama-cmake.log" 2>&1 || { tail -30 "$OUT/llama-cmake.log"; exit 1; }
cmake --build "$W/build" -j "${VOLT_LLAMA_JOBS:-16}" --target llama-bench llama-batched-bench llama-server llama-perplexity \
  >"$OUT/llama-build.log" 2>&1 || { tail -40 "$OUT/llama-build.log"; exit 1; }
echo "build_llama: built in $(( $(date +%s) - t0 )) s"
[ "${VOLT_LLAMA_PACK:-0}" = 1 ] || exit 0
P=$W/pack/llama-bin-cuda13
mkdir -p "$P"
cp "$W"/build/bin/llama-bench "$W"/build/bin/llama-batched-bench "$W"/build/bin/llama-server \
  "$W"/build/bin/llama-perplexity "$P"/
find "$W/build" -name '*.so*' -exec cp -P {} "$P"/ \;
cp "$W/llama.cpp/VOLT_SOURCE" "$P"/
strip "$P"/llama-* "$P"/*.so* 2>/dev/null || true
ls -la "$P"
tar -C "$W/pack" -cf - llama-bin-cuda13 | xz -6 -T16 >"$OUT/llama-bin-cuda13.tar.xz"
ls -la "$OUT/llama-bin-cuda13.tar.xz"
"$P/llama-bench" --help >/dev/null 2>&1 && echo "build_llama: llama-bench runs"
