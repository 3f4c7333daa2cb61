"""The observer calls of legacy calls whose POST stream closed after an event id, unanswered.

Each play is one way such a stream goes on: the client resumes it (GET + `Last-Event-ID`) and gets its
answer there, or cancels it, or never comes back; the server closes it after the client's cancel (as
the TypeScript SDK's server does, sending no answer). They run like the other plays of `test_sink`.
"""

from __future__ import annotations

from typing import Any, Protocol

from proxy.flows.events import Channel, Direction
from proxy.flows.resumes import RESUME_WINDOW
from proxy.wire.jsonrpc import classify_value, notification, request, result_response

SESSION = "sess-9c2e-secret-session-value"
HEADERS = {"Content-Type": "application/json", "Mcp-Session-Id": SESSION}
LEGACY = {"client_era": "legacy", "upstream_era": "legacy"}
SSE = "text/event-stream"


class Ticking(Protocol):
    """A clock the play moves by hand."""

    now: float


def _call_with_progress(obs: Any, clock: Ticking, exchange: str, ident: int) -> None:
    """A legacy `tools/call` whose SSE stream opens with the server's priming event, then one progress
    notification (event ids `<exchange>-0`, `<exchange>-1`)."""
    call = classify_value(request(ident, "tools/call", {"name": "slow", "arguments": {}}))
    obs.open_exchange(exchange, http_method="POST", path="/mcp", headers=HEADERS, session=SESSION, **LEGACY)
    obs.message(exchange, call, size=70, direction=Direction.TO_SERVER, channel=Channel.POST)
    obs.response_head(exchange, status=200, content_type=SSE, headers={})
    obs.note_event_id(exchange, f"{exchange}-0")
    clock.now += 0.25
    progress = classify_value(notification("notifications/progress", {"progressToken": ident, "progress": 1}))
    to_client = {"direction": Direction.TO_CLIENT, "channel": Channel.SSE}
    obs.message(exchange, progress, size=40, sse_id=f"{exchange}-1", **to_client)
    clock.now += 0.25


def _cancel(obs: Any, clock: Ticking, exchange: str, ident: int) -> Any:
    """The client's `notifications/cancelled` of request `ident`, on a POST of its own."""
    cancel = classify_value(notification("notifications/cancelled", {"requestId": ident}))
    obs.open_exchange(exchange, http_method="POST", path="/mcp", headers=HEADERS, session=SESSION, **LEGACY)
    obs.message(exchange, cancel, size=50, direction=Direction.TO_SERVER, channel=Channel.POST)
    obs.response_head(exchange, status=202, content_type=None, headers={})
    clock.now += 0.125
    return obs.close_exchange(exchange, None)


def cut_and_resumed(obs: Any, clock: Ticking, outcome: str = "client_disconnected") -> list[Any]:
    """The client's stream is cut after an event (`outcome`: it left, or a `cut_after` fault cut it);
    it resumes with GET + `Last-Event-ID` and gets the rest and the answer there."""
    _call_with_progress(obs, clock, "x1", 1)
    closed = [obs.close_exchange("x1", outcome)]
    clock.now += 0.5
    resumed = {**HEADERS, "Last-Event-ID": "x1-1"}
    obs.open_exchange("g1", http_method="GET", path="/mcp", headers=resumed, session=SESSION, **LEGACY)
    obs.response_head("g1", status=200, content_type=SSE, headers={})
    clock.now += 0.75
    done = classify_value(result_response(1, {"content": [{"type": "text", "text": "done"}]}))
    obs.message("g1", done, size=60, direction=Direction.TO_CLIENT, channel=Channel.GET_SSE, sse_id="x1-2")
    return [*closed, obs.close_exchange("g1", None)]


def resumed_without_answer(obs: Any, clock: Ticking) -> list[Any]:
    """The client's stream is cut after an event; its GET + `Last-Event-ID` is answered 200, but the
    server replays nothing (the events were still being made), and the client leaves that stream too."""
    _call_with_progress(obs, clock, "x1", 1)
    closed = [obs.close_exchange("x1", "client_disconnected")]
    clock.now += 0.5
    resumed = {**HEADERS, "Last-Event-ID": "x1-1"}
    obs.open_exchange("g1", http_method="GET", path="/mcp", headers=resumed, session=SESSION, **LEGACY)
    obs.response_head("g1", status=200, content_type=SSE, headers={})
    clock.now += 20.0
    return [*closed, obs.close_exchange("g1", "client_disconnected")]


def cut_and_resume_refused(obs: Any, clock: Ticking) -> list[Any]:
    """The client's stream is cut after an event; its GET + `Last-Event-ID` is answered 400 (the
    server restarted and knows the session no more), and nothing more comes."""
    _call_with_progress(obs, clock, "x1", 1)
    closed = [obs.close_exchange("x1", "client_disconnected")]
    clock.now += 0.5
    resumed = {**HEADERS, "Last-Event-ID": "x1-1"}
    obs.open_exchange("g1", http_method="GET", path="/mcp", headers=resumed, session=SESSION, **LEGACY)
    obs.response_head("g1", status=400, content_type="application/json", headers={})
    return [*closed, obs.close_exchange("g1", None)]


