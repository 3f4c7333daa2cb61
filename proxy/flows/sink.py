"""The observation sink: where every observation goes, queued while nobody watches, built when someone does.

Building a chain (correlation, redacted records, events, summaries) costs more CPU per small
exchange than relaying it. So the sink hands each observation to its listeners (the capture and the
metrics, which need no chain) and to the round-trip tally (the log line), and then either builds it
into chains at once, when a watcher wants chains live (a TUI, the admin feed), or queues it. Whoever
needs the chains of queued observations (an admin API read, a feed about to take its snapshot) calls
`build`; nothing builds them behind a reader's back. What ends with no observation at all (a call never
retried, a stream never resumed) ends at a `sweep`: the proxy runs one every `SWEEP_EVERY` seconds and
at each read, for the chains and the metrics alike. Observations carry their own times, so a chain
built later is the chain that would have been built live.

Bounded: past `backlog` queued observations or `max_bytes` of memory their decoded bodies are
estimated to hold (`value_weight`: the wire length can be a twentieth of it), the oldest are dropped
one by one when what they belong to is over (its chains would have left the bounded store by the time
anyone looked); those of an exchange or leg still open, or already half built, are held instead, so
what is built later is never half there. Dropped observations are counted, the builder is told what
they belonged to (what is left of it is left out when built, never filed as something else) and a
`(dropped)` chain stands where they were; whoever listens is told (the runtime logs it).
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Sequence

from proxy.flows.bus import EventBus
from proxy.flows.chains import ChainBuilder
from proxy.flows.cut_streams import NotResumed
from proxy.flows.log_lines import ExchangeSummary, ServerAsked
from proxy.flows.lost import DroppedRun
from proxy.flows.observations import (
    KEY_FIELDS,
    ExchangeClosed,
    ExchangeOpened,
    InvalidBody,
    LegClosed,
    LegLinked,
    LegMessageSeen,
    MessageSeen,
    Observation,
    ResponseHeadSeen,
    key_of,
)
from proxy.flows.redact import Redactor
from proxy.flows.tally import RoundTripTally
from proxy.flows.unwatched import RUN_KEY, UnwatchedHistory
from proxy.wire.weight import SMALL_TEXT, VALUE_BASE, WORST_RATIO, value_weight

DEFAULT_MAX_BYTES = 32 * 1024 * 1024
"""Estimated memory queued observations' bodies may hold before the oldest finished ones are dropped."""

DEFAULT_BACKLOG = 10_000
"""Observations queued before the oldest finished ones are dropped (about 2,000 small exchanges)."""

_LEG_KINDS = frozenset({LegMessageSeen, LegLinked, LegClosed})

_EXCHANGE_KINDS = frozenset({ExchangeOpened, ResponseHeadSeen, ExchangeClosed})
"""The kinds besides messages every relayed exchange makes: keyed by their exchange, bodiless."""

_MESSAGE_KINDS = frozenset({MessageSeen, LegMessageSeen})
"""Observations that hold a decoded body (their message): the bounded queue weighs it."""

_Entry = tuple[tuple[Observation, ...], int, str]
"""Queued observations of one key, the estimated memory their bodies hold, and that key."""

DROPPED_WHY = (
    "the queue of observations waiting to be built was full: {backlog} observations "
    "(10 x max_chains) or {max_bytes} bytes of bodies (max_chain_store_bytes / 2), and nobody read chains"
)
"""What bounded the queue when observations were dropped, as the chain that stands for them says it."""

SWEEP_EVERY = 1.0
"""Seconds between two sweeps the running proxy makes (`ObservationSink.sweep`): a wait that ran out
ends in the chains, the feed and the metrics at most this late, with no traffic at all."""

Sweeper = Callable[[float], None]
"""Told the time, to end what ran out by then (the metrics' operation counter)."""

Listener = Callable[[Sequence[Observation]], None]
"""Receives every observation as it is made (the capture, the metrics), in batches of one call site's
observations in order: never a chain. A listener must not keep the sequence itself."""


