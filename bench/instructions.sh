#!/usr/bin/env bash
# Instructions (valgrind callgrind's Ir) the proxy executes per small tools/call, in one process
# (bench/inproc.py): deterministic, so a change worth 2% shows, where CPU seconds on a shared
# 2-core machine move by 20% between two runs. Only the measured requests are counted: callgrind
# starts instrumenting once the proxy is up and stops once the last request is answered, so neither
# the start nor the proxy's stop and Python's finalisation are in the figure (WHOLE=1 counts on to
# the process's exit, as this script did before, for rows measured that way).
#
#   bench/instructions.sh [REQUESTS] [inproc.py options...]     (needs valgrind; about a minute)
#   VGEXTRA='--cache-sim=yes' adds valgrind options (there: the simulated caches' misses, in the
#   output KEEP=FILE keeps)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-$here/../.venv/bin/python}
requests=${1:-300}
shift || true
tmp=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] && cp "$tmp/out" "$KEEP"; rm -rf "$tmp"' EXIT
PYTHONHASHSEED=0 valgrind --tool=callgrind ${VGEXTRA:-} --instr-atstart=no --callgrind-out-file="$tmp/out" \
    "$python" "$here/inproc.py" --requests "$requests" --start-after "$tmp/go" --stop-after "$tmp/stop" "$@" \
    >"$tmp/log" 2>"$tmp/vg" &
pid=$!
until grep -q '^ready' "$tmp/log" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/log" "$tmp/vg" >&2; exit 1; }
    sleep 0.5
done
callgrind_control -i on "$pid" >/dev/null 2>&1
touch "$tmp/go"
until grep -q '^measured' "$tmp/log" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/log" "$tmp/vg" >&2; exit 1; }
    sleep 0.2
done
[ -n "${WHOLE:-}" ] || callgrind_control -i off "$pid" >/dev/null 2>&1
touch "$tmp/stop"
wait "$pid"
# `totals:` (the sum of the counted events); `summary:` reads 0 once instrumentation was switched off
total=$(grep -E '^totals:' "$tmp/out" | head -1 | awk '{print $2}')
tail -1 "$tmp/log"
echo "instructions per request: $((total / requests))"
