"""The JSON-RPC classifier on generated and mutated bodies: it routes or rejects, and never raises.

`parse_body` and `classify` see every byte a client sends before anything else does, so any exception
there is a 500 (or worse) for input the client chose. Besides never raising, what they report must
agree with the body: a request has a valid id and a string method, a notification has no id, a
response has exactly one of `result` and `error`; a body over the limit is refused 413 with the id a
client can match when it is readable; a method that is no plausible method name is refused -32600
with the id in every mode, since it ends up in headers and logs.
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import example, given
from hypothesis import strategies as st

from proxy.framing.classify import Rejection, Route, classify
from proxy.wire.jsonrpc import Kind, Message, classify_value, parse_body, parse_text
from tests.fuzz.profile import examples
from tests.fuzz.strategies import bodies, envelopes, json_values

DEEP = [256, 512, 1000, 1024, 5000]


def deep(depth: int) -> bytes:
    nest = b"[" * depth + b"]" * depth
    return (
        b'{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"t","arguments":{"a":'
        + nest
        + b"}}}"
    )


def check_message(msg: Message) -> None:
    """What a message's kind promises about its members."""
    raw = msg.raw
    if msg.kind is Kind.REQUEST:
        assert isinstance(msg.method, str)
        assert isinstance(msg.id, int | str)
        assert not isinstance(msg.id, bool)
        assert raw["id"] == msg.id
    elif msg.kind is Kind.NOTIFICATION:
        assert isinstance(msg.method, str)
        assert "id" not in raw
    elif msg.kind in (Kind.RESULT, Kind.ERROR):
        assert ("result" in raw) != ("error" in raw)
        assert isinstance(msg.error, dict)
    else:
        assert msg.problem
    assert isinstance(msg.params, dict)
    msg.result  # noqa: B018 (the accessors must not raise either)


@examples(500)
@given(data=bodies() | st.binary(max_size=64))
@example(data=b"")
@example(data=b"[]")
@example(data=b"\xef\xbb\xbf{}")
@example(data=b'{"jsonrpc":"2.0","id":1,"method":"a"}\x00')
@example(data=b"1e999")
@example(data=b'"\\ud800"')
@example(data=b"[" * 100_000)
@example(data=deep(256))
@example(data=deep(1024))
def test_parse_body_never_raises_and_each_message_keeps_its_kinds_promises(data: bytes) -> None:
    body = parse_body(data)

    assert body.messages or body.parse_error
    for msg in body.messages:
        check_message(msg)


@examples(300)
@given(value=envelopes() | json_values)
def test_classify_value_agrees_with_json_rpc_for_any_value(value: Any) -> None:
    msg = classify_value(value)

    check_message(msg)
    assert msg.raw is value
    assert parse_text(orjson.dumps(value).decode()).kind is msg.kind


HTTP_METHODS = st.sampled_from(["POST", "GET", "DELETE", "PUT", "OPTIONS", "HEAD"])
HEADERS = st.lists(
    st.tuples(
        st.sampled_from(["MCP-Protocol-Version", "Mcp-Session-Id", "Content-Type", "Accept", "X-Any"]),
        st.sampled_from(["2026-07-28", "2025-11-25", "2025-03-26", "", "s-1", "application/json"])
        | st.text(max_size=8),
    ),
    max_size=4,
)


@examples(500)
@given(
    http_method=HTTP_METHODS, headers=HEADERS, data=bodies(), max_body=st.integers(1, 256) | st.just(1 << 20)
)
@example(http_method="POST", headers=[], data=b'{"id": 1\xb2' + b"x" * 300, max_body=100)
@example(http_method="POST", headers=[], data=b'{"id": 7' + b"\xb9" * 10 + b"x" * 300, max_body=100)
@example(http_method="POST", headers=[], data=b'{"id": ' + b"9" * 4000 + b"x" * 300, max_body=100)
@example(http_method="POST", headers=[("Mcp-Session-Id", "s")], data=deep(1024), max_body=1 << 20)
def test_classify_routes_or_rejects_any_request_and_never_raises(
    http_method: str, headers: list[tuple[str, str]], data: bytes, max_body: int
) -> None:
    outcome = classify(http_method, "/mcp", headers, data, max_body=max_body)

    if isinstance(outcome, Rejection):
        assert 400 <= outcome.status < 600
        assert outcome.body["jsonrpc"] == "2.0"
        assert isinstance(outcome.body["error"]["code"], int)
        assert outcome.body["error"]["message"]
        if len(data) > max_body:
            assert outcome.status == 413
        return
    assert isinstance(outcome, Route)
    assert len(data) <= max_body
    assert outcome.raw == data
    for msg in outcome.body.messages:
        check_message(msg)


@examples(200)
@given(
    ident=st.integers(-(2**63), 2**63 - 1) | st.text(max_size=40),
    pad=st.integers(1, 2000),
)
@example(ident='a"b', pad=10)
@example(ident="\\", pad=10)
@example(ident="é€😀", pad=10)
@example(ident=-0, pad=10)
def test_a_request_over_the_limit_is_refused_413_with_its_id_when_the_id_comes_first(
    ident: int | str, pad: int
) -> None:
    data = orjson.dumps({"id": ident, "jsonrpc": "2.0", "method": "tools/call", "params": {"p": "x" * pad}})

    outcome = classify("POST", "/mcp", [], data, max_body=len(data) - 1)

    assert isinstance(outcome, Rejection)
    assert outcome.status == 413
    assert outcome.body["id"] == ident


IMPLAUSIBLE = st.sampled_from(
    [
        "tools/call\r\nX-Injected: 1",
        "tools/call\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
        "tools/call\n",
        "tools/\x00call",
        "tools/call ",
        "tools call",
        "tools/\u0131call",  # outside Latin-1
        "tools/é",
        "\x7f",
        "",
        "m" * 65536,
    ]
) | st.text(min_size=1, max_size=12).map(lambda s: "tools/" + s).filter(
    lambda s: not s.isascii() or not s.isprintable() or " " in s
)


@examples(150)
@given(
    method=IMPLAUSIBLE,
    ident=st.integers(0, 2**31) | st.text(min_size=1, max_size=8),
    version=st.sampled_from(["2026-07-28", "2025-11-25", None]),
)
def test_a_method_that_is_no_plausible_method_name_is_refused_with_32600_and_the_id(
    method: str, ident: int | str, version: str | None
) -> None:
    headers = [("MCP-Protocol-Version", version)] if version else []
    data = orjson.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": {}})

    outcome = classify("POST", "/mcp", headers, data, max_body=1 << 20)

    assert isinstance(outcome, Rejection), f"{method[:80]!r} was routed"
    assert outcome.status == 400
    assert outcome.body["id"] == ident
    assert outcome.body["error"]["code"] == -32600
    assert "method" in outcome.body["error"]["message"]
