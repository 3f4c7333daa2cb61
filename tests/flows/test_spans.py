"""The span follower: observations in, finished spans out (no SDK, no sockets).

The observations are those the relay makes for a pass-through exchange and a modern client's MRTR
retry; the bridges' legs are covered end to end with real peers (tests/e2e/test_otel.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from proxy.flows.endpoint import Endpoint
from proxy.flows.events import Channel, Direction, Mode, Side
from proxy.flows.observations import (
    ExchangeClosed,
    ExchangeOpened,
    InvalidBody,
    LegClosed,
    LegMessageSeen,
    MessageSeen,
    Observation,
    ResponseHeadSeen,
)
from proxy.flows.redact import Redactor
from proxy.flows.span_records import SpanKind, SpanRecord, parse_traceparent
from proxy.flows.spans import SpanFollower
from proxy.wire.jsonrpc import classify_value

CLIENT_TRACE = 0x4BF92F3577B34DA6A3CE929D0E0E4736
CLIENT_SPAN = 0x00F067AA0BA902B7
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
SESSION = "3f2a9c1e5b7d4e6f8a0b1c2d3e4f5a6b"


class Play:
    """One follower with deterministic ids, fed observations; `spans` is what it emitted."""

    def __init__(self) -> None:
        self.spans: list[SpanRecord] = []
        self.redactor = Redactor(key=b"k" * 32)
        counter = iter(range(1, 1_000_000))
        self.follower = SpanFollower(self.spans.append, self.redactor, ids=lambda _bits: next(counter))
        self.t = 100.0

    def feed(self, *observations: Observation) -> None:
        self.follower.observe_all(observations)

    def tick(self, seconds: float = 0.25) -> float:
        self.t += seconds
        return self.t

    def exchange(
        self, ex: str, request: dict[str, Any], answer: dict[str, Any] | None, *, session: str | None = None
    ) -> None:
        """A POST carrying `request`, answered with `answer` as JSON (None: closed unanswered)."""
        self.feed(
            ExchangeOpened(self.tick(), ex, "POST", "/mcp", {"Mcp-Protocol-Version": "2025-11-25"}, session),
            MessageSeen(self.t, ex, classify_value(request), 100, Direction.TO_SERVER, Channel.POST),
        )
        if answer is not None:
            self.feed(
                ResponseHeadSeen(self.tick(), ex, 200, "application/json", {}),
                MessageSeen(self.t, ex, classify_value(answer), 80, Direction.TO_CLIENT, Channel.JSON),
            )
        self.feed(ExchangeClosed(self.tick(0.0), ex, None if answer is not None else "upstream_failed"))


def call(ident: int, name: str = "echo", meta: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": {"text": "hi"}, **extra}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params}


def result(ident: int, **fields: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "result": {"content": [], **fields}}


def test_w3c_traceparent_is_parsed_and_malformed_ones_are_refused() -> None:
    assert parse_traceparent(TRACEPARENT) == (CLIENT_TRACE, CLIENT_SPAN, True)
    assert parse_traceparent(TRACEPARENT[:-2] + "00") == (CLIENT_TRACE, CLIENT_SPAN, False)
    for bad in (
        None,
        42,
        "",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff is invalid
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # all-zero trace id
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # all-zero span id
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # upper case
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  # version 00 has no more
    ):
        assert parse_traceparent(bad) is None, bad


def test_a_client_request_with_traceparent_is_a_server_span_continuing_the_clients_trace() -> None:
    play = Play()
    play.exchange("x1", call(7, meta={"traceparent": TRACEPARENT, "tracestate": "rojo=1"}), result(7))

    (span,) = play.spans
    assert span.kind is SpanKind.SERVER
    assert span.name == "tools/call echo"
    assert (span.trace_id, span.parent_id, span.remote_parent) == (CLIENT_TRACE, CLIENT_SPAN, True)
    assert span.trace_state == "rojo=1"
    assert (span.start, span.end) == (100.25, 100.5)
    assert not span.failed
    assert span.all_attributes() == {
        "network.protocol.name": "http",
        "network.protocol.version": "1.1",
        "network.transport": "tcp",
        "mcp.method.name": "tools/call",
        "jsonrpc.request.id": "7",
        "gen_ai.tool.name": "echo",
        "gen_ai.operation.name": "execute_tool",
        "mcp_proxy.mode": Mode.PASSTHROUGH.value,
        "mcp.protocol.version": "2025-11-25",
        "mcp_proxy.client_era": "unknown",
    }


def test_a_request_without_trace_context_starts_a_trace_of_its_own() -> None:
    play = Play()
    play.exchange("x1", call(1), result(1))
    play.exchange("x2", call(2), result(2))

    first, second = play.spans
    assert first.parent_id is None
    assert second.parent_id is None
    assert first.trace_id != second.trace_id


def test_a_client_context_that_is_not_sampled_gets_no_span() -> None:
    play = Play()
    play.exchange("x1", call(1, meta={"traceparent": TRACEPARENT[:-2] + "00"}), result(1))

    assert play.spans == []


@pytest.mark.parametrize(
    ("answer", "error_type", "message"),
    [
        ({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "bad name"}}, "-32602", "bad name"),
        (result(1, isError=True), "tool_error", None),
    ],
)
def test_an_error_answer_fails_the_span_with_the_conventions_error_type(
    answer: dict[str, Any], error_type: str, message: str | None
) -> None:
    play = Play()
    play.exchange("x1", call(1), answer)

    (span,) = play.spans
    assert span.failed
    assert span.attributes["error.type"] == error_type
    assert span.error == message


def test_an_error_echoing_the_clients_token_has_it_masked_in_the_span() -> None:
    """Only the follower sees the exchange (no capture, nobody watching): it learns the token itself."""
    play = Play()
    token = "tok-" + "9" * 24
    echo = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32001, "message": f"invalid credentials: {token}"}}
    play.feed(
        ExchangeOpened(play.tick(), "x1", "POST", "/mcp", {"Authorization": f"Bearer {token}"}, None),
        MessageSeen(play.t, "x1", classify_value(call(1)), 100, Direction.TO_SERVER, Channel.POST),
        ResponseHeadSeen(play.tick(), "x1", 200, "application/json", {}),
        MessageSeen(play.t, "x1", classify_value(echo), 80, Direction.TO_CLIENT, Channel.JSON),
        ExchangeClosed(play.tick(), "x1", None),
    )

    (span,) = play.spans
    assert span.error == f"invalid credentials: {play.redactor.token(token)}"


def test_a_request_left_unanswered_ends_with_the_exchanges_outcome() -> None:
    play = Play()
    play.exchange("x1", call(1), None)

    (span,) = play.spans
    assert span.failed
    assert span.attributes["error.type"] == "upstream_failed"


def test_the_session_id_appears_only_as_the_redactors_keyed_stand_in() -> None:
    play = Play()
    play.exchange("x1", call(1), result(1), session=SESSION)

    (span,) = play.spans
    assert span.all_attributes()["mcp.session.id"] == play.redactor.token(SESSION)
    assert SESSION not in repr(span)


def test_an_mrtr_retry_is_a_round_span_in_the_first_requests_trace() -> None:
    play = Play()
    asked = result(1, resultType="input_required", inputRequests={"n": {"method": "elicitation/create"}})
    asked["result"]["requestState"] = "sealed-state"
    play.exchange("x1", call(1, meta={"traceparent": TRACEPARENT}), asked)
    retry = call(2, inputResponses={"n": {"action": "accept"}}, requestState="sealed-state")
    play.exchange("x2", retry, result(2))

    first, second = play.spans
    assert first.attributes["mcp_proxy.result_type"] == "input_required"
    assert not first.failed
    assert second.trace_id == first.trace_id == CLIENT_TRACE
    assert (second.parent_id, second.remote_parent) == (first.span_id, False)
    assert second.attributes["mcp_proxy.round"] == 2


def test_a_notification_joins_the_trace_of_the_request_it_cancels() -> None:
    play = Play()
    play.feed(
        ExchangeOpened(play.tick(), "x1", "POST", "/mcp", {}, SESSION),
        MessageSeen(play.t, "x1", classify_value(call(5)), 90, Direction.TO_SERVER, Channel.POST),
    )
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 5}}
    play.feed(
        ExchangeOpened(play.tick(), "x2", "POST", "/mcp", {}, SESSION),
        MessageSeen(play.t, "x2", classify_value(cancel), 70, Direction.TO_SERVER, Channel.POST, Side.BOTH),
        ResponseHeadSeen(play.t, "x2", 202, None, {}),
        ExchangeClosed(play.tick(), "x2"),
        ExchangeClosed(play.tick(), "x1", "client_disconnected"),
    )

    cancelled, request = play.spans
    assert cancelled.name == "notifications/cancelled"
    assert cancelled.trace_id == request.trace_id
    assert cancelled.parent_id == request.span_id
    assert not request.failed  # cancelled, as its chain says: no error
    assert "error.type" not in request.attributes
    assert request.attributes["mcp_proxy.outcome"] == "cancelled"
    assert play.follower.open_spans == 0


@pytest.mark.parametrize(("era", "cancelled"), [("modern", True), ("legacy", False)])
def test_a_2026_client_closing_its_stream_before_the_answer_cancels_and_a_legacy_ones_fails(
    era: str, cancelled: bool
) -> None:
    play = Play()
    play.feed(
        ExchangeOpened(play.tick(), "x1", "POST", "/mcp", {}, None, era, era),
        MessageSeen(play.t, "x1", classify_value(call(5)), 90, Direction.TO_SERVER, Channel.POST),
        ResponseHeadSeen(play.t, "x1", 200, "text/event-stream", {}),
        ExchangeClosed(play.tick(), "x1", "client_disconnected"),
    )

    (request,) = play.spans
    assert request.failed is not cancelled
    if cancelled:
        assert request.attributes["mcp_proxy.outcome"] == "cancelled"
        assert "error.type" not in request.attributes
    else:
        assert request.attributes["error.type"] == "client_disconnected"


def test_a_known_secret_in_a_tool_name_is_masked_in_the_span_name_and_its_tool_attribute() -> None:
    play = Play()
    play.redactor.remember("sk-LEAK-bearer-abc123def456")  # learned from the client's Authorization
    play.exchange("x1", call(1, name="echo-sk-LEAK-bearer-abc123def456"), result(1))

    (span,) = play.spans
    assert "LEAK" not in f"{span.name} {span.all_attributes()}"
    assert span.name.startswith("tools/call echo-<redacted len=27 ")
    assert str(span.all_attributes()["gen_ai.tool.name"]).startswith("echo-<redacted len=27 ")


def test_a_get_stream_message_no_call_took_is_not_hung_under_the_call_it_came_during() -> None:
    """A session's GET stream serves one call after another: a question on it that no call took (the
    bridge refused it) is not that call's, and one the bridge gave the call (`joins`) is."""
    play = Play()
    get_sse, post, down, up = Channel.GET_SSE, Channel.POST, Direction.TO_CLIENT, Direction.TO_SERVER
    ping = {"jsonrpc": "2.0", "id": 7, "method": "ping"}
    pong = {"jsonrpc": "2.0", "id": 7, "result": {}}
    roots = {"jsonrpc": "2.0", "id": 8, "method": "roots/list"}
    no_roots = {"jsonrpc": "2.0", "id": 8, "result": {"roots": []}}
    play.feed(
        ExchangeOpened(play.tick(), "x1", "POST", "/mcp", {}, None, "modern", "legacy", Mode.MRTR_TO_LEGACY),
        MessageSeen(play.t, "x1", classify_value(call(1)), 90, up, Channel.POST),
        LegMessageSeen(play.tick(), "leg-1", "x1", classify_value(call(1)), 90, up, Channel.POST),
        LegMessageSeen(play.tick(), "leg-2", "x1", classify_value(ping), 40, down, get_sse),
        LegMessageSeen(play.tick(), "leg-2", "x1", classify_value(pong), 40, up, Channel.POST),
        LegMessageSeen(play.tick(), "leg-2", "x1", classify_value(roots), 40, down, get_sse, joins="leg-1"),
        LegMessageSeen(play.tick(), "leg-2", "x1", classify_value(no_roots), 40, up, post, joins="leg-1"),
        LegMessageSeen(play.tick(), "leg-1", "x1", classify_value(result(1)), 80, down, Channel.SSE),
        LegClosed(play.t, "leg-1"),
        MessageSeen(play.t, "x1", classify_value(result(1)), 80, down, Channel.SSE),
        ExchangeClosed(play.tick(), "x1"),
    )

    names = sorted(span.name for span in play.spans)
    assert "ping" not in names  # refused on the stream, during the call: not the call's
    assert "roots/list" in names
    (root,) = (span for span in play.spans if span.parent_id is None)
    assert all(span.trace_id == root.trace_id for span in play.spans)


