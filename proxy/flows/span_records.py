"""Spans as plain data: what the span follower (`proxy.flows.spans`) makes and an exporter sends.

The vocabulary of the OpenTelemetry semantic conventions for MCP the proxy uses: span kinds, the
W3C trace context a client puts in `params._meta`, span names and the attributes of a JSON-RPC
message. Pure: no I/O, no SDK.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from proxy.wire.jsonrpc import Message

Attributes = dict[str, str | int | bool]

TRACEPARENT = "traceparent"
"""The `params._meta` key of W3C trace context (OpenTelemetry semantic conventions for MCP)."""

TRACESTATE = "tracestate"

_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")

SPELLED = {"mcp-protocol-version": "MCP-Protocol-Version", "mcp-session-id": "Mcp-Session-Id"}
"""How clients usually spell the headers looked up (tried before a search through every header)."""


class SpanKind(StrEnum):
    """Who started the exchange a span covers, as OpenTelemetry's span kinds say it.

    A StrEnum hashes as its text, in C: the encoder looks spans up by kind (a plain Enum's hash is a
    Python call)."""

    SERVER = "server"
    CLIENT = "client"


@dataclass(slots=True)
class SpanRecord:
    """One finished span as plain data (the exporter turns it into an OTLP span)."""

    name: str
    kind: SpanKind
    trace_id: int
    span_id: int
    parent_id: int | None
    start: float
    attributes: Attributes
    """The span's own attributes (its id, its outcome)."""
    end: float = 0.0
    remote_parent: bool = False
    """The parent is the client's span (from its `traceparent`), not one of ours."""
    trace_state: str | None = None
    error: str | None = None
    """The status description when the span failed (`error.type` is then set)."""
    failed: bool = False
    shared: Attributes | None = None
    """Attributes the span shares with others of its kind (same exchange kind, method and target): one
    dict for all of them, never changed, so an exporter may encode it once."""

    def all_attributes(self) -> Attributes:
        """Every attribute of the span, shared and its own."""
        return {**self.shared, **self.attributes} if self.shared else dict(self.attributes)


def parse_traceparent(value: Any) -> tuple[int, int, bool] | None:
    """Trace id, parent span id and sampled flag of a W3C `traceparent`; None when it is not valid."""
    if not isinstance(value, str):
        return None
    found = _TRACEPARENT.fullmatch(value.strip())
    if found is None:
        return None
    version, trace, span, flags, rest = found.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    trace_id, span_id = int(trace, 16), int(span, 16)
    if not trace_id or not span_id:
        return None
    return trace_id, span_id, bool(int(flags, 16) & 1)


def span_name(method: str | None, params: dict[str, Any]) -> str:
    """`{mcp.method.name} {target}` with the tool or prompt name as target, else the method alone."""
    name = method or "(none)"
    if method in ("tools/call", "prompts/get"):
        target = params.get("name")
        if isinstance(target, str):
            return f"{name} {target}"
    return name


def method_attributes(msg: Message) -> Attributes:
    """`mcp.method.name`, `jsonrpc.request.id` and the target attributes of a request or notification."""
    method = msg.method or ""
    attributes: Attributes = {"mcp.method.name": method}
    if msg.id is not None:
        attributes["jsonrpc.request.id"] = str(msg.id)
    if method == "tools/call":
        name = msg.params.get("name")
        if isinstance(name, str):
            attributes["gen_ai.tool.name"] = name
            attributes["gen_ai.operation.name"] = "execute_tool"
    elif method == "prompts/get":
        name = msg.params.get("name")
        if isinstance(name, str):
            attributes["gen_ai.prompt.name"] = name
    return attributes


def header_value(headers: dict[str, str], name: str) -> str | None:
    """A header's value by its lower-case name, whatever case it came in."""
    value = headers.get(name)
    if value is not None:
        return value
    value = headers.get(SPELLED.get(name, name))
    if value is not None:
        return value
    for key, found in headers.items():
        if key.lower() == name:
            return found
    return None
