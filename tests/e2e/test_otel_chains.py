"""Spans tell what the chains tell: real SDK peers, the `mcp-proxy` command, and an OTLP/HTTP receiver
decoding what it exports, read beside the admin API's chains of the same traffic.

A call whose stream the server closes after its priming event (SEP-1699 polling, ``legacy-polling``)
is answered on the stream the client resumes with GET + `Last-Event-ID`: its span ends as its chain
does, and the question asked on the resumed stream is its child. A question the client never answers
on a stream that is never resumed ends failed, named by how its stream ended, as the call does.

A 2026-07-28 client's call bridged to a legacy server that dies mid-stream (killed, so its connection
closes under the call's stream) is answered the proxy's `-32000`; its log line and its span name the
fault `upstream_cut`, as pass-through names a cut stream. An upstream that answers HTTP 500 (a fake:
no SDK server does while it serves MCP) is named `500` on the span of the request that got it, relayed
or sent by a bridge. A call the client cancels that the proxy then times out (its upstream answers
plain JSON, so no head comes before the answer) ends `cancelled` alone, never failed, as its chain.
A notification the proxy could not deliver to an upstream nobody listens on is named
`upstream_unreachable`, as a request's span and the log line name it, not by the proxy's 502.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from tests.e2e.commanded import Commanded, own_proxy
from tests.e2e.legacy_raw import HEADERS, initialize, session_headers
from tests.e2e.modern_raw import modern_headers, modern_params
from tests.e2e.test_resumed_calls import events, notify, open_session, read_until
from tests.otlp_receiver import DecodedSpan, OtlpReceiver
from tests.peers.runner import NodeServer, PeerServer
from tests.peers.scenarios import run_scenario
from tests.threaded_http import FailingApp, serving
from tests.transport.helpers import bounded, dead_port

pytestmark = pytest.mark.e2e

ERROR = 2
"""The OTLP status code of a failed span."""


def traced(receiver: OtlpReceiver) -> dict[str, str]:
    """The setting that sends the proxy's spans to `receiver`."""
    return {"MCP_PROXY_OTLP_ENDPOINT": receiver.url}


def named(spans: list[DecodedSpan], name: str, kind: str) -> DecodedSpan:
    (found,) = [s for s in spans if s.name == name and s.kind == kind]
    return found


