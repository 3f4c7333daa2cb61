"""Observations kept as facts, and chains built from them only when someone looks.

Building a chain (correlation, redacted records, events, summaries) costs more CPU per small
exchange than relaying it. When nothing watches live (no TUI, no admin feed, no metrics), nobody
needs the chain yet: the pass-through relay's and the bridges' observations are queued here as
facts, in order and with their times, and replayed into the `ChainBuilder` the moment anything reads
the store or the builder, or a live watcher subscribes. Replaying the same calls with the same times
builds the same chains; the capture (when on) records every observation as a fact, whether it was
deferred or built live, so what it holds never depends on the bounded store, the bus or who watches.
A bridge's upstream legs are facts keyed by the leg: a leg can outlive the client exchange that
opened it (a parked call), so an open leg keeps its facts like an open exchange does.

Bounded: past `backlog` queued facts or `max_bytes` of bodies in them, the oldest facts of finished
exchanges are dropped one by one (their chains would have left the bounded store by the time anyone
looked); exchanges still open keep theirs, so what is built later stays consistent. Dropped facts
are counted.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy.flows.bus import EventBus
from proxy.flows.chains import ChainBuilder
from proxy.flows.events import Channel, Direction
from proxy.flows.exchanges import ExchangeSummary
from proxy.flows.redact import Redactor
from proxy.wire.jsonrpc import Kind, Message, RequestId, classify_value
from proxy.wire.mcp import target_name

DEFAULT_MAX_BYTES = 16 * 1024 * 1024
"""Body bytes the queued facts may hold before the oldest finished exchanges' facts are dropped."""

DEFAULT_BACKLOG = 10_000
"""Facts queued before the oldest finished exchanges' facts are dropped (about 2,000 small exchanges)."""


_STREAM_METHODS = {"GET": "GET stream", "DELETE": "DELETE session"}
"""What the builder names the chain of a GET or DELETE exchange (their log lines say the same)."""


class FactClock:
    """The builder's clock: the wall clock, or a fact's own time while that fact is replayed."""

    def __init__(self, source: Callable[[], float]) -> None:
        self._source = source
        self.at: float | None = None

    def __call__(self) -> float:
        at = self.at
        return at if at is not None else self._source()


@dataclass(slots=True)
class Fact:
    """One observation: the builder call it stands for, when it happened, and its exchange."""

    t: float
    op: str
    exchange: str
    kwargs: dict[str, Any]
    size: int = 0
    """Body bytes the fact holds (what counts against the backlog's byte bound)."""


@dataclass(slots=True)
class _Tally:
    """What the round-trip log line needs of a deferred exchange (the chain comes later).

    The line describes the exchange by what it carried: an exchange that only answered a nested
    request names no method, where a live line names the method of the chain it joined.
    """

    http_method: str
    started: float
    session: str | None
    bytes_in: int
    method: str | None = None
    name: str | None = None
    ids: list[RequestId] = field(default_factory=list)
    status: int | None = None
    content_type: str | None = None
    bytes_out: int = 0
    messages_out: int = 0


