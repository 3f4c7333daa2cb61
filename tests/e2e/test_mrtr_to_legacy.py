"""2026-07-28 (MRTR) clients in front of a legacy server that asks in flight, through `mrtr_to_legacy`.

The reference for every result is the same modern client talking directly to the equivalent modern
server (the same tools written MRTR-style): through the bridge it must get exactly that. Security
tests craft requests by hand (tests/e2e/modern_raw.py), since no SDK client tampers with its state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp
import anyio
import pytest

from proxy.flows.events import ChainStatus, ContinuationChanged, Direction, Mode, Side
from proxy.flows.leg_handlers import CLIENT_NEVER_RETRIED
from proxy.runtime import Proxy
from proxy.wire.mcp import META_SERVER_INFO
from tests.e2e.modern_raw import modern_call
from tests.peers.runner import PeerServer, Sdk1Server
from tests.peers.scenarios import run_scenario
from tests.sidecar import ProxyProcess, clean_env, settings_env
from tests.transport.helpers import wait_until

pytestmark = pytest.mark.e2e

MODERN = "2026-07-28"
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
ANSWER = {"action": "accept", "content": {"name": "octocat"}}


def bridge_sizes(proxy: Proxy) -> dict[str, int]:
    """The engine's and the driver's tables, minus the idle upstream sessions the bridge keeps.

    An idle session keeps its idle timer (one per session, in the driver's timers too) and its GET
    stream (`session_streams`, in the driver's too); anything still using a session
    (`session_users`) is not idle and counts.
    """
    bridge = proxy.router.bridges[Mode.MRTR_TO_LEGACY]
    engine_sizes = bridge.engine.table_sizes()  # type: ignore[attr-defined]
    driver = bridge.table_sizes()
    driver["timers"] -= engine_sizes["session_timers"]
    sizes = {**engine_sizes, **{f"driver_{k}": v for k, v in driver.items()}}
    kept = ("upstream_sessions", "session_timers", "session_param_headers", "session_streams")
    kept += ("driver_session_streams",)
    return {k: v for k, v in sizes.items() if v and k not in kept}


def drained(proxy: Proxy) -> bool:
    return not bridge_sizes(proxy)


async def first_round(http: aiohttp.ClientSession, proxy: Proxy, **headers: str) -> dict[str, Any]:
    """Call ask_name and return the input_required result (the parked call's token and keys)."""
    status, reply = await modern_call(
        http, proxy.endpoint(), "tools/call", {"name": "ask_name", "arguments": {}}, ident=1, headers=headers
    )
    assert status == 200, reply
    result: dict[str, Any] = reply["result"]
    assert result["resultType"] == "input_required"
    return result


async def retry(
    http: aiohttp.ClientSession,
    proxy: Proxy,
    result: dict[str, Any],
    *,
    state: str | None = None,
    **headers: str,
) -> tuple[int, dict[str, Any]]:
    (key,) = result["inputRequests"]
    params = {
        "name": "ask_name",
        "arguments": {},
        "inputResponses": {key: ANSWER},
        "requestState": state if state is not None else result["requestState"],
    }
    return await modern_call(http, proxy.endpoint(), "tools/call", params, ident=2, headers=headers)


def completed(reply: dict[str, Any]) -> bool:
    result = reply.get("result", {})
    return result.get("resultType") == "complete" and result["content"][0]["text"] == "Hello, octocat!"


def invalid_state(status: int, reply: dict[str, Any]) -> bool:
    return reply.get("error", {}).get("code") == -32602 and "requestState" in reply["error"]["message"]


def lost_call(status: int, reply: dict[str, Any]) -> bool:
    """The retry of a call whose parked upstream call was lost is told so (once), not that its
    `requestState` is invalid: the token was good, the call is gone."""
    error = reply.get("error", {})
    return status == 502 and error.get("code") == -32000 and "was lost while it waited" in error["message"]


@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_modern_client_through_bridge_gets_what_a_modern_server_gives(
    legacy_server: PeerServer, modern_server: PeerServer, proxy_for: Callable[..., Any], scenario: str
) -> None:
    direct = await run_scenario(modern_server.url, MODERN, scenario)
    async with proxy_for(legacy_server.url) as proxy:
        assert proxy.router.eras.label == "legacy"
        bridged = await run_scenario(proxy.endpoint(), MODERN, scenario)
        await wait_until(lambda: drained(proxy), what="bridge tables to drain")
    assert bridged == direct


@pytest.mark.parametrize("scenario", ["ask_name", "ask_two_at_once", "ask_twice", "progress"])
async def test_upstream_era_legacy_bridges_a_dual_era_server_with_in_flight_tools(
    modern_server: PeerServer, dual_inflight_server: PeerServer, proxy_for: Callable[..., Any], scenario: str
) -> None:
    direct = await run_scenario(modern_server.url, MODERN, scenario)
    async with proxy_for(dual_inflight_server.url, upstream_era="legacy") as proxy:
        bridged = await run_scenario(proxy.endpoint(), MODERN, scenario)
    assert bridged == direct


async def test_a_bridged_input_required_names_the_server_as_a_modern_servers_does(
    legacy_server: PeerServer, modern_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    """A 2026-07-28 server names itself in every result's `_meta`, an `input_required` one too; the
    normalized scenarios do not see `_meta`, so the raw results are compared. Through the bridge the
    interim result carries the legacy server's identity, the one its `complete` result carries."""
    async with aiohttp.ClientSession() as http:
        status, native = await modern_call(
            http, modern_server.url, "tools/call", {"name": "ask_name", "arguments": {}}, ident=1
        )
        assert status == 200, native
        async with proxy_for(legacy_server.url) as proxy:
            bridged = await first_round(http, proxy)
            status, done = await retry(http, proxy, bridged)
        assert status == 200, done
        assert completed(done), done

    assert native["result"]["resultType"] == "input_required"
    assert META_SERVER_INFO in native["result"]["_meta"]
    assert bridged.get("_meta", {}).keys() == native["result"]["_meta"].keys()
    assert bridged["_meta"][META_SERVER_INFO] == done["result"]["_meta"][META_SERVER_INFO]


async def test_bridged_chain_holds_every_round_on_both_sides(
    legacy_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with proxy_for(legacy_server.url) as proxy:
        await run_scenario(proxy.endpoint(), MODERN, "ask_twice")
    chains = [c for c in proxy.chains() if c.summary.name == "ask_twice"]
    assert len(chains) == 1
    chain = chains[0]
    assert chain.summary.mode is Mode.MRTR_TO_LEGACY
    assert chain.summary.status is ChainStatus.OK
    assert chain.summary.rounds == 3
    client_requests = [m for m in chain.messages if m.side is Side.CLIENT and m.kind == "request"]
    upstream_calls = [
        m
        for m in chain.messages
        if m.side is Side.UPSTREAM and m.direction is Direction.TO_SERVER and m.method == "tools/call"
    ]
    assert len(client_requests) == 3, "three client rounds"
    assert len(upstream_calls) == 1, "one live upstream call, parked between rounds"
    answers = [
        m
        for m in chain.messages
        if m.side is Side.UPSTREAM and m.direction is Direction.TO_SERVER and m.kind == "result"
    ]
    assert len(answers) == 2, "each answer went upstream as the response to its nested request"
    nested = [m for m in chain.messages if m.side is Side.UPSTREAM and m.method == "elicitation/create"]
    assert len(nested) == 2


async def test_tampered_request_state_is_refused_and_the_parked_call_survives(
    legacy_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with proxy_for(legacy_server.url) as proxy, aiohttp.ClientSession() as http:
        result = await first_round(http, proxy)
        status, reply = await retry(http, proxy, result, state=result["requestState"] + "-TAMPERED")
        assert invalid_state(status, reply), reply
        status, reply = await retry(http, proxy, result)
        assert completed(reply), reply
        await wait_until(lambda: drained(proxy), what="bridge tables to drain")


async def test_a_replayed_request_state_is_refused(
    legacy_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with proxy_for(legacy_server.url) as proxy, aiohttp.ClientSession() as http:
        result = await first_round(http, proxy)
        status, reply = await retry(http, proxy, result)
        assert completed(reply), reply
        status, reply = await retry(http, proxy, result)
        assert invalid_state(status, reply), reply


async def test_another_principal_cannot_resume_a_parked_call(
    legacy_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with proxy_for(legacy_server.url) as proxy, aiohttp.ClientSession() as http:
        result = await first_round(http, proxy, Authorization="Bearer alice")
        status, reply = await retry(http, proxy, result, Authorization="Bearer mallory")
        assert invalid_state(status, reply), reply
        status, reply = await retry(http, proxy, result, Authorization="Bearer alice")
        assert completed(reply), reply


async def test_a_retry_with_other_arguments_is_refused(
    legacy_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with proxy_for(legacy_server.url) as proxy, aiohttp.ClientSession() as http:
        result = await first_round(http, proxy)
        (key,) = result["inputRequests"]
        params = {
            "name": "ask_name",
            "arguments": {"sneaky": True},
            "inputResponses": {key: ANSWER},
            "requestState": result["requestState"],
        }
        status, reply = await modern_call(http, proxy.endpoint(), "tools/call", params, ident=3)
        assert invalid_state(status, reply), reply


async def test_an_expired_continuation_is_cancelled_upstream_and_its_state_refused(
    legacy_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with proxy_for(legacy_server.url, continuation_ttl=0.5) as proxy, aiohttp.ClientSession() as http:
        result = await first_round(http, proxy)
        await wait_until(lambda: drained(proxy), what="the continuation to expire", seconds=10)
        chain = next(c for c in proxy.chains() if c.summary.name == "ask_name")
        assert chain.summary.status is ChainStatus.INCOMPLETE  # a client may stop asking: nothing failed
        assert CLIENT_NEVER_RETRIED in chain.summary.notes
        status, reply = await retry(http, proxy, result)
        assert invalid_state(status, reply), reply
    cancels = [m for m in chain.messages if m.side is Side.UPSTREAM and m.method == "notifications/cancelled"]
    assert cancels, "the upstream was told the parked call is cancelled"
    assert chain.summary.status is ChainStatus.INCOMPLETE  # the late, refused retry took nothing over


async def test_the_continuation_table_is_bounded(
    legacy_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with proxy_for(legacy_server.url, max_continuations=1) as proxy, aiohttp.ClientSession() as http:
        result = await first_round(http, proxy)
        _, reply = await modern_call(
            http, proxy.endpoint(), "tools/call", {"name": "ask_name", "arguments": {}}, ident=5
        )
        assert "error" in reply, reply
        assert "1" in reply["error"]["message"], "the error names the limit"
        _status, reply = await retry(http, proxy, result)
        assert completed(reply), reply
        await wait_until(lambda: drained(proxy), what="bridge tables to drain")


async def test_a_missing_capability_gets_minus_32021_and_cancels_upstream(
    legacy_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with proxy_for(legacy_server.url) as proxy, aiohttp.ClientSession() as http:
        status, reply = await modern_call(
            http,
            proxy.endpoint(),
            "tools/call",
            {"name": "ask_name", "arguments": {}},
            ident=1,
            capabilities={},
        )
        assert status == 400
        assert reply["error"]["code"] == -32021
        assert "elicitation" in reply["error"]["data"]["requiredCapabilities"]
        await wait_until(lambda: drained(proxy), what="bridge tables to drain")


async def test_a_parked_call_shows_in_its_chain_and_on_the_feed(
    legacy_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with proxy_for(legacy_server.url) as proxy, aiohttp.ClientSession() as http:
        feed = proxy.bus.subscribe("test")
        result = await first_round(http, proxy, Authorization="Bearer alice")
        chain = next(c for c in proxy.chains() if c.summary.name == "ask_name")
        assert chain.summary.status is ChainStatus.PARKED
        _status, reply = await retry(http, proxy, result, Authorization="Bearer alice")
        assert completed(reply), reply
        await wait_until(lambda: drained(proxy), what="bridge tables to drain")
        events = []
        while (event := feed.get_nowait()) is not None:
            events.append(event)
    changes = [e for e in events if isinstance(e, ContinuationChanged)]
    assert [e.state for e in changes] == ["parked", "resumed", "completed"]
    assert {e.chain_id for e in changes} == {chain.summary.id}
    assert changes[0].pending_keys == list(result["inputRequests"])
    assert changes[0].principal
    assert "alice" not in changes[0].principal
    assert chain.summary.status is ChainStatus.OK


async def test_with_nobody_watching_a_bridged_call_is_built_only_when_someone_reads(
    legacy_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    # Nobody watches only without the admin API: its metrics build chains live.
    async with proxy_for(legacy_server.url, admin_enabled=False) as proxy, aiohttp.ClientSession() as http:
        result = await first_round(http, proxy)
        _status, reply = await retry(http, proxy, result)
        assert completed(reply), reply
        await wait_until(lambda: drained(proxy), what="bridge tables to drain")
        assert proxy.observations.pending > 0, "the bridge's observations waited as facts"
        assert proxy.observations.open_legs == 0, "every leg the sink kept open was closed"
        assert proxy.builder.correlation_sizes()["exchanges"] == 0
        feed = proxy.bus.subscribe("test")
        chain = next(c for c in proxy.chains() if c.summary.name == "ask_name")  # reading builds
        assert proxy.observations.pending == 0
        events = []
        while (event := feed.get_nowait()) is not None:
            events.append(event)
    assert chain.summary.mode is Mode.MRTR_TO_LEGACY
    assert chain.summary.status is ChainStatus.OK
    upstream = [m.method for m in chain.messages if m.side is Side.UPSTREAM]
    assert upstream.index("tools/call") < upstream.index("elicitation/create")  # the legs were kept
    changes = [e for e in events if isinstance(e, ContinuationChanged)]
    assert [e.state for e in changes] == ["parked", "resumed", "completed"]
    assert {e.chain_id for e in changes} == {chain.summary.id}


async def test_a_lost_upstream_session_is_reinitialized_and_its_parked_calls_are_refused(
    peer_factory: Callable[..., PeerServer], proxy_for: Callable[..., Any]
) -> None:
    first = peer_factory("legacy-inflight")
    port = first.port
    async with proxy_for(first.url) as proxy, aiohttp.ClientSession() as http:
        parked = await first_round(http, proxy)
        await anyio.to_thread.run_sync(first.stop)
        await anyio.to_thread.run_sync(lambda: peer_factory("legacy-inflight", port=port))
        status, reply = await modern_call(
            http, proxy.endpoint(), "tools/call", {"name": "echo", "arguments": {"text": "again"}}, ident=7
        )
        assert status == 200, reply
        assert reply["result"]["content"][0]["text"] == "again", "a new upstream session was opened"
        status, reply = await retry(http, proxy, parked)
        assert lost_call(status, reply), reply
        await wait_until(lambda: drained(proxy), what="bridge tables to drain")


async def test_a_1x_sdk_server_asks_a_2026_client_in_rounds_through_the_mcp_proxy_command() -> None:
    """The SDK's last 1.x release, as most servers users run are built: its `ctx.elicit` reaches a
    2026-07-28 client as an `input_required` round, and the retry's answer reaches the tool."""
    with Sdk1Server() as server, ProxyProcess(clean_env(**settings_env(upstream=server.url))) as proxy:
        async with aiohttp.ClientSession() as http:
            with anyio.fail_after(20):
                status, reply = await modern_call(
                    http, proxy.endpoint(), "tools/call", {"name": "ask_name", "arguments": {}}, ident=1
                )
                assert status == 200, reply
                asked = reply["result"]
                assert asked["resultType"] == "input_required", reply
                (key,) = asked["inputRequests"]
                params = {
                    "name": "ask_name",
                    "arguments": {},
                    "inputResponses": {key: ANSWER},
                    "requestState": asked["requestState"],
                }
                status, reply = await modern_call(http, proxy.endpoint(), "tools/call", params, ident=2)
    assert status == 200, reply
    assert reply["result"]["content"][0]["text"] == "Hello, octocat!", reply


async def test_a_stateless_server_that_asks_in_flight_fails_the_call_at_once_saying_why() -> None:
    """A 1.x server run without sessions (`stateless_http=True`) asks in flight but can never get the
    answer: a legacy client direct waits forever. Through the bridge the call fails at once, naming
    the cause, and the upstream call is cancelled."""
    with (
        Sdk1Server(stateless=True) as server,
        ProxyProcess(clean_env(**settings_env(upstream=server.url))) as proxy,
    ):
        async with aiohttp.ClientSession() as http:
            with anyio.fail_after(20):
                status, reply = await modern_call(
                    http, proxy.endpoint(), "tools/call", {"name": "ask_name", "arguments": {}}, ident=1
                )
        said = proxy.wait_events(
            lambda lines: any(e.get("event") == "bridge_stateless_server_asked" for e in lines)
        )
    assert status == 200, reply
    assert "runs without sessions" in reply["error"]["message"], reply
    warned = next(e for e in said if e.get("event") == "bridge_stateless_server_asked")
    assert (warned["level"], warned["method"]) == ("warning", "elicitation/create")
