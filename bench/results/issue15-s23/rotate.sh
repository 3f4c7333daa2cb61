#!/usr/bin/env bash
# Rotates proxy configurations, each "name|ENV=1 ...|proxy args", a fresh `mcp-proxy` per round (2 s
# warm-up, then wrk c=16 for SECS), upstream and proxy on CPU 1, wrk on CPU 0; prints each
# configuration's median req/s and proxy CPU per 1,000 requests against the first one.
# The X_* switches exist only with switches.patch applied (git apply bench/results/issue15-s23/switches.patch).
set -u
cd "$(dirname "$0")/../../.."
PY=.venv/bin/python
ROUNDS=${ROUNDS:-5}; SECS=${SECS:-6}
tmp=$(mktemp -d)
taskset -c 1 $PY bench/upstream_fast.py --port 18901 > $tmp/up.log 2>&1 &
up=$!
sleep 1.5
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
cfgs=("$@")
for r in $(seq $ROUNDS); do
  for cfg in "${cfgs[@]}"; do
    IFS='|' read name envx extra <<< "$cfg"
    taskset -c 1 env X=1 $envx $PY -m proxy.cli --upstream http://127.0.0.1:18901/mcp --listen 127.0.0.1:18902 $extra > /dev/null 2> $tmp/err &
    pid=$!
    sleep 2.5
    taskset -c 0 wrk -t1 -c16 -d2s -s bench/wrk_tools_call.lua http://127.0.0.1:18902/mcp -- small > /dev/null 2>&1
    c0=$(cpu $pid)
    out=$(taskset -c 0 wrk -t1 -c16 -d${SECS}s -s bench/wrk_tools_call.lua http://127.0.0.1:18902/mcp -- small 2>&1)
    c1=$(cpu $pid)
    kill $pid; wait $pid 2>/dev/null
    n=$(echo "$out" | grep '^BENCH' | sed 's/BENCH //' | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["requests"], round(d["requests"]/(d["duration_us"]/1e6)))')
    set -- $n
    echo "$name $2 $(python3 -c "print(round(($c1-$c0)*10/$1*1000,1))")" >> $tmp/res
  done
done
kill $up; wait 2>/dev/null
python3 - $tmp/res <<'PY'
import sys, statistics, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    n, rps, cpu = line.split(); rows[n].append((float(rps), float(cpu)))
base = None
for n, v in rows.items():
    rps = statistics.median(r for r, _ in v); cpu = statistics.median(c for _, c in v)
    base = base or (rps, cpu)
    print(f"{n:14s} rps {rps:7.0f} ({rps/base[0]:.3f})  cpu/1000 {cpu:6.1f} ({cpu/base[1]:.3f})  rps runs {[int(r) for r, _ in v]}")
PY
rm -rf $tmp
