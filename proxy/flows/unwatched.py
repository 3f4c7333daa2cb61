"""The rate bound on unwatched history: which plain calls the observation sink leaves out of the chains
while nobody watches them live.

Keeping every call's observations until someone reads them makes each new call's objects land in
memory no cache holds (the queue holds thousands of calls' objects), which under load costs a large
share of a small call's CPU, for a history that covers less than a second there. So past `rate` calls
a second, averaged over `BURST_SECONDS`, a call that opens as a plain one (a pass-through POST of one
request, not `initialize`, not a retry) is held here rather than queued, and it is left out only if it
also ends as one: answered with a result that neither reports an error nor asks for input, on a 2xx
response, with nothing else on its stream than notifications. Then it is counted (the metrics and its
round-trip line saw it as always) in a run: one `(dropped)` chain stands where the run began, for
every call that opened within `RUN_SECONDS` of that one and was left out.

A call held here that turns out to be anything else (an error, a refusal, a question from the server
on its stream, an answer that asks for input, a stream cut before its answer, a stream past
`HOLD_MAX` messages or `HOLD_BYTES`, a client's cancel while it runs, an observation of it that came
another way, such as a breakpoint's) is kept after all: what was held is queued at once, before
anything that can refer to it, so the chains a reader sees hold every failure and every operation of
more than one exchange, however busy the proxy. A watcher arriving keeps every call held then.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

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
"""Calls left out that opened within this many seconds of the first of them make one run, one
`(dropped)` chain in its place among those kept: the chains kept stay most of the list."""

HOLD_MAX = 64
"""Observations of one call held here while it runs; past it the call is kept (a stream of more
messages is worth its chain, and what is held stays small)."""

HOLD_BYTES = 16 * 1024
"""Wire bytes of messages one call held here may carry since its opening; past it the call is kept."""

HOLD_CALLS = 1024
"""Calls held here at once; past it a call that opens is not held (kept, as under the rate)."""

HOLD_ALL_BYTES = 1024 * 1024
"""Wire bytes of messages all calls held here may carry together; past it the call that brings more
is kept: what is held is bounded apart from the queue's own bounds, and small beside them."""

WHY = (
    "while nobody watches chains live, the proxy keeps at most {rate} calls a second that succeed plainly "
    "(unwatched_history_rate, averaged over {burst:g} seconds; calls that fail or ask questions are all "
    "kept); a watcher (tui --attach, the admin feed) sees every call"
)
"""Why calls were left out, as the chain that stands for them says it."""

RUN_KEY = "\x00left-out-"
"""Prefix of the queue entry that stands for a run (never an exchange's or a leg's id)."""

_PASSTHROUGH = Mode.PASSTHROUGH
_TO_SERVER = Direction.TO_SERVER
_TO_CLIENT = Direction.TO_CLIENT
_REQUEST = Kind.REQUEST
_RESULT = Kind.RESULT
_ASKING = frozenset({Kind.REQUEST, Kind.INVALID})
"""Kinds of message to the client that keep a held call: a question, or something not JSON-RPC."""
_CANCELLED = "notifications/cancelled"
_QUIET = frozenset({EventIdSeen, BytesOut})
"""Kinds of observation a call's stream may carry besides messages without anything referring to them."""


class LeftOut:
    """One call held while it runs: its opening and what came of it since, until it ends."""

    __slots__ = ("answered", "held", "held_bytes", "opening", "run")

    def __init__(self, opening: Sequence[Observation], run: DroppedRun) -> None:
        self.opening = opening
        self.run = run
        """The run it is counted in if it ends plainly (the one current when it opened, if still queued)."""
        self.held: list[Sequence[Observation]] = []
        """Its batches since the opening (a stream's events), copied."""
        self.held_bytes = 0
        """Wire bytes of the messages in `held`."""
        self.answered = False


