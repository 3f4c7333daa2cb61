"""Fault injection on bridged exchanges: the client's messages, judged before the bridge sees them.

A bridge's engine makes and rewrites the messages on both of its sides, so the gate acts where a
client's message enters it: `delay` holds it, `error` answers a request with a JSON-RPC error and
`drop` answers it with the proxy's drop error (a notification or a client's answer is accepted with
202 and never reaches the engine). Any other action a rule picks for a bridged message is recorded as
not injected, with the reason; the bridge's own messages (its rounds, its in-flight requests, the
upstream's answers) do not pass through the gate yet (docs/faults.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from proxy.engine.gate.actions import HOLD
from proxy.engine.gate.match import Seen
from proxy.engine.gate.messages import asked_of, drop_answer, error_answer, intercept_reply, seen
from proxy.engine.gate.rules import BRIDGED_ACTIONS, Fault, FaultGate
from proxy.flows.events import Mode
from proxy.flows.observations import AnsweredByProxy, FaultInjected
from proxy.flows.sink import ObservationSink
from proxy.framing.classify import Route
from proxy.transport.holds import Holds
from proxy.transport.intercept_desk import InterceptDesk
from proxy.wire.jsonrpc import Kind, Message, RequestId, dumps, parse_body

Answer = tuple[int, dict[str, Any] | None, str | None]
"""An HTTP status, the JSON-RPC message the client gets (None: an empty 202), and the note its record
carries saying the proxy made it and why (as pass-through notes its own answers)."""


@dataclass(frozen=True, slots=True)
class Edited:
    """The client's request as an intercept's decision edited it, for the bridge to take instead, and
    the note the bridge's upstream call made from it carries (as pass-through notes the edited leg)."""

    route: Route
    note: str


async def bridged_client_faults(
    gate: FaultGate,
    sink: ObservationSink,
    exchange: str,
    route: Route,
    mode: Mode,
    holds: Holds,
    desk: InterceptDesk | None = None,
) -> Answer | Edited | None:
    """Apply the faults and intercepts on a bridged request's messages: the answer when one answered
    it, the edited request to take instead when an intercept's decision edited it, else None."""
    messages = route.body.messages
    asked = asked_of(messages, server_asked(sink, route.session_id))
    if not gate.concerns(messages, asked):
        return None
    era = str(route.era)
    delay_ms = 0.0
    for msg in messages:
        judged = seen(
            msg,
            "client",
            era=era,
            session=route.session_id,
            asked=asked,
            masks=sink.redactor,
            mode=mode.value,
        )
        fault = gate.decide(judged)
        if fault is None:
            continue
        kind = fault.action.kind
        if kind == HOLD:
            if desk is None:
                continue
            held = await _hold(desk, sink, exchange, route, fault, msg, judged)
            if held is not None:
                return held
            continue
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


async def _hold(
    desk: InterceptDesk,
    sink: ObservationSink,
    exchange: str,
    route: Route,
    fault: Fault,
    msg: Message,
    judged: Seen,
) -> Answer | Edited | None:
    """Hold a client's message before the bridge takes it; what the decision makes of it (a request
    answered or dropped at the desk never goes upstream, so the proxy is recorded as answering it)."""
    alone = len(route.body.messages) == 1
    decision = await desk.hold(fault, exchange, msg, judged, side="upstream", alone=alone)
    if decision.verb == "forward":
        if decision.message is None:
            return None
        raw = dumps(decision.message)
        note = f"edited by the proxy's intercept ({fault.rule_id}), sent in place of the client's"
        return Edited(replace(route, raw=raw, body=parse_body(raw)), note)
    if msg.kind is not Kind.REQUEST:  # a notification or a client's answer: never reaches the bridge
        return 202, None, None
    sink.emit(AnsweredByProxy(sink.now(), exchange, f"intercept {fault.rule_id}"))  # no upstream time
    answer = decision.message if decision.verb == "answer" else None
    return 200, *intercept_reply(answer, msg.id, fault.rule_id)


def _answer(gate: FaultGate, sink: ObservationSink, exchange: str, fault: Fault, msg: Message) -> Answer:
    if msg.kind is not Kind.REQUEST:
        _note(gate, sink, exchange, fault, msg, True, "not forwarded (the client got 202)")
        return 202, None, None
    sink.emit(AnsweredByProxy(sink.now(), exchange, f"fault {fault.rule_id}"))  # no upstream time to count
    made = fault.made_note()
    if fault.action.kind == "error":
        _note(gate, sink, exchange, fault, msg, True, "answered by the proxy before the bridge")
        return 200, error_answer(msg.id, fault.action, fault.rule_id), made
    _note(gate, sink, exchange, fault, msg, True, "not forwarded; the client got an error saying so")
    return 200, drop_answer(msg.id, fault.rule_id), made


def _note(
    gate: FaultGate,
    sink: ObservationSink,
    exchange: str,
    fault: Fault,
    msg: Message,
    applied: bool,
    detail: str,
) -> None:
    gate.settle(fault, applied=applied)
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
            fault.action.delay_ms if fault.action.kind == "delay" else 0.0,
        )
    )


def server_asked(sink: ObservationSink, session: str | None) -> Callable[[RequestId], str | None]:
    """The method of the request the server (or a bridge) sent the client under this session and id,
    as the round-trip tally remembers it: what a client's answer answers."""
    tally = sink.tally
    return lambda ident: tally.asked(session, ident)
