"""Pass-through with real SDK peers: the client notices no difference, and the chains have the right shape.

Each scenario runs once directly against the server and once through the proxy; the normalized
results (tool output, callbacks the client saw, progress values) must be equal. Then the recorded
chains are checked: the nested request and its answering POST inside the call's chain, all MRTR
rounds inside one chain, progress inside the call's chain.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proxy.flows.events import ChainOpened, ChainStatus, Direction
from proxy.flows.store import Chain
from proxy.record.capture import read_capture
from proxy.runtime import Proxy
from tests.e2e.modern_raw import modern_call
from tests.peers.runner import PeerServer
from tests.peers.scenarios import run_scenario
from tests.transport.helpers import captured_logs

pytestmark = pytest.mark.e2e

LEGACY_SCENARIOS = [
    "echo",
    "ask_name",
    "ask_url",
    "ask_llm",
    "list_client_roots",
    "ask_twice",
    "ask_two_at_once",
    "slow_progress",
    "progress",
    "fail",
    "prompts",
    "resources",
]
MODERN_SCENARIOS = [*LEGACY_SCENARIOS, "state_only"]


def chains_named(proxy: Proxy, name: str) -> list[Chain]:
    """Chains in the proxy's store whose target (tool/prompt/resource) is `name`."""
    return [c for c in proxy.chains() if c.summary.name == name]


def only_chain(proxy: Proxy, name: str) -> Chain:
    found = chains_named(proxy, name)
    assert len(found) == 1, [c.summary for c in found]
    return found[0]


@pytest.mark.parametrize("scenario", LEGACY_SCENARIOS)
async def test_legacy_client_through_proxy_gets_what_it_gets_directly(
    legacy_server: PeerServer, proxy_for: Callable[..., Any], scenario: str
) -> None:
    direct = await run_scenario(legacy_server.url, "legacy", scenario)
    async with proxy_for(legacy_server.url) as proxy:
        proxied = await run_scenario(proxy.endpoint(), "legacy", scenario)
    assert proxied == direct


@pytest.mark.parametrize("scenario", MODERN_SCENARIOS)
async def test_modern_client_through_proxy_gets_what_it_gets_directly(
    modern_server: PeerServer, proxy_for: Callable[..., Any], scenario: str
) -> None:
    direct = await run_scenario(modern_server.url, "2026-07-28", scenario)
    async with proxy_for(modern_server.url) as proxy:
        proxied = await run_scenario(proxy.endpoint(), "2026-07-28", scenario)
    assert proxied == direct


