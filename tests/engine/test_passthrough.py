"""Pass-through decisions: each function's exact answer for one exchange's request, head or fault."""

from __future__ import annotations

import orjson
import pytest

from proxy.engine.faults import fault_outcome
from proxy.engine.passthrough import (
    BODY_COMPLETE,
    BODY_CUT,
    CLIENT_LEFT,
    ERA_BODY_LIMIT,
    ClientHead,
    FaultAnswer,
    UpstreamRequest,
    body_end,
    client_head,
    era_suspicion,
    fault_answer,
    leg_suspicion,
    proxied_location,
    sends_whole,
    upstream_request,
)
from proxy.framing.classify import Route, classify
from proxy.framing.http import parse_upstream
from proxy.wire import errors
from proxy.wire.versions import Era

UPSTREAM = parse_upstream("http://upstream.internal:8000/mcp")
UNREACHABLE_HINT = " (check that the MCP server is running and that --upstream names it)"
TIMEOUT_HINT = " (a server this slow needs a larger --upstream-timeout)"
BODY = orjson.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "echo"}})


def route(
    body: bytes = BODY, *headers: tuple[str, str], http_method: str = "POST", path: str = "/mcp"
) -> Route:
    outcome = classify(http_method, path, headers, body, max_body=1 << 20)
    assert isinstance(outcome, Route)
    return outcome


def test_a_client_request_goes_upstream_with_rewritten_headers_and_the_body_unchanged() -> None:
    client = route(
        BODY,
        ("Host", "proxy:8080"),
        ("Connection", "keep-alive"),
        ("Content-Length", str(len(BODY))),
        ("Content-Type", "application/json"),
        ("Mcp-Session-Id", "s-1"),
    )

    assert upstream_request(client) == UpstreamRequest(
        "POST",
        "/mcp",
        "",
        (("Content-Type", "application/json"), ("Mcp-Session-Id", "s-1")),
        BODY,
    )


def test_bytes_that_are_not_json_rpc_go_upstream_unchanged() -> None:
    assert upstream_request(route(b"\x00not json")) == UpstreamRequest(
        "POST", "/mcp", "", (), b"\x00not json"
    )


def test_the_clients_path_and_raw_query_go_to_the_pool_which_derives_the_target() -> None:
    client = route(b"", http_method="GET", path="/")

    assert upstream_request(client, "trace=1") == UpstreamRequest("GET", "/", "trace=1", (), b"")


def test_a_json_head_is_relayed_with_its_content_length() -> None:
    head = (("Content-Type", "application/json"), ("Content-Length", "42"), ("Connection", "keep-alive"))

    assert client_head(200, head) == ClientHead(
        200, (("Content-Type", "application/json"), ("Content-Length", "42")), 42
    )


def test_an_sse_head_is_relayed_without_content_length() -> None:
    head = (
        ("Content-Type", "text/event-stream; charset=utf-8"),
        ("Content-Length", "999"),
        ("Mcp-Session-Id", "s-1"),
    )

    assert client_head(200, head) == ClientHead(
        200, (("Content-Type", "text/event-stream; charset=utf-8"), ("Mcp-Session-Id", "s-1")), None
    )
    assert client_head(200, head).sse
    assert client_head(200, head).content_type == "text/event-stream; charset=utf-8"
    assert not client_head(200, (("Content-Type", "application/json"),)).sse


def test_a_head_without_content_length_starts_a_streamed_response() -> None:
    assert client_head(202, ()) == ClientHead(202, (), None)
    assert client_head(200, [("Content-Type", "text/event-stream")]) == ClientHead(
        200, (("Content-Type", "text/event-stream"),), None
    )


def test_a_compressed_body_keeps_its_content_encoding_and_the_head_names_it_for_observers() -> None:
    head = (("Content-Type", "application/json"), ("Content-Encoding", "gzip"), ("Content-Length", "42"))

    made = client_head(200, head)
    assert made == ClientHead(200, head, 42)  # relayed unchanged: the client asked for gzip
    assert made.content_encoding == "gzip"
    assert client_head(200, head[:1]).content_encoding is None


