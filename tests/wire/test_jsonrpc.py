"""JSON-RPC envelopes as the proxy sees them: classification, batches, invalid values, relay safety."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.wire.jsonrpc import Kind, classify_value, member_sizes, parse_body, parse_text
from proxy.wire.mcp import result_type, target_name


def test_a_request_is_classified_with_its_id_and_method() -> None:
    msg = classify_value({"jsonrpc": "2.0", "id": 7, "method": "tools/list"})

    assert (msg.kind, msg.id, msg.method, msg.problem) == (Kind.REQUEST, 7, "tools/list", None)
    assert not msg.is_response


def test_a_string_id_is_kept_as_a_string() -> None:
    msg = classify_value({"jsonrpc": "2.0", "id": "abc", "method": "ping"})

    assert (msg.kind, msg.id) == (Kind.REQUEST, "abc")


def test_a_message_with_a_method_and_no_id_is_a_notification() -> None:
    msg = classify_value({"jsonrpc": "2.0", "method": "notifications/initialized"})

    assert (msg.kind, msg.id, msg.method) == (Kind.NOTIFICATION, None, "notifications/initialized")


def test_a_result_is_a_response_carrying_its_result() -> None:
    msg = classify_value({"jsonrpc": "2.0", "id": 3, "result": {"tools": []}})

    assert (msg.kind, msg.id) == (Kind.RESULT, 3)
    assert msg.is_response
    assert msg.result == {"tools": []}
    assert msg.error == {}


def test_an_error_is_a_response_carrying_its_error_object() -> None:
    msg = classify_value({"jsonrpc": "2.0", "id": 3, "error": {"code": -32601, "message": "nope"}})

    assert (msg.kind, msg.id) == (Kind.ERROR, 3)
    assert msg.is_response
    assert msg.error == {"code": -32601, "message": "nope"}
    assert msg.result is None


def test_an_error_answering_an_unreadable_request_may_have_a_null_id() -> None:
    msg = classify_value({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse"}})

    assert (msg.kind, msg.id) == (Kind.ERROR, None)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ([1, 2], "not a JSON object"),
        ("hello", "not a JSON object"),
        (42, "not a JSON object"),
        ({"id": 1, "method": "ping"}, 'missing or wrong "jsonrpc" member'),
        ({"jsonrpc": "1.0", "id": 1, "method": "ping"}, 'missing or wrong "jsonrpc" member'),
        ({"jsonrpc": 2.0, "id": 1, "method": "ping"}, 'missing or wrong "jsonrpc" member'),
        ({"jsonrpc": "2.0", "id": True, "method": "ping"}, '"id" must be a string or integer'),
        ({"jsonrpc": "2.0", "id": None, "method": "ping"}, '"id" must be a string or integer'),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "ping"}, '"id" must be a string or integer'),
        ({"jsonrpc": "2.0", "id": 1, "method": 5}, '"method" is not a string'),
        ({"jsonrpc": "2.0", "id": 1, "result": {}, "error": {}}, "neither request nor response"),
        ({"jsonrpc": "2.0", "id": 1}, "neither request nor response"),
    ],
)
def test_values_that_are_not_json_rpc_are_invalid_with_the_reason(value: Any, problem: str) -> None:
    msg = classify_value(value)

    assert msg.kind is Kind.INVALID
    assert msg.problem == problem
    assert msg.raw is value


def test_a_boolean_id_on_a_response_is_not_taken_as_an_id() -> None:
    msg = classify_value({"jsonrpc": "2.0", "id": True, "result": {}})

    assert (msg.kind, msg.id) == (Kind.RESULT, None)


def test_unknown_fields_survive_in_raw_untouched() -> None:
    value = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "t", "x-vendor": {"deep": [1, 2]}},
        "x-top-level": "kept",
    }

    msg = parse_body(
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
        b'"params":{"name":"t","x-vendor":{"deep":[1,2]}},"x-top-level":"kept"}'
    ).first

    assert msg is not None
    assert msg.raw == value
    assert msg.params["x-vendor"] == {"deep": [1, 2]}


def test_params_that_are_not_an_object_read_as_empty() -> None:
    msg = classify_value({"jsonrpc": "2.0", "id": 1, "method": "m", "params": [1, 2]})

    assert msg.kind is Kind.REQUEST
    assert msg.params == {}


def test_a_single_object_body_is_one_message_and_not_a_batch() -> None:
    body = parse_body(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')

    assert body.batch is False
    assert body.parse_error is None
    assert [m.kind for m in body.messages] == [Kind.REQUEST]


def test_a_batch_body_is_classified_message_by_message() -> None:
    body = parse_body(
        b'[{"jsonrpc":"2.0","id":1,"method":"ping"},'
        b'{"jsonrpc":"2.0","method":"notifications/progress"},'
        b'{"jsonrpc":"2.0","id":9,"result":{}},'
        b"17]"
    )

    assert body.batch is True
    assert body.parse_error is None
    assert [m.kind for m in body.messages] == [Kind.REQUEST, Kind.NOTIFICATION, Kind.RESULT, Kind.INVALID]
    assert body.first is not None
    assert body.first.id == 1


def test_an_empty_batch_is_a_parse_error() -> None:
    body = parse_body(b"[]")

    assert (body.batch, body.messages, body.parse_error) == (True, (), "empty batch")


@pytest.mark.parametrize("data", [b"", b"   \r\n"])
def test_an_empty_body_is_a_parse_error(data: bytes) -> None:
    body = parse_body(data)

    assert body.messages == ()
    assert body.parse_error == "empty body"
    assert body.first is None


def test_bytes_that_are_not_json_are_a_parse_error_and_never_raise() -> None:
    body = parse_body(b'{"jsonrpc": "2.0", ')

    assert body.messages == ()
    assert body.parse_error is not None
    assert body.parse_error.startswith("not JSON")


def test_an_sse_payload_that_is_not_json_is_an_invalid_message_keeping_the_text() -> None:
    msg = parse_text("not json at all")

    assert msg.kind is Kind.INVALID
    assert msg.raw == "not json at all"
    assert msg.problem is not None
    assert msg.problem.startswith("not JSON")


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"])
def test_a_body_with_a_non_finite_number_is_read_as_a_python_peer_reads_it(number: str) -> None:
    """Python's `json` and pydantic-core (the SDK server) read these; orjson refuses them."""
    data = f'{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"echo","n":{number}}}}}'

    (msg,) = parse_body(data.encode()).messages
    batch = parse_body(f"[{data}]".encode())
    answer = parse_text(f'{{"jsonrpc":"2.0","id":3,"result":{{"score":{number}}}}}')

    assert (msg.kind, msg.id, msg.method, msg.params["name"]) == (Kind.REQUEST, 3, "tools/call", "echo")
    assert str(msg.params["n"]) in ("nan", "inf", "-inf")
    assert (batch.batch, batch.messages[0].method) == (True, "tools/call")
    assert (answer.kind, answer.id) == (Kind.RESULT, 3)