def the_chain(chains: list[dict[str, Any]], method: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [c for c in chains if c.get("method") == method and c.get("name") == name]
    return found


async def test_a_call_answered_on_its_resumed_stream_ends_ok_with_its_question_as_a_child(
    peer_factory: Callable[..., PeerServer],
) -> None:
    server = peer_factory("legacy-polling")  # drops each call's stream after its priming event
    with OtlpReceiver() as receiver:
        async with own_proxy(server.url, env=traced(receiver)) as proxy:
            outcome = await run_scenario(proxy.endpoint(), "legacy", "ask_name")
            await proxy.no_exchange_open()
            chain = the_chain(await proxy.chains(), "tools/call", "ask_name")
        spans = receiver.spans()

    assert outcome["result"]["content"] == ["Hello, octocat!"]
    assert chain["status"] == "ok", chain
    call = named(spans, "tools/call ask_name", "server")
    asked = named(spans, "elicitation/create", "client")
    assert call.status_code != ERROR, call
    assert "error.type" not in call.attributes, call
    assert asked.status_code != ERROR, asked
    assert (asked.trace_id, asked.parent_id) == (call.trace_id, call.span_id)
    assert call.start_ns < asked.start_ns <= asked.end_ns <= call.end_ns


async def test_a_question_on_a_resumed_stream_never_answered_nor_resumed_fails_as_its_call_does(
    peer_factory: Callable[..., PeerServer],
) -> None:
    server = peer_factory("legacy-polling")
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ask_name"}}
    with OtlpReceiver() as receiver:
        async with own_proxy(server.url, env=traced(receiver)) as proxy, aiohttp.ClientSession() as http:
            url = proxy.endpoint()
            headers = await open_session(http, url)
            async with http.post(url, json=body, headers=headers) as resp:
                ids, _ = await bounded(read_until(resp, 1), what="the server to drop the stream")
            resumed = {**headers, "Accept": "text/event-stream", "Last-Event-ID": ids[-1]}
            async with http.get(url, headers=resumed) as resp:
                async for event in events(resp):
                    if event.carries_message and "elicitation/create" in event.data:
                        break  # hangs up on the question, unanswered
            async with http.delete(url, headers=headers) as resp:
                assert resp.status == 200, await resp.text()
            await proxy.no_exchange_open()
            chain = the_chain(await proxy.chains(), "tools/call", "ask_name")
        spans = receiver.spans()

    assert (chain["status"], chain["error"]) == ("error", "client_disconnected"), chain
    call = named(spans, "tools/call ask_name", "server")
    asked = named(spans, "elicitation/create", "client")
    assert (call.status_code, call.attributes["error.type"]) == (ERROR, "client_disconnected"), call
    assert (asked.trace_id, asked.parent_id) == (call.trace_id, call.span_id)
    assert (asked.status_code, asked.attributes["error.type"]) == (ERROR, "client_disconnected"), asked
    assert asked.status_message == "the client never answered"


async def test_a_bridged_call_whose_upstream_dies_mid_stream_is_named_upstream_cut_in_its_line_and_span(
    peer_factory: Callable[..., PeerServer],
) -> None:
    server = peer_factory("legacy-inflight")
    call = {"name": "slow_progress", "arguments": {"steps": 400}, "_meta": {"progressToken": 3}}
    params = modern_params(call)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    got: list[dict[str, Any]] = []
    with OtlpReceiver() as receiver:
        env = {**traced(receiver), "MCP_PROXY_UPSTREAM_ERA": "legacy"}
        async with own_proxy(server.url, env=env) as proxy, aiohttp.ClientSession() as http:
            headers = modern_headers("tools/call", params)
            async with http.post(proxy.endpoint(), json=body, headers=headers) as resp:
                async for event in events(resp):
                    if event.carries_message:
                        got.append(json.loads(event.data))
                        if len(got) == 1:  # the first progress: the server dies mid-call
                            assert server.pid is not None
                            os.kill(server.pid, signal.SIGKILL)
            await proxy.settled()
            chain = the_chain(await proxy.chains(), "tools/call", "slow_progress")
            (line,) = [e for e in proxy.lines() if e.get("event") == "exchange"]
        spans = receiver.spans()

    assert got[-1]["error"]["code"] == -32000, got[-1]
    assert chain["status"] == "error", chain
    assert line["outcome"] == "upstream_cut", line
    served = named(spans, "tools/call slow_progress", "server")
    assert (served.status_code, served.attributes["error.type"]) == (ERROR, "upstream_cut"), served
    assert served.attributes["rpc.response.status_code"] == "-32000"


async def test_an_upstreams_http_500_is_the_error_type_of_the_relayed_and_the_bridged_requests_span() -> None:
    params = modern_params({"name": "add", "arguments": {"a": 2, "b": 3}})
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
    with serving(FailingApp) as upstream, OtlpReceiver() as receiver:
        env = {**traced(receiver), "MCP_PROXY_UPSTREAM_ERA": "legacy"}
        async with own_proxy(upstream, env=env) as proxy, aiohttp.ClientSession() as http:
            async with http.post(proxy.endpoint(), json=initialize(), headers=HEADERS) as resp:
                assert resp.status == 500  # relayed as it came
            headers = modern_headers("tools/call", params)
            async with http.post(proxy.endpoint(), json=call, headers=headers) as resp:
                assert resp.status == 502  # the bridge could not open its session
            await proxy.no_exchange_open()
            chains = await proxy.chains()
        spans = receiver.spans()

    relayed = the_chain(chains, "initialize")
    assert (relayed["status"], relayed["error"]) == ("error", "HTTP 500"), relayed
    assert the_chain(chains, "tools/call", "add")["status"] == "error"
    for span in (named(spans, "initialize", "server"), named(spans, "initialize", "client")):
        assert (span.status_code, span.attributes["error.type"]) == (ERROR, "500"), span
        assert span.status_message == "HTTP 500"


async def cancel_once_in_flight(
    proxy: Commanded, http: aiohttp.ClientSession, headers: dict[str, str]
) -> None:
    """Cancel request 1 once the proxy shows its call in flight."""
    async with asyncio.timeout(10):
        while True:
            if [c for c in await proxy.chains() if c.get("method") == "tools/call"]:
                break
            await asyncio.sleep(0.02)
    await notify(http, proxy.endpoint(), headers, "notifications/cancelled", {"requestId": 1})


async def test_a_cancelled_call_the_proxy_then_times_out_ends_cancelled_and_not_failed() -> None:
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "slow", "arguments": {"ms": 4000}},
    }
    with NodeServer("ts-v1-json") as server, OtlpReceiver() as receiver:
        env = {**traced(receiver), "MCP_PROXY_UPSTREAM_TIMEOUT": "1"}
        async with own_proxy(server.url, env=env) as proxy, aiohttp.ClientSession() as http:
            headers = await open_session(http, proxy.endpoint())
            async with asyncio.TaskGroup() as tasks:
                tasks.create_task(cancel_once_in_flight(proxy, http, headers))
                async with http.post(proxy.endpoint(), json=call, headers=headers) as resp:
                    assert resp.status == 504, await resp.text()  # the proxy's timeout
            await proxy.settled()
            chain = the_chain(await proxy.chains(), "tools/call", "slow")
            (line,) = [
                e for e in proxy.lines() if e.get("event") == "exchange" and e.get("method") == "tools/call"
            ]
        spans = receiver.spans()

    assert chain["status"] == "cancelled", chain
    assert (line["end"], line["trouble"]) == ("cancelled", None), line
    span = named(spans, "tools/call slow", "server")
    assert span.attributes["mcp_proxy.outcome"] == "cancelled", span
    assert span.status_code != ERROR, span
    assert "error.type" not in span.attributes, span


async def test_a_notification_to_an_unreachable_upstream_is_named_upstream_unreachable_in_its_span() -> None:
    upstream = f"http://127.0.0.1:{dead_port()}/mcp"
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    with OtlpReceiver() as receiver:
        env = {**traced(receiver), "MCP_PROXY_UPSTREAM_ERA": "legacy"}
        async with own_proxy(upstream, env=env) as proxy, aiohttp.ClientSession() as http:
            async with http.post(proxy.endpoint(), json=note, headers=session_headers("s-1")) as resp:
                assert resp.status == 502, await resp.text()
            await proxy.settled()
            chain = the_chain(await proxy.chains(), "notifications/initialized")
            (line,) = [e for e in proxy.lines() if e.get("event") == "exchange"]
        spans = receiver.spans()

    assert chain["status"] == "error", chain
    assert line["trouble"] == "upstream_unreachable", line
    span = named(spans, "notifications/initialized", "server")
    assert (span.status_code, span.attributes["error.type"]) == (ERROR, "upstream_unreachable"), span
    assert "unreachable" in span.status_message
