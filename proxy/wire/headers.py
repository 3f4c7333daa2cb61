"""MCP and HTTP header names the proxy reasons about, and the one builder of the `Mcp-*` headers it sends.

Header names are compared case-insensitively everywhere; these constants are the canonical spelling.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from typing import Final

PROTOCOL_VERSION: Final = "MCP-Protocol-Version"
"""2025-06-18+: the negotiated (legacy) or per-request (modern) protocol version."""

SESSION_ID: Final = "Mcp-Session-Id"
"""2025-03-26 .. 2025-11-25: the session a legacy server minted; removed in 2026-07-28."""

METHOD: Final = "Mcp-Method"
"""2026-07-28 (SEP-2243): mirrors the JSON-RPC `method` on every request."""

NAME: Final = "Mcp-Name"
"""2026-07-28: mirrors `params.name` (tools/call, prompts/get) or `params.uri` (resources/read)."""

PARAM_PREFIX: Final = "Mcp-Param-"
"""2026-07-28: one header per tool argument whose schema carries `x-mcp-header`."""

LAST_EVENT_ID: Final = "Last-Event-ID"
"""SSE resumption (legacy Streamable HTTP); ignored by modern servers."""

HOP_BY_HOP: Final[frozenset[str]] = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
"""RFC 9110 section 7.6.1 connection-scoped headers: never forwarded by a proxy."""


def forwarded_fields(
    headers: Iterable[tuple[str, str]], drop: frozenset[str] = HOP_BY_HOP
) -> list[tuple[str, str]]:
    """The headers a proxy forwards: without those named in `drop` or listed in a `Connection` field
    (RFC 9110 section 7.6.1; `drop` names `connection`). The one rule for what crosses the proxy, so
    the wire and every view of what the upstream got (`export --curl --to upstream`) agree.

    One pass, each name lower-cased once: this runs twice for every relayed exchange. Fields a
    `Connection` header lists are taken out after it, as they may come before it.
    """
    kept: list[tuple[str, str]] = []
    listed: set[str] | None = None
    for name, value in headers:
        lower = name.lower()
        if lower in drop:
            if lower == "connection":
                tokens = (token.strip().lower() for token in value.split(","))
                listed = (listed or set()).union(token for token in tokens if token)
            continue
        kept.append((name, value))
    if listed:
        return [(k, v) for k, v in kept if k.lower() not in listed]
    return kept


_B64_PREFIX: Final = "=?base64?"
_B64_SUFFIX: Final = "?="


DEFAULT_MAX_METHOD_LENGTH: Final = 256
"""Longest JSON-RPC method accepted by default (the `max_method_length` setting)."""

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""RFC 9110 token: what a header field name (and so an `Mcp-Param-*` suffix) may consist of."""


class HeaderRefused(ValueError):
    """A value that no header can represent: `field` names the header, the message says why."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field} cannot carry this request's value: {why}")
        self.field = field
        self.why = why


def method_problem(method: str, max_length: int | None = DEFAULT_MAX_METHOD_LENGTH) -> str | None:
    """Why `method` is not a plausible JSON-RPC method name, or None when it is.

    A plausible name is 1..`max_length` characters of visible ASCII (no space, no control byte):
    every MCP method is, and the 2026-07-28 `Mcp-Method` header mirrors it with no encoding, so a
    name outside that set could only ever be refused by the server or bend an HTTP head.
    """
    if max_length is not None and len(method) > max_length:
        return f"the method is {len(method)} characters long; the limit is {max_length} (max_method_length)"
    # ASCII, printable (no control byte) and no space is exactly 0x21..0x7e: three C-speed checks,
    # since this runs for every request.
    if not (method and method.isascii() and method.isprintable() and " " not in method):
        return "the method must be visible ASCII without spaces or control characters"
    return None


def encode_param_value(value: str | int | bool) -> str:
    """Encode a tool argument for an `Mcp-Param-*` header, base64-wrapping what plain ASCII cannot carry.

    Raises HeaderRefused (field `Mcp-Param-*`) for a string UTF-8 cannot encode (a lone surrogate,
    which JSON's `\\ud800` escapes can produce); `mcp_headers` names the actual header.
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    plain = value.isascii() and value == value.strip() and value.isprintable()
    if plain and not (value.startswith(_B64_PREFIX) and value.endswith(_B64_SUFFIX)):
        return value
    try:
        utf8 = value.encode("utf-8")
    except UnicodeEncodeError:
        why = "the value holds a lone surrogate, which UTF-8 cannot encode"
        raise HeaderRefused(PARAM_PREFIX + "*", why) from None
    return _B64_PREFIX + base64.b64encode(utf8).decode("ascii") + _B64_SUFFIX


def is_param_suffix(suffix: str) -> bool:
    """True when `Mcp-Param-{suffix}` is a valid header field name (an `x-mcp-header` value may not be)."""
    return _TOKEN.fullmatch(suffix) is not None


def mcp_headers(
    method: str,
    name: str | None = None,
    params: Iterable[tuple[str, str | int | bool]] = (),
    *,
    max_method_length: int | None = None,
) -> list[tuple[str, str]]:
    """The 2026-07-28 routing headers of one request, every value in its header encoding.

    `Mcp-Method` carries the method as it is (servers compare it byte for byte, so the spec allows
    no encoding there): a method that is not plausible is refused (its length only when
    `max_method_length` is given: classification already held it to the configured bound).
    `Mcp-Name` and each `Mcp-Param-{suffix}` use the base64 sentinel for what plain ASCII cannot
    carry; a suffix that is not a token, or a value UTF-8 cannot encode, is refused. Refusals are
    HeaderRefused naming the header, so the client hears which field of its request cannot be sent.
    """
    problem = method_problem(method, max_method_length)
    if problem is not None:
        raise HeaderRefused(METHOD, problem)
    out = [(METHOD, method)]
    if name is not None:
        out.append((NAME, _encoded(NAME, name)))
    for suffix, value in params:
        field = PARAM_PREFIX + suffix
        if not is_param_suffix(suffix):
            raise HeaderRefused(field[:100], "the header name is not an HTTP token")
        out.append((field, _encoded(field, value)))
    return out


def _encoded(field: str, value: str | int | bool) -> str:
    try:
        return encode_param_value(value)
    except HeaderRefused as exc:
        raise HeaderRefused(field, exc.why) from None


def decode_param_value(raw: str) -> str:
    """Decode an `Mcp-Param-*` header value (inverse of `encode_param_value` for strings)."""
    if raw.startswith(_B64_PREFIX) and raw.endswith(_B64_SUFFIX):
        inner = raw[len(_B64_PREFIX) : -len(_B64_SUFFIX)]
        return base64.b64decode(inner, validate=True).decode("utf-8")
    return raw
