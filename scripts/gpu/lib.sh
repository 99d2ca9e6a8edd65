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

# The part runner of multi_gpu.sh and tp_recipe.sh. The caller sets START (date +%s at its start), DEADLINE
# (seconds after START past which no part starts), DEADLINE_VAR (the switch that sets it, named in skip
# lines), PARTS (" NAME NAME ... ": the parts selected), S (the JSON-lines file), W (the work folder) and L
# (the log folder); VOLT_PY_DEFS (optional): python lines volt_py runs before every snippet (imports and
# helpers of the caller's own).
# volt_emit LINE: LINE on stdout and appended to $S. volt_elapsed, volt_left: seconds since START, and left
# before the deadline (<= 0 past it).
# volt_card_share MIB TOTAL_MIB: the --gpu-memory-utilization that gives a card of MIB on a GPU of TOTAL_MIB,
# rounded down to 0.01 and at most 0.9 (the memory checks of serve.sh and offload.sh run the same card size on
# an H100 or an H200).
volt_card_share() { python3 -c "import math; print(min(0.9, math.floor(100 * $1 / $2) / 100))"; }
volt_emit() { echo "$1" | tee -a "$S"; }
volt_elapsed() { echo $(($(date +%s) - START)); }
volt_left() { echo $((DEADLINE - $(date +%s) + START)); }
# volt_py SCRIPT ARGS...: runs a python snippet (json, sys, math, re, os and VOLT_PY_DEFS in scope), prints
# what it prints.
volt_py() {
  local code=$1
  shift
  python3 -c "import json, sys, math, re, os
${VOLT_PY_DEFS:-}
$code" "$@"
}
# volt_part NAME FN: runs FN (which may write a JSON object to $W/NAME.json) with its output in $L/NAME.log
# and emits {"part": NAME, "rc", "seconds", "pass", ...the object}; a part not in PARTS is silent, a part
# past the deadline emits a skip line; FN returning 77 is a skip (the object says why).
volt_part() {
  local name=$1 fn=$2
  [[ $PARTS == *" $name "* ]] || return 0
  if [ "$(volt_left)" -le 0 ]; then
    volt_emit "{\"part\": \"$name\", \"skipped\": \"deadline: $(volt_elapsed) s since the start, past $DEADLINE_VAR=$DEADLINE\"}"
    return 0
  fi
  local t0 t1 rc
  t0=$(date +%s%N)
  "$fn" >"$L/$name.log" 2>&1
  rc=$?
  t1=$(date +%s%N)
  [ -s "$W/$name.json" ] || echo '{}' >"$W/$name.json"
  volt_emit "$(volt_py '
r = json.load(open(sys.argv[1]))
d = {"part": sys.argv[2], "rc": int(sys.argv[3]), "seconds": round(int(sys.argv[4]) / 1e9, 1)}
if d["rc"] == 77: d["skipped"] = r.pop("skipped", "skipped"); d["rc"] = 0
else: d["pass"] = d["rc"] == 0 and r.pop("pass", True)
d.update(r)
print(json.dumps(d))' "$W/$name.json" "$name" "$rc" "$((t1 - t0))")"
  [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || tail -15 "$L/$name.log"
  return 0
}