class FactLog:
    """The pass-through driver's view of the chain builder: defers while nobody watches live."""

    def __init__(
        self,
        builder: ChainBuilder,
        clock: FactClock,
        redactor: Redactor,
        *,
        bus: EventBus,
        backlog: int = DEFAULT_BACKLOG,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.builder = builder
        self._clock = clock
        self._redactor = redactor
        self._bus = bus
        self._live = bus.watched_live
        self.backlog = backlog
        self.max_bytes = max_bytes
        self._bytes = 0
        self._pending: deque[Fact] = deque()
        self._held: deque[Fact] = deque()
        self._held_exchanges: set[str] = set()
        self._tallies: dict[str, _Tally] = {}
        self._legs: dict[str, str] = {}
        """Open legs whose facts are deferred, each with the exchange whose chain it joins."""
        self._leg_owners: Counter[str] = Counter()
        """Exchanges with open deferred legs: their facts are kept like those of open exchanges."""
        self._replaying = False
        self.dropped_facts = 0
        self.on_fact: Callable[[Fact], None] | None = None
        """Receives every observation as a fact, deferred or built live, in the order they happen (the
        capture writes them: what it holds never depends on the store, the bus or who watches)."""

    # -- what the store and the builder's other callers use -----------------------------------

    def materialize(self) -> None:
        """Build every queued fact into chains now (someone is about to look)."""
        if self._replaying or not (self._pending or self._held):
            return
        self._replaying = self._bus.replaying = True
        builder, clock = self.builder, self._clock
        try:
            for queue in (self._held, self._pending):
                while queue:
                    fact = queue.popleft()
                    self._bytes -= fact.size
                    clock.at = fact.t
                    getattr(builder, fact.op)(fact.exchange, **fact.kwargs)
            self._held_exchanges.clear()
        finally:
            clock.at = None
            self._replaying = self._bus.replaying = False

    @property
    def redactor(self) -> Redactor:
        """The redactor every observation passes through (the admin API keys what it shows with it)."""
        return self._redactor

    @property
    def pending(self) -> int:
        """Facts queued and not yet built."""
        return len(self._pending) + len(self._held)

    @property
    def pending_bytes(self) -> int:
        """Body bytes the queued facts hold."""
        return self._bytes

    @property
    def open_legs(self) -> int:
        """A bridge's upstream legs still open whose facts wait (tests assert they drain)."""
        return len(self._legs)

    @property
    def open_exchanges(self) -> int:
        """Exchanges in flight, built or deferred (draining waits for them)."""
        builder = self.builder
        return builder.open_exchanges + sum(1 for ex in self._tallies if not builder.has_exchange(ex))

    # -- the pass-through driver's calls ------------------------------------------------------

    def open_exchange(self, exchange: str, **kwargs: Any) -> None:
        """As ChainBuilder.open_exchange."""
        if self._defer(exchange, "open_exchange", kwargs):
            session = kwargs.get("session")
            method = kwargs["http_method"]
            self._tallies[exchange] = _Tally(
                http_method=method,
                method=_STREAM_METHODS.get(method),
                started=self._clock(),
                session=session and self._redactor.token(session),
                bytes_in=kwargs.get("body_size", 0),
            )
            return
        if self.on_fact is not None:
            self._build("open_exchange", exchange, kwargs)
            return
        self.builder.open_exchange(exchange, **kwargs)

    def message(self, exchange: str, msg: Message, **kwargs: Any) -> str | None:
        """As ChainBuilder.message; returns the chain only when it was built now."""
        if self._defer(exchange, "message", {"msg": msg, **kwargs}):
            tally = self._tallies.get(exchange)
            if tally is not None:
                if kwargs["direction"] is Direction.TO_CLIENT:
                    tally.messages_out += 1
                    tally.bytes_out += kwargs["size"]
                elif msg.kind is Kind.REQUEST:
                    if tally.method is None:
                        tally.method, tally.name = msg.method, target_name(msg.method, msg.params)
                    if msg.id is not None:
                        tally.ids.append(msg.id)
            return None
        if self.on_fact is not None:
            chain: str | None = self._build("message", exchange, {"msg": msg, **kwargs})
            return chain
        return self.builder.message(exchange, msg, **kwargs)

    def response_head(self, exchange: str, **kwargs: Any) -> None:
        """As ChainBuilder.response_head."""
        if self._defer(exchange, "response_head", kwargs):
            tally = self._tallies.get(exchange)
            if tally is not None:
                tally.status, tally.content_type = kwargs["status"], kwargs["content_type"]
            return
        if self.on_fact is not None:
            self._build("response_head", exchange, kwargs)
            return
        self.builder.response_head(exchange, **kwargs)

    def note_event_id(self, exchange: str, sse_id: str) -> None:
        """As ChainBuilder.note_event_id."""
        if not self._defer(exchange, "note_event_id", {"sse_id": sse_id}):
            if self.on_fact is not None:
                self._build("note_event_id", exchange, {"sse_id": sse_id})
                return
            self.builder.note_event_id(exchange, sse_id)

    def add_bytes_out(self, exchange: str, size: int) -> None:
        """As ChainBuilder.add_bytes_out."""
        if self._defer(exchange, "add_bytes_out", {"size": size}):
            tally = self._tallies.get(exchange)
            if tally is not None:
                tally.bytes_out += size
            return
        if self.on_fact is not None:
            self._build("add_bytes_out", exchange, {"size": size})
            return
        self.builder.add_bytes_out(exchange, size)

    def mark_invalid(self, exchange: str, problem: str, *, size: int, body: bytes) -> str | None:
        """As ChainBuilder.mark_invalid."""
        if self._defer(exchange, "mark_invalid", {"problem": problem, "size": size, "body": body}):
            return None
        if self.on_fact is not None:
            invalid: str | None = self._build(
                "mark_invalid", exchange, {"problem": problem, "size": size, "body": body}
            )
            return invalid
        return self.builder.mark_invalid(exchange, problem, size=size, body=body)

    def close_exchange(self, exchange: str, outcome: str | None = None) -> ExchangeSummary | None:
        """As ChainBuilder.close_exchange; a deferred exchange's log line has no chain id yet."""
        tally = self._tallies.pop(exchange, None)
        if tally is None or self._live() or self.builder.has_exchange(exchange):
            if tally is not None:  # built meanwhile (a watcher came, or someone read): it ends built
                self.materialize()
            if self.on_fact is not None:
                summary: ExchangeSummary | None = self._build(
                    "close_exchange", exchange, {"outcome": outcome}
                )
                return summary
            return self.builder.close_exchange(exchange, outcome)
        now = self._clock()
        self._queue(Fact(now, "close_exchange", exchange, {"outcome": outcome}))
        return ExchangeSummary(
            exchange=exchange,
            chain_id=None,
            http_method=tally.http_method,
            session=tally.session,
            method=tally.method,
            name=tally.name,
            jsonrpc_ids=tuple(tally.ids),
            status=tally.status,
            content_type=tally.content_type,
            bytes_in=tally.bytes_in,
            bytes_out=tally.bytes_out,
            messages_out=tally.messages_out,
            duration_ms=round((now - tally.started) * 1000, 3),
            outcome=outcome,
        )

    # -- a bridge's calls -----------------------------------------------------------------------

    def leg_message(
        self,
        leg: str,
        exchange_id: str,
        message: Message | dict[str, Any],
        *,
        size: int,
        direction: Direction,
        channel: Channel,
    ) -> None:
        """As ChainBuilder.leg_message: a leg first seen while its exchange is deferred stays deferred."""
        msg = message if isinstance(message, Message) else classify_value(message)
        kwargs = {
            "exchange_id": exchange_id,
            "message": msg,
            "size": size,
            "direction": direction,
            "channel": channel,
        }
        if leg not in self._legs and exchange_id in self._tallies and not self._live():
            self._open_leg(leg, exchange_id)
        if self._defer_leg(leg, "leg_message", kwargs, size):
            return
        if self.on_fact is not None:
            self._build("leg_message", leg, kwargs)
            return
        self.builder.leg_message(leg, exchange_id, msg, size=size, direction=direction, channel=channel)

    def link_leg(self, leg: str, related: str) -> None:
        """As ChainBuilder.link_leg: a leg that joins a deferred one is deferred with it."""
        owner = self._legs.get(related)
        if owner is not None and leg not in self._legs and not self._live():
            self._open_leg(leg, owner)
        if not self._defer_leg(leg, "link_leg", {"related": related}, 0):
            if self.on_fact is not None:
                self._build("link_leg", leg, {"related": related})
                return
            self.builder.link_leg(leg, related)

    def leg_closed(self, leg: str) -> None:
        """As ChainBuilder.leg_closed."""
        deferred = self._defer_leg(leg, "leg_closed", {}, 0)
        owner = self._legs.pop(leg, None)
        if owner is not None:
            self._leg_owners[owner] -= 1
            if not self._leg_owners[owner]:
                del self._leg_owners[owner]
        if not deferred:
            if self.on_fact is not None:
                self._build("leg_closed", leg, {})
                return
            self.builder.leg_closed(leg)

    def continuation_changed(self, exchange_id: str, **kwargs: Any) -> None:
        """As ChainBuilder.continuation_changed (keyed by the exchange that parked the call)."""
        if self._live() or self.builder.has_exchange(exchange_id):
            self.materialize()
            if self.on_fact is not None:
                self._build("continuation_changed", exchange_id, kwargs)
                return
            self.builder.continuation_changed(exchange_id, **kwargs)
            return
        self._queue(Fact(self._clock(), "continuation_changed", exchange_id, kwargs))

    def upstream_session(self, name: str, **kwargs: Any) -> None:
        """As ChainBuilder.upstream_session (keyed by the session's name; it belongs to no exchange)."""
        if self._live():
            self.materialize()
            if self.on_fact is not None:
                self._build("upstream_session", name, kwargs)
                return
            self.builder.upstream_session(name, **kwargs)
            return
        self._queue(Fact(self._clock(), "upstream_session", name, kwargs))

    # -- internals ------------------------------------------------------------------------------

    def _build(self, op: str, key: str, kwargs: dict[str, Any]) -> Any:
        """Build one observation live and hand it to the capture as a fact, both at the same time.

        The builder reads the fact's time, so a capture replayed later builds the very chain the
        proxy built live, timings included.
        """
        clock = self._clock
        t = clock()
        sink = self.on_fact
        if sink is not None:
            sink(Fact(t, op, key, kwargs))
        clock.at = t
        try:
            return getattr(self.builder, op)(key, **kwargs)
        finally:
            clock.at = None

    def _open_leg(self, leg: str, owner: str) -> None:
        self._legs[leg] = owner
        self._leg_owners[owner] += 1

    def _defer_leg(self, leg: str, op: str, kwargs: dict[str, Any], size: int) -> bool:
        """Queue a leg's call as a fact while the leg is deferred and nobody watches live."""
        if leg not in self._legs or self._live():
            self.materialize()
            return False
        self._queue(Fact(self._clock(), op, leg, kwargs, size))
        return True

    def _defer(self, exchange: str, op: str, kwargs: dict[str, Any]) -> bool:
        """Queue the call as a fact when nobody watches live and the exchange is deferred."""
        if self._live():
            self.materialize()
            return False
        if op != "open_exchange" and exchange not in self._tallies:
            self.materialize()  # opened while a watcher was there: it continues live
            return False
        size = kwargs.get("size", 0) if op in ("message", "mark_invalid") else 0
        self._queue(Fact(self._clock(), op, exchange, kwargs, size))
        return True

    def _queue(self, fact: Fact) -> None:
        pending = self._pending
        pending.append(fact)
        self._bytes += fact.size
        sink = self.on_fact
        if sink is not None:
            sink(fact)
        while pending and (len(pending) > self.backlog or self._bytes > self.max_bytes):
            self._shed_one()

    def _shed_one(self) -> None:
        """Drop the oldest fact if its exchange is over; one that still matters is held, in order.

        Held facts are older than every queued one, so replaying the held ones first keeps the order.
        An exchange with a held fact keeps all its facts: built later, it is never half there.
        """
        fact = self._pending.popleft()
        key = fact.exchange
        if (
            key in self._tallies
            or key in self._legs
            or key in self._leg_owners
            or key in self._held_exchanges
        ):
            self._held.append(fact)
            self._held_exchanges.add(fact.exchange)
            if len(self._held) > self.backlog or self._bytes > self.max_bytes:
                self.materialize()  # what still matters outgrew the bounds: build rather than grow
            return
        self._bytes -= fact.size
        self.dropped_facts += 1
