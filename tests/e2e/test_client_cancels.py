"""A client's cancel is no failure: every output of the `mcp-proxy` command says `cancelled` alike.

A 2026-07-28 client cancels a call, and ends a `subscriptions/listen` subscription, by closing its
stream before the answer (the TypeScript SDK v2 client: an `AbortController` on `callTool`, and
`McpSubscription.close()`). The round-trip log line, the HAR, the chains and the error counter must
give the same verdict for it: `end: cancelled` with no `trouble` (so the README's failure filter
`select(.event == "exchange" and .trouble)` does not catch it), no `_mcp.outcome`, status
`cancelled`, not counted; the `notifications/cancelled` the SDK sends after closing is filed in the
chain of the request it names. Real peers on both sides, through the real command, in pass-through and
through the bridge to a legacy server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.commanded import Commanded, own_proxy
from tests.peers.clients import ClientKind, run_plan
from tests.peers.runner import NodeServer, Sdk1Server
from tests.sidecar import until

pytestmark = pytest.mark.asyncio

SLOW_V2 = {"op": "call", "tool": "slow_progress", "arguments": {"steps": 500}, "cancelAfterMs": 400}
"""A five-second call on the TS SDK v2 server that the client aborts after 0.4 s."""

SLOW_EVERYTHING = {
    "op": "call",
    "tool": "trigger-long-running-operation",
    "arguments": {"duration": 5, "steps": 5},
    "cancelAfterMs": 800,
}
"""A five-second call on server-everything that the client aborts after 0.8 s."""

SLOW_NO_STORE = {"op": "call", "tool": "slow", "arguments": {"ms": 5000}, "cancelAfterMs": 400}
"""A five-second call on the TS SDK 1.x server without an event store, aborted after 0.4 s."""

SETTLE = {"id": "settle", "op": "sleep", "ms": 300}
"""Lets the `notifications/cancelled` the SDK sends after its abort go out before the client exits."""


@pytest.fixture(scope="module")
def ts_v2_server() -> Iterator[NodeServer]:
    with NodeServer("ts-v2") as server:
        yield server


@pytest.fixture(scope="module")
def everything() -> Iterator[NodeServer]:
    with NodeServer("everything") as server:
        yield server


@pytest.fixture(scope="module")
def sdk1_server() -> Iterator[Sdk1Server]:
    with Sdk1Server() as server:
        yield server


@pytest.fixture(scope="module")
def no_event_store() -> Iterator[NodeServer]:
    with NodeServer("ts-v1-no-store") as server:
        yield server


def exchange_lines(proxy: Commanded, carried: str) -> list[dict[str, Any]]:
    return [e for e in proxy.lines() if e.get("event") == "exchange" and e.get("carried") == carried]


async def har_entry(proxy: Commanded, jsonrpc_id: object) -> dict[str, Any]:
    """The client-side HAR entry of the exchange that carried request `jsonrpc_id`."""
    entries = await proxy.har_entries()
    found = [e for e in entries if e["_mcp"]["side"] == "client" and e["_mcp"]["jsonrpc_ids"] == [jsonrpc_id]]
    assert len(found) == 1, [e["_mcp"] for e in entries]
    return found[0]


def assert_cancelled_line(line: dict[str, Any]) -> None:
    assert line["trouble"] is None, line
    assert line["outcome"] is None, line
    assert line["end"] == "cancelled", line


async def test_a_2026_client_cancelling_a_call_and_closing_a_listen_is_logged_cancelled_without_trouble(
    ts_v2_server: NodeServer,
) -> None:
    plan = [
        {"id": "cancel", **SLOW_V2},
        {"id": "listen", "op": "listen", "filter": {"toolsListChanged": True}, "holdMs": 200},
        SETTLE,
    ]
    async with own_proxy(ts_v2_server.url) as proxy:
        run = await asyncio.to_thread(run_plan, "ts-v2", proxy.endpoint(), plan)
        assert run.lines["cancel"]["error"]["message"] == "cancelled by the test", run.lines
        assert run.lines["listen"]["result"] == "closed", run.lines
        await proxy.settled()
        (call,) = exchange_lines(proxy, "tools/call slow_progress")
        (listen,) = exchange_lines(proxy, "subscriptions/listen")
        assert_cancelled_line(call)
        assert_cancelled_line(listen)
        assert not [e for e in proxy.lines() if e.get("event") == "exchange" and e["trouble"]], proxy.lines()
        for line in (call, listen):
            entry = await har_entry(proxy, line["ids"][0])
            assert "outcome" not in entry["_mcp"], entry["_mcp"]
        chains = {c["method"]: c for c in await proxy.chains()}
        assert chains["tools/call"]["status"] == "cancelled", chains
        assert chains["subscriptions/listen"]["status"] == "cancelled", chains
        # The `notifications/cancelled {requestId: "listen:0"}` the SDK sends on close, before or
        # after its stream closed, is filed in the listen's chain, not in one of its own.
        assert "notifications/cancelled" not in chains, chains
        trail = [m.get("method") for m in await proxy.messages(chains["subscriptions/listen"]["id"])]
        assert "notifications/cancelled" in trail, trail
        assert await proxy.counted('mcp_proxy_errors_total{method="tools/call",mode="passthrough"}') == 0


async def test_a_2026_client_cancelling_a_call_bridged_to_a_legacy_server_is_logged_cancelled(
    everything: NodeServer,
) -> None:
    async with own_proxy(everything.url) as proxy:
        plan = [{"id": "cancel", **SLOW_EVERYTHING}, SETTLE]
        run = await asyncio.to_thread(run_plan, "ts-v2", proxy.endpoint(), plan)
        assert run.lines["cancel"]["error"]["message"] == "cancelled by the test", run.lines
        await proxy.settled()
        calls = exchange_lines(proxy, "tools/call trigger-long-running-operation")
        assert calls, proxy.lines()
        assert all(line["mode"] == "mrtr_to_legacy" for line in calls), calls
        # The last round is the one the client closed (server-everything's roots/list may add one).
        assert_cancelled_line(calls[-1])
        assert not [e for e in proxy.lines() if e.get("event") == "exchange" and e["trouble"]], proxy.lines()
        entry = await har_entry(proxy, calls[-1]["ids"][0])
        assert "outcome" not in entry["_mcp"], entry["_mcp"]
        (chain,) = [c for c in await proxy.chains() if c["method"] == "tools/call"]
        assert chain["status"] == "cancelled", chain


@pytest.mark.parametrize(
    "client",
    [
        pytest.param("ts-v1", id="ts-sdk-1-aborts-then-cancels"),
        pytest.param("python-legacy", id="python-sdk-cancels-then-server-ends-unanswered"),
    ],
)
async def test_a_legacy_client_cancelling_a_passed_through_call_is_logged_cancelled_as_its_chain_says(
    everything: NodeServer, client: ClientKind
) -> None:
    """The TypeScript SDK 1.x closes the call's stream and then POSTs `notifications/cancelled`; the
    Python SDK POSTs the cancel first and server-everything then ends the stream unanswered. Either
    way the call's line says `end: cancelled`, no trouble, as its chain does."""
    async with own_proxy(everything.url) as proxy:
        plan = [{"id": "cancel", **SLOW_EVERYTHING}, SETTLE]
        run = await asyncio.to_thread(run_plan, client, proxy.endpoint(), plan)
        assert "cancel" in run.lines, run.lines
        await proxy.settled()

        def logged() -> bool:
            return bool(exchange_lines(proxy, "tools/call trigger-long-running-operation"))

        await until(logged, what="the cancelled call's line", seconds=10)
        (call,) = exchange_lines(proxy, "tools/call trigger-long-running-operation")
        assert call["mode"] == "passthrough", call
        assert_cancelled_line(call)
        (chain,) = [c for c in await proxy.chains() if c["method"] == "tools/call"]
        assert chain["status"] == "cancelled", chain
        assert await proxy.counted('mcp_proxy_errors_total{method="tools/call",mode="passthrough"}') == 0


