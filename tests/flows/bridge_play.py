"""The observer calls the bridges make for one call that asks the client one question.

The MRTR->legacy bridge parks the call on the legacy server's elicitation; the legacy->MRTR bridge asks
the client in flight what the 2026-07-28 server's `input_required` asks. Shared by the sink, metrics
and capture tests: played into a sink that builds at once (what a live watcher sees) or one that
queues (or into a capture), each must build the same chain.
"""

from __future__ import annotations

from typing import Any, Protocol

from proxy.flows.events import Channel, Direction, Mode, Side
from proxy.wire.jsonrpc import classify_value, error_response, notification, request, result_response

STATE = "sealed-request-state"
PARK_HEADERS = {"Content-Type": "application/json", "Authorization": "Bearer tok-parked-secret"}


class Ticking(Protocol):
    """A clock the play moves by hand."""

    now: float


def parked_bridge_call(obs: Any, clock: Ticking, state: str = STATE) -> list[Any]:
    """A modern call bridged to a legacy server: parked on an elicitation, resumed, completed.

    Exchange x1 carries the call and gets `input_required`; its upstream leg (leg-1) stays open after
    x1 closes. Exchange x2 is the retry: its answer goes upstream on leg-3 (linked to leg-1), and the
    result arrives on leg-1. Returns what each close_exchange returned.
    """
    closed = _parked(obs, clock, state)
    clock.now += 2.0
    answer = {"action": "accept", "content": {"name": "octocat"}}
    params = {
        "name": "ask_name",
        "arguments": {},
        "inputResponses": {"elicitation-1": answer},
        "requestState": state,
    }
    again = classify_value(request(2, "tools/call", params))
    modern = {"client_era": "modern", "upstream_era": "legacy", "mode": Mode.MRTR_TO_LEGACY}
    obs.open_exchange("x2", http_method="POST", path="/mcp", headers=PARK_HEADERS, session=None, **modern)
    obs.message("x2", again, size=200, direction=Direction.TO_SERVER, channel=Channel.POST, side=Side.CLIENT)
    return [*closed, *resumed_to_its_end(obs, clock, "x2", 2, result_response(0, answer))]


def stopped_while_parked(obs: Any, clock: Ticking) -> list[Any]:
    """The call of `parked_bridge_call` parks, its client never retries, and the proxy stops 3 s later:
    the bridge lets the call go (`expired`, outcome `proxy_stopping`) and closes its leg."""
    closed = _parked(obs, clock, STATE)
    clock.now += 3.0
    gone = {"principal": None, "pending_keys": [], "age_ms": 3000.0}
    obs.continuation_changed(
        "x1", continuation="continuation-2", state="expired", outcome="proxy_stopping", **gone
    )
    obs.leg_closed("leg-1")
    return closed


def _parked(obs: Any, clock: Ticking, state: str) -> list[Any]:
    """Exchange x1's call, parked on leg-1's elicitation and answered `input_required`; returns what
    its close_exchange returned."""
    modern = {"client_era": "modern", "upstream_era": "legacy", "mode": Mode.MRTR_TO_LEGACY}
    call = classify_value(request(1, "tools/call", {"name": "ask_name", "arguments": {}}))
    obs.open_exchange("x1", http_method="POST", path="/mcp", headers=PARK_HEADERS, session=None, **modern)
    obs.message("x1", call, size=90, direction=Direction.TO_SERVER, channel=Channel.POST, side=Side.CLIENT)
    upstream_call = request("mrtr-1", "tools/call", {"name": "ask_name", "arguments": {}})
    to_server, to_client = Direction.TO_SERVER, Direction.TO_CLIENT
    obs.leg_message("leg-1", "x1", upstream_call, size=70, direction=to_server, channel=Channel.POST)
    clock.now += 0.5
    nested = request(0, "elicitation/create", {"message": "Your name?", "requestedSchema": {}})
    obs.leg_message("leg-1", "x1", nested, size=95, direction=to_client, channel=Channel.SSE)
    parked = {"principal": "p-1f2e", "pending_keys": ["elicitation-1"], "age_ms": 0.0}
    obs.continuation_changed("x1", continuation="continuation-2", state="parked", **parked)
    obs.response_head("x1", status=200, content_type="application/json", headers={})
    asked = {
        "resultType": "input_required",
        "inputRequests": {"elicitation-1": {"method": "elicitation/create", "params": nested["params"]}},
        "requestState": state,
    }
    reply = classify_value(result_response(1, asked))
    obs.message("x1", reply, size=180, direction=Direction.TO_CLIENT, channel=Channel.JSON, side=Side.CLIENT)
    return [obs.close_exchange("x1", None)]


