"""Intercepts on a bridge's own messages: what it sends the client, what it sends and gets upstream.

A bridge's engine makes messages on both of its sides: toward the client its in-flight requests,
its `input_required` results and its answers; toward the upstream its calls, its retries with
`inputResponses` and its answers to the upstream's requests; and it takes what the upstream sends.
The driver (`proxy.transport.bridge`) asks `BridgeHolds` at the one place each of those is carried
out; a message an intercept rule picks is held at the desk, and the decision comes back as an
`Outcome` the driver carries out:

- `send`: send `message` (the original, or the edit).
- `skip`: nothing goes on (a notification or an answer dropped).
- `reply`: the message is not sent, and `message` is the answer its sender gets in its place (a
  request dropped or answered): the driver hands it to the engine as if the other side had sent it
  (a bridge-made request to the client, a bridge's call upstream), or POSTs it upstream as the
  client would (a request the upstream sent the bridge).

Only intercept rules are asked here (`FaultGate.decide_hold`): fault rules act on a bridged
exchange's client messages only (`proxy.transport.bridge_faults`). Answers are judged by the
request they answer, remembered per side in small bounded tables while rules are in force.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from proxy.engine.gate.messages import (
    asked_of,
    intercept_drop_answer,
    intercept_dropped_answer,
    intercept_refusal,
    seen,
)
from proxy.flows.events import Mode
from proxy.flows.proxy_notes import by_intercept
from proxy.wire.jsonrpc import Kind, Message, RequestId, classify_value
from proxy.wire.mcp import target_name

if TYPE_CHECKING:
    from proxy.transport.relay import RelayContext

ASKED_BOUND: Final = 4096
"""Most requests remembered per table (what an answer answers); past it the table starts afresh."""

_CLIENT_ERAS: Final = {Mode.LEGACY_TO_MRTR: "legacy", Mode.MRTR_TO_LEGACY: "modern"}


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the driver does with a message a decision released (see the module docstring)."""

    verb: str
    message: Any = None
    by: str | None = None
    """Who made a `reply` that answers a request in the client's place (`intercept:i2`, from
    `proxy.flows.proxy_notes.by_intercept`): a bridge-made request to the client, or the upstream's."""
    dropped: bool = False
    """The `reply` is the drop's refusal: the request was dropped, not answered."""


def _remember(table: dict[Any, tuple[str | None, str | None]], key: Any, msg: Message) -> None:
    """Note what a request is under `key`, starting the table afresh at its bound."""
    if len(table) >= ASKED_BOUND:
        table.clear()
    table[key] = (msg.method, target_name(msg.method, msg.params))


