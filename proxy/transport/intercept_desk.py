"""The held messages of intercept rules: a bounded table where each waits for a decision or its deadline.

A gate point that meets a hold (`proxy.engine.gate.intercepts`) awaits `InterceptDesk.hold`: the
message is shown (redacted) in the table until a person decides (`decide`: forward, forward edited,
drop, answer), its deadline passes (forwarded unchanged), its rule is deleted, or the proxy drains or
stops (every held message forwarded unchanged, and later ones not held). Past `max_held` a picked
message is not held but forwarded at once and recorded so. Each hold and release is an observation
(`InterceptHeld`, `InterceptReleased`): the chain notes it, the log line and the capture keep it.

The desk checks a decision before it takes it (`proxy.wire.edits`): an edit that is not JSON-RPC,
changes the kind or id, or moves a redacted stand-in is refused with the reason and never sent; a
stand-in left where it was shown gets its secret back, and the redactor masks that secret wherever it
shows up next (the server's answer may echo it). An edit that changes what the message does (its
method, tool, prompt or resource) gets no secret back: it is refused. What the decision means for the
message is the gate point's to carry out (`Decision`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from proxy.engine.gate.match import Seen
from proxy.engine.gate.rules import Fault, FaultGate
from proxy.flows.observations import InterceptHeld, InterceptReleased
from proxy.flows.sink import ObservationSink
from proxy.transport.admin_names import did_you_mean, stray_keys
from proxy.wire.edits import (
    EditRefused,
    answer_message,
    check_message,
    restore_stand_ins,
    restored_values,
)
from proxy.wire.jsonrpc import Message, RequestId

DECIDERS: Final = ("api", "tui")
"""Who may be named as deciding (`by`) when a decision is posted."""

DECISION_KEYS: Final = {
    "forward": ("decision", "by", "message"),
    "drop": ("decision", "by"),
    "answer": ("decision", "by", "result", "error"),
}
"""The keys a decision takes, by its verb: any other key is refused before the message is released,
so a misspelled `message` never sends the held message unedited, and a `result` given with
`forward` or `drop` never passes for an answer."""

MAX_WAIT_S: Final = 60.0
"""Longest a long poll for new held messages (`wait`) is kept open."""

ID_KEY_BYTES: Final = 4
"""Random bytes in a held message's id: 2**32 ids to try within the hold's timeout."""

RECENT_RELEASES: Final = 64
"""Releases `/api/intercepts` lists (newest last): an editor open on a message that left the held
list reads there how it left (a timeout, the client leaving, another decision)."""


class InterceptError(Exception):
    """A request about intercepts that cannot be carried out: the HTTP status and the reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Decision:
    """What becomes of a held message: `forward` (with `message`: edited), `drop`, or `answer`
    (`message`: the response to send in its place)."""

    verb: str
    message: dict[str, Any] | None = None
    by: str = "api"

    @property
    def name(self) -> str:
        """`forward`, `forward_edited`, `drop` or `answer` (as observations and metrics name it)."""
        return "forward_edited" if self.verb == "forward" and self.message is not None else self.verb


FORWARD: Final = Decision("forward", by="none")
"""A message picked but not held: it goes on unchanged."""


@dataclass(slots=True)
class Held:
    """One held message and the future its gate point awaits."""

    number: int
    rule: str
    label: str
    exchange: str
    direction: str
    kind: str
    method: str | None
    msg: Message
    mode: str
    side: str
    held_at: float
    deadline: float
    shown: Any
    future: asyncio.Future[Decision]
    key: str = field(default_factory=lambda: secrets.token_hex(ID_KEY_BYTES))
    """The id's random part: a page that posts decisions blind cannot guess a held message's id."""

    @property
    def id(self) -> str:
        """`h3-9f2c41ab`: the held message's id in the admin API and the TUI; the number orders them
        (`wait?after=h3`), the random part makes it unguessable."""
        return f"h{self.number}-{self.key}"

    def view(self, chain: str | None) -> dict[str, Any]:
        """The held message as `/api/intercepts` shows it (its message redacted)."""
        return {
            "id": self.id,
            "rule": self.rule,
            "exchange": self.exchange,
            "chain": chain,
            "direction": self.direction,
            "kind": self.kind,
            "method": self.method,
            "mode": self.mode,
            "side": self.side,
            "held_at": self.held_at,
            "deadline": self.deadline,
            "message": self.shown,
        }


