"""A request the upstream never saw took no time upstream, and its chain claims no upstream era.

The `mcp-proxy` command starts in front of nothing, as a sidecar often does before its server: its
503s (the upstream's era unknown, nobody listening) are counted as requests and errors, never in
`mcp_proxy_upstream_latency_seconds`, and their chains say `mode: local`, `upstream_era: unknown` and
`upstream_ms: null`, live and read back from the capture. Then a real SDK server comes up and a call
is timed as before; once the server is gone, the 502 for the refused connection is not timed either.
A bridge's upstream leg that never reached its server says so in both HARs: no response head came.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.legacy_raw import HEADERS, initialize
from tests.e2e.modern_raw import modern_headers, modern_params
from tests.peers.runner import arun_peer
from tests.peers.scenarios import expected_result, run_scenario
from tests.sidecar import (
    ProxyProcess,
    admin_get,
    admin_json,
    clean_env,
    exported_chains,
    exported_har,
    settings_env,
)
from tests.transport.helpers import CLIENT_ACCEPT, dead_port, rpc

pytestmark = pytest.mark.e2e

LEGACY = {**CLIENT_ACCEPT, "Mcp-Session-Id": "s1", "Mcp-Protocol-Version": "2025-11-25"}
"""A 2025-11-25 client's request headers (a session it believes it has)."""

LATENCY = "mcp_proxy_upstream_latency_seconds_count"


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of the samples called `name` whose labels include `labels` (0 when there is none)."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )


async def metrics_once(proxy: ProxyProcess, holds: Callable[[str], bool], what: str) -> str:
    """The `/metrics` text once `holds` is true of it (the counters follow the traffic closely)."""
    seen = [""]

    async def scrape() -> None:
        status, _, body = await admin_get(proxy.admin + "/metrics")
        assert status == 200
        seen[0] = body.decode()

    await scrape()
    for _ in range(100):
        if holds(seen[0]):
            return seen[0]
        await asyncio.sleep(0.05)
        await scrape()
    raise AssertionError(f"/metrics never showed {what}:\n{seen[0]}")


async def post(url: str, method: str, ident: int, **params: Any) -> int:
    """POST one legacy request; the status it got."""
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, data=rpc(method, ident, **params), headers=LEGACY) as resp,
    ):
        await resp.read()
        return resp.status


def headlines(chains: list[dict[str, Any]], method: str, status: int) -> list[tuple[Any, ...]]:
    """Mode, eras and upstream time of each chain of `method` that got HTTP `status`."""
    return [
        (c["mode"], c["client_era"], c["upstream_era"], c["upstream_ms"])
        for c in chains
        if c["method"] == method and c.get("http_status") == status
    ]


@pytest.mark.timeout(120)
async def test_requests_the_upstream_never_saw_are_not_timed_as_upstream_latency(tmp_path: Path) -> None:
    port, capture = dead_port(), tmp_path / "capture.jsonl"
    env = clean_env(**settings_env(upstream=f"http://127.0.0.1:{port}/mcp", capture=capture))
    with ProxyProcess(env) as proxy:
        url = proxy.endpoint()
        refused = [await post(url, "tools/call", n, name="echo", arguments={}) for n in (1, 2, 3)]
        down = await metrics_once(
            proxy, lambda t: metric(t, "mcp_proxy_errors_total", method="tools/call") == 3, "three errors"
        )
        down_chains = await admin_json(proxy.admin + "/api/chains")

        async with arun_peer("legacy-inflight", port=port):
            echoed = await run_scenario(url, "legacy", "echo")
            up = await metrics_once(
                proxy, lambda t: metric(t, LATENCY, method="tools/call") > 0, "a timed call"
            )

        gone = await post(url, "initialize", 9, protocolVersion="2025-11-25", capabilities={})
        after = await metrics_once(
            proxy,
            lambda t: metric(t, "mcp_proxy_errors_total", method="initialize") == 1,
            "the initialize that got 502",
        )
        after_chains = await admin_json(proxy.admin + "/api/chains")
        assert proxy.stop() == 0

    assert refused == [503, 503, 503]
    assert metric(down, LATENCY) == 0, down
    assert metric(down, "mcp_proxy_requests_total", method="tools/call", mode="local") == 3
    assert metric(down, "mcp_proxy_info", upstream_era="unknown") == 1
    assert headlines(down_chains, "tools/call", 503) == [("local", "legacy", "unknown", None)] * 3

    assert echoed == expected_result("echo")
    assert metric(up, LATENCY, method="tools/call", mode="passthrough") == 1, up
    (timed,) = [c for c in after_chains if c["method"] == "tools/call" and c.get("http_status") == 200]
    assert timed["upstream_ms"] > 0

    assert gone == 502
    assert metric(after, LATENCY, method="initialize") == metric(up, LATENCY, method="initialize") == 1, after
    assert headlines(after_chains, "initialize", 502) == [("passthrough", "legacy", "legacy", None)]

    _, recorded = exported_chains(capture)
    assert headlines(recorded, "tools/call", 503) == [("local", "legacy", "unknown", None)] * 3
    assert headlines(recorded, "initialize", 502) == [("passthrough", "legacy", "legacy", None)]
    assert json.loads(capture.read_text().splitlines()[0])["version"] == "1.16"


