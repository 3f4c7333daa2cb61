"""The observer calls of requests whose answer leaves a stream open: a legacy session's bodiless
requests (GET streams, one resumed, and a DELETE) and 2026-07-28 `subscriptions/listen` streams.

Shared by the sink, metrics and export tests: the bodiless requests' chains hold their request heads as
`http` records, which every reader must build alike, and every reader must split each stream's time
alike (the upstream's until its answer, the stream's after).
"""

from __future__ import annotations

from typing import Any, Protocol

from proxy.flows.events import Channel, Direction, Mode
from proxy.wire.jsonrpc import classify_value, notification, request, result_response
from proxy.wire.mcp import LISTEN, LISTEN_ACKNOWLEDGED

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


def declined_and_refused_streams(obs: Any, clock: Ticking) -> list[Any]:
    """A GET the server declines with 405 (it offers no stream there: no failure) and one it refuses
    with 404 (a session it no longer knows: a failure). Returns what each close returned."""
    closed = []
    for exchange, status in (("g405", 405), ("g404", 404)):
        obs.open_exchange(exchange, http_method="GET", path="/mcp", headers=HEADERS, session=SESSION)
        obs.response_head(exchange, status=status, content_type="text/plain", headers={})
        clock.now += 0.1
        closed.append(obs.close_exchange(exchange, None))
    return closed


LISTEN_FILTER = {"notifications": {"toolsListChanged": True}}


def listens(obs: Any, clock: Ticking) -> list[Any]:
    """Three 2026-07-28 `subscriptions/listen` streams: one passed through, acknowledged after 0.25 s and
    closed by its client 2 s later; one the server ends with its complete result 1 s after its
    acknowledgement; one the MRTR->legacy bridge serves, acknowledged at once and closed after 3 s.
    Returns what each close returned."""
    modern = {"client_era": "modern", "upstream_era": "modern"}
    ack = classify_value(notification(LISTEN_ACKNOWLEDGED, {"notifications": {"toolsListChanged": True}}))
    closed = []
    for exchange, ident in (("l1", "listen-1"), ("l2", "listen-2")):
        obs.open_exchange(exchange, http_method="POST", path="/mcp", headers={}, session=None, **modern)
        listen = classify_value(request(ident, LISTEN, LISTEN_FILTER))
        obs.message(exchange, listen, size=80, direction=Direction.TO_SERVER, channel=Channel.POST)
        obs.response_head(exchange, status=200, content_type="text/event-stream", headers={})
        clock.now += 0.25
        obs.message(exchange, ack, size=90, direction=Direction.TO_CLIENT, channel=Channel.SSE)
        if exchange == "l1":
            clock.now += 2.0
            closed.append(obs.close_exchange(exchange, "client_disconnected"))
        else:
            clock.now += 1.0
            done = classify_value(result_response(ident, {"resultType": "complete"}))
            obs.message(exchange, done, size=60, direction=Direction.TO_CLIENT, channel=Channel.SSE)
            closed.append(obs.close_exchange(exchange, None))
    bridged = {"client_era": "modern", "upstream_era": "legacy", "mode": Mode.MRTR_TO_LEGACY}
    obs.open_exchange("l3", http_method="POST", path="/mcp", headers={}, session=None, **bridged)
    listen = classify_value(request("listen-3", LISTEN, LISTEN_FILTER))
    obs.message("l3", listen, size=80, direction=Direction.TO_SERVER, channel=Channel.POST)
    obs.response_head("l3", status=200, content_type="text/event-stream", headers={})
    obs.message("l3", ack, size=90, direction=Direction.TO_CLIENT, channel=Channel.SSE)
    clock.now += 3.0
    closed.append(obs.close_exchange("l3", "client_disconnected"))
    return closed