class UnwatchedHistory:
    """Decides which plain calls are left out, and keeps the runs they are counted in.

    `queue_run(key)`: puts a new run's entry at the end of the sink's queue; `keep(key, batches)`:
    queues the batches of a call held here that is kept after all, in order, at the end of the queue."""

    def __init__(
        self,
        rate: int,
        queue_run: Callable[[str], None],
        keep: Callable[[str, list[Sequence[Observation]]], None],
    ) -> None:
        self.rate = rate
        """Calls a second that succeed plainly kept while nobody watches (0: every one)."""
        self._queue_run = queue_run
        self._keep = keep
        self._most = float(rate) * BURST_SECONDS
        self._tokens = self._most
        self._refilled: float | None = None
        self.open: dict[str, LeftOut | tuple[Sequence[Observation], DroppedRun]] = {}
        """Calls held to be left out that have not ended, by exchange: their opening and the run they
        would be counted in, until anything but a JSON answer comes, then a `LeftOut`."""
        self._run: DroppedRun | None = None
        self.runs: dict[str, DroppedRun] = {}
        """Runs queued and not yet told or dropped, by their entry's key."""
        self._run_ids = 0
        self._held_bytes = 0
        """Wire bytes of the messages every call held here holds (`LeftOut.held_bytes`, summed)."""
        self.left_out = 0
        """Calls left out so far (counted as each ends)."""

    @property
    def why(self) -> str:
        """What the chain that stands for calls left out says of why."""
        return WHY.format(rate=self.rate, burst=BURST_SECONDS)

    def leave_out(self, key: str, opening: Sequence[Observation]) -> bool:
        """Whether the relay's opening batch of `key` (two observations) opens a plain call past the
        rate; then it is held here until it ends, and left out if it ends plainly (`more`)."""
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
        if "requestState" in params or "inputResponses" in params or len(self.open) >= HOLD_CALLS:
            return False  # a retry refers to its first round; past the bound, kept rather than held
        run = self._run
        if run is None or t - run.began > RUN_SECONDS:
            run = self._new_run(t)
        self.open[key] = (opening, run)
        return True

    def more(
        self, key: str, batch: Sequence[Observation], call: LeftOut | tuple[Sequence[Observation], DroppedRun]
    ) -> None:
        """A later batch of a call held here: the call is counted and left out if the batch ends it
        plainly, held on if it carries nothing else, and kept (queued whole) if it carries anything else."""
        if type(call) is tuple and len(batch) == 3:  # the answer of a JSON call, as the relay hands it over
            head, seen, last = batch
            if (
                type(last) is ExchangeClosed
                and type(head) is ResponseHeadSeen
                and type(seen) is MessageSeen
                and 200 <= head.status < 300
                and seen.direction is _TO_CLIENT
                and seen.msg.kind is _RESULT
                and _plain_result(seen.msg.raw)
            ):
                del self.open[key]
                self._count(call[1], 5, last.t)
                return
        self._more(key, batch, self._held_call(key, call))

    def _held_call(self, key: str, call: LeftOut | tuple[Sequence[Observation], DroppedRun]) -> LeftOut:
        """The call as a `LeftOut` (made from its opening and run the first time it is needed)."""
        if isinstance(call, LeftOut):
            return call
        made = self.open[key] = LeftOut(*call)
        return made

    def _more(self, key: str, batch: Sequence[Observation], call: LeftOut) -> None:
        last = batch[-1]
        closes = type(last) is ExchangeClosed
        if _read(call, batch) or (closes and not call.answered):
            self._keep_call(key, call, batch)
        elif closes:
            del self.open[key]
            self._held_bytes -= call.held_bytes
            self._count(call.run, len(call.opening) + sum(len(one) for one in call.held) + len(batch), last.t)
        else:
            call.held.append(tuple(batch))
            size = _wire_size(batch)
            call.held_bytes += size
            self._held_bytes += size
            if (
                sum(len(one) for one in call.held) > HOLD_MAX
                or call.held_bytes > HOLD_BYTES
                or self._held_bytes > HOLD_ALL_BYTES
            ):
                self._keep_call(key, call, ())

    def batch_kept(self, batch: Sequence[Observation]) -> None:
        """A batch that is kept, while calls are held here: a client's cancel in it (alone or in a
        JSON-RPC batch) keeps every one of them first (it may name one, which must be in the chains
        before it)."""
        for obs in batch:
            if type(obs) is MessageSeen and obs.msg.method == _CANCELLED and obs.direction is _TO_SERVER:
                self.keep_all()
                return

    def keep_calls_of(self, observations: Sequence[Observation]) -> None:
        """Keep, first, each call held here that one of `observations` belongs to: they came another
        way than its relay (a breakpoint's hold and release, a fault), and are queued after it."""
        for obs in observations:
            key = getattr(obs, "exchange", None)
            if type(key) is str:
                call = self.open.get(key)
                if call is not None:
                    self._keep_call(key, self._held_call(key, call), ())

    def keep_all(self) -> None:
        """Keep every call held here, each queued whole in the order they opened (a watcher arrived,
        who is to see every call from now on, or a cancel came that may name one)."""
        for key, call in list(self.open.items()):
            self._keep_call(key, self._held_call(key, call), ())

    def take_run(self, key: str) -> DroppedRun:
        """The run of a queue entry, as the sink tells or drops it (no longer counted in)."""
        run = self.runs.pop(key)
        run.taken = True
        if run is self._run:
            self._run = None
        return run

    def _keep_call(self, key: str, call: LeftOut, batch: Sequence[Observation]) -> None:
        """Keep a call held here after all: its opening, what was held and `batch`, queued in order."""
        del self.open[key]
        self._held_bytes -= call.held_bytes
        self._keep(key, [call.opening, *call.held, *((batch,) if batch else ())])

    def _count(self, run: DroppedRun, observations: int, t: float) -> None:
        """Count a call left out (`observations` of it, the last made at `t`) in `run`, or in the
        current run if `run` was told or dropped meanwhile (a read built it while the call ran)."""
        if run.taken:
            run = (
                self._run
                if self._run is not None and t - self._run.began <= RUN_SECONDS
                else self._new_run(t)
            )
        run.observations += observations
        run.exchanges += 1
        if t > run.ended:
            run.ended = t
        self.left_out += 1

    def _new_run(self, t: float) -> DroppedRun:
        self._run_ids += 1
        key = f"{RUN_KEY}{self._run_ids}"
        run = self._run = self.runs[key] = DroppedRun(t)
        self._queue_run(key)
        return run


