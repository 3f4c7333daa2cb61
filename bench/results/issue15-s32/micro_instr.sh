#!/usr/bin/env bash
# micro_instr.sh ROOT on|off N
set -euo pipefail
root=$1; admin=$2; n=${3:-3000}
tmp=$(mktemp -d)
PYTHONPATH=$root GO=$tmp/go STOP=$tmp/stop PYTHONHASHSEED=0 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$tmp/out" \
  ${PYTHON:-python} $(dirname "$0")/micro.py $admin $n >"$tmp/log" 2>"$tmp/vg" &
pid=$!
until grep -q '^ready' "$tmp/log" 2>/dev/null; do kill -0 $pid 2>/dev/null || { cat $tmp/log $tmp/vg >&2; exit 1; }; sleep 0.3; done
callgrind_control -i on $pid >/dev/null 2>&1
touch $tmp/go
until grep -q '^measured' "$tmp/log" 2>/dev/null; do kill -0 $pid 2>/dev/null || { cat $tmp/log $tmp/vg >&2; exit 1; }; sleep 0.2; done
callgrind_control -i off $pid >/dev/null 2>&1
touch $tmp/stop
wait $pid
total=$(grep -E '^totals:' "$tmp/out" | head -1 | awk '{print $2}')
echo "micro $admin ($root): $((total / n)) instr per exchange"
rm -rf $tmp
