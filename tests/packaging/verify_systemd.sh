#!/bin/sh
# systemd-analyze verify on packaging/systemd/voltllm.service with ExecStart pointed at the built binary
# (verify checks that the executable exists). Usage: verify_systemd.sh SYSTEMD_ANALYZE UNIT VOLTLLM_BIN
set -e
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
sed "s|/opt/voltllm/voltllm|$3|" "$2" > "$d/voltllm.service"
"$1" verify "$d/voltllm.service"
