"""Captures of real traffic for reader tests: the demo's SDK peers through real proxies, and bigger copies.

`record_demo` drives the demo's SDK clients of both eras through proxies in front of the demo's
2026-07-28 and 2025-era servers (pass-through and both bridges: SSE streams, nested requests, MRTR
rounds, upstream legs, continuations) and joins the two captures into one file. `replicate` makes a
bigger capture of it: copies of its observation lines with fresh exchange, leg, continuation and
session names and later times, so each copy builds chains of its own.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from proxy.config import Settings
from proxy.demo.clients import run_client
from proxy.demo.run import _start_server
from proxy.record.observations import OBS_PREFIX
from proxy.runtime import Proxy

_IDS = re.compile(rb'"(exchange|leg|related|continuation|name)":"((?:x|leg-|continuation-|upstream-)[^"]*)"')
_TIMES = re.compile(rb'"t":([0-9.]+)')


async def _record(directory: Path) -> list[Path]:
    paths = []
    async with asyncio.TaskGroup() as group:
        for era in ("modern", "legacy"):
            server, url = await _start_server(group, era)
            path = directory / f"demo-{era}.jsonl"
            proxy = Proxy(Settings(upstream=url, listen="127.0.0.1:0", admin_enabled=False, capture=path))
            await proxy.start()
            try:
                await run_client(proxy.endpoint(), "modern")
                await run_client(proxy.endpoint(), "legacy")
            finally:
                await proxy.stop()
                server.should_exit = True
            paths.append(path)
    return paths


def record_demo(directory: Path) -> Path:
    """One capture of the demo's clients of both eras through real proxies (header, info, observations)."""
    parts = asyncio.run(_record(directory))
    joined = directory / "demo.jsonl"
    with joined.open("wb") as out:
        for i, part in enumerate(parts):
            lines = part.read_bytes().splitlines(keepends=True)
            out.writelines(lines if i == 0 else [line for line in lines[1:] if line.startswith(OBS_PREFIX)])
    return joined


def _copy_line(line: bytes, suffix: bytes, shift: float) -> bytes:
    line = _IDS.sub(lambda m: b'"%s":"%s%s"' % (m[1], m[2], suffix), line)
    return _TIMES.sub(lambda m: b'"t":%.6f' % (float(m[1]) + shift), line, count=1)


def replicate(seed: Path, target: Path, copies: int) -> Path:
    """`copies` copies of the seed's observation lines, each with fresh names and later times."""
    lines = seed.read_bytes().splitlines(keepends=True)
    head = [line for line in lines if not line.startswith(OBS_PREFIX)]
    body = [line for line in lines if line.startswith(OBS_PREFIX)]
    times = [float(m[1]) for line in body if (m := _TIMES.search(line))]
    span = max(times) - min(times) + 0.001
    with target.open("wb") as out:
        out.writelines(head)
        for copy in range(1, copies + 1):
            suffix, shift = b".%d" % copy, span * copy
            out.writelines(_copy_line(line, suffix, shift) for line in body)
    return target
