#!/usr/bin/env bash
# scripts/bundle.sh PRESET OUTDIR: builds a GPU preset (volta, volta-ptx, cuda13) and puts what the GPU
# machine runs into OUTDIR: the stripped binaries (voltllm, cuda_backend_test, and the op harness
# volt_op_test once tests/kernels has it) and, in OUTDIR/lib, every shared library they need except the
# system's own (glibc's libc, libm, libdl, libpthread, librt, the loader) and the driver's libcuda: the
# binaries find them through their $ORIGIN/lib rpath (set at link time for GPU presets). Fat binaries are
# compressed at build time (-Xfatbin=-compress-all). Fails when the bundle is 48 MiB or more (the GPU
# machine takes 64 MiB a run, with the working tree). Writes OUTDIR/MANIFEST (commit, preset, sizes).
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${1:?usage: scripts/bundle.sh PRESET OUTDIR}
out=${2:?usage: scripts/bundle.sh PRESET OUTDIR}
case "$preset" in
  volta | volta-ptx | cuda13) ;;
  *) echo "bundle: preset $preset: expected volta, volta-ptx or cuda13"; exit 2 ;;
esac
build="build-$preset"
limit=$((48 * 1024 * 1024))

[ -f "$build/build.ninja" ] || cmake --preset "$preset" >/dev/null
targets=(voltllm cuda_backend_test)
if grep -q '^build volt_op_test:' "$build/build.ninja" 2>/dev/null; then
  targets+=(volt_op_test)
else
  echo "bundle: no volt_op_test target yet (tests/kernels): the bundle has none, scripts/gpu/check.sh skips it"
fi
t0=$(date +%s)
cmake --build "$build" --target "${targets[@]}"
echo "bundle: built ${targets[*]} for $preset in $(($(date +%s) - t0)) s"

rm -rf "$out"
mkdir -p "$out/lib"
for t in "${targets[@]}"; do
  bin=$(find "$build" -type f -name "$t" -perm -u+x | head -1)
  [ -n "$bin" ] || { echo "bundle: $t not found under $build"; exit 1; }
  cp "$bin" "$out/$t"
  strip "$out/$t"
  # Shared libraries outside the system's core, resolved as the loader does here.
  ldd "$bin" | awk '/=> \// {print $1, $3}' | while read -r name path; do
    case "$name" in
      libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | ld-linux*.so.* | libcuda.so.*) continue ;;
    esac
    [ -f "$out/lib/$name" ] || cp -L "$path" "$out/lib/$name"
  done
done
for t in "${targets[@]}"; do
  if ! readelf -d "$out/$t" | grep -q 'RPATH.*\$ORIGIN/lib'; then
    echo "bundle: $t has no \$ORIGIN/lib RPATH (configure $build with a GPU preset)"
    exit 1
  fi
done
strip --strip-unneeded "$out"/lib/*.so* 2>/dev/null || true
total=$(du -cb "$out" | tail -1 | cut -f1)
{
  echo "preset: $preset"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "cuda: $(sed -n 's/.*CMAKE_CUDA_COMPILER_VERSION "\(.*\)")/\1/p' "$build"/CMakeFiles/*/CMakeCUDACompiler.cmake | head -1), architectures $(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build/CMakeCache.txt")"
  echo "bytes: $total"
  (cd "$out" && find . -type f -printf '%s %p\n' | sort -k2)
} >"$out/MANIFEST"
cat "$out/MANIFEST"
if [ "$total" -ge "$limit" ]; then
  echo "bundle: $out is $total bytes, over the 48 MiB limit ($limit)"
  exit 1
fi
echo "bundle: $out: $((total / 1024 / 1024)) MiB ($total bytes), under 48 MiB"
