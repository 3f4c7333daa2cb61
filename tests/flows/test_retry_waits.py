"""The pass-through calls a drain waits for: answered `input_required`, their retry not come yet."""

from __future__ import annotations

from typing import Any

from proxy.flows.events import Channel, Direction, Mode
from proxy.flows.observations import ExchangeClosed, ExchangeOpened, MessageSeen
from proxy.flows.retry_waits import RetryWaits
from proxy.wire.jsonrpc import classify_value

ASK = {"inputRequests": {"name": {"method": "elicitation/create", "params": {"message": "name?"}}}}


def call(ident: int, **extra: Any) -> dict[str, Any]:
    params = {"name": "ask_name", "arguments": {"a": 1}, **extra}
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params}


def input_required(ident: int, state: str | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {"resultType": "input_required", **ASK}
    if state is not None:
        result["requestState"] = state
    return {"jsonrpc": "2.0", "id": ident, "result": result}


def done(ident: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "result": {"resultType": "complete", "content": []}}


def exchange(
    waits: RetryWaits,
    ex: str,
    sent: dict[str, Any],
    got: dict[str, Any],
    *,
    t: float = 1.0,
    mode: Mode = Mode.PASSTHROUGH,
    era: str = "modern",
) -> None:
    """One POST exchange: the client's `sent`, the answer `got`, then its close."""
    waits.observe_all(
        [
            ExchangeOpened(t, ex, "POST", "/mcp", {}, None, client_era=era, mode=mode, connection="k1"),
            MessageSeen(t, ex, classify_value(sent), 10, Direction.TO_SERVER, Channel.POST),
            MessageSeen(t, ex, classify_value(got), 10, Direction.TO_CLIENT, Channel.POST),
            ExchangeClosed(t, ex, None),
        ]
    )


def test_a_call_answered_input_required_is_awaited_until_its_retry_echoes_its_request_state() -> None:
    waits = RetryWaits()
    exchange(waits, "x1", call(1), input_required(1, state="sealed-1"))
    assert len(waits) == 1
    exchange(waits, "x2", call(2, inputResponses={"name": {}}, requestState="other"), done(2))
    assert len(waits) == 1  # a retry of another call
    exchange(waits, "x3", call(3, inputResponses={"name": {}}, requestState="sealed-1"), done(3))
    assert len(waits) == 0


def test_a_retry_without_request_state_is_matched_by_method_target_arguments_and_answered_inputs() -> None:
    waits = RetryWaits()
    exchange(waits, "x1", call(1), input_required(1))
    exchange(waits, "x2", call(2, inputResponses={"colour": {}}), done(2))
    assert len(waits) == 1  # answers an input nobody asked for
    exchange(waits, "x3", call(3, inputResponses={"name": {}}), input_required(3, state="round-2"))
    assert len(waits) == 1  # the next round waits in its place
    exchange(waits, "x4", call(4, inputResponses={"name": {}}, requestState="round-2"), done(4))
    assert len(waits) == 0


def test_a_retry_the_server_refuses_leaves_the_call_awaited() -> None:
    waits = RetryWaits()
    exchange(waits, "x1", call(1), input_required(1, state="sealed-1"))
    refusal = {"jsonrpc": "2.0", "id": 2, "error": {"code": -32602, "message": "Invalid requestState"}}
    exchange(waits, "x2", call(2, inputResponses={"name": {}}, requestState="sealed-1"), refusal)
    assert len(waits) == 1


def test_a_call_whose_client_never_retries_stops_being_awaited_once_its_window_runs_out() -> None:
    waits = RetryWaits(window=5.0)
    exchange(waits, "x1", call(1), input_required(1), t=10.0)
    waits.sweep(15.0)
    assert len(waits) == 1
    waits.sweep(15.1)
    assert len(waits) == 0


def test_past_its_bound_the_oldest_call_is_forgotten_and_counted() -> None:
    waits = RetryWaits(bound=2)
    for n in range(3):
        exchange(waits, f"x{n}", call(n, arguments={"n": n}), input_required(n))
    assert (len(waits), waits.take_forgotten(), waits.take_forgotten()) == (2, 1, 0)


def test_bridged_and_legacy_exchanges_are_left_to_their_own_tables() -> None:
    waits = RetryWaits()
    exchange(waits, "x1", call(1), input_required(1), mode=Mode.MRTR_TO_LEGACY)
    exchange(waits, "x2", call(2), input_required(2), era="legacy")
    assert len(waits) == 0
