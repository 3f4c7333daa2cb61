"""Route or reject: turn one client HTTP request (head + bounded body) into what the engines reason about.

Parsing never raises; problems become a `Rejection` (with its HTTP status from `status.py`) only where
no engine could do anything sensible with the request. Bytes that are not JSON-RPC are still routed,
because pass-through forwards them unchanged and lets the chain mark them invalid.

Some shapes are refused in every mode, since no engine and no server can use them and each costs
the proxy or its neighbours something: a body over `max_body_bytes` (413); a batch of more than
`max_batch_messages` (counted on the raw bytes, before any parsing, so a huge batch costs one scan);
JSON nested deeper than `max_json_depth`; a method that is not a plausible name (visible ASCII, at
most `max_method_length` characters), which would otherwise reach the 2026-07-28 `Mcp-Method` header
of a bridged request. Each refusal is -32600 with HTTP 400 (413 for size), names the setting and
carries the JSON-RPC id when one can be read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import orjson

from proxy.framing.http import header
from proxy.framing.status import too_large
from proxy.wire import errors
from proxy.wire.headers import DEFAULT_MAX_METHOD_LENGTH, PROTOCOL_VERSION, SESSION_ID, method_problem
from proxy.wire.jsonrpc import Body, Kind, RequestId, error_response, parse_body
from proxy.wire.mcp import era_of_request
from proxy.wire.values import value
from proxy.wire.versions import Era

# Enum members read through their class cost about ten times a module constant's on Python 3.11
# (the enum metaclass's attribute hook): the traffic path reads these.
_LEGACY = Era.LEGACY
_REQUEST = Kind.REQUEST
_UNKNOWN = Era.UNKNOWN


@value
class Route:
    """A request the proxy will handle: its parsed body and the facts engine selection needs."""

    http_method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    raw: bytes
    body: Body
    era: Era
    session_id: str | None
    protocol_version: str | None

    @property
    def method(self) -> str | None:
        """The JSON-RPC method of the first message, if any."""
        first = self.body.first
        return first.method if first is not None else None

    @property
    def request_id(self) -> RequestId | None:
        """The id of the first message when it is a request (error replies carry it)."""
        first = self.body.first
        return first.id if first is not None and first.kind is _REQUEST else None


@value
class Rejection:
    """A request the proxy answers itself: HTTP status and a JSON-RPC error body."""

    status: int
    body: dict[str, Any]
    reason: str
    retry_after: int | None = None
    """Seconds the client is told to wait before it tries again (`Retry-After`), for a refusal that
    passes: the proxy is busy, not the request wrong."""


DEFAULT_MAX_BATCH: Final = 256
"""Most messages in one batch by default (the `max_batch_messages` setting)."""
DEFAULT_MAX_DEPTH: Final = 64
"""Deepest JSON nesting accepted by default (the `max_json_depth` setting)."""
ENCODER_DEPTH: Final = 254
"""The deepest nesting the proxy's JSON encoder (orjson) writes."""
DEPTH_CEILING: Final = 250
"""Highest `max_json_depth` allowed: a few levels below `ENCODER_DEPTH`, for records that wrap a message."""


@dataclass(frozen=True, slots=True)
class Limits:
    """The shape limits classification enforces, from the settings of the same names."""

    max_batch_messages: int = DEFAULT_MAX_BATCH
    max_json_depth: int = DEFAULT_MAX_DEPTH
    max_method_length: int = DEFAULT_MAX_METHOD_LENGTH


def classify(
    http_method: str,
    path: str,
    headers: Iterable[tuple[str, str]],
    raw: bytes,
    *,
    max_body: int,
    limits: Limits = Limits(),
    parsed: Body | None = None,
) -> Route | Rejection:
    """Parse one client request; reject only what no engine or server can use (see the module doc).

    `parsed`: the body of one message (no batch) already decoded by whoever read it, not decoded again.
    """
    items = tuple(headers)
    if len(raw) > max_body:
        status, body = too_large(max_body, peek_id(raw))
        return Rejection(status, body, "body too large")
    if http_method == "POST":
        if parsed is None or parsed.batch:
            refused = _too_long(raw, limits.max_batch_messages)
            if refused is not None:
                return refused
            parsed = parse_body(raw, limits.max_batch_messages)
        refused = (
            _batch_too_long(parsed, raw, limits.max_batch_messages)
            or _too_deep(raw, parsed, limits.max_json_depth)
            or _implausible_method(parsed, limits.max_method_length)
        )
        if refused is not None:
            return refused
    else:
        parsed = Body(())
    version = header(items, PROTOCOL_VERSION)
    first = parsed.first
    era = era_of_request(first.method if first else None, first.params if first else {}, version)
    if era is _UNKNOWN and http_method == "POST" and header(items, SESSION_ID):
        era = _LEGACY
    # Positional, in the fields' order: a class called with keywords costs a dict of them on 3.11.
    return Route(http_method, path, items, raw, parsed, era, header(items, SESSION_ID), version)


