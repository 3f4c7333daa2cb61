"""Regenerate `tour.jsonl`, the capture the TUI tests replay: `python -m tests.ui.data.make_tour`.

It records the demo's 2026-07-28 server through a real proxy, driven by a 2026-07-28 client
(pass-through) and a legacy client (the legacy_to_mrtr bridge), then pins every timestamp to a fixed
base and every loopback port to a fixed number, so the file renders the same on every machine.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import orjson

from proxy import logs
from proxy.config import Settings
from proxy.demo.clients import run_client
from proxy.demo.run import _quiet_logging, _start_server
from proxy.flows.events import FlowEvent, event_from_json, event_to_json
from proxy.record.capture import CaptureWriter
from proxy.runtime import Proxy

HERE = Path(__file__).parent
BASE = 1_800_000_000.0
"""2027-01-15 08:00:00 UTC: where the recorded timeline starts."""
_TIME_KEYS = ("ts", "started", "ended")


def _pin_times(value: object, first: float) -> object:
    if isinstance(value, dict):
        return {
            k: round(BASE + (v - first), 3)
            if k in _TIME_KEYS and isinstance(v, float)
            else _pin_times(v, first)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_pin_times(v, first) for v in value]
    return value


def normalize(events: list[FlowEvent], ports: dict[int, int]) -> list[FlowEvent]:
    """Fixed timestamps and ports, nothing else changed."""
    first = min(getattr(e, "ts", None) or getattr(getattr(e, "chain", None), "started", BASE) for e in events)
    out = []
    for event in events:
        text = event_to_json(event).decode()
        text = re.sub(r"127\.0\.0\.1:(\d+)", lambda m: f"127.0.0.1:{ports.get(int(m[1]), 9999)}", text)
        out.append(event_from_json(orjson.dumps(_pin_times(orjson.loads(text), first))))
    return out


async def record() -> list[FlowEvent]:
    """Run both clients through a proxy in front of the demo's 2026-07-28 server; return its events."""
    async with asyncio.TaskGroup() as group:
        server, url = await _start_server(group, "modern")
        proxy = Proxy(Settings(upstream=url, listen="127.0.0.1:0", admin_enabled=False))
        feed = proxy.bus.subscribe("fixture")
        await proxy.start()
        try:
            await run_client(proxy.endpoint(), "modern")
            await run_client(proxy.endpoint(), "legacy")
        finally:
            await proxy.stop()
            server.should_exit = True
    events = []
    while (event := feed.get_nowait()) is not None:
        events.append(event)
    upstream_port = int(url.split(":")[2].split("/")[0])
    return normalize(events, {upstream_port: 8000, proxy.port: 8080})


def main() -> None:
    """Write tour.jsonl beside this file."""
    logs.configure(quiet=True)
    _quiet_logging()
    events = asyncio.run(record())
    path = HERE / "tour.jsonl"
    path.unlink(missing_ok=True)
    with CaptureWriter(path, clock=lambda: BASE) as writer:
        for event in events:
            writer.write(event)
    print(f"wrote {len(events)} events to {path}")


if __name__ == "__main__":
    main()
