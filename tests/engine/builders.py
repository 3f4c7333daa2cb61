"""Event builders shared by the bridge engines' Playbook tests."""

from __future__ import annotations

from typing import Any

from proxy.engine.events import LegMessage
from proxy.framing.classify import Route, classify
from proxy.wire.jsonrpc import classify_value


def route(http_method: str, body: bytes, headers: tuple[tuple[str, str], ...]) -> Route:
    """What the classifier makes of one client request to /mcp (a test that needs a Rejection fails)."""
    outcome = classify(http_method, "/mcp", headers, body, max_body=1 << 20)
    assert isinstance(outcome, Route)
    return outcome


def up(leg_id: str, message: dict[str, Any]) -> LegMessage:
    """One message arriving on an upstream leg."""
    return LegMessage(leg_id, classify_value(message))


UNREACHABLE_HINT = " (check that the MCP server is running and that --upstream names it)"
"""What a fault message adds for an unreachable upstream (proxy.engine.faults)."""
TIMEOUT_HINT = " (a server this slow needs a larger --upstream-timeout)"
"""What a fault message adds for an upstream that did not answer in time."""
CUT_HINT = " (the MCP server's own log says why it stopped)"
"""What a fault message adds for a cut upstream stream."""
