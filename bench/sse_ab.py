"""SSE first event, direct and through several versions of the proxy, in alternating rounds.

    python bench/sse_ab.py --roots old=/tmp/old-checkout,new=. [--rounds 12] [--calls 200] [--gap-ms 5]

The loopback benchmark's SSE workload alone (`bench/sse_client.py sse`, the same pinning as
`bench/run.py`: client on CPU 0, the upstream and every proxy on CPU 1), for A/B comparisons: one
benchmark upstream, one proxy per root (`python -m proxy.cli` run from it, default configuration: admin
API on), then rounds in which every path runs the workload once, in turn. On a shared 2-core machine
the speed moves within minutes, so a version's figure is the median over rounds of its p50 minus the
direct path's p50 in the same round. `--gap-ms` is the upstream's pause between events (its default,
5 ms, leaves the CPU idle between calls; 0 keeps it busy).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
PY = sys.executable


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on port {port} after {limit}s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--roots", required=True, help="name=checkout,... (each runs its own proxy)")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--gap-ms", default="5")
    args = parser.parse_args()
    roots = dict(item.split("=", 1) for item in args.roots.split(","))
    procs: list[subprocess.Popen[bytes]] = []

    def start(argv: list[str], cpu: int, cwd: str | None = None) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            ["taskset", "-c", str(cpu), *argv],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        procs.append(proc)
        return proc

    try:
        upstream = start([PY, str(BENCH / "upstream_fast.py"), "--sse-gap-ms", args.gap_ms], 1)
        assert upstream.stdout is not None
        url = f"http://127.0.0.1:{int(upstream.stdout.readline().split()[1])}/mcp"
        urls = {"direct": url}
        for name, root in roots.items():
            port = free_port()
            listen, admin = f"127.0.0.1:{port}", f"127.0.0.1:{free_port()}"
            start([PY, "-m", "proxy.cli", "--upstream", url, "--listen", listen, "--admin", admin], 1, root)
            wait_port(port)
            urls[name] = f"http://127.0.0.1:{port}/mcp"
        first: dict[str, list[float]] = {name: [] for name in urls}
        head: dict[str, list[float]] = {name: [] for name in urls}
        for index in range(args.rounds):
            for name, target in urls.items():
                argv = [
                    PY,
                    str(BENCH / "sse_client.py"),
                    "sse",
                    target,
                    "--n",
                    str(args.calls),
                    "--warmup",
                    "10",
                ]
                done = subprocess.run(
                    ["taskset", "-c", "0", *argv], capture_output=True, text=True, check=True
                )
                result = json.loads(done.stdout)
                first[name].append(result["first_event"]["p50"])
                head[name].append(result["head"]["p50"])
            print(f"round {index}: " + " ".join(f"{n}={v[-1]:.3f}" for n, v in first.items()), flush=True)
        for name in urls:
            print(
                f"{name}: first event p50 {statistics.median(first[name]):.3f} ms, head p50 "
                f"{statistics.median(head[name]):.3f} ms (medians over rounds)"
            )
        for name in roots:
            added = [a - b for a, b in zip(first[name], first["direct"], strict=True)]
            added_head = [a - b for a, b in zip(head[name], head["direct"], strict=True)]
            print(
                f"{name}: added first event p50 {statistics.median(added):.3f} ms, added head p50 "
                f"{statistics.median(added_head):.3f} ms (median of per-round differences)"
            )
    finally:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