async def test_legacy_elicitation_and_its_answer_join_the_calls_chain(
    legacy_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with proxy_for(legacy_server.url) as proxy:
        await run_scenario(proxy.endpoint(), "legacy", "ask_name")
    chain = only_chain(proxy, "ask_name")
    kinds = [(m.direction, m.kind, m.method) for m in chain.messages]
    assert kinds[0] == (Direction.TO_SERVER, "request", "tools/call")
    assert (Direction.TO_CLIENT, "request", "elicitation/create") in kinds
    answer = kinds.index((Direction.TO_SERVER, "result", None))
    assert answer > kinds.index((Direction.TO_CLIENT, "request", "elicitation/create"))
    assert kinds[-1][:2] == (Direction.TO_CLIENT, "result") or kinds[-1][1] == "http"
    assert chain.summary.status is ChainStatus.OK
    assert chain.summary.nested == 1
    assert len({m.exchange for m in chain.messages}) == 2, "the answer rode its own POST"
    assert chain.summary.client_wait_ms > 0
    assert chain.summary.upstream_ms + chain.summary.client_wait_ms == pytest.approx(
        chain.summary.duration_ms, abs=0.01
    )


async def test_legacy_progress_notifications_join_the_calls_chain(
    legacy_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with proxy_for(legacy_server.url) as proxy:
        result = await run_scenario(proxy.endpoint(), "legacy", "progress")
    chain = only_chain(proxy, "slow_progress")
    progress = [m for m in chain.messages if m.method == "notifications/progress"]
    assert len(progress) == len(result["progress"]) == 3
    assert chain.summary.status is ChainStatus.OK


async def test_modern_rounds_with_request_state_stay_in_one_chain(
    modern_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with proxy_for(modern_server.url) as proxy:
        await run_scenario(proxy.endpoint(), "2026-07-28", "ask_twice")
    chain = only_chain(proxy, "ask_twice")
    assert chain.summary.rounds == 3
    assert chain.summary.status is ChainStatus.OK
    requests = [m for m in chain.messages if m.kind == "request"]
    assert len({m.jsonrpc_id for m in requests}) == 3, "each round has its own JSON-RPC id"
    assert chain.summary.client_wait_ms > 0


async def test_modern_retry_without_request_state_is_matched_by_arguments_and_keys(
    modern_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with proxy_for(modern_server.url) as proxy:
        await run_scenario(proxy.endpoint(), "2026-07-28", "ask_name")
    chain = only_chain(proxy, "ask_name")
    assert chain.summary.rounds == 2
    assert chain.summary.status is ChainStatus.OK
    first_result = next(m for m in chain.messages if m.kind == "result")
    assert "requestState" not in first_result.body["result"], "this scenario must exercise the no-state match"


async def test_capture_file_replays_the_chains_and_holds_no_session_id(
    legacy_server: PeerServer, proxy_for: Callable[..., Any], tmp_path: Path
) -> None:
    capture = tmp_path / "run.jsonl"
    async with proxy_for(legacy_server.url, capture=capture) as proxy:
        await run_scenario(
            proxy.endpoint(), "legacy", "ask_name", headers={"Authorization": "Bearer s3cr3t-token"}
        )
    text = capture.read_text()
    assert "s3cr3t-token" not in text
    opened = [e for e in read_capture(capture) if isinstance(e, ChainOpened)]
    assert {e.chain.method for e in opened} >= {"initialize", "tools/call"}
    for chain in proxy.chains():
        raw_sessions = [
            v
            for m in chain.messages
            if m.http
            for k, v in m.http.headers.items()
            if k.lower() == "mcp-session-id"
        ]
        assert all(v.startswith("<redacted") for v in raw_sessions)


async def test_a_polling_server_that_drops_the_stream_is_resumed_by_the_client_through_the_proxy(
    peer_factory: Callable[..., PeerServer], proxy_for: Callable[..., Any]
) -> None:
    server = peer_factory("legacy-polling")
    async with proxy_for(server.url) as proxy:
        result = await run_scenario(proxy.endpoint(), "legacy", "ask_name")
    assert result["result"]["content"] == ["Hello, octocat!"]
    chain = only_chain(proxy, "ask_name")
    assert chain.summary.status is ChainStatus.OK
    assert any(note.startswith("stream resumed with Last-Event-ID") for note in chain.summary.notes)
    assert len({m.exchange for m in chain.messages}) == 3, (
        "the call's POST, the resuming GET, the answer POST"
    )
    assert not any(c.summary.invalid for c in proxy.chains()), "priming events are not messages"


async def test_a_redirect_to_the_upstreams_own_address_comes_back_through_the_proxy(
    legacy_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    """Starlette redirects `POST /mcp/` to `/mcp` on the Host it saw, which is the upstream's own."""
    body = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}

    async def location(http: aiohttp.ClientSession, url: str) -> tuple[int, str | None]:
        async with http.post(url, data=body, headers=headers, allow_redirects=False) as response:
            return response.status, response.headers.get("Location")

    async with aiohttp.ClientSession() as http, proxy_for(legacy_server.url) as proxy:
        _, direct = await location(http, legacy_server.url + "/")
        status, proxied = await location(http, proxy.endpoint() + "/")

    assert direct == legacy_server.url, "the upstream names itself in the redirect"
    assert 300 <= status < 400
    assert proxied == proxy.endpoint(), f"{proxied} leads around the proxy"


async def test_a_redirect_never_hands_the_client_the_upstream_urls_key(
    legacy_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    """The proxy adds the upstream URL's query to every request, so the server's redirect echoes it."""
    body = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    keyed = legacy_server.url + "?api_key=k-secret-123"
    async with aiohttp.ClientSession() as http, proxy_for(keyed) as proxy:
        async with http.post(proxy.endpoint() + "/", data=body, headers=headers, allow_redirects=False) as r:
            status, location = r.status, r.headers.get("Location")
        recorded = repr([(chain.summary, list(chain.messages)) for chain in proxy.chains()])
        assert "location" in recorded.lower(), "the redirect's head was recorded"
        assert proxy.admin_url is not None
        async with http.get(proxy.admin_url + "/api/chains?limit=10") as listed:
            recorded += await listed.text()

    assert 300 <= status < 400
    assert location == proxy.endpoint()
    assert "k-secret-123" not in recorded


async def test_a_dual_era_upstream_is_named_with_the_flag_that_bridges_its_in_flight_tools(
    dual_inflight_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    with captured_logs() as logs:
        async with proxy_for(dual_inflight_server.url) as proxy:
            assert proxy.router.eras.label == "dual"
    (hint,) = [entry for entry in logs if entry["event"] == "upstream_dual_era"]
    assert "--upstream-era legacy" in hint["hint"]


async def test_a_modern_call_a_dual_era_server_cannot_serve_in_flight_repeats_the_flag_that_bridges_it(
    dual_inflight_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    # The SDK's dual-era server refuses a 2026-07-28 client's call to a tool that asks in flight (no
    # back-channel): the proxy's suspicion of its verdict says, there, what would make it work.
    with captured_logs() as logs:
        async with proxy_for(dual_inflight_server.url) as proxy, aiohttp.ClientSession() as http:
            status, reply = await modern_call(
                http, proxy.endpoint(), "tools/call", {"name": "ask_name"}, ident=1
            )
    assert status >= 400, reply
    (suspect,) = [entry for entry in logs if entry["event"] == "upstream_eras_suspect"]
    assert "--upstream-era legacy" in suspect["hint"]


async def test_a_refusal_under_a_forced_era_says_once_what_the_forced_verdict_may_have_got_wrong(
    dual_inflight_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    with captured_logs() as logs:
        async with (
            proxy_for(dual_inflight_server.url, upstream_era="modern") as proxy,
            aiohttp.ClientSession() as http,
        ):
            for ident in (1, 2):
                status, reply = await modern_call(
                    http, proxy.endpoint(), "tools/call", {"name": "ask_name"}, ident=ident
                )
                assert status >= 400, reply
    (refused,) = [entry for entry in logs if entry["event"] == "upstream_era_forced_refused"]
    assert refused["log_level"] == "warning"
    assert refused["upstream_era"] == "modern"
    assert "--upstream-era legacy (or no --upstream-era)" in refused["hint"]
