"""The rate bound on unwatched history: which plain calls the observation sink leaves out of the chains
while nobody watches them live.

Keeping every call's observations until someone reads them makes each new call's objects land in
memory no cache holds (the queue holds thousands of calls' objects), which under load costs a large
share of a small call's CPU, for a history that covers less than a second there. So past `rate` plain calls a
second, averaged over `BURST_SECONDS`, a call is counted (the metrics and the round-trip line see it as
always) and left out. Left out, it is counted in a run: one `(dropped)` chain stands where the run
began, for every call left out within `RUN_SECONDS` of that.

Only a plain call is left out: a pass-through POST of one request, not `initialize`, not a retry,
whose answer nothing else refers to. Until its exchange ends, its observations are held here, and
whatever can be referred to later (a question the server asks on its stream, an answer that asks for
input, a refusal, a stream cut before its answer, a client's cancel while it runs) makes it *told*:
everything of it joins its run's batches, which the builder is told of in the run's place in the queue
(`ChainBuilder.dropped`), so what refers to it is left out too, never filed as something else.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from proxy.flows.events import Direction, Mode
from proxy.flows.lost import DroppedRun
from proxy.flows.observations import (
    BytesOut,
    EventIdSeen,
    ExchangeClosed,
    ExchangeOpened,
    MessageSeen,
    Observation,
    ResponseHeadSeen,
)
from proxy.wire.jsonrpc import Kind

BURST_SECONDS = 10.0
"""The rate is an average over this many seconds: a burst of up to `rate` times this is kept whole."""

RUN_SECONDS = 1.0
"""Calls left out within this many seconds of the first of them make one run, one `(dropped)` chain in
its place among those kept: the chains kept stay most of the list."""

HOLD_MAX = 64
"""Observations of one call left out held here while it runs; past it the call is told (its batches
join the run, bounded with the queue's observations)."""

WHY = (
    "the proxy keeps at most {rate} client calls a second (unwatched_history_rate, averaged over "
    "{burst:g} seconds) while nobody watches chains live; a watcher (tui --attach, the admin feed) or a "
    "capture keeps every one"
)
"""Why calls were left out, as the chain that stands for them says it."""

RUN_KEY = "\x00left-out-"
"""Prefix of the queue entry that stands for a run (never an exchange's or a leg's id)."""

_PASSTHROUGH = Mode.PASSTHROUGH
_TO_SERVER = Direction.TO_SERVER
_TO_CLIENT = Direction.TO_CLIENT
_REQUEST = Kind.REQUEST
_RESULT = Kind.RESULT
_ERROR = Kind.ERROR
_CANCELLED = "notifications/cancelled"
_QUIET = frozenset({EventIdSeen, BytesOut})
"""Kinds of observation a call's stream may carry besides messages without anything referring to them."""


class LeftOut:
    """One call left out while it runs: its opening and what came of it since, held until it ends."""

    __slots__ = ("answered", "held", "opening", "run", "told")

    def __init__(self, opening: Sequence[Observation], run: DroppedRun) -> None:
        self.opening = opening
        self.run = run
        """The run that counted it."""
        self.held: list[Sequence[Observation]] = []
        """Its batches since the opening (a stream's events), copied."""
        self.answered = False
        self.told = False
        """Whether it joined a run's batches (then everything of it that comes does too)."""


class UnwatchedHistory:
    """Decides which plain calls are left out, and keeps the runs they are counted in.

    `queue_run(key)`: puts a new run's entry at the end of the sink's queue; `hold(n)`: the sink
    counts `n` more observations queued (held in a run's batches), shedding past its bound."""

    def __init__(self, rate: int, queue_run: Callable[[str], None], hold: Callable[[int], None]) -> None:
        self.rate = rate
        """Plain calls a second kept while nobody watches (0: every one)."""
        self._queue_run = queue_run
        self._hold = hold
        self._most = float(rate) * BURST_SECONDS
        self._tokens = self._most
        self._refilled: float | None = None
        self.open: dict[str, LeftOut | tuple[Sequence[Observation], DroppedRun]] = {}
        """Calls left out that have not ended, by exchange: their opening and the run that counted them
        until anything but a JSON answer comes, then a `LeftOut`."""
        self._run: DroppedRun | None = None
        self.runs: dict[str, DroppedRun] = {}
        """Runs queued and not yet told or dropped, by their entry's key."""
        self._run_ids = 0
        self.left_out = 0
        """Calls left out so far."""

    @property
    def why(self) -> str:
        """What the chain that stands for calls left out says of why."""
        return WHY.format(rate=self.rate, burst=BURST_SECONDS)

    def leave_out(self, key: str, opening: Sequence[Observation]) -> bool:
        """Whether the relay's opening batch of `key` (two observations) is a plain call the rate leaves
        out; then it is counted and held here."""
        opened, seen = opening
        if type(seen) is not MessageSeen or type(opened) is not ExchangeOpened:
            return False
        msg = seen.msg
        if (
            msg.kind is not _REQUEST
            or opened.mode is not _PASSTHROUGH
            or opened.http_method != "POST"
            or seen.direction is not _TO_SERVER
            or msg.id is None
            or msg.method == "initialize"
        ):
            return False
        t = seen.t
        tokens = self._tokens
        last = self._refilled
        self._refilled = t
        if last is not None and t > last:
            tokens += (t - last) * self.rate
            if tokens > self._most:
                tokens = self._most
        if tokens >= 1.0:
            self._tokens = tokens - 1.0
            return False
        self._tokens = tokens
        params = msg.params
        if "requestState" in params or "inputResponses" in params:
            return False  # a retry refers to its first round: kept
        run = self._run
        if run is None or t - run.began > RUN_SECONDS:
            run = self._new_run(t)
        run.observations += 2
        run.exchanges += 1
        run.ended = t
        self.open[key] = (opening, run)
        self.left_out += 1
        return True

    def more(
        self, key: str, batch: Sequence[Observation], call: LeftOut | tuple[Sequence[Observation], DroppedRun]
    ) -> None:
        """A later batch of a call left out: counted if it ends it plainly, else held, or (if it can be
        referred to) told with the rest."""
        if type(call) is tuple and len(batch) == 3:  # the answer of a JSON call, as the relay hands it over
            head, seen, last = batch
            if (
                type(last) is ExchangeClosed
                and type(head) is ResponseHeadSeen
                and type(seen) is MessageSeen
                and 200 <= head.status < 300
                and seen.direction is _TO_CLIENT
            ):
                msg = seen.msg
                kind = msg.kind
                if kind is _RESULT:
                    result = msg.raw["result"]  # a result's value is a dict with it (`classify_value`)
                    plain = type(result) is not dict or result.get("resultType") != "input_required"
                else:
                    plain = kind is _ERROR
                if plain:
                    del self.open[key]
                    run = call[1]
                    run.observations += 3
                    if last.t > run.ended:
                        run.ended = last.t
                    return
        self._more(key, batch, self._left_out(key, call))

    def _left_out(self, key: str, call: LeftOut | tuple[Sequence[Observation], DroppedRun]) -> LeftOut:
        """The call as a `LeftOut` (made from its opening and run the first time it is needed)."""
        if isinstance(call, LeftOut):
            return call
        made = self.open[key] = LeftOut(*call)
        return made

    def _more(self, key: str, batch: Sequence[Observation], call: LeftOut) -> None:
        last = batch[-1]
        if call.told:
            self._tell(batch, last.t)
        else:
            referable = _read(call, batch)
            if referable or (type(last) is ExchangeClosed and not call.answered):
                self._told(call, batch)
            elif type(last) is ExchangeClosed:
                run = call.run
                run.observations += len(batch) + sum(len(one) for one in call.held)
                if last.t > run.ended:
                    run.ended = last.t
            else:
                call.held.append(tuple(batch))
                if sum(len(one) for one in call.held) > HOLD_MAX:
                    self._told(call, ())
        if type(last) is ExchangeClosed:
            del self.open[key]

    def kept(self, batch: Sequence[Observation]) -> None:
        """A batch that is kept, while calls left out run: a client's cancel in it (alone or in a JSON-RPC
        batch) makes every one of them told (it may name one, and must then join nothing)."""
        for obs in batch:
            if type(obs) is MessageSeen and obs.msg.method == _CANCELLED and obs.direction is _TO_SERVER:
                for key, call in list(self.open.items()):
                    left_out = self._left_out(key, call)
                    if not left_out.told:
                        self._told(left_out, ())
                return

    def take_run(self, key: str) -> DroppedRun:
        """The run of a queue entry, as the sink tells or drops it (no longer the current one)."""
        run = self.runs.pop(key)
        if run is self._run:
            self._run = None
        return run

    def _told(self, call: LeftOut, batch: Sequence[Observation]) -> None:
        """Make a call told: its opening, what was held and `batch` join the current run's batches, and
        it counts there rather than as a whole call in the run that counted it."""
        call.told = True
        counted = call.run
        counted.observations -= len(call.opening)
        counted.exchanges -= 1
        for one in (call.opening, *call.held):
            self._tell(one, one[-1].t)
        call.held = []
        if batch:
            self._tell(batch, batch[-1].t)

    def _tell(self, batch: Sequence[Observation], t: float) -> None:
        run = self._run
        if run is None or t - run.began > RUN_SECONDS:
            run = self._new_run(batch[0].t)
        run.batches.append(tuple(batch))
        if t > run.ended:
            run.ended = t
        self._hold(len(batch))

    def _new_run(self, t: float) -> DroppedRun:
        self._run_ids += 1
        key = f"{RUN_KEY}{self._run_ids}"
        run = self._run = self.runs[key] = DroppedRun(t)
        self._queue_run(key)
        return run


def _read(call: LeftOut, batch: Sequence[Observation]) -> bool:
    """Note what a batch of a call left out brings (its answer); whether anything in it can be referred
    to later (a question to the client, an answer that asks for input, a refusal, anything unusual)."""
    for obs in batch:
        kind = type(obs)
        if kind is MessageSeen:
            msg = obs.msg  # type: ignore[union-attr]
            if obs.direction is not _TO_CLIENT or msg.kind is _REQUEST:  # type: ignore[union-attr]
                return True
            if msg.kind is _RESULT or msg.kind is _ERROR:
                if msg.kind is _RESULT and _asks_input(msg.raw):
                    return True
                call.answered = True
        elif kind is ResponseHeadSeen:
            if not 200 <= obs.status < 300:  # type: ignore[union-attr]
                return True
        elif kind is not ExchangeClosed and kind not in _QUIET:
            return True
    return False


def _asks_input(raw: object) -> bool:
    """Whether a decoded result asks the client for input (`resultType: input_required`): its retry
    refers to the call."""
    result = raw.get("result") if type(raw) is dict else None
    return type(result) is dict and "resultType" in result and result["resultType"] == "input_required"
