"""The modern->legacy bridge's upstream sessions, with real SDK peers: whose, declaring what, how many.

The upstream is the conformance suite's legacy fixture server; its ``proxy_test_whoami`` tool tells
each caller which ``Authorization``, ``Mcp-Session-Id`` and client capabilities the server itself saw
(so these tests ask the real server, not the proxy). Clients are the Python SDK's 2026-07-28
``Client``; where a test needs a request no SDK client sends (a call left parked), it is crafted raw.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import httpx2
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client

from proxy.flows.bus import Subscription
from proxy.flows.events import Mode, SessionChanged, Side
from proxy.runtime import Proxy
from tests.e2e.modern_raw import modern_call
from tests.peers.conformance_more import WHOAMI
from tests.peers.runner import PeerServer
from tests.peers.scenarios import client_for
from tests.transport.helpers import wait_until

pytestmark = pytest.mark.e2e

MODERN = "2026-07-28"
ALICE = "Bearer alice"
BOB = "Bearer bob"
SESSION_CAPS_OF_SDK_CLIENT: dict[str, Any] = {
    "elicitation": {"form": {}, "url": {}},
    "roots": {},
    "sampling": {},
}
"""What the bridge declares upstream for an SDK client with every callback (no roots.listChanged)."""


@pytest.fixture(scope="module")
def upstream() -> Iterator[PeerServer]:
    with PeerServer("conformance-legacy") as peer:
        yield peer


def principal(auth: str) -> str:
    """How the engine names a caller: the first 16 hex digits of the SHA-256 of its `Authorization`."""
    return hashlib.sha256(auth.encode()).hexdigest()[:16]


def shown(proxy: Proxy, auth: str) -> str:
    """How observers see a caller: the engine's name keyed with the deployment's redaction key."""
    return proxy.redactor.fingerprint(principal(auth))


def sessions(proxy: Proxy) -> list[dict[str, Any]]:
    return proxy.router.bridges[Mode.MRTR_TO_LEGACY].engine.sessions_view()  # type: ignore[attr-defined,no-any-return]


async def whoami(client: Client) -> dict[str, Any]:
    result = await client.call_tool(WHOAMI, {})
    (block,) = result.content
    assert isinstance(block, types.TextContent)
    seen: dict[str, Any] = json.loads(block.text)
    return seen


@asynccontextmanager
async def sampling_only_client(url: str, sampled: list[str]) -> AsyncIterator[Client]:
    """An SDK 2026-07-28 client that can answer sampling and nothing else (so declares only that)."""

    async def sampling(
        context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        first = params.messages[0].content
        sampled.append(first.text if isinstance(first, types.TextContent) else "")
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(text="hi"), model="m", stop_reason="endTurn"
        )

    async with httpx2.AsyncClient(headers={"Authorization": ALICE}, timeout=30.0) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=MODERN, cache=None, sampling_callback=sampling) as client:
            yield client


async def deleted_upstream(
    http: aiohttp.ClientSession, url: str, session: str, *, seconds: float = 5.0
) -> bool:
    """True once the legacy server answers 404 on `session` (the bridge's DELETE runs on its own leg,
    so it may land a moment after the request that caused it); False if it never does in time."""
    deadline = asyncio.get_running_loop().time() + seconds
    while await upstream_status(http, url, session) != 404:
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


async def upstream_status(http: aiohttp.ClientSession, url: str, session: str) -> int:
    """What the legacy server answers a request on `session` (404 once it was deleted)."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
        "Mcp-Session-Id": session,
        "Authorization": ALICE,
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with http.post(url, json=body, headers=headers) as resp:
        await resp.read()
        return resp.status


def upstream_events(feed: Subscription) -> list[tuple[str, str, str | None, str | None]]:
    """The SessionChanged events of upstream sessions the feed holds so far."""
    events: list[tuple[str, str, str | None, str | None]] = []
    while (event := feed.get_nowait()) is not None:
        if isinstance(event, SessionChanged) and event.side is Side.UPSTREAM:
            events.append((event.session, event.state, event.principal, event.capabilities))
    return events


