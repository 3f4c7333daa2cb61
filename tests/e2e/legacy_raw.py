"""A legacy (2025-era) client's requests written by hand, for tests that assert the bytes a proxy answers."""

from __future__ import annotations

from typing import Any

LEGACY_VERSION = "2025-06-18"

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
"""What every legacy Streamable HTTP POST carries."""


def initialize(ident: int = 1, version: str = LEGACY_VERSION) -> dict[str, Any]:
    """The `initialize` request of a client that declares no capabilities."""
    return {
        "jsonrpc": "2.0",
        "id": ident,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    }


def session_headers(session: str, version: str = LEGACY_VERSION) -> dict[str, str]:
    """The headers of every request after `initialize` in the session it opened."""
    return {**HEADERS, "Mcp-Session-Id": session, "MCP-Protocol-Version": version}