@pytest.mark.parametrize(
    "data",
    [
        b'{"jsonrpc":"2.0","id":1,"method":"ping","x":NaN} trailing',
        b'\xef\xbb\xbf{"jsonrpc":"2.0","id":1,"method":"ping","x":NaN}',
        b'{"jsonrpc":"2.0","id":1,"method":"ping","x":NaN,"s":"\\ud800"}',
        b'{"jsonrpc":"2.0","id":1,"method":"ping","x":NaN,}',
        b'{"jsonrpc":"2.0","id":1,"method":"ping","x":"\xff",NaN}',
        b'{"jsonrpc":"2.0","id":1,"method":"ping","s":"\\ud800"}',
        b"[" * 100_000 + b"NaN" + b"]" * 100_000,
    ],
)
def test_only_non_finite_numbers_are_forgiven_whatever_else_orjson_refuses_stays_refused(data: bytes) -> None:
    """A byte order mark, trailing bytes, a trailing comma, invalid UTF-8, a lone surrogate: the SDK's
    pydantic-core refuses those too."""
    body = parse_body(data)

    assert body.messages == ()
    assert (body.parse_error or "").startswith("not JSON")


def test_an_sse_payload_that_is_json_rpc_is_classified() -> None:
    msg = parse_text('{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}')

    assert (msg.kind, msg.method, msg.params) == (
        Kind.NOTIFICATION,
        "notifications/progress",
        {"progress": 1},
    )


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ({"content": []}, "complete"),
        ({"resultType": "complete"}, "complete"),
        ({"resultType": "input_required", "requestState": "s"}, "input_required"),
        ({"resultType": "task"}, "task"),
        ({"resultType": 3}, "invalid"),
        (None, "complete"),
        ([], "complete"),
    ],
)
def test_result_type_reads_a_missing_field_as_complete(result: Any, expected: str) -> None:
    assert result_type(result) == expected


@pytest.mark.parametrize(
    ("method", "params", "expected"),
    [
        ("tools/call", {"name": "weather", "arguments": {}}, "weather"),
        ("prompts/get", {"name": "greet"}, "greet"),
        ("resources/read", {"uri": "file:///a"}, "file:///a"),
        ("resources/subscribe", {"uri": "file:///b"}, "file:///b"),
        ("tasks/get", {"taskId": "t-1"}, "t-1"),
        ("tools/call", {"name": 5}, None),
        ("tools/call", {}, None),
        ("tools/list", {"name": "ignored"}, None),
        (None, {"name": "x"}, None),
    ],
)
def test_target_name_is_the_tool_prompt_uri_or_task_a_request_names(
    method: str | None, params: dict[str, Any], expected: str | None
) -> None:
    assert target_name(method, params) == expected


@pytest.mark.parametrize(
    "data",
    [
        b'{"jsonrpc":"2.0","id":1,"result":{}}',
        b'[{"jsonrpc":"2.0","id":1,"result":{}}]',
        b'[ {"jsonrpc": "2.0", "id": 1, "result": {"a": "\\u00e9"}},\n {"jsonrpc":"2.0","method":"x"} ]',
        b'[{"jsonrpc":"2.0","id":1,"method":"a"},{"jsonrpc":"2.0","id":2,"method":"bb"},3]',
    ],
)
def test_the_messages_of_a_body_share_its_bytes_exactly(data: bytes) -> None:
    body = parse_body(data)
    sizes = member_sizes(body.messages, len(data))
    assert len(sizes) == len(body.messages)
    assert sum(sizes) == len(data)
    assert all(size > 0 for size in sizes)
