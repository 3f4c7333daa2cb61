"""The upstream era verdict follows the upstream: probed at start, probed again when answers stop fitting.

The proxy is the `mcp-proxy` command; its verdict is read where an operator reads it (`/readyz`'s
`upstream_era`), each chain's mode from the admin API (`/api/chains`), and its doubts from its JSON
log (`upstream_eras_suspect`, after which the next request waits for a probe).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp
import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from proxy.wire import errors
from tests.e2e.commanded import Commanded, own_proxy
from tests.e2e.modern_raw import modern_call
from tests.peers.runner import PeerServer
from tests.peers.scenarios import run_scenario

pytestmark = pytest.mark.e2e


async def upstream_era(proxy: Commanded) -> str:
    """The era verdict `/readyz` reports (no token needed there, as for a probe)."""
    status, answer = await proxy.call("GET", "/readyz")
    assert status == 200, answer
    return str(answer["upstream_era"])


def doubts(proxy: Commanded) -> list[dict[str, Any]]:
    """The `upstream_eras_suspect` lines the proxy logged since its test's mark."""
    return [line for line in proxy.lines() if line.get("event") == "upstream_eras_suspect"]


async def once_reprobed(proxy: Commanded, era: str, scenario: str) -> dict[str, Any]:
    """The scenario's result once it passes: the proxy re-probes a changed upstream at most every 2 s,
    so it is tried again every half second, for at most 20 s."""
    with anyio.fail_after(20):
        while True:
            try:
                return await run_scenario(proxy.endpoint(), era, scenario)
            except BaseException as exc:
                if isinstance(exc, anyio.get_cancelled_exc_class()):
                    raise
                await anyio.sleep(0.5)


async def refused(http: aiohttp.ClientSession, proxy: Commanded, method: str, ident: int) -> tuple[int, int]:
    """A 2026-07-28 client's request the server refuses: the HTTP status and JSON-RPC error code."""
    params = {"name": "echo", "arguments": {}} if method == "tools/call" else {}
    status, reply = await modern_call(http, proxy.endpoint(), method, params, ident=ident)
    return status, reply["error"]["code"]


async def test_a_dual_era_upstream_passes_both_eras_through(dual_inflight_server: PeerServer) -> None:
    async with own_proxy(dual_inflight_server.url) as proxy:
        assert await upstream_era(proxy) == "dual"
        await run_scenario(proxy.endpoint(), "legacy", "ask_name")
        await run_scenario(proxy.endpoint(), "2026-07-28", "echo")
        await proxy.no_exchange_open()
        chains = await proxy.chains()
    assert chains
    assert {c["mode"] for c in chains} == {"passthrough"}


async def test_bridge_off_passes_a_legacy_client_through_to_a_modern_server_unchanged(
    modern_server: PeerServer,
) -> None:
    async with own_proxy(modern_server.url, "--bridge", "off") as proxy:
        with pytest.raises(BaseException):  # noqa: PT011,B017 - the SDK wraps the refusal in exception groups
            await run_scenario(proxy.endpoint(), "legacy", "echo")
        await proxy.no_exchange_open()
        initialize = [c for c in await proxy.chains() if c.get("method") == "initialize"]
    assert initialize
    assert initialize[0]["mode"] == "passthrough"
    assert initialize[0]["http_status"] == 400


async def test_an_upstream_that_changes_era_is_probed_again_and_then_bridged(
    peer_factory: Callable[..., PeerServer],
) -> None:
    legacy = peer_factory("legacy-inflight")
    port = legacy.port
    async with own_proxy(legacy.url) as proxy:
        assert await upstream_era(proxy) == "legacy"
        await run_scenario(proxy.endpoint(), "legacy", "echo")
        await anyio.to_thread.run_sync(legacy.stop)
        await anyio.to_thread.run_sync(lambda: peer_factory("modern-mrtr", port=port))
        result = await once_reprobed(proxy, "legacy", "ask_name")
        assert await upstream_era(proxy) == "modern"
        await proxy.no_exchange_open()
        chains = await proxy.chains()
    assert result["result"]["content"] == ["Hello, octocat!"]
    assert any(c["mode"] == "legacy_to_mrtr" and c.get("name") == "ask_name" for c in chains)


