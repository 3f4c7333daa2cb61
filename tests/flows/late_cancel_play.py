"""The observer calls of a legacy client that aborts its call's stream, then cancels the call.

The TypeScript SDK 1.x cancels that way: it closes the POST stream of a `tools/call` first, then sends
`notifications/cancelled` naming it. Against a server that sends no SSE event ids (no event store, the
most common server) nothing can resume the stream, so the call is judged by whether the cancel comes
within `LATE_CANCEL_S` of the hang-up. They run like the other plays of `test_sink`.
"""

from __future__ import annotations

from typing import Any, Protocol

from proxy.flows.events import Channel, Direction
from proxy.flows.observations import LATE_CANCEL_S
from proxy.wire.jsonrpc import classify_value, notification, request

SESSION = "sess-7a3f-secret-session-value"
HEADERS = {"Content-Type": "application/json", "Mcp-Session-Id": SESSION}
LEGACY = {"client_era": "legacy", "upstream_era": "legacy"}
INSIDE = 0.3
"""Seconds from the hang-up to the cancel when it comes in time (the SDK's is a few milliseconds)."""
OUTSIDE = LATE_CANCEL_S + 1.0
"""Seconds from the hang-up to a cancel that comes too late to be the hang-up's."""


class Ticking(Protocol):
    """A clock the play moves by hand."""

    now: float


def aborted_then_cancelled(obs: Any, clock: Ticking, gap: float = INSIDE) -> list[Any]:
    """A legacy `tools/call` whose SSE stream (no event id) the client closes before the answer, and
    its `notifications/cancelled` `gap` seconds later; returns what the closes returned."""
    call = classify_value(request(3, "tools/call", {"name": "slow", "arguments": {}}))
    obs.open_exchange("x1", http_method="POST", path="/mcp", headers=HEADERS, session=SESSION, **LEGACY)
    obs.message("x1", call, size=70, direction=Direction.TO_SERVER, channel=Channel.POST)
    obs.response_head("x1", status=200, content_type="text/event-stream", headers={})
    clock.now += 0.5
    closed = [obs.close_exchange("x1", "client_disconnected")]
    clock.now += gap
    cancel = classify_value(notification("notifications/cancelled", {"requestId": 3}))
    obs.open_exchange("x2", http_method="POST", path="/mcp", headers=HEADERS, session=SESSION, **LEGACY)
    obs.message("x2", cancel, size=50, direction=Direction.TO_SERVER, channel=Channel.POST)
    obs.response_head("x2", status=202, content_type=None, headers={})
    clock.now += 0.125
    return [*closed, obs.close_exchange("x2", None)]


def aborted_cancel_too_late(obs: Any, clock: Ticking) -> list[Any]:
    """As `aborted_then_cancelled`, the cancel `OUTSIDE` the window: the call ended as its stream did."""
    return aborted_then_cancelled(obs, clock, OUTSIDE)


UNREAD = "an SSE event larger than max_inspected_bytes (64 bytes) was relayed whole but not inspected"
"""Why the proxy stopped reading the call's stream (the relay's words)."""


def hung_up_after_unread(obs: Any, clock: Ticking) -> list[Any]:
    """A legacy `tools/call` whose SSE answer goes by unread (over `max_inspected_bytes`), its client
    closing the stream once it has read it, as an SDK client does, before the server's stream ends."""
    call = classify_value(request(3, "tools/call", {"name": "slow", "arguments": {}}))
    obs.open_exchange("x1", http_method="POST", path="/mcp", headers=HEADERS, session=SESSION, **LEGACY)
    obs.message("x1", call, size=70, direction=Direction.TO_SERVER, channel=Channel.POST)
    obs.response_head("x1", status=200, content_type="text/event-stream", headers={})
    obs.not_inspected("x1", UNREAD)
    clock.now += 0.5
    return [obs.close_exchange("x1", "client_disconnected")]
