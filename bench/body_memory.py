"""Bursts of big request bodies through `mcp-proxy`: the proxy's RSS after each burst, and its peak.

    .venv/bin/python bench/body_memory.py [--bursts 3] [--clients 10] [--mib 8] [SETTING=VALUE ...]

Starts `bench/upstream_fast.py` and the `mcp-proxy` command in front of it with the default settings
(plus any `SETTING=VALUE` given, as `MCP_PROXY_SETTING` variables), then sends `--bursts` bursts of
`--clients` concurrent `tools/call` POSTs, each with a `--mib` MiB argument, half a second apart. A
sidecar's memory limit must hold the peak of the worst burst, not only of the first: memory the
allocator keeps after a burst adds to the next. Prints (and writes to `--out`) VmRSS and VmHWM (the
peak since start) of the proxy after each burst, and the HTTP statuses each burst got (503 is the
`max_body_bytes_in_flight` bound refusing a body before it is read).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.sidecar import ProxyProcess, clean_env, settings_env  # noqa: E402

HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-11-25",
    "Mcp-Session-Id": "bench-upstream-session",
}


def memory_mib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in MiB."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name = line.split(":", 1)[0]
        if name in ("VmRSS", "VmHWM"):
            out[name] = int(line.split()[1]) // 1024
    return out


async def burst(url: str, clients: int, body: bytes) -> Counter[int]:
    """`clients` concurrent POSTs of `body`; the statuses they got."""
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as http:

        async def one() -> int:
            async with http.post(url, data=body, headers=HEADERS) as resp:
                await resp.read()
                return resp.status

        return Counter(await asyncio.gather(*(one() for _ in range(clients))))


@contextmanager
def proxy_before_fast_upstream(settings: dict[str, str]) -> Iterator[tuple[ProxyProcess, int]]:
    """`mcp-proxy` (default settings plus `settings`) in front of `bench/upstream_fast.py`, and the
    proxy's pid, a second after it listens (its RSS settled); both stopped on exit."""
    upstream = subprocess.Popen(
        [sys.executable, str(REPO / "bench" / "upstream_fast.py"), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert upstream.stdout is not None
        port = upstream.stdout.readline().split()[1]
        env = clean_env(**settings_env(upstream=f"http://127.0.0.1:{port}/mcp", **settings))
        with ProxyProcess(env) as proxy:
            assert proxy.process is not None
            time.sleep(1.0)
            yield proxy, proxy.process.pid
    finally:
        upstream.terminate()
        upstream.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bursts", type=int, default=3)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--mib", type=float, default=8.0)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "body-memory")
    parser.add_argument("settings", nargs="*", help="SETTING=VALUE, as MCP_PROXY_SETTING variables")
    args = parser.parse_args()
    settings = dict(item.split("=", 1) for item in args.settings)
    argument = "x" * int(args.mib * 2**20)
    params = {"name": "small", "arguments": {"text": argument}}
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
    results: dict[str, Any] = {"settings": settings, "clients": args.clients, "mib": args.mib, "bursts": []}
    with proxy_before_fast_upstream(settings) as (proxy, pid):
        results["start"] = memory_mib(pid)
        print("start", results["start"], flush=True)
        for n in range(1, args.bursts + 1):
            statuses = asyncio.run(burst(proxy.endpoint(), args.clients, body))
            time.sleep(0.5)
            seen = {"burst": n, "statuses": dict(statuses), **memory_mib(pid)}
            results["bursts"].append(seen)
            print(seen, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
