"""How the legacy->MRTR bridge dresses a request for a 2026-07-28 server: `_meta` and HTTP headers.

A 2026 server rejects a request whose per-request envelope is incomplete (`-32602`) or whose
`Mcp-*` headers disagree with the body (`-32020`), so every upstream leg is built here from the
session's facts and the message itself. The client's own `_meta` entries (`progressToken`, trace
keys) are kept; headers that only mean something on the legacy wire (`Mcp-Session-Id`,
`Last-Event-ID`, the client's `MCP-Protocol-Version`) never cross.

Which tool arguments a server wants mirrored as `Mcp-Param-*` headers is `tool_headers.ToolHeaders`
(shared with the other bridge). A 2026 server's lists must not vary per connection, so one map
per upstream serves every session.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from proxy.engine.tool_headers import ToolHeaders
from proxy.wire.headers import (
    PROTOCOL_VERSION,
    mcp_headers,
)
from proxy.wire.mcp import (
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    META_LOG_LEVEL,
    META_PROTOCOL_VERSION,
    target_name,
)
from proxy.wire.relayed import relayed_client_headers
from proxy.wire.versions import LATEST_MODERN

MODERN_ACCEPT: Final = "application/json, text/event-stream"
"""2026-07-28 requires both media types in `Accept` on every POST."""


@dataclass(frozen=True, slots=True)
class Envelope:
    """The per-request facts a session contributes to every upstream request's `_meta`."""

    capabilities: dict[str, Any]
    client_info: Any = None
    log_level: str | None = None

    def meta(self) -> dict[str, Any]:
        """The 2026 `_meta` keys for one request (protocolVersion, capabilities, clientInfo, logLevel)."""
        meta: dict[str, Any] = {
            META_PROTOCOL_VERSION: LATEST_MODERN,
            META_CLIENT_CAPABILITIES: self.capabilities,
        }
        if isinstance(self.client_info, dict):
            meta[META_CLIENT_INFO] = self.client_info
        if self.log_level is not None:
            meta[META_LOG_LEVEL] = self.log_level
        return meta


def with_envelope(params: dict[str, Any], envelope: Envelope) -> dict[str, Any]:
    """A copy of `params` whose `_meta` holds the client's own entries plus the 2026 envelope."""
    out = dict(params)
    own = params.get("_meta")
    out["_meta"] = {**(own if isinstance(own, dict) else {}), **envelope.meta()}
    return out


def leg_headers(
    method: str,
    params: dict[str, Any],
    client_headers: Iterable[tuple[str, str]],
    tools: ToolHeaders,
) -> tuple[tuple[str, str], ...]:
    """The complete header set of one upstream POST (the transport adds only Host and length).

    The `Mcp-*` headers come from `mcp_headers`, which encodes what it can and raises HeaderRefused
    (naming the header) for what no header can carry.
    """
    out: list[tuple[str, str]] = [
        ("Content-Type", "application/json"),
        ("Accept", MODERN_ACCEPT),
        (PROTOCOL_VERSION, LATEST_MODERN),
    ]
    values = tools.values_for(params) if method == "tools/call" else []
    out.extend(mcp_headers(method, target_name(method, params), values))
    out.extend(relayed_client_headers(client_headers))
    return tuple(out)