class ObservationSink:
    """Takes every observation: tells the listeners and the tally, then builds it or queues it."""

    def __init__(
        self,
        builder: ChainBuilder,
        redactor: Redactor,
        *,
        bus: EventBus,
        clock: Callable[[], float] = time.time,
        backlog: int = DEFAULT_BACKLOG,
        max_bytes: int = DEFAULT_MAX_BYTES,
        keep: bool = True,
        unwatched_rate: int = 0,
    ) -> None:
        """`unwatched_rate`: plain calls a second kept while nobody watches live (0: every one; see
        `proxy.flows.unwatched`)."""
        self.builder = builder
        self.redactor = redactor
        """The redactor every observation passes through (the admin API keys what it shows with it)."""
        self.now = clock
        """The time an observation is made at (call sites stamp their observations with it)."""
        self.tally = RoundTripTally(redactor, builder.endpoint)
        self.listeners: list[Listener] = []
        self.modern_listeners: list[Listener] = []
        """Listeners only 2026-07-28 pass-through calls concern: told of every batch once the first such
        call opened (`RoundTripTally.modern_passthrough`), of none before, so a proxy whose clients
        speak older versions pays nothing for them."""
        self.sweepers: list[Sweeper] = []
        """Told the time at each `sweep` (the metrics), to end the waits that ran out by then as the
        chain builder does."""
        self.on_released: Callable[[ExchangeSummary, str], None] | None = None
        """Told of each round-trip line the tally held for a cancel and let go (with the exchange's
        mode), as it goes: the runtime logs it."""
        self.on_asked: Callable[[ServerAsked], None] | None = None
        """Told of each request sent to a client, as it goes (the runtime logs it): the exchange it
        rides waits on the client from then on."""
        self.on_not_resumed: Callable[[NotResumed], None] | None = None
        """Told of each exchange logged `end: resumable` whose stream can no longer be resumed (its
        session ended, or the wait ran out), as it is known (the runtime logs it)."""
        self._live = bus.live
        """The bus's live subscribers (the same list): someone wants chains as they happen if any."""
        self.keep = keep
        """Whether anyone may ever want chains: False, each observation ends with the listeners and the
        tally, neither queued nor built (nothing could read them, and they hold decoded bodies)."""
        self.backlog = backlog
        self.max_bytes = max_bytes
        self._bytes = 0
        self._count = 0
        """Observations queued (in `_pending` and `_held`); `backlog` bounds each of the two."""
        self._pending: deque[_Entry] = deque()
        self._held: deque[_Entry] = deque()
        """Queued observations, a batch of one key at a time, each with the body bytes it holds."""
        self._held_keys: set[str] = set()
        self._held_count = 0
        """Observations in `_held`."""
        self._legs: dict[str, str] = {}
        """Open legs, each with the exchange whose chain it joins."""
        self._leg_owners: Counter[str] = Counter()
        """Exchanges with open legs: their observations are kept like those of open exchanges."""
        self._building = False
        self.dropped = 0
        """Observations dropped unbuilt so far."""
        self.on_dropped: Callable[[int, float], None] | None = None
        """Told how many observations were just dropped unbuilt, and when the last of them was made
        (the runtime logs it): at drop time, never on the traffic's usual path."""
        self.unwatched = UnwatchedHistory(unwatched_rate, self._queue_run, self._keep_held)
        """The plain calls left out while nobody watches, and the runs that stand for them."""
        self.on_left_out: Callable[[int, float], None] | None = None
        """Told how many calls were left out so far, and when, at the first sweep after some were (the
        runtime logs it): never on the traffic's path."""
        self._left_out_told = 0

    def emit(self, obs: Observation) -> None:
        """Take one observation."""
        self._take((obs,))

    def emit_all(self, batch: Sequence[Observation], exchange: str | None = None) -> None:
        """Take observations made together, in order (one fan-out for all of them).

        `exchange`: the client exchange every one of them belongs to, none of them a leg's, when the
        caller knows it (a relay does): the queue then takes it as their key without looking, and the
        caller hands the batch over (it never changes it afterwards: a call held to be left out keeps
        its opening batch until it ends)."""
        self._take(batch, exchange)

    def close(
        self, obs: ExchangeClosed, before: Sequence[Observation] = (), *, whole: bool = False
    ) -> ExchangeSummary | None:
        """Take an exchange's last observation (after `before`, made just ahead of it); returns its
        round-trip line (None if it never opened). `whole`: every observation of `before` is of the
        same exchange, none of them a leg's (as `emit_all`'s `exchange` says)."""
        return self._take((*before, obs) if before else (obs,), obs.exchange if whole else None)

    def build(self) -> None:
        """Build every queued observation into chains now, and end the waits that ran out by now
        (someone is about to look at them)."""
        self.build_some(None)
        self.sweep()

    def sweep(self, now: float | None = None) -> None:
        """End, in the chains and in every sweeper at once, the waits that ran out by `now` (None: the
        clock's) though no observation came since: a call never retried within `continuation_ttl`, a
        stream never resumed. Chains not built yet are swept when they are (`build`): a wait may have
        ended by an observation still queued."""
        now = self.now() if now is None else now
        self.tally.expire(now)
        if self.tally.released:
            self._tell_released()
        if self.tally.cuts.not_resumed:
            self._tell_not_resumed()
        for sweeper in self.sweepers:
            sweeper(now)
        left_out = self.unwatched.left_out
        if left_out != self._left_out_told:
            self._left_out_told = left_out
            if self.on_left_out is not None:
                self.on_left_out(left_out, now)
        if self.keep and not (self._building or self._pending or self._held):
            self.builder.sweep(now)

    def build_some(self, most: int | None) -> bool:
        """Build queued observations into chains, the oldest first: about `most` of them (None: all),
        so a caller on the traffic's loop can yield between two calls; whether some are left."""
        if self._building or not (self._pending or self._held):
            return False
        self._building = True
        try:
            left = self._build_from(self._held, most)
            if not self._held:
                self._held_keys.clear()  # what was held is built: the builder knows it from now on
            if left is None or left > 0:
                self._build_from(self._pending, left)
            return bool(self._held or self._pending)
        finally:
            self._building = False

    def _build_from(self, queue: deque[_Entry], most: int | None) -> int | None:
        """Build entries off the front of `queue`, up to `most` observations (None: all of them); how
        many more the caller may build (None: no bound)."""
        apply = self.builder.apply
        while queue and (most is None or most > 0):
            batch, size, key = queue.popleft()
            self._bytes -= size
            self._count -= len(batch)
            if queue is self._held:
                self._held_count -= len(batch)
            if most is not None:
                most -= len(batch)
            if not batch and key.startswith(RUN_KEY):
                self._tell_run(self.unwatched.take_run(key))
                continue
            for obs in batch:
                apply(obs)
        return most

    @property
    def pending(self) -> int:
        """Observations queued and not yet built."""
        return self._count

    @property
    def pending_bytes(self) -> int:
        """Estimated memory the queued observations' bodies hold."""
        return self._bytes

    @property
    def open_legs(self) -> int:
        """A bridge's upstream legs still open (tests assert they drain)."""
        return len(self._legs)

    @property
    def open_exchanges(self) -> int:
        """Client exchanges in flight, built or not (draining waits for them)."""
        return self.tally.open_exchanges

    # -- internals ------------------------------------------------------------------------------

    def _take(self, batch: Sequence[Observation], exchange: str | None = None) -> ExchangeSummary | None:
        if not batch:
            return None
        # The tally first: naming a request learns the credentials its target carries (a resource
        # URI's query token), and every listener's copy is masked with them.
        tally = self.tally
        line = tally.observe_all(batch)
        for listener in self.listeners:
            listener(batch)
        if tally.modern_passthrough:
            for listener in self.modern_listeners:
                listener(batch)
        if tally.asking:
            self._tell_asked(tally.asking)
        if tally.released:
            self._tell_released()
        if tally.cuts.not_resumed:
            self._tell_not_resumed()
        if not self.keep:
            return line
        key: str | None = exchange
        if key is not None:  # weighed only to be queued
            unwatched = self.unwatched
            if unwatched.open:
                if self._live:  # a watcher arrived while calls were held: it sees them whole
                    unwatched.keep_all()
                else:
                    call = unwatched.open.get(key)
                    if call is not None:
                        unwatched.more(key, batch, call)
                        return line
            if unwatched.rate and not self._live and len(batch) == 2 and unwatched.leave_out(key, batch):
                return line
            if unwatched.open:
                unwatched.batch_kept(batch)
            size = 0 if self._live else _exchange_weight(batch)
        else:
            key, size, legs = _scan(batch)
            if self.unwatched.open:  # anything of a held call that comes another way keeps it, first
                self.unwatched.keep_calls_of(batch if key is None else batch[:1])
            if legs:
                for obs in batch:
                    if type(obs) in _LEG_KINDS:
                        self._track_leg(obs)
        if self._live:
            if self._pending or self._held:
                self.build_some(None)
            apply = self.builder.apply
            for obs in batch:
                apply(obs)
        elif key is not None:  # one key's (a relay's batches are): one entry, queued here (`_enqueue`)
            self._pending.append((tuple(batch), size, key))
            self._bytes += size
            self._count += len(batch)
            if self._count - self._held_count > self.backlog or self._bytes > self.max_bytes:
                self._shed()
        else:
            for one in batch:  # what is dropped or held together is always one key's
                self._enqueue(((one,), _body_weight(one), key_of(one)))
        return line

    def _queue_run(self, key: str) -> None:
        """Queue the entry of a run of calls left out, in its place."""
        self._pending.append(((), 0, key))

    def _keep_held(self, key: str, batches: list[Sequence[Observation]]) -> None:
        """Queue (or, watched, build) the batches of a call held to be left out that turned out to be
        kept, in order, before anything that comes after."""
        if self._live:
            if self._pending or self._held:
                self.build_some(None)
            apply = self.builder.apply
            for batch in batches:
                for obs in batch:
                    apply(obs)
            return
        for batch in batches:
            size = _exchange_weight(batch)
            self._pending.append((tuple(batch), size, key))
            self._bytes += size
            self._count += len(batch)
        if self._count - self._held_count > self.backlog or self._bytes > self.max_bytes:
            self._shed()

    def _tell_run(self, run: DroppedRun) -> None:
        """Tell the builder of a run of calls left out, in its place in the queue (none, if every call
        held in it turned out to be kept)."""
        if run.exchanges:
            self.builder.left_out(run, self.unwatched.why)

    def release_held(self) -> None:
        """Let every round-trip line held for a cancel go as it stands (the proxy stops)."""
        self.tally.release_all()
        if self.tally.released:
            self._tell_released()

    def _tell_released(self) -> None:
        released, self.tally.released = self.tally.released, []
        told = self.on_released
        if told is not None:
            for line, mode in released:
                told(line, mode)

    def _tell_not_resumed(self) -> None:
        ended, self.tally.cuts.not_resumed = self.tally.cuts.not_resumed, []
        told = self.on_not_resumed
        if told is not None:
            for line in ended:
                told(line)

    def _tell_asked(self, asking: list[ServerAsked]) -> None:
        told = self.on_asked
        try:
            if told is not None:
                for asked in asking:
                    told(asked)
        finally:
            asking.clear()

    def _track_leg(self, obs: Observation) -> None:
        match obs:
            case LegMessageSeen(leg=leg) if leg not in self._legs:
                self._open_leg(leg, obs.exchange)
            case LegLinked(leg=leg, related=related) if leg not in self._legs and related in self._legs:
                self._open_leg(leg, self._legs[related])
            case LegClosed(leg=leg):
                owner = self._legs.pop(leg, None)
                if owner is not None:
                    self._leg_owners[owner] -= 1
                    if not self._leg_owners[owner]:
                        del self._leg_owners[owner]
            case _:
                pass

    def _open_leg(self, leg: str, owner: str) -> None:
        self._legs[leg] = owner
        self._leg_owners[owner] += 1

    def _enqueue(self, entry: _Entry) -> None:
        self._pending.append(entry)
        self._bytes += entry[1]
        self._count += len(entry[0])
        if self._count - self._held_count > self.backlog or self._bytes > self.max_bytes:
            self._shed()

    def _shed(self) -> None:
        """Past a bound, drop the oldest entries whose exchange or leg is over, down to a sixteenth
        under each bound (so a queue at its bound sheds in runs, not one entry per observation);
        an entry that still matters is held.

        Held observations are older than every queued one, so building the held ones first keeps the
        order. Whatever has a held observation keeps all its later ones: built later, it is whole.
        """
        backlog, max_bytes = self.backlog, self.max_bytes
        count_to, bytes_to = backlog - backlog // 16, max_bytes - max_bytes // 16
        pending, held, held_keys = self._pending, self._held, self._held_keys
        legs, leg_owners = self._legs, self._leg_owners
        open_exchanges = self.tally.open_ids
        built_exchanges, built_legs = self.builder.exchange_ids, self.builder.leg_ids
        count, held_count, queued_bytes, dropped = self._count, self._held_count, self._bytes, 0
        lost: list[Sequence[Observation]] = []
        try:
            while pending and (count - held_count > count_to or queued_bytes > bytes_to):
                entry = pending.popleft()
                batch, size, key = entry
                if not batch and key.startswith(RUN_KEY):  # a run of calls left out: told as it goes
                    self._tell_run(self.unwatched.take_run(key))
                    continue
                if (
                    key in open_exchanges
                    or key in legs
                    or key in leg_owners
                    or key in held_keys
                    or key in built_exchanges
                    or key in built_legs
                ):
                    held.append(entry)
                    held_keys.add(key)
                    held_count += len(batch)
                    if held_count > backlog or queued_bytes > max_bytes:
                        break  # what still matters outgrew the bounds: build rather than grow
                    continue
                queued_bytes -= size
                count -= len(batch)
                dropped += len(batch)
                lost.append(batch)
            else:  # down under the bounds without outgrowing them: nothing to build
                return
        finally:
            self._count, self._held_count, self._bytes = count, held_count, queued_bytes
            if lost:
                self._lose(lost, dropped)
        self.build_some(None)

    def _lose(self, lost: list[Sequence[Observation]], dropped: int) -> None:
        """Tell the builder what was dropped (so what is left of it is never filed as something else,
        and a chain marks the gap) and whoever listens for drops (the runtime logs them)."""
        self.dropped += dropped
        self.builder.dropped(lost, DROPPED_WHY.format(backlog=self.backlog, max_bytes=self.max_bytes))
        told = self.on_dropped
        if told is not None:
            told(dropped, lost[-1][-1].t)