def cut_and_resume_refused_again(obs: Any, clock: Ticking) -> list[Any]:
    """The client's stream is cut after an event and it keeps resuming: two GETs + `Last-Event-ID`
    are answered 502 (the server is down), three more 400 (it restarted and knows the session no more)."""
    _call_with_progress(obs, clock, "x1", 1)
    closed = [obs.close_exchange("x1", "client_disconnected")]
    resumed = {**HEADERS, "Last-Event-ID": "x1-1"}
    for n, status in enumerate((502, 502, 400, 400, 400), start=1):
        clock.now += 0.5
        obs.open_exchange(f"g{n}", http_method="GET", path="/mcp", headers=resumed, session=SESSION, **LEGACY)
        obs.response_head(f"g{n}", status=status, content_type="application/json", headers={})
        closed.append(obs.close_exchange(f"g{n}", None))
    return closed


def cut_by_fault_and_resumed(obs: Any, clock: Ticking) -> list[Any]:
    """As `cut_and_resumed`, the stream cut by the proxy's own `cut_after` fault."""
    return cut_and_resumed(obs, clock, "cut_by_fault")


def cut_never_resumed(obs: Any, clock: Ticking) -> list[Any]:
    """Two cut streams the client never resumes: one's wait runs out (a later call comes more than
    `RESUME_WINDOW` after the cut), the other's session is deleted."""
    _call_with_progress(obs, clock, "x1", 1)
    closed = [obs.close_exchange("x1", "client_disconnected")]
    clock.now += RESUME_WINDOW + 1.0
    _call_with_progress(obs, clock, "x2", 2)
    closed.append(obs.close_exchange("x2", "cut_by_fault"))
    clock.now += 1.0
    obs.open_exchange("d1", http_method="DELETE", path="/mcp", headers=HEADERS, session=SESSION, **LEGACY)
    obs.response_head("d1", status=200, content_type=None, headers={})
    return [*closed, obs.close_exchange("d1", None)]


def _delete(obs: Any, exchange: str) -> None:
    """The client's DELETE of its session opens (its answer is the caller's)."""
    obs.open_exchange(exchange, http_method="DELETE", path="/mcp", headers=HEADERS, session=SESSION, **LEGACY)


def closed_by_delete(obs: Any, clock: Ticking, *, answered_first: bool = False) -> list[Any]:
    """The client deletes its session while a call runs; the server closes the call's stream after an
    event id, unanswered, because of the DELETE: before it answers the DELETE 200 (as the TypeScript
    SDK's server does), or after (`answered_first`)."""
    _call_with_progress(obs, clock, "x1", 1)
    _delete(obs, "d1")
    closed = []
    if not answered_first:
        closed.append(obs.close_exchange("x1", None))
    clock.now += 0.125
    obs.response_head("d1", status=200, content_type=None, headers={})
    if answered_first:
        clock.now += 0.125
        closed.append(obs.close_exchange("x1", None))
    return [*closed, obs.close_exchange("d1", None)]


def closed_after_delete_answered(obs: Any, clock: Ticking) -> list[Any]:
    """As `closed_by_delete`, the server closing the call's stream after it answered the DELETE."""
    return closed_by_delete(obs, clock, answered_first=True)


def dropped_then_delete_refused(obs: Any, clock: Ticking) -> list[Any]:
    """The server drops a call's stream after an event id; the client's DELETE of the session is
    refused (HTTP 405: the server does not let clients end sessions), so the session goes on."""
    _call_with_progress(obs, clock, "x1", 1)
    closed = [obs.close_exchange("x1", None)]
    _delete(obs, "d1")
    obs.response_head("d1", status=405, content_type=None, headers={})
    return [*closed, obs.close_exchange("d1", None)]


def closed_after_cancel(obs: Any, clock: Ticking) -> list[Any]:
    """The client cancels a call; the server (the TypeScript SDK's) sends no answer and closes the
    call's stream, which carried event ids."""
    _call_with_progress(obs, clock, "x1", 1)
    closed = [_cancel(obs, clock, "x2", 1)]
    return [*closed, obs.close_exchange("x1", None)]


def cancelled_while_cut(obs: Any, clock: Ticking) -> list[Any]:
    """The server drops a call's stream after an event id; the client cancels instead of resuming."""
    _call_with_progress(obs, clock, "x1", 1)
    closed = [obs.close_exchange("x1", None)]
    clock.now += 0.5
    return [*closed, _cancel(obs, clock, "x2", 1)]


def cut_then_session_gone(obs: Any, clock: Ticking) -> list[Any]:
    """A cut stream the client does not resume; its next request gets HTTP 404: the session is gone
    from the server (it restarted, or expired the session)."""
    _call_with_progress(obs, clock, "x1", 1)
    closed = [obs.close_exchange("x1", "client_disconnected")]
    clock.now += 2.0
    ping = classify_value(request(2, "ping", {}))
    obs.open_exchange("x2", http_method="POST", path="/mcp", headers=HEADERS, session=SESSION, **LEGACY)
    obs.message("x2", ping, size=40, direction=Direction.TO_SERVER, channel=Channel.POST)
    obs.response_head("x2", status=404, content_type="application/json", headers={})
    return [*closed, obs.close_exchange("x2", None)]


def cut_and_id_reused(obs: Any, clock: Ticking) -> list[Any]:
    """A cut stream the client never resumes; a later call of the session takes the same id (a naive
    retry), so no resume can reach the first one; the later call is cut too and still waits."""
    _call_with_progress(obs, clock, "x1", 1)
    closed = [obs.close_exchange("x1", "client_disconnected")]
    clock.now += 1.0
    _call_with_progress(obs, clock, "x2", 1)
    return [*closed, obs.close_exchange("x2", "client_disconnected")]
