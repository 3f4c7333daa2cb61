"""Plays of a call whose first retry the server refuses for its `requestState`, then a good retry.

The client retries an `input_required` round with the right `requestState` but something the token
is not bound to (other arguments, another principal): the server (the MRTR->legacy bridge, or a
2026-07-28 server in pass-through) answers -32602 "Invalid or expired requestState" with HTTP 400
and touches nothing, so the proper retry that follows continues the call. Shared by the chain and
sink tests (live, built later, and read back from a capture).
"""

from __future__ import annotations

from typing import Any

from proxy.flows.events import Channel, Direction, Mode, Side
from proxy.wire.jsonrpc import classify_value, request, result_response
from tests.flows.bridge_play import PARK_HEADERS, Ticking, resumed_to_its_end

STATE = "sealed-request-state"
OTHER_PRINCIPAL = {"Content-Type": "application/json", "Authorization": "Bearer tok-someone-else"}
ANSWER = {"action": "accept", "content": {"name": "octocat"}}
BRIDGE_REFUSAL = {
    "code": -32602,
    "message": "Invalid or expired requestState",
    "data": {"reason": "invalid_request_state"},
}
SDK_REFUSAL = {"code": -32602, "message": "Invalid or expired requestState"}
"""How the Python SDK refuses a `requestState`: no `data`."""
ANSWER_REFUSAL = {
    "code": -32602,
    "message": "Invalid inputResponses: elicitation-1 (elicitation/create): 'action' must be one of "
    "accept, decline, cancel, got None",
    "data": {"reason": "invalid_input_responses"},
}
"""How the bridge refuses an answer that is no result of its question (the call stays parked)."""


def retry_request(
    ident: int, arguments: dict[str, Any], state: str, answer: dict[str, Any] = ANSWER
) -> dict[str, Any]:
    params = {"name": "ask_name", "arguments": arguments, "inputResponses": {"elicitation-1": answer}}
    return request(ident, "tools/call", {**params, "requestState": state})


def refused_retry(
    obs: Any, exchange: str, retry: dict[str, Any], refusal: tuple[dict[str, str], dict[str, Any]], **era: Any
) -> Any:
    """One retry (with these headers) the server refuses with this error (HTTP 400); returns what its
    close returned."""
    headers, error = refusal
    obs.open_exchange(exchange, http_method="POST", path="/mcp", headers=headers, session=None, **era)
    side = Side.CLIENT if era.get("mode") is Mode.MRTR_TO_LEGACY else Side.BOTH
    sent = classify_value(retry)
    obs.message(exchange, sent, size=200, direction=Direction.TO_SERVER, channel=Channel.POST, side=side)
    obs.response_head(exchange, status=400, content_type="application/json", headers={})
    reply = classify_value({"jsonrpc": "2.0", "id": retry["id"], "error": error})
    obs.message(exchange, reply, size=110, direction=Direction.TO_CLIENT, channel=Channel.JSON, side=side)
    return obs.close_exchange(exchange, None)


MODERN_TO_LEGACY: dict[str, Any] = {
    "client_era": "modern",
    "upstream_era": "legacy",
    "mode": Mode.MRTR_TO_LEGACY,
}


def park(obs: Any, clock: Ticking, exchange: str, sent: dict[str, Any], state: str) -> Any:
    """A bridged request (the call, or a retry asked again) parked on the legacy server's elicitation
    on leg-1 and answered `input_required` with `state`; returns what its close returned."""
    to_server, to_client = Direction.TO_SERVER, Direction.TO_CLIENT
    era = MODERN_TO_LEGACY
    obs.open_exchange(exchange, http_method="POST", path="/mcp", headers=PARK_HEADERS, session=None, **era)
    obs.message(
        exchange, classify_value(sent), size=90, direction=to_server, channel=Channel.POST, side=Side.CLIENT
    )
    if "requestState" not in sent["params"]:
        upstream_call = request("mrtr-1", "tools/call", {"name": "ask_name", "arguments": {}})
        obs.leg_message("leg-1", exchange, upstream_call, size=70, direction=to_server, channel=Channel.POST)
    clock.now += 0.5
    nested = request(sent["id"], "elicitation/create", {"message": "Your name?", "requestedSchema": {}})
    obs.leg_message("leg-1", exchange, nested, size=95, direction=to_client, channel=Channel.SSE)
    parked = {"principal": "p-1f2e", "pending_keys": ["elicitation-1"], "age_ms": 0.0}
    obs.continuation_changed("x1", continuation="continuation-2", state="parked", **parked)
    obs.response_head(exchange, status=200, content_type="application/json", headers={})
    asked = {
        "resultType": "input_required",
        "inputRequests": {"elicitation-1": {"method": "elicitation/create", "params": nested["params"]}},
        "requestState": state,
    }
    reply = classify_value(result_response(sent["id"], asked))
    obs.message(exchange, reply, size=180, direction=to_client, channel=Channel.JSON, side=Side.CLIENT)
    return obs.close_exchange(exchange, None)