def resumed_to_its_end(
    obs: Any, clock: Ticking, exchange: str, ident: int, answer: dict[str, Any]
) -> list[Any]:
    """The retry on `exchange` (JSON-RPC id `ident`) resumes the call x1 parked: `answer` goes upstream
    on leg-3 (linked to leg-1), the result arrives on leg-1 and answers the retry, the continuation
    ends. Returns what the retry's close returned."""
    obs.link_leg("leg-3", "leg-1")
    obs.leg_message("leg-3", exchange, answer, size=80, direction=Direction.TO_SERVER, channel=Channel.POST)
    resumed = {"principal": "p-1f2e", "pending_keys": [], "age_ms": 2000.0}
    obs.continuation_changed("x1", continuation="continuation-2", state="resumed", **resumed)
    obs.leg_closed("leg-3")
    clock.now += 0.25
    final = result_response("mrtr-1", {"content": [{"type": "text", "text": "Hello, octocat!"}]})
    obs.leg_message("leg-1", "x1", final, size=75, direction=Direction.TO_CLIENT, channel=Channel.SSE)
    obs.response_head(exchange, status=200, content_type="application/json", headers={})
    done = classify_value(result_response(ident, {"resultType": "complete", **final["result"]}))
    obs.message(
        exchange, done, size=90, direction=Direction.TO_CLIENT, channel=Channel.JSON, side=Side.CLIENT
    )
    closed = [obs.close_exchange(exchange, None)]
    obs.leg_closed("leg-1")
    ended = {"principal": None, "pending_keys": [], "age_ms": 0.0}
    obs.continuation_changed("x1", continuation="continuation-2", state="ended", **ended)
    return closed


def asked_bridge_call(obs: Any, clock: Ticking) -> list[Any]:
    """A legacy call bridged to a 2026-07-28 server whose `input_required` asks one question.

    Exchange x1 carries the call; its upstream leg (leg-1) answers `input_required`, which the proxy
    asks the client as an `elicitation/create` on x1's stream. The client answers on x2 (the proxy
    acknowledges it with 202), the retry goes upstream on leg-2, and its result ends x1's stream.
    Returns what each close_exchange returned.
    """
    legacy = {"client_era": "legacy", "upstream_era": "modern", "mode": Mode.LEGACY_TO_MRTR}
    to_server, to_client, client = Direction.TO_SERVER, Direction.TO_CLIENT, Side.CLIENT
    call = classify_value(request(4, "tools/call", {"name": "ask_name", "arguments": {}}))
    obs.open_exchange("x1", http_method="POST", path="/mcp", headers=PARK_HEADERS, session="s-1", **legacy)
    obs.message("x1", call, size=80, direction=to_server, channel=Channel.POST, side=client)
    upstream_call = request("mrtr-1", "tools/call", {"name": "ask_name", "arguments": {}})
    obs.leg_message("leg-1", "x1", upstream_call, size=90, direction=to_server, channel=Channel.POST)
    clock.now += 0.25
    ask = {"method": "elicitation/create", "params": {"message": "Your name?", "requestedSchema": {}}}
    asked = result_response("mrtr-1", {"resultType": "input_required", "inputRequests": {"name": ask}})
    obs.leg_message("leg-1", "x1", asked, size=150, direction=to_client, channel=Channel.JSON)
    obs.leg_closed("leg-1")
    obs.response_head("x1", status=200, content_type="text/event-stream", headers={})
    nested = classify_value(request("nested-1", "elicitation/create", ask["params"]))
    obs.message("x1", nested, size=95, direction=to_client, channel=Channel.SSE, side=client)
    clock.now += 2.0
    answer = {"action": "accept", "content": {"name": "octocat"}}
    obs.open_exchange("x2", http_method="POST", path="/mcp", headers=PARK_HEADERS, session="s-1", **legacy)
    reply = classify_value(result_response("nested-1", answer))
    obs.message("x2", reply, size=70, direction=to_server, channel=Channel.POST, side=client)
    obs.response_head("x2", status=202, content_type=None, headers={})
    closed = [obs.close_exchange("x2", None)]
    retry = request(
        "mrtr-2", "tools/call", {"name": "ask_name", "arguments": {}, "inputResponses": {"name": answer}}
    )
    obs.leg_message("leg-2", "x1", retry, size=140, direction=to_server, channel=Channel.POST)
    clock.now += 0.25
    final = {"content": [{"type": "text", "text": "Hello, octocat!"}]}
    obs.leg_message(
        "leg-2", "x1", result_response("mrtr-2", final), size=75, direction=to_client, channel=Channel.JSON
    )
    obs.leg_closed("leg-2")
    done = classify_value(result_response(4, final))
    obs.message("x1", done, size=70, direction=to_client, channel=Channel.SSE, side=client)
    closed.append(obs.close_exchange("x1", None))
    return closed


