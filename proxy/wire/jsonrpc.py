"""JSON-RPC 2.0 envelopes as the proxy sees them: a light, relay-safe view over the parsed JSON.

The hot path parses each body once (orjson) and classifies it without building pydantic models; the
original dict is kept so that unknown fields always survive a relay. A body orjson refuses is read
again only for the non-finite numbers Python peers accept (`proxy.wire.python_json`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from enum import StrEnum
from typing import Any, Final

import orjson

from proxy.wire.python_json import loads_non_finite
from proxy.wire.values import value

JSONRPC_VERSION: Final = "2.0"

RequestId = int | str
"""A JSON-RPC id as MCP allows it (no null, no fractions)."""


class Kind(StrEnum):
    """What one JSON value on the wire turned out to be."""

    REQUEST = "request"
    NOTIFICATION = "notification"
    RESULT = "result"
    ERROR = "error"
    INVALID = "invalid"


# Members read through the enum class cost about ten times a module constant's on Python 3.11 (the
# enum metaclass's attribute hook): every message passes here.
_REQUEST = Kind.REQUEST
_NOTIFICATION = Kind.NOTIFICATION
_RESULT = Kind.RESULT
_ERROR = Kind.ERROR
_INVALID = Kind.INVALID
_RESPONSE_KINDS = (Kind.RESULT, Kind.ERROR)


@value
class Message:
    """One JSON-RPC message (or one invalid value), with the fields the proxy routes on.

    `raw` is the decoded JSON value exactly as received, so nothing the proxy does not understand is lost.
    """

    kind: Kind
    raw: Any
    id: RequestId | None = None
    method: str | None = None
    problem: str | None = None
    params: dict[str, Any] = field(init=False, repr=False, compare=False)
    """The request/notification params, or an empty dict when absent or not an object (read once
    here: the classifier, the tally and the metrics all read it)."""
    is_response: bool = field(init=False, repr=False, compare=False)
    """True for results and errors (what a peer sends back to a request)."""

    def __post_init__(self) -> None:
        raw = self.raw
        params = raw.get("params") if isinstance(raw, dict) else None
        object.__setattr__(self, "params", params if isinstance(params, dict) else {})
        object.__setattr__(self, "is_response", self.kind in _RESPONSE_KINDS)

    @property
    def result(self) -> Any:
        """The `result` member of a response (None for anything else)."""
        return self.raw.get("result") if self.kind is _RESULT else None

    @property
    def error(self) -> dict[str, Any]:
        """The `error` object of an error response (empty for anything else)."""
        if self.kind is _ERROR and isinstance(self.raw.get("error"), dict):
            err: dict[str, Any] = self.raw["error"]
            return err
        return {}


def _valid_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def classify_value(value: Any) -> Message:
    """Classify one decoded JSON value as a JSON-RPC message, or INVALID with the reason."""
    if not isinstance(value, dict):
        return Message(_INVALID, value, problem="not a JSON object")
    if value.get("jsonrpc") != JSONRPC_VERSION:
        return Message(_INVALID, value, problem='missing or wrong "jsonrpc" member')
    method = value.get("method")
    has_id = "id" in value
    ident = value.get("id")
    if method is not None:
        if not isinstance(method, str):
            return Message(_INVALID, value, problem='"method" is not a string')
        if not has_id:
            return Message(_NOTIFICATION, value, None, method)
        if not _valid_id(ident):
            return Message(_INVALID, value, problem='"id" must be a string or integer')
        return Message(_REQUEST, value, ident, method)  # positional: keywords cost a dict on 3.11
    if "result" in value and "error" not in value:
        return Message(_RESULT, value, ident if _valid_id(ident) else None)
    if "error" in value and "result" not in value:
        return Message(_ERROR, value, ident if _valid_id(ident) else None)
    return Message(
        _INVALID, value, id=ident if _valid_id(ident) else None, problem="neither request nor response"
    )


@value
class Body:
    """A decoded HTTP body: one message, a batch (2025-03-26), or a reason it could not be decoded."""

    messages: tuple[Message, ...]
    batch: bool = False
    parse_error: str | None = None
    batch_length: int = 0
    """Messages in the batch as sent; past `parse_body`'s `max_batch` only the first ones are decoded."""
    non_finite: bool = False
    """The body holds `NaN`, `Infinity` or a number past a double's range, which the proxy's encoder would
    write as `null`: pass-through forwards the sender's bytes, a bridge (which re-encodes) refuses them."""

    @property
    def first(self) -> Message | None:
        """The first message, which is the only one outside 2025-03-26 batches."""
        return self.messages[0] if self.messages else None