def refused_bridge_retry(obs: Any, clock: Ticking) -> list[Any]:
    """A modern call bridged to a legacy server, parked on an elicitation; its first retry carries the
    call's `requestState` with other arguments (the bridge refuses it), the second is the proper one."""
    return _bridged_with_a_refusal(obs, clock, retry_request(2, {"x": 1}, STATE), BRIDGE_REFUSAL)


def refused_bridge_answer(obs: Any, clock: Ticking) -> list[Any]:
    """The same call whose first retry answers with no result of its question (no `action`): the
    bridge refuses it and keeps the call parked; the second retry is the proper one."""
    return _bridged_with_a_refusal(obs, clock, retry_request(2, {}, STATE, {"foo": 1}), ANSWER_REFUSAL)


def _bridged_with_a_refusal(
    obs: Any, clock: Ticking, refused: dict[str, Any], error: dict[str, Any]
) -> list[Any]:
    """x1 parks the call (leg-1 stays open), x2 is the refused retry, x3 the accepted one whose answer
    goes upstream on leg-3; the result arrives on leg-1."""
    modern = MODERN_TO_LEGACY
    to_server = Direction.TO_SERVER
    call = request(1, "tools/call", {"name": "ask_name", "arguments": {}})
    closed = [park(obs, clock, "x1", call, STATE)]

    clock.now += 1.0
    closed.append(refused_retry(obs, "x2", refused, (PARK_HEADERS, error), **modern))
    clock.now += 1.0
    again = classify_value(retry_request(3, {}, STATE))
    obs.open_exchange("x3", http_method="POST", path="/mcp", headers=PARK_HEADERS, session=None, **modern)
    obs.message("x3", again, size=200, direction=to_server, channel=Channel.POST, side=Side.CLIENT)
    return [*closed, *resumed_to_its_end(obs, clock, "x3", 3, result_response(1, ANSWER))]


def refused_passthrough_retry(obs: Any, clock: Ticking) -> list[Any]:
    """A 2026-07-28 call through pass-through whose server asks one question; another principal's
    retry with the call's `requestState` is refused (the Python SDK's way: no `data`), then the
    caller's own retry completes the call."""
    modern = {"client_era": "modern", "upstream_era": "modern"}
    ask = {"method": "elicitation/create", "params": {"message": "Your name?", "requestedSchema": {}}}
    call = classify_value(request(1, "tools/call", {"name": "ask_name", "arguments": {}}))
    obs.open_exchange("x1", http_method="POST", path="/mcp", headers=PARK_HEADERS, session=None, **modern)
    obs.message("x1", call, size=90, direction=Direction.TO_SERVER, channel=Channel.POST)
    obs.response_head("x1", status=200, content_type="application/json", headers={})
    clock.now += 0.25
    asked = {"resultType": "input_required", "inputRequests": {"elicitation-1": ask}, "requestState": STATE}
    reply = classify_value(result_response(1, asked))
    obs.message("x1", reply, size=120, direction=Direction.TO_CLIENT, channel=Channel.JSON)
    closed = [obs.close_exchange("x1", None)]
    clock.now += 1.0
    closed.append(
        refused_retry(obs, "x2", retry_request(2, {}, STATE), (OTHER_PRINCIPAL, SDK_REFUSAL), **modern)
    )
    clock.now += 1.0
    again = classify_value(retry_request(3, {}, STATE))
    obs.open_exchange("x3", http_method="POST", path="/mcp", headers=PARK_HEADERS, session=None, **modern)
    obs.message("x3", again, size=200, direction=Direction.TO_SERVER, channel=Channel.POST)
    obs.response_head("x3", status=200, content_type="application/json", headers={})
    clock.now += 0.25
    done = classify_value(result_response(3, {"content": [{"type": "text", "text": "Hello, octocat!"}]}))
    obs.message("x3", done, size=90, direction=Direction.TO_CLIENT, channel=Channel.JSON)
    closed.append(obs.close_exchange("x3", None))
    return closed
