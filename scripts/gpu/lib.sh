# shellcheck shell=bash
# scripts/gpu/lib.sh: sourced by the GPU-machine scripts (scripts/gpu/*.sh, bench/compare/*.sh).
#
# volt_find_cublas [TAG]: cuBLAS 13 / 12 by soname where the loader does not already find it (the GPU
# machine has it under /usr/local/cuda/lib64 or inside a python package, not always in ldconfig's cache):
# prepends its directory to LD_LIBRARY_PATH, so the bundle's dlopen by soname succeeds and every script
# runs with the same cuBLAS. With TAG, says where it was found ("TAG: libcublas.so.13 from DIR").
volt_find_cublas() {
  local soname dir
  for soname in libcublas.so.13 libcublas.so.12; do
    ldconfig -p 2>/dev/null | grep -q "$soname" && continue
    dir=$( (ls -d /usr/local/cuda/lib64 2>/dev/null
      python3 -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null) |
      while read -r d; do find "$d/" -maxdepth 5 -name "$soname" 2>/dev/null; done | head -1 | xargs -r dirname)
    if [ -n "$dir" ]; then
      export LD_LIBRARY_PATH=$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      [ -n "${1:-}" ] && echo "$1: $soname from $dir"
    fi
  done
  return 0
}
