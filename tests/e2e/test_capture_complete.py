"""A complete capture under pressure: what the proxy relayed is in the capture once, whatever the ring did.

A call stays open while more than `max_chains` newer chains open (the client floods the proxy with
other calls from inside its own elicitation or progress callback, so the order is certain, not timed).
The ring lets the call's chain go; its later messages (the elicitation answer, progress, the result)
must still reach the capture, the admin feed (the bus) and the chain, exactly once each.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from mcp import Client
from mcp_types import ElicitRequestParams, ElicitResult

from proxy.flows.events import ChainOpened, ChainStatus, Direction, MessageRecorded
from proxy.record.capture import read_capture
from proxy.record.completeness import Expected, check_capture
from proxy.runtime import Proxy
from tests.peers.runner import PeerServer

pytestmark = pytest.mark.e2e

RING = 4
"""max_chains in these tests: small, so a handful of calls pushes a chain out of the ring."""

FLOOD = 3 * RING
"""Calls opened while the watched call is still running."""


async def flood(url: str, tag: str) -> list[str]:
    """Open FLOOD chains through the proxy from a second client; return their markers."""
    markers = [f"{tag}-{n}" for n in range(FLOOD)]
    async with Client(url, mode="legacy") as other:
        for marker in markers:
            await other.call_tool("add", {"a": 1, "b": 2, "tag": marker})
    return markers


def in_ring(proxy: Proxy, chain_id: str) -> bool:
    return chain_id in {chain.summary.id for chain in proxy.chains()}


async def test_an_elicited_call_the_ring_let_go_keeps_its_answer_and_result_in_the_capture(
    legacy_server: PeerServer, proxy_for: Callable[..., Any], tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    seen: dict[str, Any] = {}
    async with proxy_for(legacy_server.url, max_chains=RING, capture=capture) as proxy:
        feed = proxy.bus.subscribe("feed")  # what the admin feed relays
        url = proxy.endpoint()

        async def answer(ctx: Any, params: ElicitRequestParams) -> ElicitResult:
            (chain,) = [c for c in proxy.chains() if c.summary.name == "ask_name"]
            seen["chain"] = chain.summary.id
            seen["flood"] = await flood(url, "elicit")
            seen["left_ring"] = not in_ring(proxy, chain.summary.id)
            seen["held"] = proxy.chains().get(chain.summary.id) is not None
            return ElicitResult(action="accept", content={"name": "ringname-7"})

        async with Client(url, mode="legacy", elicitation_callback=answer) as client:
            result = await client.call_tool("ask_name", {})
        text = result.content[0].text  # type: ignore[union-attr]
    # Read once the proxy has stopped: the answer's 202 exchange may close after the client has its
    # result, and its `http` record is filed when it closes (the capture holds it either way).
    events = []
    while (event := feed.get_nowait()) is not None:
        events.append(event)
    feed.close()
    chain_id = seen["chain"]
    assert "ringname-7" in text
    assert seen["left_ring"], "the flood pushed the waiting call's chain out of the ring"
    assert seen["held"], "an open chain the ring let go is still found by id"
    assert proxy.chains().evicted >= FLOOD

    live = [e.message for e in events if isinstance(e, MessageRecorded) and e.chain_id == chain_id]
    shapes = [(m.direction, m.kind) for m in live]
    late = shapes[shapes.index((Direction.TO_CLIENT, "request")) + 1 :]  # after the elicitation
    assert late.count((Direction.TO_SERVER, "result")) == 1, shapes  # the elicitation answer
    assert late.count((Direction.TO_CLIENT, "result")) == 1, shapes  # the call's result

    report = check_capture(
        capture,
        [
            Expected("ringname-7", "to_server", "elicitation answer"),
            *(Expected(m, "to_server", "flood call") for m in seen["flood"]),
        ],
    )
    assert report.ok, report.to_dict()
    assert report.completeness == 100.0
    assert report.unfinished_chains == []
    replayed = list(read_capture(capture))
    (opened,) = [e.chain for e in replayed if isinstance(e, ChainOpened) and e.chain.name == "ask_name"]
    mine = [e.message for e in replayed if isinstance(e, MessageRecorded) and e.chain_id == opened.id]
    assert [(m.direction, m.kind) for m in mine] == [(m.direction, m.kind) for m in live]
    assert any(text in str(m.body) for m in mine if m.direction is Direction.TO_CLIENT)


async def test_a_progressing_call_the_ring_let_go_keeps_every_progress_and_its_result(
    legacy_server: PeerServer, proxy_for: Callable[..., Any], tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    steps = 120
    progress: list[float] = []
    seen: dict[str, Any] = {}
    async with proxy_for(legacy_server.url, max_chains=RING, capture=capture) as proxy:
        feed = proxy.bus.subscribe("feed")
        url = proxy.endpoint()

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append(value)
            if len(progress) == 1:
                (chain,) = [c for c in proxy.chains() if c.summary.name == "slow_progress"]
                seen["chain"] = chain.summary.id
                await flood(url, "progress")
                seen["left_ring"] = not in_ring(proxy, chain.summary.id)

        async with Client(url, mode="legacy") as client:
            result = await client.call_tool("slow_progress", {"steps": steps}, progress_callback=on_progress)
        events = []
        while (event := feed.get_nowait()) is not None:
            events.append(event)
        feed.close()
    chain_id = seen["chain"]
    assert result.content[0].text == f"done {steps}"  # type: ignore[union-attr]
    assert progress == [float(n) for n in range(1, steps + 1)]
    assert seen["left_ring"], "the flood pushed the running call's chain out of the ring"

    live = [e.message for e in events if isinstance(e, MessageRecorded) and e.chain_id == chain_id]
    assert sum(1 for m in live if m.method == "notifications/progress") == steps
    assert live[-1].kind == "result"

    replayed = list(read_capture(capture))
    (opened,) = [e.chain for e in replayed if isinstance(e, ChainOpened) and e.chain.name == "slow_progress"]
    mine = [e.message for e in replayed if isinstance(e, MessageRecorded) and e.chain_id == opened.id]
    assert sum(1 for m in mine if m.method == "notifications/progress") == steps
    assert [m.kind for m in mine] == [m.kind for m in live]
    last = [e.chain for e in replayed if getattr(e, "chain", None) is not None and e.chain.id == opened.id]
    assert last[-1].status is ChainStatus.OK


async def test_a_bus_too_small_for_the_traffic_costs_the_capture_nothing(
    legacy_server: PeerServer, proxy_for: Callable[..., Any], tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    steps = 60
    async with proxy_for(legacy_server.url, capture=capture, bus_queue_size=1) as proxy:
        lagging = proxy.bus.subscribe("never-read")  # a live watcher that never reads: it lags at once
        async with Client(proxy.endpoint(), mode="legacy") as client:
            markers = [f"busy-{n}" for n in range(20)]
            for marker in markers:
                await client.call_tool("add", {"a": 1, "b": 2, "tag": marker})
            await client.call_tool("slow_progress", {"steps": steps}, progress_callback=_ignore)
        assert lagging.dropped_total > 0
        lagging.close()

    report = check_capture(capture, [Expected(m, "to_server") for m in markers])
    assert report.ok, report.to_dict()
    replayed = list(read_capture(capture))
    (opened,) = [e.chain for e in replayed if isinstance(e, ChainOpened) and e.chain.name == "slow_progress"]
    mine = [e.message for e in replayed if isinstance(e, MessageRecorded) and e.chain_id == opened.id]
    assert sum(1 for m in mine if m.method == "notifications/progress") == steps
    assert mine[-1].kind == "result"


async def _ignore(value: float, total: float | None, message: str | None) -> None:
    """A progress callback, so the call carries a progressToken and the server reports progress."""


async def test_a_capture_announces_the_proxy_once_at_start(
    legacy_server: PeerServer, proxy_for: Callable[..., Any], tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    async with proxy_for(legacy_server.url, capture=capture):
        pass
    kinds = [orjson.loads(line).get("type") for line in capture.read_bytes().splitlines() if line.strip()]
    assert kinds.count("proxy_info") == 1, kinds