async def test_a_legacy_client_aborting_then_cancelling_a_call_to_a_server_without_event_ids_is_cancelled(
    no_event_store: NodeServer,
) -> None:
    """The TypeScript SDK 1.x aborts the call and POSTs `notifications/cancelled`; the server keeps no
    event store, so the call's stream carries events without ids, no resume can answer the call, and
    only the cancel decides it: the log line, the chain and the error counter all say `cancelled`, and
    the cancel is filed in the call's chain. (The SDK's aborted fetch keeps its connection until the
    client exits, so the proxy sees the cancel before the hang-up here; the other order, the hang-up
    first, is `tests/flows/test_late_cancel.py`'s.)"""
    async with own_proxy(no_event_store.url) as proxy:
        plan = [{"id": "cancel", **SLOW_NO_STORE}, SETTLE]
        run = await asyncio.to_thread(run_plan, "ts-v1", proxy.endpoint(), plan)
        assert "cancel" in run.lines, run.lines
        await proxy.settled()

        def logged() -> bool:
            return bool(exchange_lines(proxy, "tools/call slow"))

        await until(logged, what="the cancelled call's line", seconds=10)
        (call,) = exchange_lines(proxy, "tools/call slow")
        assert call["mode"] == "passthrough", call
        assert_cancelled_line(call)
        chains = {c["method"]: c for c in await proxy.chains()}
        assert chains["tools/call"]["status"] == "cancelled", chains
        assert "cancelled by the client" in chains["tools/call"]["notes"], chains
        assert "notifications/cancelled" not in chains, chains
        events = [
            m
            for m in await proxy.messages(chains["tools/call"]["id"])
            if m.get("method") == "notifications/message"
        ]
        assert events, "the call's stream carried no event"
        assert [m.get("sse_id") for m in events] == [None] * len(events)
        assert await proxy.counted('mcp_proxy_errors_total{method="tools/call",mode="passthrough"}') == 0


