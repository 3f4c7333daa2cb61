#!/usr/bin/env bash
# Instructions (valgrind callgrind's Ir) the proxy executes per small tools/call, in one process
# (bench/inproc.py): deterministic, so a change worth 2% shows, where CPU seconds on a shared
# 2-core machine move by 20% between two runs. Only the measured requests are counted (callgrind
# starts instrumenting once the proxy is up).
#
#   bench/instructions.sh [REQUESTS] [inproc.py options...]     (needs valgrind; about a minute)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-$here/../.venv/bin/python}
requests=${1:-300}
shift || true
tmp=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] && cp "$tmp/out" "$KEEP"; rm -rf "$tmp"' EXIT
PYTHONHASHSEED=0 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$tmp/out" \
    "$python" "$here/inproc.py" --requests "$requests" --start-after "$tmp/go" "$@" >"$tmp/log" 2>"$tmp/vg" &
pid=$!
until grep -q '^ready' "$tmp/log" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { cat "$tmp/log" "$tmp/vg" >&2; exit 1; }
    sleep 0.5
done
callgrind_control -i on "$pid" >/dev/null 2>&1
touch "$tmp/go"
wait "$pid"
total=$(grep -E '^(summary|totals):' "$tmp/out" | head -1 | awk '{print $2}')
tail -1 "$tmp/log"
echo "instructions per request: $((total / requests))"
