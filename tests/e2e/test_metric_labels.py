"""The `method` label of `/metrics` says what the proxy knows, and no client can write into its own labels.

The real `mcp-proxy` runs in front of the Python SDK's legacy server. A client's method named like a
label the proxy gives operations itself (`(http)`, `(response)`, `none`) is counted as `other`, so
`mcp_proxy_errors_total{method="(http)"}` stays what the docs promise (plain HTTP, never an error).
A request the proxy refuses for its method (not plain method text) is a request it answered itself:
`other`, mode `local`, in `mcp_proxy_requests_total` as in `mcp_proxy_errors_total`, so an error
ratio has its denominator.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.commanded import Commanded, ProxyFleet
from tests.e2e.legacy_raw import HEADERS, initialize, session_headers
from tests.peers.runner import PeerServer

pytestmark = pytest.mark.e2e

COUNTERS = ("mcp_proxy_requests_total", "mcp_proxy_chains_total", "mcp_proxy_errors_total")


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The request, chain and error counters of a `/metrics` text, by name and label set."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name in COUNTERS
    }


def grown(before: str, after: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """The counters that grew between two scrapes, by how much."""
    old, new = samples(before), samples(after)
    return {key: value - old.get(key, 0.0) for key, value in new.items() if value != old.get(key, 0.0)}


def labelled(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset(labels.items())


async def post(proxy: Commanded, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.post(proxy.endpoint(), data=json.dumps(body).encode(), headers=headers) as resp,
    ):
        text = (await resp.read()).decode()
    data = next((line[5:] for line in text.splitlines() if line.startswith("data:")), text)  # SSE or JSON
    return resp.status, json.loads(data or "null")


async def legacy_session(proxy: Commanded) -> dict[str, str]:
    """A session of a legacy client (initialized, as the SDK's client opens one): its headers."""
    async with (
        aiohttp.ClientSession() as http,
        http.post(proxy.endpoint(), data=json.dumps(initialize()).encode(), headers=HEADERS) as resp,
    ):
        assert resp.status == 200, await resp.text()
        session = resp.headers["Mcp-Session-Id"]
    headers = session_headers(session)
    status, _ = await post(proxy, {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers)
    assert status == 202
    return headers


async def test_a_client_method_named_like_a_label_of_the_proxy_is_counted_as_other(
    fleet: ProxyFleet, legacy_server: PeerServer
) -> None:
    proxy = await fleet.at(legacy_server)
    headers = await legacy_session(proxy)
    await proxy.settled()
    before = await proxy.metrics()
    for ident, method in enumerate(("(http)", "(response)", "none"), start=1):
        status, answer = await post(proxy, {"jsonrpc": "2.0", "id": ident, "method": method}, headers)
        assert (status, answer["error"]["code"]) == (200, -32601), answer  # the SDK: method not found
    await proxy.settled()

    assert grown(before, await proxy.metrics()) == {
        labelled("mcp_proxy_requests_total", method="other", client_era="legacy", mode="passthrough"): 3,
        labelled("mcp_proxy_chains_total", method="other", client_era="legacy", mode="passthrough"): 3,
        labelled("mcp_proxy_errors_total", method="other", mode="passthrough"): 3,
    }


async def test_a_request_refused_for_its_method_counts_as_an_other_request_the_proxy_answered(
    fleet: ProxyFleet, legacy_server: PeerServer
) -> None:
    proxy = await fleet.at(legacy_server)
    headers = await legacy_session(proxy)
    await proxy.settled()
    before = await proxy.metrics()
    for ident, method in enumerate(("GET stream", "caf\u00e9", "tools/call "), start=1):
        status, answer = await post(proxy, {"jsonrpc": "2.0", "id": ident, "method": method}, headers)
        assert (status, answer["id"], answer["error"]["code"]) == (400, ident, -32600), answer
    await post(proxy, {"jsonrpc": "2.0", "method": "notifications/caf\u00e9"}, headers)  # no id: no request
    await proxy.settled()

    assert grown(before, await proxy.metrics()) == {
        labelled("mcp_proxy_requests_total", method="other", client_era="unknown", mode="local"): 3,
        labelled("mcp_proxy_chains_total", method="other", client_era="unknown", mode="local"): 4,
        labelled("mcp_proxy_errors_total", method="other", mode="local"): 4,
    }
