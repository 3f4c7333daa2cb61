"""Rounds of calls whose bodies decode to many small objects through `mcp-proxy`: its RSS per round.

    .venv/bin/python bench/store_memory.py [--rounds 8] [--calls 100] [--watch] [SETTING=VALUE ...]

Starts `bench/upstream_fast.py` and the `mcp-proxy` command in front of it with the default settings
(the admin API on; plus any `SETTING=VALUE` given, as `MCP_PROXY_SETTING` variables), then sends
`--rounds` rounds of `--calls` `tools/call` POSTs, ten at a time, each carrying `--objects`
one-member JSON objects (5,500 make a 58 KiB body, about 1.3 MiB once decoded). With `--watch` a
reader stays attached to the admin feed all along, as a TUI would, so every exchange is built into
chains as it happens; without it the observations wait in the proxy's queue for a reader. Either
way the proxy keeps those bodies decoded, and what bounds them is what this measures: RSS must level
off, not grow with every round. Prints (and writes to `--out`) VmRSS and VmHWM after each round,
and the proxy's `mcp_proxy_chain_store_bytes` and `mcp_proxy_chains_stored` at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp
import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.body_memory import HEADERS, memory_mib, proxy_before_fast_upstream  # noqa: E402
from tests.sidecar import ProxyProcess  # noqa: E402


async def one_round(url: str, calls: int, body: bytes) -> dict[int, int]:
    """`calls` POSTs of `body`, ten at a time; how many got each status."""
    statuses: dict[int, int] = {}
    gate = asyncio.Semaphore(10)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:

        async def one() -> None:
            async with gate, http.post(url, data=body, headers=HEADERS) as resp:
                await resp.read()
                statuses[resp.status] = statuses.get(resp.status, 0) + 1

        await asyncio.gather(*(one() for _ in range(calls)))
    return statuses


async def watch_feed(admin: str, stop: asyncio.Event) -> int:
    """Read the admin feed until `stop`; how many lines came."""
    lines = 0
    async with aiohttp.ClientSession() as http, http.get(f"{admin}/api/feed") as resp:
        while not stop.is_set():
            try:
                line = await asyncio.wait_for(resp.content.readline(), 0.5)
            except TimeoutError:
                continue
            if not line:
                break
            lines += 1
    return lines


async def metric(admin: str, name: str) -> float | None:
    """One unlabelled sample of the proxy's /metrics."""
    async with aiohttp.ClientSession() as http, http.get(f"{admin}/metrics") as resp:
        for line in (await resp.text()).splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


async def run(proxy: ProxyProcess, pid: int, args: argparse.Namespace, body: bytes) -> dict[str, Any]:
    admin = proxy.admin
    stop = asyncio.Event()
    watcher = asyncio.get_running_loop().create_task(watch_feed(admin, stop)) if args.watch else None
    await asyncio.sleep(0.5)
    rounds = []
    for n in range(1, args.rounds + 1):
        statuses = await one_round(proxy.endpoint(), args.calls, body)
        await asyncio.sleep(0.5)
        seen = {"round": n, "statuses": statuses, **memory_mib(pid)}
        rounds.append(seen)
        print(seen, flush=True)
    stop.set()
    if watcher is not None:
        with contextlib.suppress(aiohttp.ClientError):
            await watcher
    async with aiohttp.ClientSession() as http, http.get(f"{admin}/api/chains") as resp:
        await resp.read()  # a reader arrives: what waited is built into chains
    built = memory_mib(pid)
    print("chains read", built, flush=True)
    return {
        "rounds": rounds,
        "after_chains_read": built,
        "chain_store_bytes": await metric(admin, "mcp_proxy_chain_store_bytes"),
        "chains_stored": await metric(admin, "mcp_proxy_chains_stored"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--objects", type=int, default=5500)
    parser.add_argument("--watch", action="store_true", help="keep a reader on the admin feed")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "store-memory")
    parser.add_argument("settings", nargs="*", help="SETTING=VALUE, as MCP_PROXY_SETTING variables")
    args = parser.parse_args()
    settings = dict(item.split("=", 1) for item in args.settings)
    rows = [{"a": n % 1000} for n in range(args.objects)]
    params = {"name": "small", "arguments": {"rows": rows}}
    body = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
    results: dict[str, Any] = {
        "settings": settings,
        "calls": args.calls,
        "body_bytes": len(body),
        "watch": args.watch,
    }
    with proxy_before_fast_upstream(settings) as (proxy, pid):
        results["start"] = memory_mib(pid)
        print("start", results["start"], flush=True)
        results.update(asyncio.run(run(proxy, pid, args, body)))
    args.out.mkdir(parents=True, exist_ok=True)
    name = "watched.json" if args.watch else "queued.json"
    (args.out / name).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
