"""A `subscriptions/listen` through the `mcp-proxy` command: its open time, and what it was not given.

A 2026-07-28 SDK client listens for tool-list changes and a resource's updates, calls a tool that
announces both, and keeps listening for a while. The server is an `MCPServer` (SDK 2.3) that
declares neither `tools.listChanged` nor `resources.subscribe`, yet announces both. In pass-through
(the server in the 2026-07-28 era) the listen is the upstream's: its time up to the acknowledgement
is upstream time, the rest is the stream staying open. Through the bridge to the same server in the
legacy era the bridge serves the listen itself, which the upstream never sees, and it grants only
what the server declared (the 2026-07-28 listen contract: the acknowledgement names what will be
delivered), so the client is acknowledged with nothing and gets nothing: the listen chain says which
of the asked subscriptions the server does not offer, and the GET stream's records of the
notifications the server sent anyway say they reached no listening client and why. The live export,
the capture's export and the upstream latency histogram agree.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.peers.announcing_app import TOUCHED_URI
from tests.peers.runner import PeerServer
from tests.peers.scenarios import client_for
from tests.sidecar import ProxyProcess, admin_get, admin_json, clean_env, run_mcp_proxy, settings_env

pytestmark = pytest.mark.e2e

MODERN = "2026-07-28"
HOLD = 1.5
"""Seconds the client keeps listening after its call: the listen's stream time, at least."""

LISTEN = "subscriptions/listen"
ACKNOWLEDGED = "notifications/subscriptions/acknowledged"
UNDECLARED = "the server did not declare"


@pytest.fixture(scope="module")
def legacy_announcing() -> Iterator[PeerServer]:
    with PeerServer("legacy-announcing") as server:
        yield server


@pytest.fixture(scope="module")
def modern_announcing() -> Iterator[PeerServer]:
    with PeerServer("modern-announcing") as server:
        yield server


async def listen_and_touch(url: str, heard: anyio.Event | None = None) -> tuple[dict[str, Any], list[str]]:
    """Listen, call `touch`, keep listening `HOLD` seconds (or, with `heard`, until it is set and
    then `HOLD` seconds); the honoured filter and the events heard."""
    events: list[str] = []
    async with client_for(url, MODERN, read_timeout=10.0) as client:
        with anyio.fail_after(HOLD + 20):
            async with client.listen(tools_list_changed=True, resource_subscriptions=[TOUCHED_URI]) as sub:
                assert sub.honored is not None
                honoured = sub.honored.model_dump(by_alias=True, exclude_none=True)
                assert not (await client.call_tool("touch", {})).is_error
                if heard is not None:
                    await heard.wait()
                with anyio.move_on_after(HOLD):
                    async for event in sub:
                        events.append(type(event).__name__)
    return honoured, events


async def listen_latency(admin: str) -> tuple[float, float]:
    """The upstream latency /metrics has for `subscriptions/listen`: (count, sum in seconds)."""
    _, _, body = await admin_get(admin + "/metrics")
    found = {"count": 0.0, "sum": 0.0}
    for line in body.decode().splitlines():
        for part in found:
            sample = f"mcp_proxy_upstream_latency_seconds_{part}{{"
            if line.startswith(sample) and f'method="{LISTEN}"' in line:
                found[part] += float(line.rsplit(" ", 1)[1])
    return found["count"], found["sum"]


def chain_of(exported: dict[str, Any], method: str) -> dict[str, Any]:
    (chain,) = [c for c in exported["chains"] if c["chain"]["method"] == method]
    return chain


def assert_stream_time(headline: dict[str, Any]) -> None:
    """The listen's open time is stream time; the upstream's part ends at the acknowledgement."""
    assert headline["stream_ms"] >= HOLD * 1000, headline
    assert headline["upstream_ms"] is not None, headline
    assert headline["upstream_ms"] < HOLD * 1000 / 3, headline
    parts = headline["upstream_ms"] + headline["client_wait_ms"] + headline["held_ms"] + headline["stream_ms"]
    assert abs(parts - headline["duration_ms"]) < 1, headline