NO_HEAD = "a bridge's upstream leg: no response head came; it ended as upstream_unreachable"


async def test_a_bridge_leg_that_never_reached_its_server_says_no_head_came_in_both_hars(
    tmp_path: Path,
) -> None:
    """The capture records a leg's head whenever one comes (format 1.5 on), so a leg without one got
    none, and its entry says that rather than that it might only be unrecorded."""
    port, capture = dead_port(), tmp_path / "capture.jsonl"
    upstream = f"http://127.0.0.1:{port}/mcp"  # a 2026-07-28 server, said so, that is not running
    env = clean_env(**settings_env(upstream=upstream, upstream_era="modern", capture=capture))
    with ProxyProcess(env) as proxy:
        init = rpc("initialize", 1, protocolVersion="2025-11-25", capabilities={}, clientInfo=CLIENT)
        async with (
            aiohttp.ClientSession() as http,
            http.post(proxy.endpoint(), data=init, headers=CLIENT_ACCEPT) as resp,
        ):
            answer = await resp.json()
        status, _, live = await admin_get(proxy.admin + "/api/export.har")
        assert status == 200
        assert proxy.stop() == 0
    exported = exported_har(capture, tmp_path / "capture.har")

    assert "unreachable" in answer["error"]["message"]
    for har in (json.loads(live), json.loads(exported.read_bytes())):
        (leg,) = [e for e in har["log"]["entries"] if e["_mcp"]["side"] == "upstream"]
        assert leg["response"]["status"] == 0
        assert leg["comment"] == NO_HEAD


CLIENT = {"name": "raw-client", "version": "1"}


ADD = {"name": "add", "arguments": {"a": 2, "b": 3}}

BRIDGED_TO_NOBODY = [
    pytest.param(
        "legacy",
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": modern_params(ADD)},
        modern_headers("tools/call", modern_params(ADD)),
        "tools/call",
        id="mrtr_to_legacy",
    ),
    pytest.param("modern", initialize(), HEADERS, "initialize", id="legacy_to_mrtr"),
]


@pytest.mark.parametrize(("era", "sent", "headers", "method"), BRIDGED_TO_NOBODY)
async def test_a_bridged_request_whose_upstream_is_unreachable_is_not_timed_as_upstream_latency(
    era: str, sent: dict[str, Any], headers: dict[str, str], method: str
) -> None:
    """Each bridge's first leg finds nobody listening: the request counts as an error, and as in
    pass-through it has no upstream time, in `/metrics` as in its chain."""
    upstream = f"http://127.0.0.1:{dead_port()}/mcp"  # a server of that era, said so, not running
    with ProxyProcess(clean_env(**settings_env(upstream=upstream, upstream_era=era))) as proxy:
        async with (
            aiohttp.ClientSession() as http,
            http.post(proxy.endpoint(), json=sent, headers=headers) as resp,
        ):
            answer = await resp.json()
        counted = await metrics_once(
            proxy, lambda t: metric(t, "mcp_proxy_errors_total", method=method) == 1, "the error"
        )
        chains = await admin_json(proxy.admin + "/api/chains")
        assert proxy.stop() == 0

    assert "unreachable" in answer["error"]["message"]
    assert metric(counted, "mcp_proxy_requests_total", method=method) == 1
    assert metric(counted, LATENCY) == 0, counted
    assert [(c["method"], c["upstream_ms"]) for c in chains] == [(method, None)]
