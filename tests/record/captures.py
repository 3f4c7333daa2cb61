"""Captures of real traffic for reader tests: the demo's SDK peers through real proxies, and bigger copies.

`full_har` and `full_read` are what the full chain builder makes of a capture: the lighter readers
are held to them. `record_play` writes a scripted play (`tests.flows`) to a capture while a watched
sink builds its chains at once, as a running proxy with a watcher does. `record_demo` drives the
demo's SDK clients of both eras through proxies in front of the demo's 2026-07-28 and 2025-era
servers (pass-through and both bridges: SSE streams, nested requests, MRTR rounds, upstream legs,
continuations) and joins the two captures into one file.
`replicate` makes a bigger capture of it: copies of its observation lines with fresh exchange, leg,
continuation and session names and later times, so each copy builds chains of its own.
"""

from __future__ import annotations

import asyncio
import io
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from proxy.config import Settings
from proxy.demo.clients import run_client
from proxy.demo.run import _start_server
from proxy.flows.bus import EventBus
from proxy.flows.chains import ChainBuilder
from proxy.flows.events import ChainSummary, FlowEvent, MessageRecord, MessageRecorded, ProxyInfo
from proxy.flows.filters import ChainFilter
from proxy.flows.redact import Redactor
from proxy.flows.sink import ObservationSink
from proxy.flows.store import ChainStore
from proxy.record.capture import CaptureWriter
from proxy.record.export import RING, open_readers
from proxy.record.har import HarWriter
from proxy.record.har_capture import HarFromCapture
from proxy.record.observations import OBS_PREFIX, ObservationEncoder, ObservationReplayer
from proxy.runtime import Proxy
from tests.flows.calls import Calls

LISTEN = "http://127.0.0.1:18201"
"""Where `record_play`'s proxy listened (its `proxy_info`)."""
UPSTREAM = "http://127.0.0.1:18202/mcp"
"""What `record_play`'s proxy proxied."""

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


def full_har(paths: list[Path], keep: ChainFilter | None = None) -> bytes:
    """The HAR the full build gives: message records and headline announcements included."""
    out = io.BytesIO()
    har = HarWriter(out)
    store = ChainStore(max_chains=RING, max_messages_per_chain=1)
    entries = HarFromCapture(har.write, store, keep=keep, lean=False)
    readers = open_readers(paths, entries.replayer)
    for reader in readers:
        with reader:
            for event in reader:
                if isinstance(event, ProxyInfo):
                    entries.proxy_info(event)
    entries.finish()
    har.close()
    return out.getvalue()


def full_read(paths: list[Path]) -> tuple[dict[str, ChainSummary], dict[str, list[MessageRecord]]]:
    """Every chain's final headline and its records, as a watcher holding the whole capture sees them."""
    store = ChainStore(max_chains=1_000_000, max_messages_per_chain=100_000)
    replayer = ObservationReplayer(store=store)
    records: dict[str, list[MessageRecord]] = {}
    for reader in open_readers(paths, replayer):
        with reader:
            for event in reader:
                if isinstance(event, MessageRecorded):
                    records.setdefault(event.chain_id, []).append(event.message)
    return {chain.summary.id: chain.summary for chain in store.drain()}, records


class _Clock:
    """The play's clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


def record_play(play: Callable[[Any, Any], object], path: Path) -> tuple[ChainStore, list[FlowEvent]]:
    """A play into a watched sink (its chains built at once) whose observations go to the capture `path`
    too; returns the live chains' store and the events they made."""
    redactor, clock = Redactor(key=b"test-key"), _Clock()
    store, events = ChainStore(), list[FlowEvent]()
    bus = EventBus()
    bus.subscribe("tui")
    builder = ChainBuilder(store, events.append, redactor, clock=clock)
    sink = ObservationSink(builder, redactor, bus=bus, clock=clock)
    encoder = ObservationEncoder(redactor, 65536)
    with CaptureWriter(path) as writer:
        writer.write(ProxyInfo(ts=clock.now, version="t", listen=LISTEN, upstream=UPSTREAM))
        sink.listeners.append(lambda batch: writer.write_lines([encoder.encode(obs) for obs in batch]))
        play(Calls(sink), clock)
    sink.build()
    return store, events


def damage_opening(capture: Path, exchange: str, damage: Callable[[bytes], bytes]) -> tuple[int, int]:
    """Damage, in place, the `exchange_opened` line of `exchange`: its line number (from 1), and how
    many later lines are that exchange's (what the reader cannot place without it)."""
    lines = capture.read_bytes().splitlines(keepends=True)
    own = f'"exchange":"{exchange}"'.encode()
    at = next(i for i, line in enumerate(lines) if b'"exchange_opened"' in line and own in line)
    later = sum(1 for line in lines[at + 1 :] if own in line)
    lines[at] = damage(lines[at])
    capture.write_bytes(b"".join(lines))
    return at + 1, later


def as_written_by_1_9(capture: bytes) -> bytes:
    """A capture of this version as format 1.9 wrote it, made by hand: its header says 1.9 and each
    header value of its observation lines is the latin-1 reading of the value's UTF-8 bytes
    (`cafÃ©` for `café`), as the 1.9 writer stored every value."""
    lines = capture.splitlines(keepends=True)
    header = orjson.loads(lines[0])
    header["version"] = "1.9"
    header.pop("follows", None)
    out = [orjson.dumps(header) + b"\n"]
    for raw in lines[1:]:
        line = orjson.loads(raw)
        if isinstance(line, dict) and isinstance(line.get("headers"), dict):
            line["headers"] = {k: v.encode().decode("latin-1") for k, v in line["headers"].items()}
            raw = orjson.dumps(line) + b"\n"
        out.append(raw)
    return b"".join(out)