def exported_from(capture: Path) -> dict[str, Any]:
    done = run_mcp_proxy("export", "--json", "-", str(capture))
    assert done.returncode == 0, done.stderr
    exported: dict[str, Any] = json.loads(done.stdout)
    return exported


async def test_a_passed_through_listen_is_upstream_time_until_its_acknowledgement_then_stream_time(
    modern_announcing: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "run.jsonl"
    with ProxyProcess(clean_env(**settings_env(upstream=modern_announcing.url, capture=capture))) as proxy:
        honoured, events = await listen_and_touch(proxy.endpoint())
        live: dict[str, Any] = {}

        async def ended() -> bool:
            live.update(await admin_json(proxy.admin + "/api/export.json"))
            return chain_of(live, LISTEN)["chain"]["ended"] is not None

        await until_async(ended, what="the listen's chain to end")
        count, total = await listen_latency(proxy.admin)
    assert honoured == {"toolsListChanged": True, "resourceSubscriptions": [TOUCHED_URI]}
    assert sorted(events) == ["ResourceUpdated", "ToolsListChanged"]
    listen = chain_of(live, LISTEN)
    assert listen["chain"]["mode"] == "passthrough"
    assert_stream_time(listen["chain"])
    assert_stream_time(chain_of(exported_from(capture), LISTEN)["chain"])
    assert count == 1
    assert total < HOLD / 3


async def test_a_bridged_listen_says_what_the_server_does_not_offer_and_what_it_sent_reached_no_listener(
    legacy_announcing: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "run.jsonl"
    with ProxyProcess(clean_env(**settings_env(upstream=legacy_announcing.url, capture=capture))) as proxy:
        live: dict[str, Any] = {}
        heard = anyio.Event()

        async def announced() -> bool:
            """The server's two notifications are in the GET stream's chain."""
            live.update(await admin_json(proxy.admin + "/api/export.json"))
            streams = [c for c in live["chains"] if c["chain"]["method"] == "GET stream"]
            return bool(streams) and len(streams[0]["messages"]) >= 2

        async def watch() -> None:
            await until_async(announced, what="the server's notifications on its GET stream")
            heard.set()

        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            honoured, events = await listen_and_touch(proxy.endpoint(), heard)

        async def ended() -> bool:
            live.update(await admin_json(proxy.admin + "/api/export.json"))
            return chain_of(live, LISTEN)["chain"]["ended"] is not None

        await until_async(ended, what="the listen's chain to end")
        count, total = await listen_latency(proxy.admin)
    # The bridge grants only what the server declared: nothing here, as the server's discover says.
    assert honoured == {}
    assert events == []
    for exported in (live, exported_from(capture)):
        listen = chain_of(exported, LISTEN)
        assert listen["chain"]["mode"] == "mrtr_to_legacy"
        assert_stream_time(listen["chain"])
        (ack,) = [
            m for m in listen["messages"] if m.get("method") == "notifications/subscriptions/acknowledged"
        ]
        assert ack["note"] == (
            "not honoured, the server did not declare them: toolsListChanged (tools.listChanged), "
            "resourceSubscriptions (resources.subscribe)"
        ), ack
        stream = chain_of(exported, "GET stream")
        notes = {m["method"]: m.get("note") for m in stream["messages"] if m["kind"] == "notification"}
        assert notes == {
            "notifications/tools/list_changed": "not delivered to the listening client: "
            "the server did not declare tools.listChanged",
            "notifications/resources/updated": "not delivered to the listening client: "
            "the server did not declare resources.subscribe",
        }, stream["messages"]
    assert count == 1
    assert total < HOLD / 3


async def until_async(check: Any, *, what: str, seconds: float = 15.0) -> None:
    """Poll an async `check` until it holds (bounded), failing with a message naming `what`."""
    with anyio.move_on_after(seconds):
        while True:
            if await check():
                return
            await anyio.sleep(0.05)
    raise AssertionError(f"timed out after {seconds}s waiting for {what}")