def test_an_upstream_error_status_is_relayed_as_is() -> None:
    head = (("Content-Type", "application/json"), ("Content-Length", "10"))

    assert client_head(404, head) == ClientHead(404, head, 10)
    assert client_head(500, head) == ClientHead(500, head, 10)


def test_an_unreachable_upstream_before_the_head_is_answered_502_with_the_request_id() -> None:
    client = route()

    assert fault_answer("unreachable", "connection refused", client.request_id) == FaultAnswer(
        502,
        {
            "jsonrpc": "2.0",
            "id": 7,
            "error": {
                "code": errors.UPSTREAM_UNAVAILABLE,
                "message": "the upstream MCP server is unreachable: connection refused" + UNREACHABLE_HINT,
            },
        },
    )


def test_a_timeout_before_the_head_is_answered_504_with_the_request_id() -> None:
    client = route()

    assert fault_answer("timeout", "", client.request_id) == FaultAnswer(
        504,
        {
            "jsonrpc": "2.0",
            "id": 7,
            "error": {
                "code": errors.UPSTREAM_UNAVAILABLE,
                "message": "the upstream MCP server did not answer in time" + TIMEOUT_HINT,
            },
        },
    )


def test_a_timeout_names_its_detail_in_the_message() -> None:
    answer = fault_answer("timeout", "no response head within 30s", 7)

    assert answer is not None
    assert answer.body["error"]["message"] == (
        "the upstream MCP server did not answer in time: no response head within 30s" + TIMEOUT_HINT
    )


def test_a_notification_that_cannot_be_delivered_is_answered_with_a_null_id() -> None:
    client = route(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')

    assert client.request_id is None
    assert fault_answer("unreachable", "refused", client.request_id) == FaultAnswer(
        502,
        {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": errors.UPSTREAM_UNAVAILABLE,
                "message": "the upstream MCP server is unreachable: refused" + UNREACHABLE_HINT,
            },
        },
    )


def test_a_response_cut_after_the_head_has_no_proxy_answer() -> None:
    assert fault_answer("cut", "payload incomplete", 7) is None


def test_a_fault_is_recorded_as_an_upstream_outcome_named_by_its_reason() -> None:
    assert fault_outcome("unreachable") == "upstream_unreachable"
    assert fault_outcome("timeout") == "upstream_timeout"
    assert fault_outcome("cut") == "upstream_cut"


# -- redirects --------------------------------------------------------------------------------------

OWN = "http://127.0.0.1:9000"


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("http://upstream.internal:8000/mcp", f"{OWN}/mcp"),
        ("http://UPSTREAM.internal:8000/mcp?x=1#top", f"{OWN}/mcp?x=1#top"),
        ("//upstream.internal:8000/other", f"{OWN}/other"),
        ("http://upstream.internal:8000", OWN),
        ("/mcp", "/mcp"),
        ("other/path", "other/path"),
        ("http://elsewhere.example:8000/mcp", "http://elsewhere.example:8000/mcp"),
        ("http://upstream.internal:8001/mcp", "http://upstream.internal:8001/mcp"),
        ("https://upstream.internal:8000/mcp", "https://upstream.internal:8000/mcp"),
        ("http://upstream.internal:bad/mcp", "http://upstream.internal:bad/mcp"),
    ],
)
def test_a_location_naming_the_upstream_moves_onto_the_proxy(location: str, expected: str) -> None:
    assert proxied_location(location, UPSTREAM, OWN) == expected


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("http://upstream.internal:8000/mcp?api_key=k-123", f"{OWN}/mcp"),
        ("http://upstream.internal:8000/mcp?api_key=k-123&trace=on", f"{OWN}/mcp?trace=on"),
        ("http://upstream.internal:8000/mcp?api_key=k-1234", f"{OWN}/mcp?api_key=k-1234"),
        ("http://upstream.internal:8000/mcp?trace=on#f", f"{OWN}/mcp?trace=on#f"),
    ],
)
def test_a_rewritten_location_drops_the_upstream_urls_own_query(location: str, expected: str) -> None:
    keyed = parse_upstream("http://upstream.internal:8000/mcp?api_key=k-123")

    assert proxied_location(location, keyed, OWN) == expected