def _same_json(a: Any, b: Any) -> bool:
    """Whether two JSON values are the same message: equal as JSON text, whatever their keys' order
    (Python's `==` would take `1` for `1.0` and `true` for `1`, which a peer may tell apart)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _kind(seen: Seen) -> str | None:
    if seen.kind in ("result", "error"):
        return "response"
    return seen.kind if seen.kind in ("request", "notification") else None


class InterceptDesk:
    """The held messages, bounded; each released by a decision, its deadline, or the proxy stopping."""

    def __init__(
        self,
        sink: ObservationSink,
        gate: FaultGate,
        *,
        default_timeout: float,
        max_held: int,
        max_body_bytes: int,
        chain_of: Callable[[str, RequestId | None], str | None] = lambda _x, _i: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.sink = sink
        self.gate = gate
        self.default_timeout = default_timeout
        self.max_held = max_held
        self.max_body_bytes = max_body_bytes
        self.chain_of = chain_of
        """The chain a message of an exchange belongs to, when chains are being built (else None)."""
        self.clock = clock
        self.held: dict[str, Held] = {}
        self.held_total = 0
        """Messages held since the start (`mcp_proxy_intercepts_held_total`)."""
        self.released: Counter[str] = Counter()
        """Releases by decision (`forward`, `forward_edited`, `drop`, `answer`, `abandoned`)."""
        self.recent: deque[dict[str, Any]] = deque(maxlen=RECENT_RELEASES)
        """The latest releases, as `/api/intercepts` lists them under `released`."""
        self.draining = False
        self._numbers = itertools.count(1)
        self._new: asyncio.Event | None = None

    # -- the gate points --------------------------------------------------------------------------

    async def hold(
        self, fault: Fault, exchange: str, msg: Message, seen: Seen, *, side: str, alone: bool = True
    ) -> Decision:
        """Hold one message until it is decided on; `FORWARD` at once when it cannot be held.

        `side` is where the message is going (`upstream` or `client`); `alone` is False for a message
        in a batch, which is relayed whole and so is never held on its own.
        """
        kind = _kind(seen)
        label = self.gate.label(fault.rule_id)
        why = self._why_not(kind, alone)
        if why is not None or kind is None:
            self._emit(
                InterceptHeld(
                    self.sink.now(), exchange, "", label, seen.direction, msg.id, seen.method, False, why
                )
            )
            return FORWARD
        timeout = fault.action.delay_ms / 1000 or self.default_timeout
        now = self.clock()
        held = Held(
            number=next(self._numbers),
            rule=fault.rule_id,
            label=label,
            exchange=exchange,
            direction=seen.direction,
            kind=kind,
            method=seen.method,
            msg=msg,
            mode=seen.mode,
            side=side,
            held_at=now,
            deadline=now + timeout,
            shown=self._shown(exchange, msg),
            future=asyncio.get_running_loop().create_future(),
        )
        self.held[held.id] = held
        self.held_total += 1
        self._emit(
            InterceptHeld(self.sink.now(), exchange, held.id, label, seen.direction, msg.id, seen.method)
        )
        self._announce()
        try:
            return await asyncio.wait_for(asyncio.shield(held.future), timeout)
        except TimeoutError:
            return self._release(held, Decision("forward", by="timeout"))
        except asyncio.CancelledError:
            self._release(held, Decision("abandoned", by="client"))
            raise

    def _shown(self, exchange: str, msg: Message) -> Any:
        """The held message as observers show it, whether or not any observer has masked its exchange's
        head yet (without a capture or a watcher nothing has): the head's credentials are learned first,
        so an echo of the client's token in the message is masked."""
        redactor = self.sink.redactor
        opened = self.sink.tally.opened(exchange)
        if opened is not None:
            redactor.learn(opened.path, opened.headers)
        return redactor.body(msg.raw)

    def _why_not(self, kind: str | None, alone: bool) -> str | None:
        if kind is None:
            return "it is not a JSON-RPC request, notification or response"
        if self.draining:
            return "the proxy is draining"
        if not alone:
            return "a message in a batch is relayed whole"
        if len(self.held) >= self.max_held:
            count = len(self.held)
            return f"{count} message{'' if count == 1 else 's'} already held (intercept_max_held)"
        return None

    # -- decisions --------------------------------------------------------------------------------

    def decide(self, held_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Take a decision (`{"decision": ..., ...}` as the admin API receives it); InterceptError why not."""
        held = self.held.get(held_id)
        if held is None:
            now = ", ".join(self.held) or "none"
            raise InterceptError(
                404, f"no held message {held_id!r} (held now: {now}); it may have been released already"
            )
        verb = _verb(body)
        stray = stray_keys(body, DECISION_KEYS[verb], f"decision {verb}")
        if stray is not None:
            raise InterceptError(400, f"not decided: {stray}")
        by = body.get("by", "api")
        if by not in DECIDERS:
            raise InterceptError(400, f"by is one of {', '.join(DECIDERS)}, got {by!r}")
        decision = self._decision(held, verb, body, str(by))
        self._release(held, decision)
        return {"id": held.id, "decision": decision.name}

    def _decision(self, held: Held, verb: str, body: Mapping[str, Any], by: str) -> Decision:
        try:
            if verb == "drop":
                return Decision("drop", by=by)
            if verb == "answer":
                self._answerable(held)
                typed = restore_stand_ins(dict(body), {}, restore=False)
                answer = answer_message(held.msg.id, typed, max_bytes=self.max_body_bytes)
                return Decision("answer", answer, by)
            if "message" not in body:
                return Decision("forward", by=by)
            ident, limit = held.msg.id, self.max_body_bytes
            check_message(body["message"], kind=held.kind, ident=ident, max_bytes=limit)
            edited = restore_stand_ins(body["message"], held.shown, held.msg.raw)
            checked = check_message(edited, kind=held.kind, ident=ident, max_bytes=limit)
            if _same_json(checked, held.msg.raw):  # the held message sent back as it was
                return Decision("forward", by=by)
            self._remember_restored(body["message"], held.msg.raw)
            return Decision("forward", checked, by)
        except EditRefused as exc:
            raise InterceptError(400, f"not sent: {exc}") from None

    def _remember_restored(self, edited: Any, original: Any) -> None:
        """Have the redactor mask the secrets an edit got back wherever they show up next: the message
        now differs from the one its sender sent, and its answer may echo them."""
        for value in restored_values(edited, original):
            if isinstance(value, str):
                self.sink.redactor.remember(value)

    @staticmethod
    def _answerable(held: Held) -> None:
        if held.kind == "notification":
            raise InterceptError(409, "a notification has no answer: forward it, edit it or drop it")
        if held.kind == "response" and held.direction == "client":
            raise InterceptError(
                409,
                "this is the client's answer to the server's request; it has no answer of its own: "
                "forward it, edit it or drop it",
            )

    def _release(self, held: Held, decision: Decision) -> Decision:
        if self.held.pop(held.id, None) is None:
            return held.future.result() if held.future.done() else decision
        if not held.future.done():
            held.future.set_result(decision)
        self.released[decision.name] += 1
        now = self.clock()
        held_ms = round((now - held.held_at) * 1000, 3)
        self.recent.append({"id": held.id, "decision": decision.name, "by": decision.by, "at": now})
        self._emit(
            InterceptReleased(
                self.sink.now(),
                held.exchange,
                held.id,
                held.label,
                held.direction,
                held.msg.id,
                held.method,
                decision.name,
                decision.by,
                held_ms,
                decision.message,
            )
        )
        return decision

    def release_rule(self, rule_id: str) -> int:
        """Forward unchanged every message a deleted rule holds; how many."""
        mine = [held for held in self.held.values() if held.rule == rule_id]
        for held in mine:
            self._release(held, Decision("forward", by="rule_deleted"))
        return len(mine)

    def drain(self) -> None:
        """The proxy drains or stops: every held message goes on unchanged, and none is held after."""
        self.draining = True
        for held in list(self.held.values()):
            self._release(held, Decision("forward", by="drain"))

    # -- reading ----------------------------------------------------------------------------------

    def listing(self) -> list[dict[str, Any]]:
        """Every held message as the admin API shows it, oldest first."""
        return [held.view(self.chain_of(held.exchange, held.msg.id)) for held in self.held.values()]

    async def wait(self, after: str | None, seconds: float) -> list[dict[str, Any]]:
        """Held messages newer than `after` (`h3`; None: any), waiting up to `seconds` for one."""
        floor = _number(after)
        loop = asyncio.get_running_loop()
        end = loop.time() + max(0.0, min(seconds, MAX_WAIT_S))
        while True:
            newer = [h for h in self.held.values() if h.number > floor]
            left = end - loop.time()
            if newer or left <= 0:
                return [held.view(self.chain_of(held.exchange, held.msg.id)) for held in newer]
            if self._new is None:
                self._new = asyncio.Event()
            event = self._new
            try:
                async with asyncio.timeout(left):
                    await event.wait()
            except TimeoutError:
                pass

    def _announce(self) -> None:
        event, self._new = self._new, None
        if event is not None:
            event.set()

    def _emit(self, obs: InterceptHeld | InterceptReleased) -> None:
        self.sink.emit(obs)


def _verb(body: Mapping[str, Any]) -> str:
    """The decision's verb, or InterceptError(400) naming the verbs (and the closest one)."""
    verb = body.get("decision")
    if isinstance(verb, str) and verb in DECISION_KEYS:
        return verb
    close = did_you_mean(verb, DECISION_KEYS) if isinstance(verb, str) else ""
    stray = stray_keys(body, {key for keys in DECISION_KEYS.values() for key in keys}, "a decision")
    raise InterceptError(
        400,
        "decision is forward (optionally with message), drop or answer (with result or error), "
        f"got {verb!r}{close}" + (f"; {stray}" if stray else ""),
    )


def _number(held_id: str | None) -> int:
    """The order number of a held id (`h3-9f2c41ab`, or just `h3`: only the order matters here); None
    asks for any. Empty (`after=`, a script's unset variable) is refused, not read as any: it would
    answer messages held long ago."""
    if held_id is None:
        return 0
    head = held_id.partition("-")[0]
    digits = head[1:] if head[:1] == "h" else head
    if not digits.isdigit():
        raise InterceptError(400, f"after is a held message's id such as h3-9f2c41ab, got {held_id!r}")
    return int(digits)
