"""Count what one warm pass-through `tools/call` touches inside the proxy: calls, modules, crossings.

    python bench/crossings.py [--requests 5] [--admin on|off] [--json out.json] 2>/dev/null

A structural measure, not a timing: the proxy runs in this process (default settings, uvloop, the
admin API on unless `--admin off`), in front of bench/upstream_fast.py in a process of its own. After
a warm-up, a profiler hook counts every Python function call made inside `proxy/` while the client
sends one small `tools/call` and reads its answer (and the loop turns right after it, where the
exchange is recorded), and reports the medians over `--requests` such windows:

- calls: function calls whose code lives in `proxy/`;
- modules: distinct `proxy/` files those calls ran in;
- module crossings: calls from one `proxy/` file into another;
- module pairs: distinct (calling file, called file) pairs among those crossings;
- room crossings: calls from one room into another (a room is a package of `proxy/`, such as
  `proxy/transport`, or a top-level module such as `proxy/logs.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PROXY_DIR = str(ROOT / "proxy") + "/"
sys.path.insert(0, str(ROOT))

_REQUEST = b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"small","arguments":{}}}'


def room_of(filename: str) -> str:
    """`proxy/transport/front.py` -> `proxy/transport`; `proxy/logs.py` -> `proxy/logs.py`."""
    rel = filename[len(PROXY_DIR) :]
    head, sep, _ = rel.partition("/")
    return f"proxy/{head}" if sep else f"proxy/{rel}"


class Tally:
    """A profiler hook that counts calls into `proxy/` and the crossings between its files and rooms."""

    def __init__(self) -> None:
        self.calls = 0
        self.modules: Counter[str] = Counter()
        self.module_crossings = 0
        self.room_crossings: Counter[tuple[str, str]] = Counter()
        self.edges: Counter[str] = Counter()

    def hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = frame.f_code.co_filename
        if not callee.startswith(PROXY_DIR):
            return
        self.calls += 1
        self.modules[callee] += 1
        back = frame.f_back
        caller = back.f_code.co_filename if back is not None else ""
        if not caller.startswith(PROXY_DIR) or caller == callee:
            return
        self.module_crossings += 1
        self.edges[f"{caller[len(PROXY_DIR) :]} -> {callee[len(PROXY_DIR) :]}:{frame.f_code.co_name}"] += 1
        rooms = (room_of(caller), room_of(callee))
        if rooms[0] != rooms[1]:
            self.room_crossings[rooms] += 1

    def summary(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "modules": len(self.modules),
            "module_crossings": self.module_crossings,
            "room_crossings": sum(self.room_crossings.values()),
            "module_pairs": len({edge.split(":")[0] for edge in self.edges}),
            "room_pairs": {f"{a} -> {b}": n for (a, b), n in self.room_crossings.most_common()},
            "module_list": sorted(name[len(PROXY_DIR) :] for name in self.modules),
            "module_edges": dict(self.edges.most_common()),
        }


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str, ident: int
) -> None:
    body = _REQUEST % ident
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\nMcp-Session-Id: bench-upstream-session\r\n"
        "Mcp-Protocol-Version: 2025-11-25\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    writer.write(head + body)
    status = await reader.readline()
    if b" 200 " not in status:
        raise RuntimeError(f"unexpected answer: {status!r}")
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        if name.lower() == "content-length":
            length = int(value)
    await reader.readexactly(length)


async def measure(upstream: str, requests: int, admin: bool) -> list[dict[str, Any]]:
    from proxy.config import Settings
    from proxy.logs import configure
    from proxy.runtime import Proxy

    configure(fmt="json")  # as `mcp-proxy` logs when its stderr is not a terminal

    fields: dict[str, Any] = {"upstream": upstream, "listen": "127.0.0.1:0"}
    if admin:
        fields["admin"] = "127.0.0.1:0"
    else:
        fields["admin_enabled"] = False
    proxy = Proxy(Settings(**fields))
    await proxy.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        path = proxy.endpoint()[len(proxy.url) :]
        for ident in range(1, 51):  # warm: the probe, the pool's connection, caches
            await _exchange(reader, writer, path, ident)
        results = []
        for ident in range(100, 100 + requests):
            tally = Tally()
            sys.setprofile(tally.hook)
            try:
                await _exchange(reader, writer, path, ident)
                for _ in range(3):  # what is recorded just after the answer went out
                    await asyncio.sleep(0)
            finally:
                sys.setprofile(None)
            results.append(tally.summary())
        writer.close()
        return results
    finally:
        await proxy.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5)
    parser.add_argument("--admin", choices=("on", "off"), default="on")
    parser.add_argument("--json", type=Path, help="write the medians and the last window's detail here")
    args = parser.parse_args()
    upstream_proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "upstream_fast.py"), "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert upstream_proc.stdout is not None
        ready = upstream_proc.stdout.readline().split()
        if len(ready) != 2 or ready[0] != "READY":
            raise SystemExit(f"upstream did not start: {ready}")
        upstream = f"http://127.0.0.1:{ready[1]}/mcp"
        import uvloop

        results = uvloop.run(measure(upstream, args.requests, args.admin == "on"))
    finally:
        upstream_proc.terminate()
        upstream_proc.wait(10)
    medians = {
        key: statistics.median(r[key] for r in results)
        for key in ("calls", "modules", "module_crossings", "module_pairs", "room_crossings")
    }
    report = {"admin": args.admin, "windows": len(results), "median": medians, "last": results[-1]}
    print(json.dumps(report, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
