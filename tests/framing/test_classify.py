"""Route or reject: one client HTTP request becomes a Route (with era and session) or a Rejection."""

from __future__ import annotations

import timeit

import orjson
import pytest

from proxy.framing.classify import Limits, Rejection, Route, classify
from proxy.wire import errors
from proxy.wire.jsonrpc import Kind, parse_body
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
    assert outcome.body["error"]["data"] == {"limit": LIMIT, "setting": "max_body_bytes"}
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


# --- shapes refused in every mode --------------------------------------------------------------------


def refusal(outcome: Route | Rejection) -> Rejection:
    assert isinstance(outcome, Rejection), outcome
    assert outcome.status == 400
    assert outcome.body["error"]["code"] == errors.INVALID_REQUEST
    return outcome


@pytest.mark.parametrize(
    "method",
    [
        "tools/call\r\nX-Injected: 1",
        "a\nb",
        "a\x00",
        "tools/\u2603",
        "tools/c\u00e4ll",
        "a b",
        "\t",
        "",
        "x" * 257,
    ],
)
def test_a_method_that_is_no_plausible_name_is_refused_with_its_id_and_the_field(method: str) -> None:
    outcome = refusal(post({"jsonrpc": "2.0", "id": "m1", "method": method}))
    assert outcome.body["id"] == "m1"
    assert outcome.body["error"]["data"]["field"] == "method"
    assert outcome.reason == "implausible method"


def test_the_method_length_bound_is_a_setting_and_its_name_is_in_the_refusal() -> None:
    limits = Limits(max_method_length=10)
    ok = classify(
        "POST", "/", [], b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}', max_body=LIMIT, limits=limits
    )
    assert isinstance(ok, Route)
    too_long = classify(
        "POST", "/", [], b'{"jsonrpc":"2.0","id":1,"method":"tools/call1"}', max_body=LIMIT, limits=limits
    )
    assert "max_method_length" in refusal(too_long).body["error"]["message"]


def test_a_plausible_but_unknown_method_is_routed() -> None:
    routed(post({"jsonrpc": "2.0", "id": 1, "method": "vendor.example/do-it_now~1"}))


def test_one_implausible_method_in_a_batch_refuses_the_batch_with_that_messages_id() -> None:
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"jsonrpc": "2.0", "id": 2, "method": "a\r\nb"}]
    assert refusal(post(batch)).body["id"] == 2


def test_a_batch_over_the_limit_is_refused_before_parsing_and_one_at_it_is_routed() -> None:
    limits = Limits(max_batch_messages=3)
    notice = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
    at_limit = b"[" + b",".join([notice] * 3) + b"]"
    over = b"[" + b",".join([notice] * 4) + b"]"
    assert isinstance(classify("POST", "/", [], at_limit, max_body=LIMIT, limits=limits), Route)
    outcome = refusal(classify("POST", "/", [], over, max_body=LIMIT, limits=limits))
    assert outcome.body["error"]["data"] == {"limit": 3, "setting": "max_batch_messages"}
    assert "max_batch_messages" in outcome.body["error"]["message"]


def test_a_huge_batch_is_refused_after_scanning_only_its_first_messages() -> None:
    notice = b'{"jsonrpc":"2.0","method":"n"}'
    huge = b"[" + b",".join([notice] * 300_000) + b"]"
    refusal(classify("POST", "/", [], huge, max_body=len(huge)))
    # Against one scan of the whole body (what counting every message would cost), best of five each.
    whole = min(timeit.repeat(lambda: huge.count(b'"jsonrpc"'), number=1, repeat=5))
    ours = min(timeit.repeat(lambda: classify("POST", "/", [], huge, max_body=len(huge)), number=1, repeat=5))
    assert ours < whole / 5


@pytest.mark.parametrize(
    "member",
    [b"{}", b"1", b'{"json\\u0072pc":"2.0","method":"n"}'],
    ids=["empty-objects", "numbers", "escaped-jsonrpc-key"],
)
def test_a_long_batch_the_raw_scan_cannot_count_is_refused_once_decoded(member: bytes) -> None:
    huge = b'[{"jsonrpc":"2.0","id":5,"method":"ping"},' + b",".join([member] * 100_000) + b"]"
    outcome = refusal(classify("POST", "/", [], huge, max_body=len(huge)))
    assert outcome.body["id"] == 5
    assert outcome.body["error"]["data"] == {"limit": 256, "setting": "max_batch_messages"}


def test_a_long_batch_has_only_the_messages_up_to_the_limit_decoded() -> None:
    body = parse_body(b"[" + b",".join([b"{}"] * 1000) + b"]", max_batch=10)
    assert body.batch_length == 1000
    assert len(body.messages) == 11


@pytest.mark.parametrize("depth", [65, 256, 1023, 1024, 1025, 100_000])
def test_json_deeper_than_the_limit_is_refused_with_the_id_when_it_can_be_read(depth: int) -> None:
    deep = b"[" * depth + b"]" * depth
    raw = b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"a":' + deep + b"}}"
    outcome = refusal(classify("POST", "/", [], raw, max_body=len(raw)))
    assert outcome.body["id"] == 9
    assert outcome.body["error"]["data"] == {"limit": 64, "setting": "max_json_depth"}


def test_json_as_deep_as_the_limit_is_routed_and_brackets_in_strings_do_not_count() -> None:
    at_limit = b"[" * 62 + b"]" * 62  # plus the message object and params: 64 levels
    routed(post(b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"a":' + at_limit + b"}}"))
    brackets = '"' + "[" * 500 + '"'
    routed(post(f'{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{{"a":{brackets}}}}}'.encode()))
