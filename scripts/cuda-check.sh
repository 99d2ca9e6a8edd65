#!/usr/bin/env bash
# The CUDA part of CI (no GPU needed; issue 13): every .cu compiled for sm_70 with Debian's CUDA 11.8 (the
# cuda-check preset, 70-real, ptxas -v) and each kernel's resources checked in that cubin
# (scripts/cuda-resources.py: <= 96 KiB shared memory, no spills, no local memory); then the cuda13 preset
# (CUDA 13, sm_90) builds the backend, voltllm and the cuda-label test binary, which proves every .cu
# compiles for sm_90 too and that the static-runtime link works. Where /usr/local/cuda holds no nvcc the
# cuda13 part is skipped with a message. Times each part.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/lib/nvidia-cuda-toolkit/bin:/usr/bin:/bin:$PATH

t0=$(date +%s)
[ -f build-cuda-check/build.ninja ] || cmake --preset cuda-check >/dev/null
# The build log holds ptxas' reports (replayed by ccache on cache hits) for the spill check.
# --clean-first: ptxas reports only what it compiles (ccache replays them, so this costs little).
if ! cmake --build build-cuda-check --target volt_cuda --clean-first >build-cuda-check/volt_cuda.log 2>&1; then
  grep -v 'ptxas info\|bytes stack frame' build-cuda-check/volt_cuda.log | tail -60
  echo "cuda-check: the sm_70 build failed (full log: build-cuda-check/volt_cuda.log)"
  exit 1
fi
python3 scripts/cuda-resources.py build-cuda-check/src/cuda/libvolt_cuda.a build-cuda-check/volt_cuda.log
# The GEMV's batch invariance on the CPU: no float mul + add pair in its kernels' PTX that ptxas may fuse in
# one instance and not in another (scripts/ptx-contraction.py; sm_70 here, sm_90 with CUDA 13 below).
nvcc -std=c++17 -arch=sm_70 -ccbin g++-11 -O3 -DNDEBUG -Isrc -Ibuild-cuda-check/generated -ptx \
  -o build-cuda-check/gemv.ptx src/cuda/kernels/gemv.cu
python3 scripts/ptx-contraction.py build-cuda-check/gemv.ptx gemv_kernel
t1=$(date +%s)
echo "cuda-check: sm_70 build and resource check: $((t1 - t0)) s"

if [ -x /usr/local/cuda/bin/nvcc ]; then
  [ -f build-cuda13/build.ninja ] || cmake --preset cuda13 >/dev/null
  cmake --build build-cuda13 --target volt_cuda voltllm cuda_backend_test
  /usr/local/cuda/bin/nvcc -std=c++17 -arch=sm_90 -O3 -DNDEBUG -Isrc -Ibuild-cuda13/generated -ptx \
    -o build-cuda13/gemv.ptx src/cuda/kernels/gemv.cu
  python3 scripts/ptx-contraction.py build-cuda13/gemv.ptx gemv_kernel
  echo "cuda-check: cuda13 (sm_90) build: $(($(date +%s) - t1)) s"
  # The cuda-label tests without a GPU: the dtype and dispatch rules run, every GPU test skips with its reason.
  if ! build-cuda13/tests/unit/cuda_backend_test --gtest_color=no >build-cuda13/cuda_backend_test.log 2>&1; then
    tail -40 build-cuda13/cuda_backend_test.log
    echo "cuda-check: cuda_backend_test failed without a GPU"
    exit 1
  fi
  grep -E '^\[ *(OK|SKIPPED) *\] .* \(|^no CUDA device' build-cuda13/cuda_backend_test.log | sort | uniq -c
else
  echo "cuda-check: /usr/local/cuda/bin/nvcc not found: the cuda13 (sm_90) build is skipped (install CUDA 13 there to run it)"
fi
