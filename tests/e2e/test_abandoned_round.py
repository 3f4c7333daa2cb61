"""A 2026-07-28 client that gives up on a round, then calls again, behind `mrtr_to_legacy`.

The Python SDK client stops retrying when its sampling, elicitation or roots callback fails, so the
bridge keeps that call parked until `continuation_ttl`. server-everything asks `roots/list` on its
session's GET stream (right after the handshake, and again from `get-roots-list` when it has none),
naming no request. The parked call is never asked it, but its upstream request still runs and could
be the asker, so while it is parked the question is the parked call's or the running call's, and it
is refused rather than shown to a client it may not belong to. Once the parked call's
`continuation_ttl` has run out, `get-roots-list` lists the client's root exactly as it does for a
legacy client talking to the server directly.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError

from tests.peers.runner import NodeServer, PeerServer
from tests.sidecar import ProxyProcess, admin_json, clean_env, settings_env

pytestmark = pytest.mark.e2e

ROOT = types.Root(uri="file:///r", name="r")


@pytest.fixture
def everything() -> Iterator[NodeServer]:
    """A fresh server-everything per test: it asks for roots once per session it has not synced."""
    with NodeServer("everything") as server:
        yield server


@asynccontextmanager
async def refusing_sampling_client(url: str, mode: str) -> AsyncIterator[Client]:
    """A client whose sampling callback fails (the 2026-07-28 client then stops asking) and whose
    roots callback names one root."""

    async def sampling(
        context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.ErrorData:
        return types.ErrorData(code=-32002, message="sampling refused by user")

    async def roots(context: ClientRequestContext) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[ROOT])

    client = Client(
        url,
        mode=mode,
        sampling_callback=sampling,
        list_roots_callback=roots,
        cache=None,
        read_timeout_seconds=10,
    )
    async with client:
        yield client


async def refuse_then_list_roots(url: str, mode: str, *, wait: float = 0.0) -> tuple[str, str, str]:
    """Step 1: `trigger-sampling-request`, refused by the client; step 2: `get-roots-list`; step 3,
    `wait` seconds later: `get-roots-list` again."""
    async with refusing_sampling_client(url, mode) as client:
        with anyio.fail_after(20 + wait):
            try:
                await client.call_tool("trigger-sampling-request", {"prompt": "x"})
                refused = "answered"
            except MCPError as exc:
                refused = exc.message
            listed = await client.call_tool("get-roots-list", {})
            await anyio.sleep(wait)
            later = await client.call_tool("get-roots-list", {})
    return refused, _text(listed), _text(later)


def _text(result: types.CallToolResult) -> str:
    first = result.content[0]
    return first.text if isinstance(first, types.TextContent) else repr(first)


TTL = 2.0
"""The proxy's `continuation_ttl` here: how long the abandoned call stays parked."""


async def test_a_round_the_client_gave_up_on_never_takes_the_next_calls_question_and_lets_go_at_its_ttl(
    everything: NodeServer,
) -> None:
    _, direct, _ = await refuse_then_list_roots(everything.url, "legacy")  # the legacy client's own session
    assert direct.startswith("Current MCP Roots (1 total):\n\n1. r\n   URI: file:///r"), direct
    env = settings_env(upstream=everything.url, continuation_ttl=str(TTL))
    with ProxyProcess(clean_env(**env)) as proxy:
        refused, meanwhile, later = await refuse_then_list_roots(proxy.endpoint(), "2026-07-28", wait=TTL + 1)
        chains = await admin_json(proxy.admin + "/api/chains")
        events = proxy.events()
    assert refused == "sampling refused by user"  # the 2026-07-28 client gave up on its round
    assert meanwhile.startswith("The client supports roots but no roots are currently configured"), meanwhile
    assert later == direct
    ambiguous = [e for e in events if e.get("event") == "bridge_stream_request_ambiguous"]
    assert [len(e["parked"]) for e in ambiguous] == [1], ambiguous
    assert ambiguous[0]["parked"][0].startswith("leg-"), ambiguous  # the upstream id its chain carries
    abandoned = [c for c in _summaries(chains) if c.get("name") == "trigger-sampling-request"]
    assert [c["nested"] for c in abandoned] == [1]  # its own question, nothing more
    listings = [c["nested"] for c in _summaries(chains) if c.get("name") == "get-roots-list"]
    assert listings == [0, 1], listings  # refused while the other call was parked, then asked


def _summaries(answer: Any) -> list[dict[str, Any]]:
    return answer if isinstance(answer, list) else answer.get("chains", [])


async def test_per_connection_a_refusal_caused_by_the_clients_own_parked_call_says_so_and_until_when(
    legacy_server: PeerServer,
) -> None:
    """Its own upstream session (`per_connection`) holds only this client's calls: the refusal names
    its own parked call and how it clears, and suggests no setting already in force nor a transport
    the upstream does not use."""

    async def refuse(context: ClientRequestContext, params: Any) -> types.ErrorData:
        return types.ErrorData(code=-32002, message="declined by user")

    async def roots(context: ClientRequestContext) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[ROOT])

    env = settings_env(upstream=legacy_server.url, anonymous_upstream_sessions="per_connection")
    with ProxyProcess(clean_env(**env)) as proxy:
        client = Client(
            proxy.endpoint(),
            mode="2026-07-28",
            elicitation_callback=refuse,
            list_roots_callback=roots,
            cache=None,
            read_timeout_seconds=10,
        )
        async with client:
            with anyio.fail_after(20):
                with pytest.raises(MCPError):
                    await client.call_tool("ask_name", {})  # the client gives up on its round
                with pytest.raises(MCPError) as refused:
                    await client.call_tool("session_roots", {})
                parked = await admin_json(proxy.admin + "/api/continuations")
                chains = _summaries(await admin_json(proxy.admin + "/api/chains"))
    text = refused.value.message
    assert [item["chain"] for item in parked] == [c["id"] for c in chains if c.get("name") == "ask_name"]
    assert f"({parked[0]['upstream_id']}, parked at " in text, text  # named as its chain's messages name it
    assert "calls of this connection are in flight on its own upstream session" in text, text
    assert "this connection's own call waiting for the retry of its input_required round" in text, text
    assert "until" in text, text
    assert "at the latest (continuation_ttl)" in text, text
    assert "per_connection" not in text, text
    assert "HTTP+SSE or stdio" not in text, text
