"""A 2026-07-28 client that gives up on a round, then calls again, behind `mrtr_to_legacy`.

The Python SDK client stops retrying when its sampling, elicitation or roots callback fails, so the
bridge keeps that call parked until `continuation_ttl`. server-everything asks `roots/list` on its
session's GET stream (right after the handshake, and again from `get-roots-list` when it has none):
the question belongs to the one call whose client is waiting, never to the abandoned parked one,
so `get-roots-list` lists the client's root exactly as it does for a legacy client talking to the
server directly.
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

from tests.peers.runner import NodeServer
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


async def refuse_then_list_roots(url: str, mode: str) -> tuple[str, str]:
    """Step 1: `trigger-sampling-request`, refused by the client; step 2: `get-roots-list`."""
    async with refusing_sampling_client(url, mode) as client:
        with anyio.fail_after(20):
            try:
                await client.call_tool("trigger-sampling-request", {"prompt": "x"})
                refused = "answered"
            except MCPError as exc:
                refused = exc.message
            listed = await client.call_tool("get-roots-list", {})
    text = listed.content[0]
    return refused, text.text if isinstance(text, types.TextContent) else repr(text)


async def test_a_round_the_client_gave_up_on_does_not_take_or_block_the_next_calls_question(
    everything: NodeServer,
) -> None:
    _, direct = await refuse_then_list_roots(everything.url, "legacy")  # the legacy client's own session
    assert direct.startswith("Current MCP Roots (1 total):\n\n1. r\n   URI: file:///r"), direct
    with ProxyProcess(clean_env(**settings_env(upstream=everything.url))) as proxy:
        refused, bridged = await refuse_then_list_roots(proxy.endpoint(), "2026-07-28")
        chains = await admin_json(proxy.admin + "/api/chains")
        continuations = await admin_json(proxy.admin + "/api/continuations")
        events = proxy.events()
    assert refused == "sampling refused by user"  # the 2026-07-28 client gave up on its round
    assert bridged == direct
    assert not [e for e in events if e.get("event") == "bridge_stream_request_ambiguous"]
    by_name = {c["name"]: c for c in _summaries(chains) if c.get("name")}
    abandoned = by_name["trigger-sampling-request"]
    assert (abandoned["status"], abandoned["nested"]) == ("parked", 1)  # its own question, nothing more
    assert by_name["get-roots-list"]["nested"] == 1  # the session's question was asked in this call
    assert [c["name"] for c in _continuations(continuations)] == ["trigger-sampling-request"]


def _summaries(answer: Any) -> list[dict[str, Any]]:
    return answer if isinstance(answer, list) else answer.get("chains", [])


def _continuations(answer: Any) -> list[dict[str, Any]]:
    return answer if isinstance(answer, list) else answer.get("continuations", [])
