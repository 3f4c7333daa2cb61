"""A proxy nobody watches, under more calls a second than `unwatched_history_rate`: the `mcp-proxy`
command in front of the real SDK server, with a real SDK client.

The chains keep the rate's calls and every call that fails or asks a question, and a `(dropped)` chain
stands for each run of the plain others, naming the setting; the metrics, the round-trip lines and the
capture count every call; the log says it once; a watcher attached sees every call whatever the rate.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.flows.events import ChainChanged
from tests.peers.runner import PeerServer
from tests.peers.scenarios import client_for
from tests.sidecar import ProxyProcess, admin_json, clean_env, exported_chains, metric, scrape, settings_env
from tests.transport.test_admin_feed import attached

pytestmark = pytest.mark.e2e

RATE = 2
"""Calls a second kept: a burst of twenty, then two a second."""

CALLS = 60


async def _calls(url: str, count: int, *, then: tuple[str, ...] = ()) -> None:
    """`count` plain calls, then one call of each tool in `then`, on one SDK client."""
    async with client_for(url, "legacy") as client:
        for n in range(count):
            result = await client.call_tool("add", {"a": n, "b": 1})
            assert not result.is_error
        for tool in then:
            await client.call_tool(tool, {})


async def test_past_the_rate_calls_are_left_out_of_the_chains_and_counted_everywhere_else(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "run.jsonl"
    env = clean_env(**settings_env(upstream=legacy_server.url, unwatched_history_rate=RATE, capture=capture))
    with ProxyProcess(env) as proxy:
        await _calls(proxy.endpoint(), CALLS, then=("fail", "ask_name"))
        metrics = await scrape(proxy)
        chains = await admin_json(proxy.admin + "/api/chains?limit=1000")
        lines = proxy.wait_events(lambda events: any(e["event"] == "calls_left_out" for e in events))

    left_out = metric(metrics, "mcp_proxy_calls_left_out_total")
    assert 0 < left_out < CALLS, metrics
    assert metric(metrics, "mcp_proxy_requests_total", method="tools/call") == CALLS + 2
    # Past the rate, a call that fails and one whose server asks a question are kept all the same.
    (failed,) = [c for c in chains if c.get("name") == "fail"]
    assert failed["status"] == "error", failed
    (asked,) = [c for c in chains if c.get("name") == "ask_name"]
    assert (asked["status"], asked["nested"]) == ("ok", 1), asked
    calls = [c for c in chains if c["method"] == "tools/call" and c.get("name") == "add"]
    gaps = [c for c in chains if c["method"] == "(dropped)"]
    assert gaps, [c["method"] for c in chains]
    for gap in gaps:
        assert "unwatched_history_rate" in gap["notes"][0], gap
        assert gap["status"] == "incomplete"
    counted = sum(int(g["notes"][0].split(" observations of about ")[1].split()[0]) for g in gaps)
    assert len(calls) + counted == CALLS
    assert len(calls) == CALLS - left_out
    assert all(c["status"] == "ok" for c in calls), calls
    assert not [c for c in chains if c["method"] in ("(response)", "notifications/cancelled")]

    said = [e for e in lines if e["event"] == "calls_left_out"]
    assert len(said) == 1, said
    assert said[0]["level"] == "info"
    assert said[0]["unwatched_history_rate"] == RATE
    assert "unwatched_history_rate" in said[0]["hint"]
    round_trips = [e for e in lines if e["event"] == "exchange" and e.get("method") == "tools/call"]
    assert len(round_trips) == CALLS + 2  # every call has its log line

    _, recorded = exported_chains(capture)
    assert (
        len([c for c in recorded if c["method"] == "tools/call"]) == CALLS + 2
    )  # the capture holds them all


async def test_a_watcher_attached_sees_every_call_whatever_the_rate(legacy_server: PeerServer) -> None:
    env = clean_env(**settings_env(upstream=legacy_server.url, unwatched_history_rate=RATE))
    with ProxyProcess(env) as proxy:
        async with attached(proxy.admin) as feed:
            await feed.until(lambda item: item == "live")
            await _calls(proxy.endpoint(), CALLS)
            ended: set[str] = set()

            def every_call_ended(item: object) -> bool:
                if isinstance(item, ChainChanged) and item.chain.name == "add" and item.chain.ended:
                    ended.add(item.chain.id)
                return len(ended) == CALLS

            await feed.until(every_call_ended)  # the feed told every call, and its end
        metrics = await scrape(proxy)
        chains = await admin_json(proxy.admin + "/api/chains?limit=1000")

    assert metric(metrics, "mcp_proxy_calls_left_out_total") == 0
    assert len([c for c in chains if c["method"] == "tools/call"]) == CALLS
    assert not [c for c in chains if c["method"] == "(dropped)"]