class BridgeHolds:
    """Judges a bridge's own messages against the intercept rules, and holds the ones they pick."""

    def __init__(self, relays: RelayContext, mode: Mode) -> None:
        self.relays = relays
        self.mode = mode
        self.era = _CLIENT_ERAS[mode]
        self._client_asked: dict[tuple[str, RequestId], tuple[str | None, str | None]] = {}
        """(exchange, id) of the client's requests: what the bridge's answers to the client answer."""
        self._leg_asked: dict[tuple[str, RequestId], tuple[str | None, str | None]] = {}
        """(leg, id) of the bridge's requests upstream: what the upstream's answers answer."""
        self._upstream_asked: dict[RequestId, tuple[str | None, str | None]] = {}
        """Ids of the upstream's requests to the bridge: what the bridge's answers upstream answer."""

    @property
    def active(self) -> bool:
        """Whether any intercept rule is in force (else nothing is judged or remembered)."""
        gate = self.relays.gate
        return gate is not None and gate.holding and self.relays.desk is not None

    def client_request(self, exchange: str, messages: tuple[Message, ...]) -> None:
        """Remember a client's requests on an exchange (the bridge's answers on it answer them)."""
        for ident, asked in asked_of(messages).items():
            if len(self._client_asked) >= ASKED_BOUND:
                self._client_asked.clear()
            self._client_asked[(exchange, ident)] = asked

    async def to_client(self, exchange: str, message: dict[str, Any], session: str | None) -> Outcome:
        """A message the bridge sends the client (an SSE event or a JSON answer)."""
        msg = classify_value(message)
        asked = (
            {msg.id: self._client_asked.get((exchange, msg.id), (None, None))} if msg.id is not None else {}
        )
        decision = await self._hold(msg, "server", exchange, session, asked, side="client")
        if decision is None:
            return Outcome("send", message)
        verb, made, rule = decision
        if verb == "forward":
            return Outcome("send", made or message)
        if msg.kind is Kind.REQUEST:  # a bridge-made request: its answer goes back to the bridge
            dropped = verb != "answer" or made is None
            reply = intercept_refusal(msg.id, rule) if dropped else made
            return Outcome("reply", reply, by_intercept(rule), dropped)
        if msg.is_response:
            return Outcome("send", made if verb == "answer" else intercept_dropped_answer(msg.id, rule))
        return Outcome("skip")

    async def to_upstream(self, leg: str, exchange: str, message: dict[str, Any]) -> Outcome:
        """A message the bridge sends the upstream on leg `leg` (a call, a retry, an answer)."""
        msg = classify_value(message)
        asked: dict[RequestId, tuple[str | None, str | None]] = {}
        if msg.kind is Kind.REQUEST and msg.id is not None:
            _remember(self._leg_asked, (leg, msg.id), msg)
        elif msg.is_response and msg.id is not None:
            asked[msg.id] = self._upstream_asked.get(msg.id, (None, None))
        decision = await self._hold(msg, "client", exchange, None, asked, side="upstream")
        if decision is None:
            return Outcome("send", message)
        verb, made, rule = decision
        if verb == "forward":
            return Outcome("send", made or message)
        if msg.kind is Kind.REQUEST:  # the bridge gets an answer as if the upstream had sent it
            return Outcome("reply", made if verb == "answer" else intercept_drop_answer(msg.id, rule))
        return Outcome("skip")

    async def from_upstream(self, leg: str, exchange: str, msg: Message) -> Outcome:
        """A message the upstream sent the bridge on leg `leg`."""
        asked: dict[RequestId, tuple[str | None, str | None]] = {}
        if msg.kind is Kind.REQUEST and msg.id is not None:
            _remember(self._upstream_asked, msg.id, msg)
        elif msg.is_response and msg.id is not None:
            asked[msg.id] = self._leg_asked.get((leg, msg.id), (None, None))
        decision = await self._hold(msg, "server", exchange, None, asked, side="client")
        if decision is None:
            return Outcome("send", msg)
        verb, made, rule = decision
        if verb == "forward":
            return Outcome("send", classify_value(made) if made is not None else msg)
        if msg.kind is Kind.REQUEST:  # the upstream gets the client's answer, from the proxy
            answered = verb == "answer" and made is not None
            answer = made if answered else intercept_refusal(msg.id, rule)
            return Outcome("reply", answer, by_intercept(rule), not answered)
        if msg.is_response:
            made = made if verb == "answer" else intercept_dropped_answer(msg.id, rule)
            return Outcome("send", classify_value(made))
        return Outcome("skip")

    def forget(self, exchange: str | None = None, leg: str | None = None) -> None:
        """Drop what was remembered for a closed exchange or leg."""
        if exchange is not None:
            for key in [k for k in self._client_asked if k[0] == exchange]:
                del self._client_asked[key]
        if leg is not None:
            for key in [k for k in self._leg_asked if k[0] == leg]:
                del self._leg_asked[key]

    async def _hold(
        self,
        msg: Message,
        direction: str,
        exchange: str,
        session: str | None,
        asked: dict[RequestId, tuple[str | None, str | None]],
        *,
        side: str,
    ) -> tuple[str, dict[str, Any] | None, str] | None:
        """(verb, the edit or answer, rule id) once a held message is decided; None when not picked."""
        gate, desk = self.relays.gate, self.relays.desk
        if gate is None or desk is None:
            return None
        masks = self.relays.observations.redactor
        judged = seen(
            msg, direction, era=self.era, session=session, asked=asked, masks=masks, mode=self.mode.value
        )
        fault = gate.decide_hold(judged)
        if fault is None:
            return None
        decision = await desk.hold(fault, exchange, msg, judged, side=side)
        return decision.verb, decision.message, fault.rule_id
