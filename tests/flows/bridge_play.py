"""The observer calls the MRTR->legacy bridge driver makes for one call parked for one elicitation.

Shared by the sink and capture tests: played into a sink that builds at once (what a live watcher
sees) or one that queues (or into a capture), each must build the same chain.
"""

from __future__ import annotations

from typing import Any, Protocol

from proxy.flows.events import Channel, Direction, Mode, Side
from proxy.wire.jsonrpc import classify_value, request, result_response

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
    closed = [obs.close_exchange("x1", None)]

    clock.now += 2.0
    answer = {"action": "accept", "content": {"name": "octocat"}}
    params = {
        "name": "ask_name",
        "arguments": {},
        "inputResponses": {"elicitation-1": answer},
        "requestState": state,
    }
    again = classify_value(request(2, "tools/call", params))
    obs.open_exchange("x2", http_method="POST", path="/mcp", headers=PARK_HEADERS, session=None, **modern)
    obs.message("x2", again, size=200, direction=Direction.TO_SERVER, channel=Channel.POST, side=Side.CLIENT)
    obs.link_leg("leg-3", "leg-1")
    upstream_answer = result_response(0, answer)
    obs.leg_message(
        "leg-3", "x2", upstream_answer, size=80, direction=Direction.TO_SERVER, channel=Channel.POST
    )
    resumed = {"principal": "p-1f2e", "pending_keys": [], "age_ms": 2000.0}
    obs.continuation_changed("x1", continuation="continuation-2", state="resumed", **resumed)
    obs.leg_closed("leg-3")
    clock.now += 0.25
    final = result_response("mrtr-1", {"content": [{"type": "text", "text": "Hello, octocat!"}]})
    obs.leg_message("leg-1", "x1", final, size=75, direction=to_client, channel=Channel.SSE)
    obs.response_head("x2", status=200, content_type="application/json", headers={})
    done = classify_value(result_response(2, {"resultType": "complete", **final["result"]}))
    obs.message("x2", done, size=90, direction=Direction.TO_CLIENT, channel=Channel.JSON, side=Side.CLIENT)
    closed.append(obs.close_exchange("x2", None))
    obs.leg_closed("leg-1")
    ended = {"principal": None, "pending_keys": [], "age_ms": 0.0}
    obs.continuation_changed("x1", continuation="continuation-2", state="ended", **ended)
    return closed