def _read(call: LeftOut, batch: Sequence[Observation]) -> bool:
    """Note what a batch of a call held here brings (its answer); whether anything in it makes the call
    one to keep: a message from the client, a question to it, an answer that is not a plain result (an
    error, a tool's error, one that asks for input), a response that is not 2xx, anything unusual."""
    for obs in batch:
        kind = type(obs)
        if kind is MessageSeen:
            msg = obs.msg  # type: ignore[union-attr]
            if obs.direction is not _TO_CLIENT or msg.kind in _ASKING:  # type: ignore[union-attr]
                return True
            if msg.is_response:
                if msg.kind is not _RESULT or not _plain_result(msg.raw):
                    return True
                call.answered = True
        elif kind is ResponseHeadSeen:
            if not 200 <= obs.status < 300:  # type: ignore[union-attr]
                return True
        elif kind is not ExchangeClosed and kind not in _QUIET:
            return True
    return False


def _wire_size(batch: Sequence[Observation]) -> int:
    """Wire bytes of the messages in a batch."""
    return sum(obs.size for obs in batch if type(obs) is MessageSeen)


def _plain_result(raw: Any) -> bool:
    """Whether a result (the decoded response, a dict holding `result`) neither reports a tool's error
    nor asks the client for input (a retry would refer to the call)."""
    result = raw["result"]
    if type(result) is not dict:
        return True
    return result.get("isError") is not True and result.get("resultType") != "input_required"