ASKED_THEN_CANCELLED = {"cancelAfterMs": 500, "answerAfterMs": 3000}
"""The caller gives up while its elicitation callback is still filling in the form."""


async def test_a_legacy_call_an_mcp_1x_server_answers_with_error_0_after_its_cancel_is_logged_cancelled(
    sdk1_server: Sdk1Server,
) -> None:
    """The Python SDK 1.x server answers a call its client cancelled with JSON-RPC error code 0
    (`Request cancelled`): that answer is the server's side of the cancel, so the line says
    `end: cancelled` with no trouble, as the chain and the error counter do."""
    plan = [
        {"id": "before", "op": "call", "tool": "add", "arguments": {"a": 1, "b": 2}},
        # cancelled while the tool waits on its question: the cancel reaches the server after the call
        # (cancelled at once, it could overtake the call's own POST under load) and before the answer
        {
            "id": "asking",
            "op": "call",
            "tool": "ask_name",
            "arguments": {},
            "cancelAfterMs": 500,
            "answerAfterMs": 3000,
        },
        {"id": "after", "op": "call", "tool": "add", "arguments": {"a": 3, "b": 4}},
    ]
    async with own_proxy(sdk1_server.url) as proxy:
        run = await asyncio.to_thread(run_plan, "python-legacy", proxy.endpoint(), plan)
        assert "after" in run.lines, run.lines
        await proxy.settled()
        chains = await proxy.chains()
        (chain,) = [c for c in chains if c["method"] == "tools/call" and c.get("name") == "ask_name"]
        assert chain["status"] == "cancelled", chain
        assert str(chain["error"]).startswith("0:"), chain  # the server did answer, with error 0
        (call,) = exchange_lines(proxy, "tools/call ask_name")
        assert_cancelled_line(call)
        assert await proxy.counted('mcp_proxy_errors_total{method="tools/call",mode="passthrough"}') == 0