def test_the_scheme_default_port_counts_as_the_upstreams() -> None:
    https = parse_upstream("https://mcp.example.com/mcp")

    assert proxied_location("https://mcp.example.com:443/a", https, OWN) == f"{OWN}/a"
    assert proxied_location("https://mcp.example.com/a", https, OWN) == f"{OWN}/a"
    assert proxied_location("http://mcp.example.com/a", https, OWN) == "http://mcp.example.com/a"


def test_only_a_redirects_location_is_rewritten() -> None:
    headers = (("Location", "http://upstream.internal:8000/mcp"), ("Content-Length", "0"))

    assert client_head(307, headers, (UPSTREAM, OWN)).headers == (
        ("Location", f"{OWN}/mcp"),
        ("Content-Length", "0"),
    )
    assert client_head(201, headers, (UPSTREAM, OWN)).headers == headers


# -- whole or stream, cut or end, era suspicion -------------------------------------------------------


@pytest.mark.parametrize(
    ("length", "buffered", "complete", "whole"),
    [
        (12, 12, True, True),  # all here, as declared: head and body in one write
        (12, 5, False, False),  # still coming: streamed
        (12, 0, True, False),  # a HEAD answer or 204 declares a length it does not carry
        (None, 40, True, False),  # no declared length (SSE, chunked): streamed, even when all here
    ],
)
def test_a_body_goes_whole_only_when_all_of_it_arrived_as_declared(
    length: int | None, buffered: int, complete: bool, whole: bool
) -> None:
    assert sends_whole(length, buffered, complete) is whole


def test_a_body_that_ended_as_framed_ends_the_clients_response_cleanly() -> None:
    assert body_end(upstream_cut=False, client_gone=None) is BODY_COMPLETE
    assert (BODY_COMPLETE.finish_client, BODY_COMPLETE.cut_client, BODY_COMPLETE.outcome) == (
        True,
        False,
        None,
    )


def test_a_body_the_upstream_cut_cuts_the_clients_connection() -> None:
    end = body_end(upstream_cut=True, client_gone=None)
    assert end is BODY_CUT
    assert (end.finish_client, end.cut_client, end.outcome) == (False, True, fault_outcome("cut"))


def test_a_client_that_left_is_recorded_as_gone_whatever_the_upstream_did() -> None:
    for cut in (False, True):
        end = body_end(upstream_cut=cut, client_gone="client_disconnected")
        assert end is CLIENT_LEFT
        assert (end.finish_client, end.cut_client, end.outcome) == (False, False, "client_disconnected")


def test_a_connection_the_stopping_proxy_cut_is_recorded_as_its_cut_not_as_the_client_leaving() -> None:
    end = body_end(upstream_cut=False, client_gone="proxy_stopping")
    assert (end.finish_client, end.cut_client, end.outcome) == (False, False, "proxy_stopping")


@pytest.mark.parametrize("status", [400, 404, 405])
def test_a_refused_handshake_casts_doubt_on_the_upstreams_era(status: int) -> None:
    handshake = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
    assert era_suspicion(route(handshake), status) == f"HTTP {status} for initialize from a legacy client"


def test_a_refused_legacy_call_or_a_success_casts_no_doubt() -> None:
    call = route(BODY, ("Mcp-Protocol-Version", "2025-11-25"))
    assert era_suspicion(call, 404) is None
    handshake = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
    assert era_suspicion(route(handshake), 200) is None
    assert era_suspicion(route(handshake), 500) is None


MODERN = ("Mcp-Protocol-Version", "2026-07-28")
HANDSHAKE = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})


