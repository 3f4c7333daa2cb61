"""Route or reject: one client HTTP request becomes a Route (with era and session) or a Rejection."""

from __future__ import annotations

import orjson
import pytest

from proxy.framing.classify import Rejection, Route, classify
from proxy.framing.status import http_status_for
from proxy.wire import errors
from proxy.wire.jsonrpc import Kind
from proxy.wire.mcp import META_PROTOCOL_VERSION
from proxy.wire.versions import Era

LIMIT = 1024


def post(body: object | bytes, *headers: tuple[str, str], max_body: int = LIMIT) -> Route | Rejection:
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return classify("POST", "/mcp", [("Content-Type", "application/json"), *headers], raw, max_body=max_body)


def routed(outcome: Route | Rejection) -> Route:
    assert isinstance(outcome, Route), outcome
    return outcome


def test_a_body_over_the_limit_is_rejected_413_naming_the_limit_and_the_request_id() -> None:
    raw = b'{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"blob":"' + b"x" * 2000 + b'"}}'

    outcome = post(raw)

    assert isinstance(outcome, Rejection)
    assert outcome.status == 413
    assert outcome.reason == "body too large"
    assert outcome.body["id"] == 42
    assert outcome.body["error"]["data"] == {"limit": LIMIT}
    assert str(LIMIT) in outcome.body["error"]["message"]
    assert "max_body_bytes" in outcome.body["error"]["message"]


def test_a_string_id_is_peeked_from_an_oversized_body() -> None:
    raw = b'{"id" : "req-7", "jsonrpc":"2.0","method":"x","params":{"p":"' + b"y" * 2000 + b'"}}'

    outcome = post(raw)

    assert isinstance(outcome, Rejection)
    assert outcome.body["id"] == "req-7"


def test_an_oversized_body_without_a_readable_id_is_rejected_with_a_null_id() -> None:
    outcome = post(b"[" + b"1," * 2000 + b"1]")

    assert isinstance(outcome, Rejection)
    assert outcome.status == 413
    assert outcome.body["id"] is None


def test_a_body_exactly_at_the_limit_is_routed() -> None:
    raw = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'

    route = routed(post(raw, max_body=len(raw)))

    assert route.request_id == 1


def test_a_modern_request_is_routed_modern_with_its_method_and_id() -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/call",
        "params": {"name": "t", "_meta": {META_PROTOCOL_VERSION: "2026-07-28"}},
    }

    route = routed(post(body, ("MCP-Protocol-Version", "2026-07-28")))

    assert (route.era, route.method, route.request_id) == (Era.MODERN, "tools/call", 5)
    assert route.protocol_version == "2026-07-28"
    assert route.session_id is None
    assert route.raw == orjson.dumps(body)


def test_initialize_is_routed_legacy() -> None:
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}

    assert routed(post(body)).era is Era.LEGACY


def test_a_legacy_version_header_routes_legacy_and_the_session_id_is_read_case_insensitively() -> None:
    body = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}

    route = routed(post(body, ("mcp-protocol-version", "2025-06-18"), ("MCP-SESSION-ID", "s-123")))

    assert (route.era, route.session_id, route.protocol_version) == (Era.LEGACY, "s-123", "2025-06-18")


def test_a_session_id_alone_marks_a_post_legacy() -> None:
    route = routed(post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, ("Mcp-Session-Id", "s")))

    assert route.era is Era.LEGACY


def test_a_post_with_nothing_to_go_on_is_of_unknown_era() -> None:
    route = routed(post({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}))

    assert route.era is Era.UNKNOWN
    assert route.session_id is None


def test_a_notification_has_no_request_id() -> None:
    route = routed(post({"jsonrpc": "2.0", "method": "notifications/initialized"}))

    assert route.method == "notifications/initialized"
    assert route.request_id is None


def test_bytes_that_are_not_json_are_still_routed_for_pass_through() -> None:
    route = routed(post(b"this is not json"))

    assert route.body.parse_error is not None
    assert route.body.messages == ()
    assert (route.method, route.request_id) == (None, None)


def test_a_batch_is_routed_with_its_first_message_as_the_head() -> None:
    route = routed(post([{"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"jsonrpc": "2.0", "method": "n"}]))

    assert route.body.batch is True
    assert [m.kind for m in route.body.messages] == [Kind.REQUEST, Kind.NOTIFICATION]
    assert route.request_id == 1


@pytest.mark.parametrize("http_method", ["GET", "DELETE"])
def test_a_non_post_is_routed_without_parsing_a_body(http_method: str) -> None:
    outcome = classify(
        http_method,
        "/mcp",
        [("Accept", "text/event-stream"), ("Mcp-Session-Id", "s-9"), ("MCP-Protocol-Version", "2025-11-25")],
        b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
        max_body=LIMIT,
    )

    route = routed(outcome)
    assert route.http_method == http_method
    assert route.body.messages == ()
    assert route.body.parse_error is None
    assert route.session_id == "s-9"
    assert route.era is Era.LEGACY
    assert route.request_id is None


def test_a_get_with_only_a_session_id_is_of_unknown_era() -> None:
    route = routed(classify("GET", "/mcp", [("Mcp-Session-Id", "s")], b"", max_body=LIMIT))

    assert route.era is Era.UNKNOWN


def test_headers_are_kept_in_order_and_spelling() -> None:
    headers = [("X-B", "2"), ("x-a", "1"), ("X-B", "3")]

    route = routed(classify("POST", "/mcp", headers, b"{}", max_body=LIMIT))

    assert route.headers == (("X-B", "2"), ("x-a", "1"), ("X-B", "3"))


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (errors.PARSE_ERROR, 400),
        (errors.INVALID_PARAMS, 400),
        (errors.HEADER_MISMATCH, 400),
        (errors.METHOD_NOT_FOUND, 404),
        (errors.INTERNAL_ERROR, 500),
        (-32099, 500),
    ],
)
def test_each_error_code_has_one_http_status(code: int, status: int) -> None:
    assert http_status_for(code) == status