async def test_two_principals_get_two_upstream_sessions_opened_with_their_own_credentials(
    upstream: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with proxy_for(upstream.url) as proxy:
        feed = proxy.bus.subscribe("test")
        async with (
            client_for(proxy.endpoint(), MODERN, headers={"Authorization": ALICE}) as alice,
            client_for(proxy.endpoint(), MODERN, headers={"Authorization": BOB}) as bob,
        ):
            first = await whoami(alice)
            theirs = await whoami(bob)
            again = await whoami(alice)
        view = sessions(proxy)
        events = upstream_events(feed)

    assert first["authorization"] == ALICE
    assert theirs["authorization"] == BOB
    assert first["session"]
    assert theirs["session"]
    assert first["session"] != theirs["session"]
    assert again["session"] == first["session"]
    assert first["capabilities"] == theirs["capabilities"] == SESSION_CAPS_OF_SDK_CLIENT
    assert sorted(v["principal"] for v in view) == sorted([principal(ALICE), principal(BOB)])
    opened = [(state, who, caps) for _name, state, who, caps in events]
    everything = "elicitation.form elicitation.url sampling roots"
    assert sorted(opened) == sorted(
        [("opened", shown(proxy, ALICE), everything), ("opened", shown(proxy, BOB), everything)]
    )
    for secret in ("alice", "bob", first["session"], theirs["session"]):
        assert secret not in repr(view)
        assert secret not in repr(events)


async def test_a_client_without_elicitation_makes_the_legacy_server_take_its_fallback_path(
    upstream: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    """The server asks the user when its session says it may, else the LLM: the bridge's session for
    a sampling-only client says exactly that, so the question is a sampling one, not a -32021."""
    sampled: list[str] = []
    async with proxy_for(upstream.url) as proxy:
        async with sampling_only_client(proxy.endpoint(), sampled) as client:
            seen = await whoami(client)
            result = await client.call_tool("test_input_required_result_capabilities", {})
        async with client_for(proxy.endpoint(), MODERN, headers={"Authorization": ALICE}) as full:
            asked = await full.call_tool("test_input_required_result_capabilities", {})
        view = sessions(proxy)

    assert seen["capabilities"] == {"sampling": {}}
    assert sampled == ["Say something for the capability check"]
    assert [block.text for block in result.content if isinstance(block, types.TextContent)] == [
        "sampled=hi (fallback: no elicitation declared)"
    ]
    assert not result.is_error
    assert next(block.text for block in asked.content if isinstance(block, types.TextContent)).startswith(
        "note="
    )
    assert sorted(v["capabilities"] for v in view) == [
        "elicitation.form elicitation.url sampling roots",
        "sampling",
    ]


async def test_past_max_upstream_sessions_the_idle_one_is_deleted_upstream_to_make_room(
    upstream: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with (
        proxy_for(upstream.url, max_upstream_sessions=1) as proxy,
        aiohttp.ClientSession() as http,
    ):
        feed = proxy.bus.subscribe("test")
        async with client_for(proxy.endpoint(), MODERN, headers={"Authorization": ALICE}) as alice:
            first = await whoami(alice)
            async with client_for(proxy.endpoint(), MODERN, headers={"Authorization": BOB}) as bob:
                theirs = await whoami(bob)
            assert await deleted_upstream(http, upstream.url, first["session"])
            again = await whoami(alice)
        view = sessions(proxy)
        events = upstream_events(feed)

    assert theirs["authorization"] == BOB
    assert again["session"] not in (first["session"], theirs["session"])
    assert [v["principal"] for v in view] == [principal(ALICE)]
    states = [(state, who) for _name, state, who, _caps in events]
    assert states == [
        ("opened", shown(proxy, ALICE)),
        ("ended", shown(proxy, ALICE)),
        ("opened", shown(proxy, BOB)),
        ("ended", shown(proxy, BOB)),
        ("opened", shown(proxy, ALICE)),
    ]


async def test_when_every_session_is_busy_a_new_caller_is_refused_naming_the_setting(
    upstream: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    ask = {"name": "test_input_required_result_elicitation", "arguments": {}}
    async with (
        proxy_for(upstream.url, max_upstream_sessions=1) as proxy,
        aiohttp.ClientSession() as http,
    ):
        url = proxy.endpoint()
        status, parked = await modern_call(
            http, url, "tools/call", ask, ident=1, headers={"Authorization": ALICE}
        )
        assert status == 200
        assert parked["result"]["resultType"] == "input_required"
        status, refused = await modern_call(
            http, url, "tools/call", ask, ident=2, headers={"Authorization": BOB}
        )
        (key,) = parked["result"]["inputRequests"]
        retry = {**ask, "inputResponses": {key: {"action": "accept", "content": {"name": "Ann"}}}}
        retry["requestState"] = parked["result"]["requestState"]
        _, done = await modern_call(http, url, "tools/call", retry, ident=3, headers={"Authorization": ALICE})
        status_after, served = await modern_call(
            http, url, "tools/call", ask, ident=4, headers={"Authorization": BOB}
        )

    assert status == 503
    assert refused["error"]["code"] == -32000
    assert "max_upstream_sessions=1" in refused["error"]["message"]
    assert done["result"]["content"][0]["text"] == "Hello, Ann!"
    assert status_after == 200
    assert served["result"]["resultType"] == "input_required"


async def test_an_idle_session_is_deleted_upstream_after_its_ttl(
    upstream: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with (
        proxy_for(upstream.url, upstream_session_ttl=0.2) as proxy,
        aiohttp.ClientSession() as http,
    ):
        feed = proxy.bus.subscribe("test")
        async with client_for(proxy.endpoint(), MODERN, headers={"Authorization": ALICE}) as alice:
            seen = await whoami(alice)
        await wait_until(lambda: not sessions(proxy), what="the idle session to be closed")
        assert await deleted_upstream(http, upstream.url, seen["session"])
        events = upstream_events(feed)

    assert [state for _name, state, _who, _caps in events] == ["opened", "expired"]


async def test_when_the_proxy_stops_its_upstream_sessions_are_deleted(
    upstream: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with (
        proxy_for(upstream.url) as proxy,
        client_for(proxy.endpoint(), MODERN, headers={"Authorization": ALICE}) as alice,
    ):
        seen = await whoami(alice)
    async with aiohttp.ClientSession() as http:
        assert await upstream_status(http, upstream.url, seen["session"]) == 404
