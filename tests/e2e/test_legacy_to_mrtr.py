"""Legacy clients in front of a 2026-07-28-only server, through the `legacy_to_mrtr` bridge.

The reference for every result is the same legacy client talking directly to the equivalent legacy
server (the same tools written in flight): through the bridge it must get exactly that.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import orjson
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitRequestParams, ElicitResult, ErrorData, TextContent

from proxy.flows.events import ChainStatus, Mode, Side
from proxy.runtime import Proxy
from tests.e2e.legacy_raw import HEADERS, initialize, session_headers
from tests.peers.runner import PeerServer
from tests.peers.scenarios import run_scenario
from tests.transport.helpers import exchange_ends, wait_until

pytestmark = pytest.mark.e2e

SCENARIOS = [
    "echo",
    "ask_name",
    "ask_url",
    "ask_llm",
    "list_client_roots",
    "ask_twice",
    "ask_two_at_once",
    "state_only",
    "progress",
    "fail",
    "prompts",
    "resources",
]


def bridge_leftovers(proxy: Proxy) -> dict[str, int]:
    """What the bridge still holds beyond sessions and caches (calls, legs, nested requests, timers)."""
    bridge = proxy.router.bridges[Mode.LEGACY_TO_MRTR]
    engine = bridge.engine.table_sizes()  # type: ignore[attr-defined]
    driver = bridge.table_sizes()
    # A session's open GET stream legitimately holds one client exchange and one upstream listen leg.
    busy = {
        "driver_exchanges": driver["exchanges"] - engine["get_streams"],
        "driver_legs": driver["legs"] - engine["listen_legs"],
        "driver_timers": driver["timers"],
    }
    kept = ("sessions", "tool_headers", "get_streams", "listen_legs", "subscriptions")
    busy.update({k: v for k, v in engine.items() if k not in kept})
    return {k: v for k, v in busy.items() if v}


def stalling(asked: anyio.Event) -> Callable[[Any, ElicitRequestParams], Awaitable[ElicitResult]]:
    """An elicitation callback that says it was asked, then never answers (the client stays in the round)."""

    async def stall(ctx: Any, params: ElicitRequestParams) -> ElicitResult:
        asked.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    return stall


def bridge_tables_empty(proxy: Proxy) -> bool:
    """True when the bridge holds nothing but sessions and caches (no call, leg, nested or timer)."""
    return not bridge_leftovers(proxy)


def chain_named(proxy: Proxy, name: str) -> Any:
    found = [c for c in proxy.chains() if c.summary.name == name and c.summary.method != "tools/list"]
    assert len(found) == 1, [c.summary for c in found]
    return found[0]


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_legacy_client_through_bridge_gets_what_a_legacy_server_gives(
    legacy_server: PeerServer, modern_server: PeerServer, proxy_for: Callable[..., Any], scenario: str
) -> None:
    direct = await run_scenario(legacy_server.url, "legacy", scenario)
    async with proxy_for(modern_server.url) as proxy:
        assert proxy.router.eras.label == "modern"
        bridged = await run_scenario(proxy.endpoint(), "legacy", scenario)
        await wait_until(lambda: bridge_tables_empty(proxy), what="bridge tables to drain")
    assert bridged == direct


@pytest.mark.parametrize("scenario", ["echo", "ask_name", "ask_llm", "list_client_roots", "progress"])
async def test_a_2025_06_18_client_is_bridged_too(
    legacy_server: PeerServer, modern_server: PeerServer, proxy_for: Callable[..., Any], scenario: str
) -> None:
    direct = await run_scenario(legacy_server.url, "2025-06-18", scenario)
    async with proxy_for(modern_server.url) as proxy:
        bridged = await run_scenario(proxy.endpoint(), "2025-06-18", scenario)
    assert bridged == direct


@pytest.mark.parametrize("scenario", ["ask_name", "ask_two_at_once", "ask_twice"])
async def test_upstream_era_modern_bridges_a_dual_era_server_with_mrtr_tools(
    legacy_server: PeerServer, dual_mrtr_server: PeerServer, proxy_for: Callable[..., Any], scenario: str
) -> None:
    direct = await run_scenario(legacy_server.url, "legacy", scenario)
    async with proxy_for(dual_mrtr_server.url, upstream_era="modern") as proxy:
        bridged = await run_scenario(proxy.endpoint(), "legacy", scenario)
    assert bridged == direct


async def test_bridged_chain_holds_every_round_and_both_sides(
    modern_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with proxy_for(modern_server.url) as proxy:
        await run_scenario(proxy.endpoint(), "legacy", "ask_twice")
    chain = chain_named(proxy, "ask_twice")
    summary = chain.summary
    assert summary.mode is Mode.LEGACY_TO_MRTR
    assert (summary.client_era, summary.upstream_era) == ("legacy", "modern")
    assert summary.status is ChainStatus.OK
    assert summary.rounds == 3
    upstream = [m for m in chain.messages if m.side is Side.UPSTREAM]
    client = [m for m in chain.messages if m.side is Side.CLIENT]
    assert [m.method for m in upstream if m.kind == "request"] == ["tools/call"] * 3
    assert [m.method for m in client if m.kind == "request"] == [
        "tools/call",
        "elicitation/create",
        "elicitation/create",
    ]
    retries = [m.body["params"] for m in upstream if m.kind == "request"][1:]
    assert all("inputResponses" in p for p in retries)
    assert "requestState" in retries[1]
    assert str(retries[1]["requestState"]).startswith("<requestState len="), "shown as length + hash only"
    assert summary.client_wait_ms > 0


async def test_the_initialize_answer_the_bridge_makes_itself_records_the_headers_it_sent(
    modern_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with proxy_for(modern_server.url) as proxy:
        await run_scenario(proxy.endpoint(), "legacy", "echo")
    chains = [c for c in proxy.chains() if c.summary.method == "initialize"]

    assert chains
    for chain in chains:
        (answer,) = [m for m in chain.messages if m.kind == "result" and m.side is Side.CLIENT]
        head = answer.http
        assert head is not None
        assert head.status == 200
        assert head.headers["Content-Type"] == "application/json"
        assert head.headers["Mcp-Session-Id"].startswith("<redacted len=")  # the session the bridge minted


async def test_undeclared_capability_fails_the_tool_call_as_the_sdk_shims_do(
    modern_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    # No elicitation callback: the client does not declare the capability.
    async with proxy_for(modern_server.url) as proxy, Client(proxy.endpoint(), mode="legacy") as client:
        result = await client.call_tool("ask_name", {})
        await wait_until(lambda: bridge_tables_empty(proxy), what="bridge tables to drain")
    assert result.is_error
    text = result.content[0]
    assert isinstance(text, TextContent)
    assert "elicitation" in text.text


async def test_client_answering_with_an_error_fails_the_call_cleanly(
    modern_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async def refuse(ctx: Any, params: ElicitRequestParams) -> ElicitResult | ErrorData:
        return ErrorData(code=-32603, message="user closed the dialog")

    async with proxy_for(modern_server.url) as proxy:
        async with Client(proxy.endpoint(), mode="legacy", elicitation_callback=refuse) as client:
            result = await client.call_tool("ask_name", {})
        await wait_until(lambda: bridge_tables_empty(proxy), what="bridge tables to drain")
    assert result.is_error
    assert "user closed the dialog" in str(result.content)
    assert chain_named(proxy, "ask_name").summary.status is ChainStatus.ERROR


async def test_round_cap_fails_the_call_with_a_clear_message(
    modern_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with proxy_for(modern_server.url, max_rounds=2) as proxy:
        result = await run_scenario(proxy.endpoint(), "legacy", "ask_twice")
        await wait_until(lambda: bridge_tables_empty(proxy), what="bridge tables to drain")
    assert result["result"]["isError"] is True
    message = result["result"]["content"][0]
    assert "2" in message
    assert "round" in message


async def cancel_once_asked(client: Client, asked: anyio.Event) -> None:
    """Call `ask_name` and cancel it once the server's question has reached the client (the SDK then
    sends `notifications/cancelled`); bounded."""
    with anyio.move_on_after(20) as scope:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.call_tool, "ask_name", {})
            await asked.wait()
            tg.cancel_scope.cancel()
    assert not scope.cancelled_caught


async def test_client_cancelling_mid_round_leaves_nothing_pending(
    modern_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    asked = anyio.Event()
    stall = stalling(asked)

    async with (
        proxy_for(modern_server.url) as proxy,
        Client(proxy.endpoint(), mode="legacy", elicitation_callback=stall) as client,
    ):
        await cancel_once_asked(client, asked)
        await wait_until(lambda: bridge_tables_empty(proxy), what="bridge tables to drain")
        after = await client.call_tool("echo", {"text": "still serving"})
    assert after.content[0].text == "still serving"  # type: ignore[union-attr]
    cancelled = chain_named(proxy, "ask_name").summary
    assert "cancelled by the client" in cancelled.notes
    assert cancelled.status is ChainStatus.CANCELLED


async def test_a_call_a_legacy_client_cancels_in_passthrough_ends_cancelled(
    legacy_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    asked = anyio.Event()
    stall = stalling(asked)

    async with (
        proxy_for(legacy_server.url) as proxy,
        Client(proxy.endpoint(), mode="legacy", elicitation_callback=stall) as client,
    ):
        await cancel_once_asked(client, asked)
        await wait_until(
            lambda: chain_named(proxy, "ask_name").summary.ended is not None, what="the call's chain to end"
        )
        cancelled = chain_named(proxy, "ask_name").summary
    assert cancelled.mode is Mode.PASSTHROUGH
    assert "cancelled by the client" in cancelled.notes
    assert cancelled.status is ChainStatus.CANCELLED


async def test_client_vanishing_mid_round_leaves_nothing_pending(
    modern_server: PeerServer, proxy_for: Callable[..., Any], tmp_path: Path
) -> None:
    asked = anyio.Event()
    stall = stalling(asked)
    capture = tmp_path / "run.jsonl"

    async with proxy_for(modern_server.url, capture=capture) as proxy:
        with anyio.move_on_after(20):
            async with (
                Client(proxy.endpoint(), mode="legacy", elicitation_callback=stall) as client,
                anyio.create_task_group() as tg,
            ):
                tg.start_soon(client.call_tool, "ask_name", {})
                await asked.wait()
                tg.cancel_scope.cancel()
        await wait_until(lambda: bridge_tables_empty(proxy), what="bridge tables to drain")
    # The SDK's client may get its notifications/cancelled out as it goes (the call ends cancelled),
    # or be gone first (the vanished client fails it): ended either way, never left pending.
    vanished = chain_named(proxy, "ask_name").summary
    assert vanished.status is (
        ChainStatus.CANCELLED if "cancelled by the client" in vanished.notes else ChainStatus.ERROR
    )
    opened, closed = exchange_ends(capture)
    assert opened
    assert closed == opened  # every exchange closed in the capture, and none twice


async def test_upstream_going_down_mid_chain_fails_the_call_and_clears_state(
    peer_factory: Callable[..., PeerServer], proxy_for: Callable[..., Any]
) -> None:
    server = peer_factory("modern-mrtr")

    async def stop_server_then_answer(ctx: Any, params: ElicitRequestParams) -> ElicitResult:
        await anyio.to_thread.run_sync(server.stop)
        return ElicitResult(action="accept", content={"name": "octocat"})

    async with proxy_for(server.url, upstream_timeout=5) as proxy:
        async with Client(
            proxy.endpoint(),
            mode="legacy",
            elicitation_callback=stop_server_then_answer,
            read_timeout_seconds=20,
        ) as client:
            with pytest.raises(MCPError, match="unreachable"):
                await client.call_tool("ask_twice", {})
        await wait_until(lambda: bridge_tables_empty(proxy), what="bridge tables to drain")
    assert chain_named(proxy, "ask_twice").summary.status is ChainStatus.ERROR


async def test_upstream_rejecting_request_state_is_reported_to_the_client(
    peer_factory: Callable[..., PeerServer], proxy_for: Callable[..., Any]
) -> None:
    first = peer_factory("modern-mrtr")
    port = first.port
    restarted: list[PeerServer] = []

    async def restart_server_then_answer(ctx: Any, params: ElicitRequestParams) -> ElicitResult:
        if not restarted:
            await anyio.to_thread.run_sync(first.stop)
            restarted.append(await anyio.to_thread.run_sync(lambda: peer_factory("modern-mrtr", port=port)))
        return ElicitResult(action="accept", content={"name": "octocat", "color": "green"})

    async with proxy_for(first.url) as proxy:
        async with Client(
            proxy.endpoint(),
            mode="legacy",
            elicitation_callback=restart_server_then_answer,
            read_timeout_seconds=20,
        ) as client:
            with pytest.raises(MCPError, match="requestState") as raised:
                await client.call_tool("ask_twice", {})
        await wait_until(lambda: bridge_tables_empty(proxy), what="bridge tables to drain")
    assert raised.value.error.code == -32603, "a legacy client must not see a 2026-era code"


async def test_a_call_waiting_on_its_client_when_the_proxy_stops_fails_with_the_reason(
    modern_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    asked = anyio.Event()
    stall = stalling(asked)

    async with proxy_for(modern_server.url) as proxy:
        outcome: dict[str, Any] = {}
        with anyio.fail_after(20):
            async with Client(proxy.endpoint(), mode="legacy", elicitation_callback=stall) as client:

                async def call() -> None:
                    outcome["result"] = await client.call_tool("ask_name", {})

                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    await asked.wait()
                    await proxy.stop()
    result = outcome["result"]
    assert result.is_error
    assert "the proxy is stopping" in result.content[0].text


async def test_a_call_cancelled_before_its_stream_began_ends_with_an_empty_stream_not_a_500(
    modern_server: PeerServer, proxy_for: Callable[..., Any], tmp_path: Path
) -> None:
    # No progressToken, so nothing has gone out on the call's response when the client cancels it.
    capture = tmp_path / "run.jsonl"
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "slow_progress", "arguments": {"steps": 500}},
    }
    cancel = {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": 2, "reason": "user"},
    }
    async with proxy_for(modern_server.url, capture=capture) as proxy, httpx.AsyncClient(timeout=20) as http:
        opened = await http.post(proxy.endpoint(), json=initialize(), headers=HEADERS)
        session = session_headers(opened.headers["mcp-session-id"])
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await http.post(proxy.endpoint(), json=initialized, headers=session)).status_code == 202

        async def cancel_soon() -> None:
            await anyio.sleep(0.5)
            assert (await http.post(proxy.endpoint(), json=cancel, headers=session)).status_code == 202

        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel_soon)
            answer = await http.post(proxy.endpoint(), json=call, headers=session)
        await wait_until(
            lambda: chain_named(proxy, "slow_progress").summary.ended is not None, what="the call to end"
        )
        ended = chain_named(proxy, "slow_progress").summary
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "text/event-stream"
    assert answer.content == b""  # no answer to a cancelled request, as a server that drops it sends
    assert ended.status is ChainStatus.CANCELLED
    lines = [orjson.loads(line) for line in capture.read_bytes().splitlines() if line.strip()]
    call_exchange = next(
        o["exchange"]
        for o in lines
        if o.get("kind") == "message" and o["msg"]["raw"].get("method") == "tools/call"
    )
    heads = [
        o["status"] for o in lines if o.get("kind") == "response_head" and o.get("exchange") == call_exchange
    ]
    assert heads == [200]  # what the client got is in the capture too