UPSTREAM_SESSION = "upstream-sess-9c1e-secret"
"""The session id the legacy server mints in `refused_leg_call` (shown only as a stand-in)."""

LEG_STATUSES = {"leg-1": 200, "leg-2": 404, "leg-3": 200, "leg-4": 202, "leg-5": 200}
"""The upstream's status on each leg of `refused_leg_call`."""


def refused_leg_call(obs: Any, clock: Ticking) -> list[Any]:
    """A modern call bridged to a legacy server that forgot the proxy's session, with every leg's head.

    The session's GET stream (leg-1) answers its head before any event; the call (leg-2) is refused
    404 with a JSON-RPC error; the proxy initializes again (leg-3, its head naming the new session),
    acknowledges it (leg-4: a 202 that carries no message) and calls again (leg-5, an SSE answer),
    which takes the log the server sends on the GET stream meanwhile (`joins`).
    Returns what the close_exchange returned.
    """
    modern = {"client_era": "modern", "upstream_era": "legacy", "mode": Mode.MRTR_TO_LEGACY}
    to_server, to_client = Direction.TO_SERVER, Direction.TO_CLIENT
    json, sse = "application/json", "text/event-stream"
    call = classify_value(request(1, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
    obs.open_exchange("x1", http_method="POST", path="/mcp", headers=PARK_HEADERS, session=None, **modern)
    obs.message("x1", call, size=90, direction=to_server, channel=Channel.POST, side=Side.CLIENT)
    obs.leg_head("leg-1", status=200, content_type=sse, headers={"Content-Type": sse})
    clock.now += 0.1
    upstream_call = request("legacy-1", "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    obs.leg_message("leg-2", "x1", upstream_call, size=80, direction=to_server, channel=Channel.POST)
    clock.now += 0.05
    obs.leg_head("leg-2", status=404, content_type=json, headers={"Content-Type": json})
    gone = error_response(None, -32600, "Session not found")
    obs.leg_message("leg-2", "x1", gone, size=70, direction=to_client, channel=Channel.JSON)
    obs.leg_closed("leg-2")
    init = request("legacy-2", "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}})
    obs.leg_message("leg-3", "x1", init, size=120, direction=to_server, channel=Channel.POST)
    clock.now += 0.05
    minted = {"Content-Type": json, "Mcp-Session-Id": UPSTREAM_SESSION}
    obs.leg_head("leg-3", status=200, content_type=json, headers=minted)
    ready = result_response("legacy-2", {"protocolVersion": "2025-11-25", "capabilities": {}})
    obs.leg_message("leg-3", "x1", ready, size=110, direction=to_client, channel=Channel.JSON)
    obs.leg_closed("leg-3")
    initialized = notification("notifications/initialized")
    obs.leg_message("leg-4", "x1", initialized, size=50, direction=to_server, channel=Channel.POST)
    obs.leg_head("leg-4", status=202, content_type=None, headers={})
    obs.leg_closed("leg-4")
    again = request("legacy-3", "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    obs.leg_message("leg-5", "x1", again, size=80, direction=to_server, channel=Channel.POST)
    logged = notification("notifications/message", {"level": "info", "data": "calling echo"})
    obs.leg_message(
        "leg-1", "x1", logged, size=60, direction=to_client, channel=Channel.GET_SSE, joins="leg-5"
    )
    clock.now += 0.1
    obs.leg_head("leg-5", status=200, content_type=sse, headers={"Content-Type": sse})
    echoed = {"content": [{"type": "text", "text": "hi"}]}
    obs.leg_message(
        "leg-5", "x1", result_response("legacy-3", echoed), size=75, direction=to_client, channel=Channel.SSE
    )
    obs.leg_closed("leg-5")
    obs.response_head("x1", status=200, content_type=json, headers={})
    done = classify_value(result_response(1, {"resultType": "complete", **echoed}))
    obs.message("x1", done, size=80, direction=to_client, channel=Channel.JSON, side=Side.CLIENT)
    closed = [obs.close_exchange("x1", None)]
    obs.leg_closed("leg-1")
    return closed
