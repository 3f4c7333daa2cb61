"""`subscriptions/listen` emulated over a real legacy server's GET stream, bytes and all.

The legacy server is the Python SDK's (``tests.peers.notifying_app``, in its own environment, as the
e2e tests start peers). The test plays a legacy client toward it: it opens a session, opens the
session's GET stream, subscribes to a resource and asks the server to announce changes, recording
the GET stream's bytes as they come. Those bytes, decoded by the proxy's own SseDecoder, are fed to
the MRTR->legacy engine as the LegMessage events of its listen leg; the client-side commands it
gives must deliver each notification to each listener that asked for it, tagged with its
subscription id, and nothing else.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from proxy.engine.commands import OpenLegStream, SendSse
from proxy.engine.events import LegMessage
from proxy.framing.sse import SseDecoder, SseEvent
from proxy.wire.jsonrpc import parse_text, request
from tests.engine.playbook import protocol
from tests.engine.test_mrtr_to_legacy import (
    ACK,
    head,
    listen,
    note,
    ready_engine,
    tagged,
)
from tests.peers.notifying_app import ANNOUNCE_URI
from tests.peers.runner import PeerServer

pytestmark = pytest.mark.e2e

LEGACY = "2025-11-25"
WAIT = 10.0
"""Seconds the test waits for the server's notifications on its GET stream."""


async def _post(
    http: aiohttp.ClientSession, url: str, message: dict[str, Any], session: str | None
) -> aiohttp.ClientResponse:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if session is not None:
        headers |= {"Mcp-Session-Id": session, "MCP-Protocol-Version": LEGACY}
    response = await http.post(url, json=message, headers=headers)
    await response.read()  # each answer is whole (JSON, or an SSE stream that ends with it)
    return response


async def record_get_stream(url: str) -> list[bytes]:
    """The raw chunks of a legacy session's GET stream while the server announces changes."""
    chunks: list[bytes] = []
    timeout = aiohttp.ClientTimeout(total=WAIT)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        init = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
        answer = await _post(
            http, url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}, None
        )
        session = answer.headers["Mcp-Session-Id"]
        await _post(http, url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
        stream_headers = {
            "Accept": "text/event-stream",
            "Mcp-Session-Id": session,
            "MCP-Protocol-Version": LEGACY,
        }
        async with http.get(url, headers=stream_headers) as stream:
            assert stream.status == 200, await stream.text()
            subscribe = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "resources/subscribe",
                "params": {"uri": ANNOUNCE_URI},
            }
            await _post(http, url, subscribe, session)
            await _post(http, url, request(3, "tools/call", {"name": "announce_changes"}), session)
            decoder, seen = SseDecoder(), 0
            while seen < 2:  # the list change and the resource update
                chunk = await asyncio.wait_for(stream.content.readany(), WAIT)
                assert chunk, "the server ended its GET stream"
                chunks.append(chunk)
                seen += sum(isinstance(e, SseEvent) and e.carries_message for e in decoder.feed(chunk))
    return chunks


@pytest.fixture(scope="module")
def recorded() -> list[bytes]:
    """The GET stream bytes of one real session (the server process stops with the fixture)."""
    with PeerServer("legacy-notifying") as server:
        return asyncio.run(record_get_stream(server.url))


def leg_events(leg: str, chunks: list[bytes]) -> list[LegMessage]:
    """What the executor feeds for these bytes: one LegMessage per SSE event that carries a message."""
    decoder = SseDecoder()
    events = [e for chunk in chunks for e in decoder.feed(chunk) if isinstance(e, SseEvent)]
    return [LegMessage(leg, parse_text(e.data), e.id) for e in events if e.carries_message]


def test_the_recorded_stream_holds_the_servers_notifications(recorded: list[bytes]) -> None:
    methods = [event.message.method for event in leg_events("leg", recorded)]

    assert methods == ["notifications/tools/list_changed", "notifications/resources/updated"]


def test_listeners_get_the_real_get_streams_notifications_tagged_and_only_what_they_asked(
    recorded: list[bytes],
) -> None:
    engine = ready_engine()
    opened = engine.handle(listen("x1", "tools", toolsListChanged=True))
    opened += engine.handle(listen("x2", 7, resourceSubscriptions=[ANNOUNCE_URI]))
    stream_leg = next(c.leg for c in opened if isinstance(c, OpenLegStream))  # the session's GET
    engine.handle(head(stream_leg))

    out = [c for event in leg_events(stream_leg, recorded) for c in protocol(engine.handle(event))]

    changed = note("notifications/tools/list_changed")
    updated = note("notifications/resources/updated", {"uri": ANNOUNCE_URI})
    assert out == [SendSse("x1", tagged(changed, "tools")), SendSse("x2", tagged(updated, 7))]
    assert all(c.message["method"] != ACK for c in out)
