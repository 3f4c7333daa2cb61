"""Compressed answers: relayed as the server sent them, observed as what they say.

The upstream is a real SDK server behind Starlette's `GZipMiddleware` (`tests.peers.compressed`),
and the clients send `Accept-Encoding` as real ones do (the SDK's httpx client, aiohttp). The client
must get the gzip bytes unchanged; the chains, the capture and its HAR must hold the decoded
messages, each call `ok`, nothing recorded as invalid.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.flows.events import ChainStatus, Direction, MessageRecorded
from proxy.flows.store import Chain
from proxy.record.capture import read_capture
from proxy.transport.observe import ENCODED_COUNT
from tests.peers.runner import PeerServer
from tests.peers.scenarios import run_scenario
from tests.record.captures import full_har
from tests.transport.helpers import bounded, captured_logs, client_session, drained, rpc, wait_until
from tests.transport.test_relay_observation import open_session

pytestmark = pytest.mark.e2e

GZIP_ACCEPT = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "Accept-Encoding": "gzip, deflate",
}
CLIENT_INFO = {"name": "gzip-test", "version": "1"}


SCENARIO = {"json": ("echo", "hello"), "sse": ("ask_name", "Hello, octocat!")}
"""What each shape is asked, and the text its tool answers: a plain JSON answer has no stream for
the server's own requests, an SSE one carries the elicitation before the result."""


@pytest.fixture(scope="module", params=["json", "sse"])
def gzip_server(request: pytest.FixtureRequest) -> Iterator[tuple[PeerServer, str]]:
    """A legacy SDK server whose answers are gzip: plain JSON ones, or SSE streams event by event."""
    with PeerServer("legacy-inflight", extra_args=["--gzip", request.param]) as peer:
        yield peer, request.param


def response_records(chain: Chain) -> list[Any]:
    return [m for m in chain.messages if m.direction is Direction.TO_CLIENT and m.jsonrpc_id is not None]


def encoding_of(record: Any) -> str | None:
    headers = record.http.headers if record.http is not None else {}
    return next((v for k, v in headers.items() if k.lower() == "content-encoding"), None)


async def test_gzip_answers_are_observed_decoded_and_every_call_is_ok(
    gzip_server: tuple[PeerServer, str], proxy_for: Callable[..., Any], tmp_path: Path
) -> None:
    peer, shape = gzip_server
    scenario, answered = SCENARIO[shape]
    direct = await run_scenario(peer.url, "legacy", scenario)
    capture = tmp_path / "gz.jsonl"
    async with proxy_for(peer.url, capture=capture) as proxy:
        proxied = await run_scenario(proxy.endpoint(), "legacy", scenario)
        chains = {c.summary.method: c for c in proxy.chains() if c.summary.jsonrpc_id is not None}
    assert proxied == direct

    assert {"initialize", "tools/list", "tools/call"} <= set(chains)
    assert {m: (c.summary.status, c.summary.error, c.summary.invalid) for m, c in chains.items()} == {
        m: (ChainStatus.OK, None, False) for m in chains
    }
    call = chains["tools/call"]
    answers = response_records(call)
    # the upstream did answer gzip: the head the chain keeps says so, and the body is shown decoded
    assert encoding_of(answers[0]) == "gzip"
    assert answers[-1].body["result"]["content"][0]["text"] == answered
    if shape == "sse":
        asked = [m for m in call.messages if m.method == "elicitation/create"]
        assert [m.body["params"]["message"] for m in asked] == ["What is your name?"]

    recorded = [e.message for e in read_capture(capture) if isinstance(e, MessageRecorded)]
    assert recorded
    assert not [m for m in recorded if m.kind == "invalid"]
    har = json.loads(full_har([capture]))
    posts = [
        e["response"]["content"]["text"] for e in har["log"]["entries"] if e["request"]["method"] == "POST"
    ]
    assert any(answered in text for text in posts)
    assert not [text for text in posts if "\x1f" in text or "\ufffd" in text]


async def test_the_client_gets_the_gzip_bytes_the_server_sent(
    gzip_server: tuple[PeerServer, str], proxy_for: Callable[..., Any]
) -> None:
    peer, _ = gzip_server
    init = rpc("initialize", 1, protocolVersion="2025-11-25", capabilities={}, clientInfo=CLIENT_INFO)
    async with (
        proxy_for(peer.url) as proxy,
        client_session() as client,
        client.post(proxy.endpoint(), data=init, headers=GZIP_ACCEPT) as response,
    ):
        raw = await response.read()
        assert response.headers["Content-Encoding"] == "gzip"
    text = gzip.decompress(raw).decode()
    assert '"serverInfo"' in text


async def test_a_fault_rule_on_a_compressed_answer_lets_it_through_as_it_comes(
    gzip_server: tuple[PeerServer, str], proxy_for: Callable[..., Any]
) -> None:
    """A rule that picks the call routes its answer through the fault gate, which judges plain bodies
    only: a compressed one (an SSE stream flushed event by event too) goes on as it comes, never held
    back waiting for an event boundary its compressed bytes do not show."""
    peer, shape = gzip_server
    scenario, _ = SCENARIO[shape]
    direct = await run_scenario(peer.url, "legacy", scenario)
    async with proxy_for(peer.url, faults=[f"tool:{scenario} dir:server => delay=20ms"]) as proxy:
        proxied = await run_scenario(proxy.endpoint(), "legacy", scenario)
        chains = {c.summary.method: c for c in proxy.chains() if c.summary.jsonrpc_id is not None}
    assert proxied == direct
    assert chains["tools/call"].summary.status is ChainStatus.OK


async def test_a_gzip_answer_decoding_past_the_limit_counts_the_bytes_relayed_and_says_so(
    gzip_server: tuple[PeerServer, str], proxy_for: Callable[..., Any]
) -> None:
    """Inflating the rest of an answer only to count it would undo the limit (a gzip bomb): its size is
    the compressed bytes the client got, never the decode budget, and the line says which it is."""
    peer, _ = gzip_server  # the SSE shape: each event of this answer already decodes past the limit
    limit = 4096
    async with proxy_for(peer.url, max_inspected_bytes=limit) as proxy, client_session() as client:
        session = await open_session(proxy, client)
        call = rpc("tools/call", 3, name="echo", arguments={"text": "x" * 64 * limit})
        headers = {**GZIP_ACCEPT, "Mcp-Session-Id": session}
        with captured_logs() as logs:
            async with client.post(proxy.endpoint(), data=call, headers=headers) as response:
                raw = await bounded(response.read(), what="the gzip answer through the proxy")
                assert response.headers["Content-Encoding"] == "gzip"
            await wait_until(lambda: drained(proxy), what="the proxy to close the exchange")
    assert b"x" * 64 * limit in gzip.decompress(raw)
    (line,) = [entry for entry in logs if entry["event"] == "exchange"]
    assert line["bytes_out"] == len(raw) < limit
    assert f"max_inspected_bytes ({limit} bytes)" in line["not_inspected"]
    assert line["not_inspected"].endswith(ENCODED_COUNT)