def parse_body(data: bytes | bytearray, max_batch: int | None = None) -> Body:
    """Decode an HTTP body into JSON-RPC messages; never raises.

    With `max_batch`, a longer batch has only its first `max_batch + 1` messages decoded (its
    `batch_length` tells the whole), so a batch of a million tiny values costs one C-speed JSON
    decode, not a million Python ones.
    """
    if not data or data.isspace():  # never `strip()`: it copies a big body
        return Body((), parse_error="empty body")
    non_finite = False
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        try:
            value = loads_non_finite(data)
        except ValueError:
            return Body((), parse_error=f"not JSON: {exc}")
        non_finite = True
    if isinstance(value, list):
        if not value:
            return Body((), batch=True, parse_error="empty batch")
        kept = value if max_batch is None else value[: max_batch + 1]
        messages = tuple(classify_value(v) for v in kept)
        return Body(messages, batch=True, batch_length=len(value), non_finite=non_finite)
    if non_finite:
        return Body((classify_value(value),), non_finite=True)
    return Body((classify_value(value),))


def parse_text(text: str) -> Message:
    """Decode one SSE `data` payload into a message (INVALID when it is not JSON)."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        try:
            value = loads_non_finite(text)
        except ValueError:
            return Message(_INVALID, text, problem=f"not JSON: {exc}")
    return classify_value(value)


def parse_event_text(text: str) -> tuple[Message, bool]:
    """`parse_text`, and whether the payload held a non-finite number (a bridge refuses those)."""
    try:
        return classify_value(orjson.loads(text)), False
    except orjson.JSONDecodeError as exc:
        try:
            value = loads_non_finite(text)
        except ValueError:
            return Message(_INVALID, text, problem=f"not JSON: {exc}"), False
    return classify_value(value), True


def dumps(value: Any) -> bytes:
    """Encode a JSON value compactly (the proxy's one JSON encoder)."""
    return orjson.dumps(value)


def member_sizes(messages: Sequence[Message], size: int) -> list[int]:
    """Each message's share of a body of `size` bytes, the shares adding up to `size`.

    A single message is the whole body. A batch's members share it in proportion to their compact
    encodings, so its brackets, commas and spacing are counted too: a body's byte count (log, chain,
    HAR `bodySize`) is the sum of its messages' sizes, and must be what went on the wire.
    """
    if len(messages) == 1:
        return [size]
    weights = [len(dumps(msg.raw)) for msg in messages]
    total = sum(weights) or 1
    shares, before, running = [], 0, 0
    for weight in weights:
        running += weight
        upto = size * running // total
        shares.append(upto - before)
        before = upto
    return shares


def error_response(ident: RequestId | None, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """Build a JSON-RPC error response object."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": JSONRPC_VERSION, "id": ident, "error": error}


def result_response(ident: RequestId, result: Any) -> dict[str, Any]:
    """Build a JSON-RPC result response object."""
    return {"jsonrpc": JSONRPC_VERSION, "id": ident, "result": result}


def request(ident: RequestId, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build a JSON-RPC request object."""
    msg: dict[str, Any] = {"jsonrpc": JSONRPC_VERSION, "id": ident, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def notification(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    """Build a JSON-RPC notification object."""
    msg: dict[str, Any] = {"jsonrpc": JSONRPC_VERSION, "method": method}
    if params is not None:
        msg["params"] = params
    return msg
