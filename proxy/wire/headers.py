"""MCP and HTTP header names the proxy reasons about, and the `Mcp-Param-*` value codec.

Header names are compared case-insensitively everywhere; these constants are the canonical spelling.
"""

from __future__ import annotations

import base64
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

_B64_PREFIX: Final = "=?base64?"
_B64_SUFFIX: Final = "?="


def encode_param_value(value: str | int | bool) -> str:
    """Encode a tool argument for an `Mcp-Param-*` header, base64-wrapping what plain ASCII cannot carry."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    plain = value.isascii() and value == value.strip() and value.isprintable()
    if plain and not (value.startswith(_B64_PREFIX) and value.endswith(_B64_SUFFIX)):
        return value
    return _B64_PREFIX + base64.b64encode(value.encode("utf-8")).decode("ascii") + _B64_SUFFIX


def decode_param_value(raw: str) -> str:
    """Decode an `Mcp-Param-*` header value (inverse of `encode_param_value` for strings)."""
    if raw.startswith(_B64_PREFIX) and raw.endswith(_B64_SUFFIX):
        inner = raw[len(_B64_PREFIX) : -len(_B64_SUFFIX)]
        return base64.b64decode(inner, validate=True).decode("utf-8")
    return raw
