"""The pass-through engine, Playbook style: each event in, the exact list of commands out.

`Playbook(engine) >> event << command << command >> event ...` reads like a sequence diagram; asserting
it feeds the events in order and compares each step's commands with the expected list, exactly.
"""

from __future__ import annotations

import orjson

from proxy.engine.commands import (
    CloseUpstream,
    EndClientResponse,
    Log,
    RelayBody,
    RespondToClient,
    SendUpstream,
    StartClientResponse,
)
from proxy.engine.events import (
    ClientDisconnected,
    ClientRequestReceived,
    TimerFired,
    UpstreamEnded,
    UpstreamFailed,
    UpstreamMessageReceived,
    UpstreamResponded,
)
from proxy.engine.passthrough import PassthroughEngine
from proxy.framing.classify import Route, classify
from proxy.framing.http import parse_upstream
from proxy.wire.jsonrpc import parse_text
from tests.engine.playbook import Playbook

UPSTREAM = parse_upstream("http://upstream.internal:8000/mcp")
BODY = orjson.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "echo"}})


def route(
    body: bytes = BODY, *headers: tuple[str, str], http_method: str = "POST", path: str = "/mcp"
) -> Route:
    outcome = classify(http_method, path, headers, body, max_body=1 << 20)
    assert isinstance(outcome, Route)
    return outcome


def request(exchange: str = "x1", body: bytes = BODY, *headers: tuple[str, str]) -> ClientRequestReceived:
    return ClientRequestReceived(exchange, route(body, *headers))


def fault_log(exchange: str, reason: str, detail: str) -> Log:
    return Log("upstream_fault", "warning", {"exchange": exchange, "reason": reason, "detail": detail})


def test_a_client_request_goes_upstream_with_rewritten_headers_and_the_body_unchanged() -> None:
    engine = PassthroughEngine(UPSTREAM)
    event = request(
        "x1",
        BODY,
        ("Host", "proxy:8080"),
        ("Connection", "keep-alive"),
        ("Content-Length", str(len(BODY))),
        ("Content-Type", "application/json"),
        ("Mcp-Session-Id", "s-1"),
    )

    assert (
        Playbook(engine)
        >> event
        << SendUpstream(
            "x1",
            "POST",
            "/mcp",
            (
                ("Content-Type", "application/json"),
                ("Mcp-Session-Id", "s-1"),
                ("Host", "upstream.internal:8000"),
            ),
            BODY,
        )
    )


def test_bytes_that_are_not_json_rpc_go_upstream_unchanged() -> None:
    engine = PassthroughEngine(UPSTREAM)

    assert (
        Playbook(engine)
        >> request("x1", b"\x00not json")
        << SendUpstream("x1", "POST", "/mcp", (("Host", "upstream.internal:8000"),), b"\x00not json")
    )


def test_a_root_path_is_sent_to_the_upstream_endpoint() -> None:
    engine = PassthroughEngine(UPSTREAM)
    event = ClientRequestReceived("x1", route(b"", http_method="GET", path="/"))

    assert (
        Playbook(engine)
        >> event
        << SendUpstream("x1", "GET", "/mcp", (("Host", "upstream.internal:8000"),), b"")
    )


def test_a_json_head_is_relayed_with_its_content_length() -> None:
    engine = PassthroughEngine(UPSTREAM)
    head = (("Content-Type", "application/json"), ("Content-Length", "42"), ("Connection", "keep-alive"))

    assert (
        Playbook(engine)
        >> request("x1")
        << SendUpstream("x1", "POST", "/mcp", (("Host", "upstream.internal:8000"),), BODY)
        >> UpstreamResponded("x1", 200, head)
        << StartClientResponse(
            "x1", 200, (("Content-Type", "application/json"), ("Content-Length", "42")), 42
        )
        << RelayBody("x1")
        >> UpstreamMessageReceived("x1", parse_text('{"jsonrpc":"2.0","id":7,"result":{}}'))
        >> UpstreamEnded("x1")
        << EndClientResponse("x1")
    )
    assert engine.in_flight == 0


def test_an_sse_head_is_relayed_without_content_length() -> None:
    engine = PassthroughEngine(UPSTREAM)
    head = (
        ("Content-Type", "text/event-stream; charset=utf-8"),
        ("Content-Length", "999"),
        ("Mcp-Session-Id", "s-1"),
    )

    assert (
        Playbook(engine)
        >> UpstreamResponded("x1", 200, head)
        << StartClientResponse(
            "x1", 200, (("Content-Type", "text/event-stream; charset=utf-8"), ("Mcp-Session-Id", "s-1")), None
        )
        << RelayBody("x1")
    )


def test_a_head_without_content_length_starts_a_streamed_response() -> None:
    engine = PassthroughEngine(UPSTREAM)

    assert (
        Playbook(engine)
        >> UpstreamResponded("x1", 202, ())
        << StartClientResponse("x1", 202, (), None)
        << RelayBody("x1")
    )


def test_an_upstream_error_status_is_relayed_as_is() -> None:
    engine = PassthroughEngine(UPSTREAM)
    head = (("Content-Type", "application/json"), ("Content-Length", "10"))

    assert (
        Playbook(engine)
        >> request("x1")
        << SendUpstream("x1", "POST", "/mcp", (("Host", "upstream.internal:8000"),), BODY)
        >> UpstreamResponded("x1", 404, head)
        << StartClientResponse("x1", 404, head, 10)
        << RelayBody("x1")
    )