@pytest.mark.parametrize(
    ("data", "doubted"),
    [
        ({"supported": ["2026-07-28"], "requested": "2025-11-25"}, True),
        ({"supported": [], "requested": "2025-11-25"}, True),
        ({"supported": ["2025-11-25", "2026-07-28"]}, False),
        ({"requested": "2025-11-25"}, False),
        (None, False),
    ],
)
def test_a_legacy_call_refused_as_a_version_no_longer_served_casts_doubt(data: object, doubted: bool) -> None:
    # A modern-only server that replaced a legacy one answers an old session's call so.
    call = route(BODY, ("Mcp-Protocol-Version", "2025-11-25"))
    doubt = era_suspicion(call, 400, error_body(errors.UNSUPPORTED_PROTOCOL_VERSION, data))
    assert (doubt is not None) is doubted
    assert era_suspicion(call, 400, error_body(errors.INVALID_REQUEST, data)) is None


def test_a_bridges_own_requests_are_judged_by_the_same_rule_and_named_as_the_bridges() -> None:
    legacy_gone = error_body(errors.UNSUPPORTED_PROTOCOL_VERSION, {"supported": ["2026-07-28"]})
    assert (
        leg_suspicion("tools/call", Era.LEGACY, 400, legacy_gone, "mrtr_to_legacy")
        == "HTTP 400 (JSON-RPC -32022) for tools/call from the mrtr_to_legacy bridge"
    )
    assert leg_suspicion("initialize", Era.LEGACY, 400, None, "mrtr_to_legacy") == (
        "HTTP 400 for initialize from the mrtr_to_legacy bridge"
    )
    assert leg_suspicion("tools/call", Era.MODERN, 400, error_body(errors.INVALID_PARAMS), "x") is None
    assert leg_suspicion(
        "tools/call", Era.MODERN, 400, error_body(errors.INVALID_REQUEST), "legacy_to_mrtr"
    ) == ("HTTP 400 (JSON-RPC -32600) for tools/call from the legacy_to_mrtr bridge")
    assert leg_suspicion("initialize", Era.LEGACY, 200, None, "mrtr_to_legacy") is None


def modern_route(method: str = "tools/call") -> Route:
    body = orjson.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": {"name": "echo"}})
    return route(body, MODERN)


def error_body(code: object, data: object = None, **extra: object) -> bytes:
    error: dict[str, object] = {"code": code, "message": "refused"}
    if data is not None:
        error["data"] = data
    return orjson.dumps({"jsonrpc": "2.0", "id": 7, "error": error, **extra})


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, errors.INVALID_PARAMS),
        (400, errors.HEADER_MISMATCH),
        (400, errors.MISSING_REQUIRED_CLIENT_CAPABILITY),
        (400, errors.UNSUPPORTED_PROTOCOL_VERSION),
        (404, errors.METHOD_NOT_FOUND),
    ],
)
def test_a_modern_servers_refusal_of_a_modern_clients_mistake_casts_no_doubt(status: int, code: int) -> None:
    assert era_suspicion(modern_route(), status, error_body(code)) is None
    assert era_suspicion(modern_route("ping"), status, error_body(code)) is None


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (404, errors.INVALID_PARAMS),  # a modern server gives -32602 with 400 only
        (400, errors.METHOD_NOT_FOUND),  # and -32601 with 404 only
        (405, errors.METHOD_NOT_FOUND),
        (405, errors.INVALID_PARAMS),
        (400, errors.INVALID_REQUEST),  # what a legacy server's version check answers
        (404, -32001),  # a legacy server's unknown session
        (400, errors.INTERNAL_ERROR),
    ],
)
def test_a_refusal_no_modern_server_gives_a_modern_client_keeps_the_doubt(status: int, code: int) -> None:
    doubt = era_suspicion(modern_route(), status, error_body(code))
    assert doubt == f"HTTP {status} (JSON-RPC {code}) for tools/call from a modern client"


def test_server_discover_unknown_to_the_server_keeps_the_doubt_since_every_modern_server_has_it() -> None:
    doubt = era_suspicion(modern_route("server/discover"), 404, error_body(errors.METHOD_NOT_FOUND))
    assert doubt == "HTTP 404 (JSON-RPC -32601) for server/discover from a modern client"


