"""A sidecar nobody reads chains from but Prometheus: what the `mcp-proxy` command says and shows when
its queue of unbuilt observations fills, against the real SDK server and clients.

The queue's contents show in `/metrics` before anything builds them; the first drop is logged (with
the counts and the setting that bounds the queue), later ones at most once a minute; what is left of
a dropped operation is never filed as something else (a client's answer as a `(response)` chain
noted as answering a request the proxy did not see), and a `(dropped)` chain stands where the
history has its gap, in `/api/chains` and in the feed a TUI attaches to.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from proxy.flows.events import ChainOpened, ProxyInfo
from tests.peers.runner import PeerServer
from tests.peers.scenarios import client_for
from tests.sidecar import ProxyProcess, admin_json, clean_env, exported_chains, settings_env
from tests.test_sidecar import metric, scrape
from tests.transport.test_admin_feed import attached

pytestmark = pytest.mark.e2e

MAX_CHAINS = 30
"""The ring's bound: the queue of unbuilt observations holds ten times as many observations."""

STEPS = 40
"""Progress notifications in each client's long call: chains of many observations each, so what the
queue keeps after a drop fits the ring beside what was built before it (the gap stays in view)."""


async def _client_session(url: str, mode: str = "legacy") -> None:
    """One SDK client of `mode`: two calls the server asks questions during (answered on POSTs of their
    own), and one long call with progress."""
    async with client_for(url, mode) as client:
        await client.call_tool("ask_name", {})
        await client.call_tool("ask_twice", {})
        await client.call_tool("slow_progress", {"steps": STEPS}, progress_callback=_ignore)


async def _ignore(progress: float, total: float | None, message: str | None) -> None:
    return None


async def test_a_full_queue_is_logged_shown_as_a_gap_and_leaves_no_misfiled_chain(
    legacy_server: PeerServer,
) -> None:
    env = clean_env(**settings_env(upstream=legacy_server.url, max_chains=MAX_CHAINS))
    with ProxyProcess(env) as proxy:
        await _client_session(proxy.endpoint())
        metrics = await scrape(proxy)
        assert metric(metrics, "mcp_proxy_observations_queued") > 0, metrics
        assert metric(metrics, "mcp_proxy_observations_queued_bytes") > 0
        assert metric(metrics, "mcp_proxy_chains_stored") == 0  # nothing built yet: the queue says it
        before = await admin_json(proxy.admin + "/api/chains?limit=1000")  # built now: history to keep

        for _ in range(3):  # three clients at a time: their exchanges interleave in the queue
            await asyncio.gather(*(_client_session(proxy.endpoint()) for _ in range(3)))
        dropped = metric(await scrape(proxy), "mcp_proxy_observations_dropped_total")
        assert dropped > 0

        lines = proxy.wait_events(lambda events: any(e["event"] == "observations_dropped" for e in events))
        said = [e for e in lines if e["event"] == "observations_dropped"]
        assert len(said) == 1, said  # the first drop at once; the next ones within the minute are counted
        (line,) = said
        assert line["level"] == "warning"
        assert (line["backlog"], line["max_chains"]) == (10 * MAX_CHAINS, MAX_CHAINS)
        assert 0 < line["dropped"] <= line["dropped_total"] <= dropped
        assert "max_chains" in line["hint"]

        chains = await admin_json(proxy.admin + "/api/chains?limit=1000")
        async with attached(proxy.admin, "?history=1000") as feed:
            history = await feed.until(lambda item: item == "live")

    misfiled = [c for c in chains if c["method"] in ("(response)", "notifications/cancelled")]
    assert not misfiled, misfiled
    assert not [c for c in chains if any("did not see" in note for note in c.get("notes", []))]
    gaps = [c for c in chains if c["method"] == "(dropped)"]
    assert len(gaps) == 1, [c["method"] for c in chains]
    (gap,) = gaps
    ids = [c["id"] for c in chains]
    assert ids.index(gap["id"]) > ids.index(before[-1]["id"])  # after what was built before it
    assert gap["status"] == "incomplete", gap
    assert "a capture, where one is written, holds them" in gap["notes"][0], gap
    assert int(gap["notes"][0].split()[0]) == dropped
    opened = [e.chain for e in history if isinstance(e, ChainOpened)]
    assert isinstance(history[0], ProxyInfo)
    assert [c.id for c in opened if c.method == "(dropped)"] == [gap["id"]]
    for chain in chains:  # what is left of a call is never filed as anything else
        if chain["method"] == "tools/call" and chain["name"] != "slow_progress":
            assert chain["nested"] >= 1, chain


@pytest.mark.parametrize(
    ("server", "mode", "settings"),
    [
        ("legacy_server", "legacy", {}),
        ("dual_inflight_server", "2026-07-28", {"upstream_era": "legacy"}),
        ("modern_server", "legacy", {}),
    ],
    ids=["passthrough", "mrtr_to_legacy", "legacy_to_mrtr"],
)
async def test_after_drops_the_admin_view_lists_no_chain_the_capture_does_not_hold(
    request: pytest.FixtureRequest, tmp_path: Path, server: str, mode: str, settings: dict[str, str]
) -> None:
    peer: PeerServer = request.getfixturevalue(server)
    capture = tmp_path / "run.jsonl"
    env = clean_env(**settings_env(upstream=peer.url, max_chains=MAX_CHAINS, capture=capture, **settings))
    with ProxyProcess(env) as proxy:
        for _ in range(3):
            await asyncio.gather(*(_client_session(proxy.endpoint(), mode) for _ in range(3)))
        assert metric(await scrape(proxy), "mcp_proxy_observations_dropped_total") > 0
        chains = await admin_json(proxy.admin + "/api/chains?limit=1000")
    _, recorded = exported_chains(capture)

    shown = Counter((c["method"], c["mode"]) for c in chains if c["method"] != "(dropped)")
    held = Counter((c["method"], c["mode"]) for c in recorded)
    assert not shown - held, (shown - held, held)
    assert not [c for c in chains if any("did not see" in note for note in c.get("notes", []))]