def _scan(batch: Sequence[Observation]) -> tuple[str | None, int, bool]:
    """One pass over a batch: the key every observation in it belongs to (None if they differ, or
    for no observation; see `key_of`), the memory their bodies hold (what the queue's byte bound counts),
    and whether any of them is a leg's (tracked while open).

    The kinds a relay's batches hold (an exchange's opening, messages, response head and end) are
    looked at first and most cheaply: every small exchange passes here."""
    key: str | None = None
    size = 0
    legs = False
    for obs in batch:
        kind = type(obs)
        if kind is MessageSeen:
            wire = obs.size  # type: ignore[union-attr]
            raw = obs.msg.raw  # type: ignore[union-attr]
            # A small JSON object is charged from its wire length, as `value_weight` charges it,
            # without the call.
            size += (
                VALUE_BASE + WORST_RATIO * wire
                if wire <= SMALL_TEXT and type(raw) is dict
                else value_weight(raw, wire)
            )
            this = obs.exchange  # type: ignore[union-attr]
        elif kind in _EXCHANGE_KINDS:
            this = obs.exchange  # type: ignore[union-attr]
        elif kind in KEY_FIELDS:
            if kind is LegMessageSeen:
                size += value_weight(obs.msg.raw, obs.size)  # type: ignore[union-attr]
            legs = legs or kind in _LEG_KINDS
            this = getattr(obs, KEY_FIELDS[kind])
        else:
            if kind is InvalidBody:
                size += obs.size  # type: ignore[union-attr]
            this = obs.exchange  # type: ignore[union-attr]  # every other kind has one
        if this is not key:
            if key is None:
                key = this
            elif this != key:
                return None, 0, True  # queued one by one, each counted alone; legs looked for one by one
    return key, size, legs


def _exchange_weight(batch: Sequence[Observation]) -> int:
    """The memory the bodies of one client exchange's observations hold (none of them a leg's): what
    `_scan` counts of such a batch, without looking for its key."""
    size = 0
    for obs in batch:
        kind = type(obs)
        if kind is MessageSeen:
            wire = obs.size  # type: ignore[union-attr]
            raw = obs.msg.raw  # type: ignore[union-attr]
            size += (
                VALUE_BASE + WORST_RATIO * wire
                if wire <= SMALL_TEXT and type(raw) is dict
                else value_weight(raw, wire)
            )
        elif kind is InvalidBody:
            size += obs.size  # type: ignore[union-attr]
    return size


def _body_weight(obs: Observation) -> int:
    """Estimated memory one observation's body holds (the raw bytes of an invalid one)."""
    kind = type(obs)
    if kind in _MESSAGE_KINDS:
        return value_weight(obs.msg.raw, obs.size)  # type: ignore[union-attr]
    return obs.size if kind is InvalidBody else 0  # type: ignore[union-attr]
