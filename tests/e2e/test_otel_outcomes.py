"""How spans end when an exchange does not end as meant: real SDK servers, the `mcp-proxy` command, and
an OTLP/HTTP receiver decoding what the proxy exports.

A question the server asks (an `elicitation/create` on the client's stream) that the client never
answers still gets its span, ending when the stream does, with how it ended; the client here is raw
HTTP because hanging up mid-question is what is under test, and no SDK client does that on purpose.
An upstream nobody listens on is named by its outcome (`upstream_unreachable`) in the round-trip log
line and in the span, whichever mode served the client. A stdio upstream's legs say what they ran on:
a pipe, not HTTP on TCP.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from tests.e2e.channel_peers import python_stdio_command
from tests.e2e.legacy_raw import HEADERS, initialize, session_headers
from tests.e2e.modern_raw import modern_headers, modern_params
from tests.otlp_receiver import DecodedSpan, OtlpReceiver
from tests.peers.runner import PeerServer
from tests.peers.scenarios import client_for
from tests.sidecar import ProxyProcess, clean_env, settings_env
from tests.transport.helpers import dead_port

pytestmark = pytest.mark.e2e

ASK = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "ask_name", "arguments": {}}}


async def hang_up_on_the_question(endpoint: str) -> None:
    """A legacy client that declares elicitation, calls `ask_name`, reads its stream until the
    server's `elicitation/create` arrives, and closes the connection without answering."""
    opening = initialize()
    opening["params"]["capabilities"] = {"elicitation": {}}
    timeout = aiohttp.ClientTimeout(total=20)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        async with http.post(endpoint, json=opening, headers=HEADERS) as resp:
            assert resp.status == 200, await resp.text()
            session = resp.headers["Mcp-Session-Id"]
            await resp.read()
        headers = session_headers(session)
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        async with http.post(endpoint, json=initialized, headers=headers) as resp:
            assert resp.status == 202
        async with http.post(endpoint, json=ASK, headers=headers) as resp:
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            async for line in resp.content:
                if line.startswith(b"data:"):
                    asked = json.loads(line[5:])
                    assert asked["method"] == "elicitation/create"
                    break
            resp.close()  # hangs up: the question is never answered


def named(spans: list[DecodedSpan], name: str, kind: str) -> DecodedSpan:
    (found,) = [s for s in spans if s.name == name and s.kind == kind]
    return found


def closed_exchanges(events: list[dict[str, Any]], *methods: str) -> list[dict[str, Any]]:
    """The round-trip log lines of exchanges that carried one of `methods`."""
    return [e for e in events if e.get("event") == "exchange" and e.get("method") in methods]


@pytest.mark.parametrize(
    ("server", "mode", "nested"),
    [("legacy_server", "passthrough", "relayed"), ("modern_server", "legacy_to_mrtr", "asked")],
)
async def test_a_question_the_client_hangs_up_on_gets_a_span_ending_with_how_its_stream_ended(
    server: str, mode: str, nested: str, request: pytest.FixtureRequest
) -> None:
    upstream: PeerServer = request.getfixturevalue(server)
    with OtlpReceiver() as receiver:
        env = clean_env(**settings_env(upstream=upstream.url, otlp_endpoint=receiver.url))
        with ProxyProcess(env) as proxy:
            await hang_up_on_the_question(proxy.endpoint())
            events = proxy.wait_events(lambda e: bool(closed_exchanges(e, "tools/call")), 15)
            (line,) = closed_exchanges(events, "tools/call")
            assert (line["mode"], line["outcome"]) == (mode, "client_disconnected"), line
            proxy.stop()
        spans = receiver.spans()

    call = named(spans, "tools/call ask_name", "server")
    asked = named(spans, "elicitation/create", "client")
    assert (asked.trace_id, asked.parent_id) == (call.trace_id, call.span_id)
    assert asked.attributes["mcp_proxy.nested"] == nested
    assert asked.attributes["error.type"] == "client_disconnected"
    assert asked.status_message == "the client never answered"
    assert call.start_ns < asked.start_ns <= asked.end_ns <= call.end_ns


async def post(endpoint: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
    timeout = aiohttp.ClientTimeout(total=20)
    async with (
        aiohttp.ClientSession(timeout=timeout) as http,
        http.post(endpoint, json=body, headers=headers) as resp,
    ):
        return resp.status, await resp.json(content_type=None)


SENT = ("initialize", "tools/call")


async def test_an_unreachable_upstream_is_the_outcome_of_the_log_line_and_the_span_in_every_mode() -> None:
    """The same cause, one name: a legacy client's `initialize` relayed as it is, and a 2026-07-28
    client's call the bridge needs a legacy session for, both to an upstream nobody listens on."""
    upstream = f"http://127.0.0.1:{dead_port()}/mcp"
    params = modern_params({"name": "add", "arguments": {"a": 2, "b": 3}})
    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
    with OtlpReceiver() as receiver:
        env = clean_env(**settings_env(upstream=upstream, upstream_era="legacy", otlp_endpoint=receiver.url))
        with ProxyProcess(env) as proxy:
            relayed = await post(proxy.endpoint(), initialize(), HEADERS)
            bridged = await post(proxy.endpoint(), call, modern_headers("tools/call", params))
            events = proxy.wait_events(lambda e: len(closed_exchanges(e, *SENT)) == 2, 15)
            proxy.stop()
        spans = receiver.spans()

    assert [(status, body["error"]["code"]) for status, body in (relayed, bridged)] == [(502, -32000)] * 2
    assert [(e["mode"], e["outcome"], e["trouble"]) for e in closed_exchanges(events, *SENT)] == [
        ("passthrough", "upstream_unreachable", "upstream_unreachable"),
        ("mrtr_to_legacy", "upstream_unreachable", "upstream_unreachable"),
    ]
    for name in ("initialize", "tools/call add"):
        span = named(spans, name, "server")
        assert span.attributes["error.type"] == "upstream_unreachable", span
        assert span.attributes["rpc.response.status_code"] == "-32000"  # the code the client got
        assert "unreachable" in span.status_message


async def test_a_stdio_upstreams_legs_say_pipe_and_the_clients_side_stays_http() -> None:
    """A 2026-07-28 SDK client's call bridged to the Python SDK's stdio server (a child of the proxy):
    the upstream leg runs over the child's stdin and stdout, not HTTP on TCP."""
    with OtlpReceiver() as receiver:
        env = clean_env(
            **settings_env(
                upstream_cmd=python_stdio_command(), upstream_era="legacy", otlp_endpoint=receiver.url
            )
        )
        with ProxyProcess(env) as proxy:
            async with client_for(proxy.endpoint(), "2026-07-28") as client:
                assert not (await client.call_tool("add", {"a": 2, "b": 3})).is_error
            proxy.stop()
        spans = receiver.spans()

    served = named(spans, "tools/call add", "server")
    leg = named(spans, "tools/call add", "client")
    assert leg.parent_id == served.span_id
    network = {key: value for key, value in leg.attributes.items() if key.startswith("network.")}
    assert network == {"network.transport": "pipe"}
    assert "server.address" not in leg.attributes
    assert served.attributes["network.transport"] == "tcp"
    assert served.attributes["network.protocol.name"] == "http"
