"""The observer calls of a legacy session's bodiless requests: GET streams (one resumed) and a DELETE.

Shared by the sink, metrics and export tests: none of these requests carries a message, so their
chains hold their request heads as `http` records, which every reader must build alike.
"""

from __future__ import annotations

from typing import Any, Protocol

from proxy.flows.events import Channel, Direction, Mode
from proxy.wire.jsonrpc import classify_value, notification

SESSION = "sess-9c2e-secret-session-value"
TOKEN = "tok-never-shown"
HEADERS = {"Host": "127.0.0.1:18201", "Authorization": f"Bearer {TOKEN}", "Mcp-Session-Id": SESSION}


class Ticking(Protocol):
    """A clock the play moves by hand."""

    now: float


def streams_and_delete(obs: Any, clock: Ticking) -> list[Any]:
    """A GET stream that carries one event and drops, resumed by its id until the session's DELETE
    (with a query), and a GET the legacy-client bridge serves itself. Returns what each close returned.
    """
    obs.open_exchange("g1", http_method="GET", path="/mcp", headers=HEADERS, session=SESSION)
    obs.response_head(
        "g1", status=200, content_type="text/event-stream", headers={"Cache-Control": "no-cache"}
    )
    changed = classify_value(notification("notifications/tools/list_changed"))
    obs.message("g1", changed, size=60, direction=Direction.TO_CLIENT, channel=Channel.GET_SSE, sse_id="e1")
    clock.now += 1.0
    closed = [obs.close_exchange("g1", None)]
    resumed = {**HEADERS, "Last-Event-ID": "e1"}
    obs.open_exchange("g2", http_method="GET", path="/mcp", headers=resumed, session=SESSION)
    obs.response_head("g2", status=200, content_type="text/event-stream", headers={})
    clock.now += 1.0
    closed.append(obs.close_exchange("g2", "session_deleted"))
    obs.open_exchange("d1", http_method="DELETE", path="/mcp?trace=1", headers=HEADERS, session=SESSION)
    obs.response_head("d1", status=200, content_type=None, headers={"Content-Length": "0"})
    closed.append(obs.close_exchange("d1", None))
    bridged = {"client_era": "legacy", "upstream_era": "modern", "mode": Mode.LEGACY_TO_MRTR}
    obs.open_exchange("g3", http_method="GET", path="/mcp", headers=HEADERS, session=SESSION, **bridged)
    obs.response_head("g3", status=200, content_type="text/event-stream", headers={})
    clock.now += 0.5
    closed.append(obs.close_exchange("g3", "client_disconnected"))
    return closed
