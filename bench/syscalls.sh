#!/usr/bin/env bash
# System calls the proxy makes per pass-through call (strace -c), in the default configuration (admin
# API on): a deterministic companion of the loopback latencies, which on a shared 2-core machine move
# more between two runs than one write or one loop turn is worth. Each event-loop turn that waits is an
# epoll_pwait, each read from a socket a read, each write to one a write (the exchange's log line on
# stderr included). Strace slows the proxy, so more of the upstream's writes coalesce into one read than
# without it: compare two versions with the same command, not these counts with the loopback's.
#
#   bench/syscalls.sh [CALLS] [sse|small]     (needs strace; BENCH_PROXY_ROOT=<checkout> for another tree)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-$here/../.venv/bin/python}
calls=${1:-50}
kind=${2:-sse}
root=$(cd "${BENCH_PROXY_ROOT:-$here/..}" && pwd)
tmp=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT
free_port() { "$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
"$python" "$here/upstream_fast.py" >"$tmp/upstream" 2>/dev/null &
pids+=($!)
until grep -q READY "$tmp/upstream" 2>/dev/null; do sleep 0.1; done
upstream="http://127.0.0.1:$(awk '{print $2}' "$tmp/upstream")/mcp"
port=$(free_port)
(cd "$root" && exec "$python" -m proxy.cli --upstream "$upstream" --listen "127.0.0.1:$port" \
    --admin "127.0.0.1:$(free_port)" 2>/dev/null) &
proxy=$!
pids+=("$proxy")
until (echo >"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do sleep 0.1; done
if [ "$kind" = sse ]; then args=(sse "http://127.0.0.1:$port/mcp"); else args=(big "http://127.0.0.1:$port/mcp" --tool small); fi
"$python" "$here/sse_client.py" "${args[@]}" --n 20 >/dev/null  # warm: connections, caches
strace -f -qq -c -o "$tmp/counts" -p "$proxy" 2>/dev/null &
tracer=$!
sleep 1  # strace attaches
"$python" "$here/sse_client.py" "${args[@]}" --n "$calls" >/dev/null
kill -INT "$tracer"
wait "$tracer" 2>/dev/null || true
echo "system calls per $kind call ($calls calls, proxy from $root):"
# strace -c's columns: % time, seconds, usecs/call, calls, [errors,] syscall.
awk -v n="$calls" '$NF ~ /^(epoll_pwait|epoll_wait|read|write|writev|sendto|recvfrom|getpid)$/ {
    printf "  %-12s %6.2f\n", $NF, $4 / n }' "$tmp/counts"