@pytest.mark.parametrize(
    ("first", "then", "client", "bridge"),
    [
        ("legacy-inflight", "modern-mrtr", "2026-07-28", "mrtr_to_legacy"),
        ("modern-mrtr", "legacy-inflight", "legacy", "legacy_to_mrtr"),
    ],
)
async def test_an_upstream_replaced_by_the_other_era_is_probed_again_when_only_bridged_clients_come(
    peer_factory: Callable[..., PeerServer], first: str, then: str, client: str, bridge: str
) -> None:
    # Every client is bridged, so no client request reaches the new server as it was sent: the
    # refusals of the bridge's own requests (its handshake, its 2026-07-28 call) are the news, and
    # so is the end of the bridge's upstream session stream when the old server stops.
    old = peer_factory(first)
    port = old.port
    async with own_proxy(old.url) as proxy:
        await run_scenario(proxy.endpoint(), client, "ask_name")
        await anyio.to_thread.run_sync(old.stop)
        await anyio.to_thread.run_sync(lambda: peer_factory(then, port=port))
        result = await once_reprobed(proxy, client, "ask_name")
        assert await upstream_era(proxy) == ("modern" if then == "modern-mrtr" else "legacy")
        await proxy.no_exchange_open()
        chains = await proxy.chains()
        reasons = [line["reason"] for line in doubts(proxy)]
    assert result["result"]["content"] == ["Hello, octocat!"]
    assert reasons
    assert all(
        reason.endswith(f"from the {bridge} bridge")
        or reason.startswith("the bridge's upstream GET stream ended")
        for reason in reasons
    ), reasons
    assert [c["mode"] for c in chains if c.get("name") == "ask_name"][-1] == "passthrough"


async def test_a_modern_servers_refusals_of_client_mistakes_keep_its_verdict_until_its_era_changes(
    peer_factory: Callable[..., PeerServer],
) -> None:
    modern = peer_factory("modern-mrtr")
    port = modern.port
    async with own_proxy(modern.url) as proxy, aiohttp.ClientSession() as http:
        assert await upstream_era(proxy) == "modern"
        # Arguments the tool's schema refuses, and a method 2026-07-28 removed: the server's own
        # answers to the client's mistakes, relayed as they are.
        assert await refused(http, proxy, "tools/call", 1) == (400, errors.INVALID_PARAMS)
        assert await refused(http, proxy, "ping", 2) == (404, errors.METHOD_NOT_FOUND)
        await proxy.settled()
        assert doubts(proxy) == []

        # The upstream becomes a legacy-only server at the same address. The verdict was never
        # marked stale, so the next 2026-07-28 request still passes through (no probe ran before
        # it), and the legacy server's refusal of it is the doubt that sends the proxy to probe.
        await anyio.to_thread.run_sync(modern.stop)
        await anyio.to_thread.run_sync(lambda: peer_factory("legacy-inflight", port=port))
        params = {"name": "echo", "arguments": {"text": "hi"}}
        status, reply = await modern_call(http, proxy.endpoint(), "tools/call", params, ident=3)
        assert (status, reply["error"]["code"]) == (400, errors.INVALID_REQUEST)
        await proxy.settled()
        (doubt,) = doubts(proxy)
        assert doubt["reason"] == "HTTP 400 (JSON-RPC -32600) for tools/call from a modern client"

        result = await once_reprobed(proxy, "2026-07-28", "echo")
        assert await upstream_era(proxy) == "legacy"
        await proxy.no_exchange_open()
        chains = await proxy.chains()
    assert result["result"]["content"] == ["hello"]
    assert [line["eras"] for line in proxy.lines() if line.get("event") == "upstream_eras"] == ["legacy"]
    assert any(c["mode"] == "mrtr_to_legacy" and c.get("name") == "echo" for c in chains)


async def test_the_gated_relay_reads_a_refusals_body_for_its_era_too(modern_server: PeerServer) -> None:
    # With a fault rule in force every answer takes the gated relay, which reads a JSON body first.
    async with own_proxy(modern_server.url, "--bridge", "off") as proxy, aiohttp.ClientSession() as http:
        await proxy.add_faults("dir:server => delay=1ms")
        assert await refused(http, proxy, "tools/call", 1) == (400, errors.INVALID_PARAMS)
        assert await refused(http, proxy, "ping", 2) == (404, errors.METHOD_NOT_FOUND)
        await proxy.settled()
        assert doubts(proxy) == []
        # A legacy handshake passed through (no bridge) to a 2026-07-28-only server is era evidence.
        with pytest.raises(BaseException):  # noqa: PT011,B017 - the SDK wraps the refusal in exception groups
            await run_scenario(proxy.endpoint(), "legacy", "echo")
        await proxy.settled()
        (doubt,) = doubts(proxy)
    assert doubt["reason"] == "HTTP 400 (JSON-RPC -32022) for initialize from a legacy client"


async def era_becomes(proxy: Commanded, era: str) -> None:
    """Wait (at most 10 s) for `/readyz` to report `era`: it probes a stale verdict itself."""
    with anyio.fail_after(10):
        while True:
            if await upstream_era(proxy) == era:
                return
            await anyio.sleep(0.25)


