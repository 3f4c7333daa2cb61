"""Route or reject: turn one client HTTP request (head + bounded body) into what the engines reason about.

Parsing never raises; problems become a `Rejection` (with its HTTP status from `status.py`) only where
no engine could do anything sensible with the request. Bytes that are not JSON-RPC are still routed,
because pass-through forwards them unchanged and lets the chain mark them invalid.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from proxy.framing.http import header
from proxy.framing.status import too_large
from proxy.wire.headers import PROTOCOL_VERSION, SESSION_ID
from proxy.wire.jsonrpc import Body, Kind, RequestId, parse_body
from proxy.wire.mcp import era_of_request
from proxy.wire.versions import Era


@dataclass(frozen=True, slots=True)
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
        return first.id if first is not None and first.kind is Kind.REQUEST else None


@dataclass(frozen=True, slots=True)
class Rejection:
    """A request the proxy answers itself: HTTP status and a JSON-RPC error body."""

    status: int
    body: dict[str, Any]
    reason: str


def classify(
    http_method: str, path: str, headers: Iterable[tuple[str, str]], raw: bytes, *, max_body: int
) -> Route | Rejection:
    """Parse one client request; reject only what no engine can handle (a body over the limit)."""
    items = tuple(headers)
    if len(raw) > max_body:
        status, body = too_large(max_body, _peek_id(raw))
        return Rejection(status, body, "body too large")
    parsed = parse_body(raw) if http_method == "POST" else Body(())
    version = header(items, PROTOCOL_VERSION)
    first = parsed.first
    era = era_of_request(first.method if first else None, first.params if first else {}, version)
    if era is Era.UNKNOWN and http_method == "POST" and header(items, SESSION_ID):
        era = Era.LEGACY
    return Route(
        http_method=http_method,
        path=path,
        headers=items,
        raw=raw,
        body=parsed,
        era=era,
        session_id=header(items, SESSION_ID),
        protocol_version=version,
    )


def _peek_id(raw: bytes) -> RequestId | None:
    """Best-effort request id from a body too large to parse fully (looks at its head only)."""
    head = raw[:4096]
    marker = head.find(b'"id"')
    if marker < 0:
        return None
    rest = head[marker + 4 :].lstrip()
    if not rest.startswith(b":"):
        return None
    rest = rest[1:].lstrip()
    if rest.startswith(b'"'):
        end = rest.find(b'"', 1)
        return rest[1:end].decode("utf-8", "replace") if end > 0 else None
    digits = bytearray()
    for byte in rest:
        if chr(byte).isdigit() or (byte == ord("-") and not digits):
            digits.append(byte)
        else:
            break
    return int(digits) if digits and digits != b"-" else None