@pytest.mark.parametrize(
    ("data", "doubted"),
    [
        ({"supported": ["2025-06-18", "2025-11-25"], "requested": "2026-07-28"}, True),
        ({"supported": [], "requested": "2026-07-28"}, True),
        ({"supported": ["2026-07-28"], "requested": "2027-01-01"}, False),
        ({"supported": ["2025-11-25", "2026-07-28"]}, False),
        ({"requested": "2026-07-28"}, False),
        ("no details", False),
        (None, False),
    ],
)
def test_an_unsupported_version_error_keeps_the_doubt_only_when_it_names_no_modern_version(
    data: object, doubted: bool
) -> None:
    doubt = era_suspicion(modern_route(), 400, error_body(errors.UNSUPPORTED_PROTOCOL_VERSION, data))
    assert (doubt is not None) is doubted


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (404, errors.METHOD_NOT_FOUND),
        (400, errors.UNSUPPORTED_PROTOCOL_VERSION),
        (400, errors.INVALID_PARAMS),
    ],
)
def test_a_handshake_refused_with_any_body_still_casts_doubt(status: int, code: int) -> None:
    # A modern-only server refusing `initialize` is the era change the rule looks for.
    data = {"supported": ["2026-07-28"], "requested": "2025-11-25"}
    doubt = era_suspicion(route(HANDSHAKE), status, error_body(code, data))
    assert doubt == f"HTTP {status} (JSON-RPC {code}) for initialize from a legacy client"


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"   ",
        b"Not Found",
        b"<!DOCTYPE html><html><body><h1>404 Not Found</h1></body></html>",
        b'event: message\ndata: {"jsonrpc":"2.0","id":7,"error":{"code":-32602,"message":"x"}}\n\n',
        error_body(errors.INVALID_PARAMS)[:-1],  # cut short
        b"[" + error_body(errors.INVALID_PARAMS) + b"]",  # a batch
        orjson.dumps({"id": 7, "error": {"code": errors.INVALID_PARAMS, "message": "no jsonrpc"}}),
        orjson.dumps({"jsonrpc": "1.0", "id": 7, "error": {"code": errors.INVALID_PARAMS}}),
        orjson.dumps({"jsonrpc": "2.0", "id": 7, "result": {}}),
        orjson.dumps({"jsonrpc": "2.0", "id": 7, "error": "bad params"}),
        orjson.dumps({"jsonrpc": "2.0", "id": 7, "error": {"message": "no code"}}),
        error_body(str(errors.INVALID_PARAMS)),
        error_body(float(errors.INVALID_PARAMS)),
        error_body(True),
        b'"a string"',
        b"\xff\xfe not utf-8",
    ],
)
def test_a_body_that_is_not_a_json_rpc_error_keeps_the_status_only_doubt(body: bytes) -> None:
    assert era_suspicion(modern_route(), 400, body) == "HTTP 400 for tools/call from a modern client"
    assert era_suspicion(modern_route(), 404, body) == "HTTP 404 for tools/call from a modern client"


def test_a_streamed_answer_is_judged_by_its_status_alone() -> None:
    assert era_suspicion(modern_route(), 400, None) == "HTTP 400 for tools/call from a modern client"
    assert era_suspicion(modern_route(), 405) == "HTTP 405 for tools/call from a modern client"


def test_only_a_small_body_is_read_for_its_error() -> None:
    def padded(size: int) -> bytes:
        bare = error_body(errors.INVALID_PARAMS, data="")
        body = error_body(errors.INVALID_PARAMS, data="x" * (size - len(bare)))
        assert len(body) == size
        return body

    assert era_suspicion(modern_route(), 400, padded(ERA_BODY_LIMIT)) is None
    doubt = "HTTP 400 for tools/call from a modern client"
    assert era_suspicion(modern_route(), 400, padded(ERA_BODY_LIMIT + 1)) == doubt
    assert era_suspicion(modern_route(), 400, padded(8 * 1024 * 1024)) == doubt


def test_a_legacy_call_or_a_success_casts_no_doubt_whatever_its_body() -> None:
    legacy = route(BODY, ("Mcp-Protocol-Version", "2025-11-25"))
    assert era_suspicion(legacy, 400, b"<html>Bad Request</html>") is None
    assert era_suspicion(modern_route(), 200, error_body(errors.INVALID_REQUEST)) is None
    assert era_suspicion(route(HANDSHAKE), 200, b"") is None