async def test_an_upgrade_to_a_dual_era_server_is_noticed_by_the_bridge_and_its_clients_then_pass_through(
    peer_factory: Callable[..., PeerServer],
) -> None:
    # The SDK's default app refuses no request of either era, so no refusal tells of the upgrade: the
    # bridge's upstream session stream ending when its server stops is the news.
    legacy = peer_factory("legacy-inflight")
    port = legacy.port
    async with own_proxy(legacy.url) as proxy:
        await run_scenario(proxy.endpoint(), "2026-07-28", "ask_name")
        await anyio.to_thread.run_sync(legacy.stop)
        await anyio.to_thread.run_sync(lambda: peer_factory("dual-mrtr", port=port))
        await era_becomes(proxy, "dual")
        result = await run_scenario(proxy.endpoint(), "2026-07-28", "ask_name")
        await proxy.no_exchange_open()
        chains = await proxy.chains()
        eras = [line["eras"] for line in proxy.lines() if line.get("event") == "upstream_eras"]
    assert result["result"]["content"] == ["Hello, octocat!"]
    assert [c["mode"] for c in chains if c.get("name") == "ask_name"] == ["mrtr_to_legacy", "passthrough"]
    assert eras == ["dual"]


async def test_the_first_request_after_an_outage_in_which_the_upstream_changed_era_is_routed_by_its_new_era(
    peer_factory: Callable[..., PeerServer],
) -> None:
    legacy = peer_factory("legacy-inflight")
    port = legacy.port
    async with own_proxy(legacy.url) as proxy:
        await run_scenario(proxy.endpoint(), "legacy", "echo")
        await anyio.to_thread.run_sync(legacy.stop)
        with pytest.raises(BaseException):  # noqa: PT011,B017 - the SDK wraps the 502 in exception groups
            await run_scenario(proxy.endpoint(), "legacy", "echo")
        await anyio.to_thread.run_sync(lambda: peer_factory("modern-mrtr", port=port))
        result = await run_scenario(proxy.endpoint(), "legacy", "ask_name")  # once: no retry needed
        await proxy.no_exchange_open()
        chains = await proxy.chains()
    assert result["result"]["content"] == ["Hello, octocat!"]
    assert any(c["mode"] == "legacy_to_mrtr" and c.get("name") == "ask_name" for c in chains)


async def test_sessions_bridged_to_a_2026_server_end_with_404_after_a_rollback_to_a_legacy_one(
    peer_factory: Callable[..., PeerServer],
) -> None:
    modern = peer_factory("modern-mrtr")
    port = modern.port
    async with own_proxy(modern.url) as proxy:
        async with Client(proxy.endpoint(), mode="legacy") as client:
            assert not (await client.call_tool("echo", {"text": "one"})).is_error
            await anyio.to_thread.run_sync(modern.stop)
            await anyio.to_thread.run_sync(lambda: peer_factory("legacy-inflight", port=port))
            # The legacy server refuses the bridge's 2026-07-28 leg: that refusal has the proxy probe
            # again, and the new verdict ends the session, which its client then hears as a 404.
            with anyio.fail_after(10):
                while True:
                    try:
                        await client.call_tool("echo", {"text": "again"})
                    except MCPError as exc:
                        if "Session not found" in str(exc):
                            break
                    await anyio.sleep(0.25)
        result = await run_scenario(proxy.endpoint(), "legacy", "ask_name")  # a new session: passed through
        await proxy.settled()
        chains = await proxy.chains()
        lines = proxy.lines()
    retired = [line for line in lines if line.get("event") == "legacy_sessions_retired"]
    assert [(line["sessions"], line["level"]) for line in retired] == [(1, "warning")]
    assert result["result"]["content"] == ["Hello, octocat!"]
    assert [c["mode"] for c in chains if c.get("name") == "ask_name"] == ["passthrough"]
    # Nothing fails any more, so nothing has the proxy probe the confirmed verdict again and again.
    after = lines[lines.index(retired[0]) :]
    assert [line for line in after if line.get("event") == "upstream_eras_suspect"] == []


async def test_a_legacy_server_replaced_by_a_2026_one_under_upstream_era_legacy_is_hinted_toward_modern(
    peer_factory: Callable[..., PeerServer],
) -> None:
    legacy = peer_factory("legacy-inflight")
    port = legacy.port
    async with own_proxy(legacy.url, "--upstream-era", "legacy") as proxy:
        await run_scenario(proxy.endpoint(), "legacy", "echo")
        await anyio.to_thread.run_sync(legacy.stop)
        await anyio.to_thread.run_sync(lambda: peer_factory("modern-mrtr", port=port))
        for _ in range(2):
            with pytest.raises(BaseException):  # noqa: PT011,B017 - the SDK wraps the refusal in exception groups
                await run_scenario(proxy.endpoint(), "legacy", "echo")
        await proxy.settled()
        refused = [line for line in proxy.lines() if line.get("event") == "upstream_era_forced_refused"]
    (line,) = refused  # the second refusal, within the minute, is counted for the next line
    assert line["upstream_era"] == "legacy"
    assert "--upstream-era modern (or no --upstream-era)" in line["hint"]
    assert "--upstream-era legacy" not in line["hint"]
