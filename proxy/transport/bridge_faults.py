"""Fault injection on bridged exchanges: the client's messages, judged before the bridge sees them.

A bridge's engine makes and rewrites the messages on both of its sides, so the gate acts where a
client's message enters it: `delay` holds it, `error` answers a request with a JSON-RPC error and
`drop` answers it with the proxy's drop error (a notification or a client's answer is accepted with
202 and never reaches the engine). Any other action a rule picks for a bridged message is recorded as
not injected, with the reason; the bridge's own messages (its rounds, its in-flight requests, the
upstream's answers) do not pass through the gate yet (docs/faults.md).
"""

from __future__ import annotations

from typing import Any

from proxy.engine.gate.messages import asked_of, drop_answer, error_answer, seen
from proxy.engine.gate.rules import BRIDGED_ACTIONS, Fault, FaultGate
from proxy.flows.events import Mode
from proxy.flows.observations import FaultInjected
from proxy.flows.sink import ObservationSink
from proxy.framing.classify import Route
from proxy.transport.holds import Holds
from proxy.wire.jsonrpc import Kind, Message

Answer = tuple[int, dict[str, Any] | None]
"""An HTTP status and the JSON-RPC message the client gets (None: an empty 202)."""


async def bridged_client_faults(
    gate: FaultGate, sink: ObservationSink, exchange: str, route: Route, mode: Mode, holds: Holds
) -> Answer | None:
    """Apply the faults on a bridged request's messages; the answer when a fault answered it."""
    messages = route.body.messages
    if not gate.concerns(messages):
        return None
    asked = asked_of(messages)
    era = str(route.era)
    delay_ms = 0.0
    for msg in messages:
        judged = seen(msg, "client", era=era, session=route.session_id, asked=asked, mode=mode.value)
        fault = gate.decide(judged)
        if fault is None:
            continue
        kind = fault.action.kind
        if kind not in BRIDGED_ACTIONS:
            _note(
                gate,
                sink,
                exchange,
                fault,
                msg,
                False,
                f"on a bridged exchange faults take {', '.join(BRIDGED_ACTIONS)}",
            )
        elif kind == "delay":
            delay_ms += fault.action.delay_ms
            _note(gate, sink, exchange, fault, msg, True, "held before the bridge took it")
        elif len(messages) > 1:
            _note(gate, sink, exchange, fault, msg, False, "a message in a batch is relayed whole")
        else:
            return _answer(gate, sink, exchange, fault, msg)
    if delay_ms:
        await holds.wait(delay_ms / 1000)
    return None


def _answer(gate: FaultGate, sink: ObservationSink, exchange: str, fault: Fault, msg: Message) -> Answer:
    if msg.kind is not Kind.REQUEST:
        _note(gate, sink, exchange, fault, msg, True, "not forwarded (the client got 202)")
        return 202, None
    if fault.action.kind == "error":
        _note(gate, sink, exchange, fault, msg, True, "answered by the proxy before the bridge")
        return 200, error_answer(msg.id, fault.action, fault.rule_id)
    _note(gate, sink, exchange, fault, msg, True, "not forwarded; the client got an error saying so")
    return 200, drop_answer(msg.id, fault.rule_id)


def _note(
    gate: FaultGate,
    sink: ObservationSink,
    exchange: str,
    fault: Fault,
    msg: Message,
    applied: bool,
    detail: str,
) -> None:
    gate.injected[fault.action.kind if applied else "not_injected"] += 1
    sink.emit(
        FaultInjected(
            sink.now(),
            exchange,
            fault.describe(),
            gate.label(fault.rule_id),
            "client",
            msg.id,
            msg.method,
            applied,
            detail,
        )
    )
