# shellcheck shell=bash
# bench/compare/common.sh: what run_20b.sh (call A) and serve_20b.sh (call B) share, sourced after each
# sets J (its jsonl of results, truncated here) and DEADLINE (seconds after which parts are skipped).
# emit LINE: append a result line to $J (and print it); since: seconds since sourcing; left: seconds to
# the hard stop VOLT_COMPARE_HARD_S (default 560), at least 10 (every timeout is cut to it); late PART:
# true, with a "skipped" line, once the deadline passed; cpy ARGS: bench/compare/compare.py.
: >"$J"
emit() { echo "$1" | tee -a "$J"; }
t0=$(date +%s)
since() { echo $(($(date +%s) - t0)); }
left() {
  local l=$((${VOLT_COMPARE_HARD_S:-560} - $(since)))
  echo $((l < 10 ? 10 : l))
}
late() { [ "$(since)" -ge "$DEADLINE" ] && { emit "{\"skipped\": \"$1\", \"reason\": \"deadline ${DEADLINE} s\", \"at_s\": $(since)}"; return 0; }; return 1; }
cpy() { python3 bench/compare/compare.py "$@"; }
export CUDA_CACHE_PATH=$W/jit-cache