def test_a_plain_http_request_beside_the_endpoint_is_no_mcp_operation_and_gets_no_span() -> None:
    """OAuth's `/token` (a form) and `/register` (JSON that is not JSON-RPC) pass the proxy's mirrored
    paths: they are no MCP operations, so no `(invalid)` error span; the endpoint's own requests are."""
    play = Play()
    play.follower.endpoint = Endpoint("/mcp")
    register = {"client_name": "app", "redirect_uris": ["http://127.0.0.1:1/cb"]}
    play.feed(
        ExchangeOpened(play.tick(), "x1", "POST", "/token", {}, None),
        InvalidBody(play.t, "x1", "not JSON: unexpected character", 40, b"grant_type=refresh_token"),
        ResponseHeadSeen(play.tick(), "x1", 200, "application/json", {}),
        ExchangeClosed(play.tick(), "x1"),
        ExchangeOpened(play.tick(), "x2", "POST", "/register", {}, None),
        MessageSeen(play.t, "x2", classify_value(register), 70, Direction.TO_SERVER, Channel.POST),
        ResponseHeadSeen(play.tick(), "x2", 201, "application/json", {}),
        ExchangeClosed(play.tick(), "x2"),
    )
    play.exchange("x3", call(1), result(1))

    assert [span.name for span in play.spans] == ["tools/call echo"]
    assert play.follower.open_spans == 0
