"""OTLP trace protobuf, written straight from span records: the bytes of an ExportTraceServiceRequest.

The SDK's encoder builds a protobuf message object per span, per attribute and per value, then
serializes them: about a tenth of a millisecond a span, more than the proxy spends relaying a small
request, on a thread that shares the interpreter with the traffic. The proxy's spans use a small part
of the schema (ids, name, kind, times, flags, string/int/bool attributes, status), so they are written
here as protobuf wire format directly; the attributes a span shares with others of its kind are
encoded once for all of them. The field numbers are those of
`opentelemetry/proto/trace/v1/trace.proto`; the tests decode what this writes with the official
message types and compare it with the SDK's own encoding.

Pure: no SDK, no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from proxy.flows.span_records import SpanKind, SpanRecord

_KIND: Final = {SpanKind.SERVER: b"\x30\x02", SpanKind.CLIENT: b"\x30\x03"}
"""Span.kind (field 6, varint): SPAN_KIND_SERVER = 2, SPAN_KIND_CLIENT = 3."""

_FLAGS_LOCAL: Final = b"\x85\x01" + struct.pack("<I", 0x101)
_FLAGS_REMOTE: Final = b"\x85\x01" + struct.pack("<I", 0x301)
"""Span.flags (field 16, fixed32): sampled, and whether the parent is remote is known (0x100) and true
(0x200)."""

_STATUS_ERROR: Final = b"\x18\x02"
"""Status.code (field 3) = STATUS_CODE_ERROR."""

_MEMO_LIMIT: Final = 4096

_TIMES: Final = struct.Struct("<BQBQ")
"""Span.start_time_unix_nano (field 7) and end_time_unix_nano (field 8), both fixed64."""


_SMALL: Final = tuple(bytes((i,)) for i in range(128))
"""Varints below 128 are one byte (most lengths here)."""


def _varint(value: int) -> bytes:
    if 0 <= value < 128:
        return _SMALL[value]
    if value < 0:
        value += 1 << 64  # int64 as protobuf writes it: two's complement in ten bytes
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag, the payload's length, the payload."""
    return tag + _varint(len(payload)) + payload


def _text(tag: bytes, text: str) -> bytes:
    return _field(tag, text.encode("utf-8", "surrogatepass"))


def _any_value(value: Any) -> bytes:
    """An AnyValue: string (1), bool (2), int (3) or double (4); anything else as its text."""
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + _varint(value)
    if isinstance(value, float):
        return b"\x21" + struct.pack("<d", value)
    return _text(b"\x0a", value if isinstance(value, str) else str(value))


def key_value(key: str, value: Any) -> bytes:
    """One KeyValue (key = 1, value = 2), as an element of a repeated field is framed by its caller."""
    return _text(b"\x0a", key) + _field(b"\x12", _any_value(value))


def attributes_field(tag: bytes, attributes: Iterable[tuple[str, Any]]) -> bytes:
    """Repeated KeyValue attributes under `tag`."""
    return b"".join(_field(tag, key_value(k, v)) for k, v in attributes)


class SpanEncoder:
    """Encodes batches of span records under one resource and instrumentation scope."""

    def __init__(self, resource: Mapping[str, Any], scope_name: str, scope_version: str) -> None:
        self._resource = _field(b"\x0a", attributes_field(b"\x0a", resource.items()))
        self._scope = _field(b"\x0a", _text(b"\x0a", scope_name) + _text(b"\x12", scope_version))
        self._names: dict[tuple[str, SpanKind], bytes] = {}
        """Span names with their kind, encoded (fields 5 and 6)."""
        self._keys: dict[str, bytes] = {}
        """Each attribute key, encoded (field 1 of a KeyValue)."""
        self._shared_memo: dict[int, tuple[Mapping[str, Any], bytes]] = {}
        """Encoded shared attribute sets by identity (each kept with its dict, so an id is never reused)."""

    def request(self, spans: Sequence[SpanRecord]) -> bytes:
        """An ExportTraceServiceRequest holding `spans`."""
        encoded = b"".join(_field(b"\x12", self.span(span)) for span in spans)
        scope_spans = _field(b"\x12", self._scope + encoded)
        return _field(b"\x0a", self._resource + scope_spans)

    def _shared(self, shared: Mapping[str, Any]) -> bytes:
        found = self._shared_memo.get(id(shared))
        if found is not None and found[0] is shared:
            return found[1]
        if len(self._shared_memo) >= _MEMO_LIMIT:
            self._shared_memo.clear()
        encoded = attributes_field(b"\x4a", shared.items())
        self._shared_memo[id(shared)] = (shared, encoded)
        return encoded

    def span(self, span: SpanRecord) -> bytes:
        """One Span message."""
        parts = [
            b"\x0a\x10" + span.trace_id.to_bytes(16, "big"),
            b"\x12\x08" + span.span_id.to_bytes(8, "big"),
        ]
        if span.trace_state:
            parts.append(_text(b"\x1a", span.trace_state))
        if span.parent_id is not None:
            parts.append(b"\x22\x08" + span.parent_id.to_bytes(8, "big"))
        named = (span.name, span.kind)
        name = self._names.get(named)
        if name is None:
            if len(self._names) >= _MEMO_LIMIT:
                self._names.clear()
            name = self._names[named] = _text(b"\x2a", span.name) + _KIND[span.kind]
        parts.append(name)
        parts.append(_TIMES.pack(0x39, int(span.start * 1e9), 0x41, int(span.end * 1e9)))
        if span.shared:
            parts.append(self._shared(span.shared))
        keys = self._keys
        for key, value in span.attributes.items():
            prefix = keys.get(key)
            if prefix is None:
                if len(keys) >= _MEMO_LIMIT:
                    keys.clear()
                prefix = keys[key] = _text(b"\x0a", key)
            if type(value) is str:  # the common case, written without a call per layer
                text = value.encode("utf-8", "surrogatepass")
                any_value = b"\x0a" + _varint(len(text)) + text
            else:
                any_value = _any_value(value)
            pair = prefix + b"\x12" + _varint(len(any_value)) + any_value
            parts.append(b"\x4a" + _varint(len(pair)) + pair)
        if span.failed:
            status = _text(b"\x12", span.error) if span.error else b""
            parts.append(_field(b"\x7a", status + _STATUS_ERROR))
        parts.append(_FLAGS_REMOTE if span.remote_parent else _FLAGS_LOCAL)
        return b"".join(parts)