def _invalid(ident: RequestId | None, text: str, data: dict[str, Any], reason: str) -> Rejection:
    body = error_response(ident, errors.INVALID_REQUEST, f"Invalid Request: {text}", data)
    return Rejection(400, body, reason)


def _too_long(raw: bytes, limit: int) -> Rejection | None:
    """A batch of more than `limit` messages, told from the raw bytes before parsing.

    Each `"jsonrpc"` member starts a message, so the search stops at the one past the limit: a huge
    batch costs a scan of its first `limit` messages, not of all of it. The count over-counts only
    when a message carries the exact string value "jsonrpc".
    """
    if raw[:1] != b"[" and raw[:64].lstrip()[:1] != b"[":
        return None
    found = 0
    for _ in range(limit + 1):
        found = raw.find(b'"jsonrpc"', found)
        if found < 0:
            return None
        found += 9
    return _batch_refusal(peek_id(raw), limit)


def _batch_too_long(body: Body, raw: bytes, limit: int) -> Rejection | None:
    """A batch the raw scan could not count (its members spelled or shaped otherwise), told once decoded."""
    if body.batch_length <= limit:
        return None
    return _batch_refusal(body.first.id if body.first is not None else peek_id(raw), limit)


def _batch_refusal(ident: RequestId | None, limit: int) -> Rejection:
    text = f"a batch of more than {limit} messages exceeds the proxy's limit (max_batch_messages)"
    return _invalid(ident, text, {"limit": limit, "setting": "max_batch_messages"}, "batch too large")


def _too_deep(raw: bytes, body: Body, limit: int) -> Rejection | None:
    """JSON nested more than `limit` levels, measured only when the body holds more brackets than that."""
    if body.parse_error is not None:
        deep = "depth" in body.parse_error  # orjson stops decoding at 1024 levels
    elif len(raw) > limit and raw.count(b"[") + raw.count(b"{") > limit:
        deep = any(deeper_than(msg.raw, limit) for msg in body.messages)
    else:
        return None
    if not deep:
        return None
    ident = body.first.id if body.first is not None else peek_id(raw)
    text = f"the JSON is nested deeper than the proxy's limit of {limit} levels (max_json_depth)"
    return _invalid(ident, text, {"limit": limit, "setting": "max_json_depth"}, "JSON too deep")


def beyond_encoding(raw: bytes | bytearray | str, values: Iterable[Any]) -> bool:
    """True when a decoded value nests deeper than the proxy can encode again (`DEPTH_CEILING`).

    For what the upstream sends a bridge, which re-encodes it: only text holding more brackets
    than the ceiling is measured.
    """
    brackets = raw.count("[") + raw.count("{") if isinstance(raw, str) else raw.count(b"[") + raw.count(b"{")
    return brackets > DEPTH_CEILING and any(deeper_than(value, DEPTH_CEILING) for value in values)


def deeper_than(value: Any, limit: int) -> bool:
    """True when `value` nests containers more than `limit` (at most `ENCODER_DEPTH`) levels deep.

    Measured by the encoder itself, at C speed: `value` inside `ENCODER_DEPTH - limit` more lists
    is too deep for orjson exactly when `value` is deeper than `limit`. A walk in Python costs
    several times the decode on a body of many small containers; this costs a fraction of it.
    """
    for _ in range(ENCODER_DEPTH - limit):
        value = [value]
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError:
        return True
    return False


IMPLAUSIBLE_METHOD: Final = "implausible method"
"""The reason of a refusal for a method that is no plausible name (not visible ASCII, too long)."""


def _implausible_method(body: Body, max_length: int) -> Rejection | None:
    """The first message whose method is no plausible name, refused with its id and the field named."""
    for msg in body.messages:
        if msg.method is None:
            continue
        problem = method_problem(msg.method, max_length)
        if problem is not None:
            data = {"field": "method", "limit": max_length, "setting": "max_method_length"}
            return _invalid(msg.id, problem, data, IMPLAUSIBLE_METHOD)
    return None


_PEEKED_ID = re.compile(rb'"id"\s*:\s*("(?:[^"\\\x00-\x1f]|\\.)*"|-?(?:0|[1-9][0-9]*)(?![0-9.eE]))')
"""`"id":` and a JSON string or integer after it (a fraction or exponent is no id the proxy echoes)."""


def peek_id(raw: bytes) -> RequestId | None:
    """Best-effort request id from a body too large to parse fully (looks at its head only).

    The value is decoded as JSON, so escapes in a string id come back as the client wrote them.
    """
    found = _PEEKED_ID.search(raw, 0, 4096)
    if found is None:
        return None
    try:
        value = orjson.loads(found.group(1))
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, str | int) else None