def test_an_unreachable_upstream_before_the_head_is_answered_502_with_the_request_id() -> None:
    engine = PassthroughEngine(UPSTREAM)

    assert (
        Playbook(engine)
        >> request("x1")
        << SendUpstream("x1", "POST", "/mcp", (("Host", "upstream.internal:8000"),), BODY)
        >> UpstreamFailed("x1", "unreachable", "connection refused")
        << fault_log("x1", "unreachable", "connection refused")
        << CloseUpstream("x1")
        << RespondToClient(
            "x1",
            502,
            {
                "jsonrpc": "2.0",
                "id": 7,
                "error": {"code": -32000, "message": "upstream MCP server unreachable: connection refused"},
            },
        )
        << EndClientResponse("x1", "upstream_unreachable")
    )
    assert engine.in_flight == 0


def test_a_timeout_before_the_head_is_answered_504_with_the_request_id() -> None:
    engine = PassthroughEngine(UPSTREAM)

    assert (
        Playbook(engine)
        >> request("x1")
        << SendUpstream("x1", "POST", "/mcp", (("Host", "upstream.internal:8000"),), BODY)
        >> UpstreamFailed("x1", "timeout")
        << fault_log("x1", "timeout", "")
        << CloseUpstream("x1")
        << RespondToClient(
            "x1",
            504,
            {
                "jsonrpc": "2.0",
                "id": 7,
                "error": {"code": -32000, "message": "upstream MCP server did not answer in time"},
            },
        )
        << EndClientResponse("x1", "upstream_timeout")
    )


def test_a_notification_that_cannot_be_delivered_is_answered_with_a_null_id() -> None:
    engine = PassthroughEngine(UPSTREAM)
    body = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'

    assert (
        Playbook(engine)
        >> request("x1", body)
        << SendUpstream("x1", "POST", "/mcp", (("Host", "upstream.internal:8000"),), body)
        >> UpstreamFailed("x1", "unreachable", "refused")
        << fault_log("x1", "unreachable", "refused")
        << CloseUpstream("x1")
        << RespondToClient(
            "x1",
            502,
            {
                "jsonrpc": "2.0",
                "id": None,
                "error": {"code": -32000, "message": "upstream MCP server unreachable: refused"},
            },
        )
        << EndClientResponse("x1", "upstream_unreachable")
    )


def test_a_response_cut_after_the_head_ends_the_client_response_without_a_proxy_answer() -> None:
    engine = PassthroughEngine(UPSTREAM)

    assert (
        Playbook(engine)
        >> request("x1")
        << SendUpstream("x1", "POST", "/mcp", (("Host", "upstream.internal:8000"),), BODY)
        >> UpstreamResponded("x1", 200, (("Content-Type", "text/event-stream"),))
        << StartClientResponse("x1", 200, (("Content-Type", "text/event-stream"),), None)
        << RelayBody("x1")
        >> UpstreamFailed("x1", "cut", "payload incomplete")
        << fault_log("x1", "cut", "payload incomplete")
        << CloseUpstream("x1")
        << EndClientResponse("x1", "upstream_cut")
    )
    assert engine.in_flight == 0


def test_a_timeout_after_the_head_cannot_become_a_504() -> None:
    engine = PassthroughEngine(UPSTREAM)

    assert (
        Playbook(engine)
        >> request("x1")
        << SendUpstream("x1", "POST", "/mcp", (("Host", "upstream.internal:8000"),), BODY)
        >> UpstreamResponded("x1", 200, ())
        << StartClientResponse("x1", 200, (), None)
        << RelayBody("x1")
        >> UpstreamFailed("x1", "timeout", "idle")
        << fault_log("x1", "timeout", "idle")
        << CloseUpstream("x1")
        << EndClientResponse("x1", "upstream_timeout")
    )


def test_a_client_that_disconnects_aborts_the_upstream_request() -> None:
    engine = PassthroughEngine(UPSTREAM)

    assert (
        Playbook(engine)
        >> request("x1")
        << SendUpstream("x1", "POST", "/mcp", (("Host", "upstream.internal:8000"),), BODY)
        >> UpstreamResponded("x1", 200, (("Content-Type", "text/event-stream"),))
        << StartClientResponse("x1", 200, (("Content-Type", "text/event-stream"),), None)
        << RelayBody("x1")
        >> ClientDisconnected("x1")
        << CloseUpstream("x1")
        << EndClientResponse("x1", "client_disconnected")
    )
    assert engine.in_flight == 0


def test_messages_and_timers_need_no_action_in_pass_through() -> None:
    engine = PassthroughEngine(UPSTREAM)

    assert (
        Playbook(engine)
        >> UpstreamMessageReceived("x1", parse_text('{"jsonrpc":"2.0","method":"notifications/progress"}'))
        >> TimerFired("t1")
    )


def test_in_flight_counts_open_exchanges_and_drains_as_each_ends() -> None:
    engine = PassthroughEngine(UPSTREAM)
    engine.handle(request("x1"))
    engine.handle(request("x2"))
    engine.handle(request("x3"))
    assert engine.in_flight == 3

    engine.handle(UpstreamResponded("x1", 200, ()))
    engine.handle(UpstreamEnded("x1"))
    engine.handle(UpstreamFailed("x2", "unreachable"))
    assert engine.in_flight == 1

    engine.handle(ClientDisconnected("x3"))
    assert engine.in_flight == 0


def test_repr_shows_the_upstream_and_the_open_exchanges() -> None:
    engine = PassthroughEngine(UPSTREAM)
    engine.handle(request("x2"))
    engine.handle(request("x1"))

    assert (
        repr(engine) == "PassthroughEngine(upstream='http://upstream.internal:8000/mcp', open=['x1', 'x2'])"
    )

    engine.handle(UpstreamEnded("x1"))
    assert repr(engine) == "PassthroughEngine(upstream='http://upstream.internal:8000/mcp', open=['x2'])"
