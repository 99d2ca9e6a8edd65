#!/usr/bin/env bash
# Idempotent: Debian 12's CUDA 11.8 toolkit (nvidia-cuda-toolkit-gcc: nvcc, ptxas, cuobjdump, the static
# runtime, with g++-11 as nvcc's host compiler), the last CUDA that compiles for sm_70 (Volta). It lives in
# Debian's contrib and non-free components, which this adds to the apt sources when missing. About 3
# minutes on a fresh machine, nothing when it is there. CUDA 13 (/usr/local/cuda, the cuda13 preset) does
# not come from Debian; where it is absent the cuda13 build is skipped with a message (scripts/cuda-check.sh).
set -euo pipefail

NVCC=/usr/lib/nvidia-cuda-toolkit/bin/nvcc
if [ -x "$NVCC" ] && command -v g++-11 >/dev/null && command -v cuobjdump >/dev/null &&
   [ -f /usr/lib/x86_64-linux-gnu/libcudart_static.a ]; then
  exit 0
fi
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
SOURCES=/etc/apt/sources.list.d/debian.sources
if [ -f "$SOURCES" ]; then
  for comp in contrib non-free; do
    if grep -E '^Components:' "$SOURCES" | grep -qvw "$comp"; then
      echo "setup-cuda: adding '$comp' to the Components of $SOURCES"
      $SUDO sed -i -E "/^Components:/ { / $comp( |\$)/! s/\$/ $comp/ }" "$SOURCES"
    fi
  done
elif [ -f /etc/apt/sources.list ] && ! grep -qw non-free /etc/apt/sources.list; then
  echo "setup-cuda: adding contrib non-free to /etc/apt/sources.list"
  $SUDO sed -i -E '/^deb / s/ main( |$)/ main contrib non-free\1/' /etc/apt/sources.list
fi
echo "setup-cuda: installing Debian's CUDA 11.8 (nvidia-cuda-toolkit-gcc, g++-11); about 3 minutes"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q nvidia-cuda-toolkit-gcc g++-11
"$NVCC" --version | tail -1
