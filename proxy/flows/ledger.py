"""The chain ledger: opens chains, files their records, times them and announces every change.

Everything the chain builder writes to the store or the sink passes through here: `ChainOpened` when a
chain starts, `MessageRecorded` as each record is filed and counted in the headline, `ChainChanged`
when its status moves (held while a message is being filed, so the last announcement of a chain
already counts its final message), `SessionChanged` and `ContinuationChanged`. Time a chain spends
waiting on the client is kept apart from time spent upstream. Which chain a message joins is decided
elsewhere (`correlate`). No I/O, no clock of its own (one is injected), no logging.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from proxy.flows.events import (
    BEGAN_EARLIER,
    ChainChanged,
    ChainOpened,
    ChainStatus,
    ChainSummary,
    ContinuationChanged,
    Direction,
    FlowEvent,
    MessageRecord,
    MessageRecorded,
    SessionChanged,
)
from proxy.flows.exchanges import BoundedMap, Exchange
from proxy.flows.redact import Redactor
from proxy.flows.store import Chain, ChainStore
from proxy.wire.jsonrpc import RequestId

DROPPED_METHOD = "(dropped)"
"""The method of the chain that stands where observations were dropped unbuilt (`ChainLedger.dropped`)."""


class ChainLedger:
    """Keeps chains' headlines, records and timings current, and tells observers of each change."""

    def __init__(
        self,
        store: ChainStore,
        sink: Callable[[FlowEvent], None],
        redactor: Redactor,
        *,
        clock: Callable[[], float],
        on_finished: Callable[[str], None],
        id_prefix: str = "c",
        headlines: bool = True,
    ) -> None:
        self.store = store
        self._id_prefix = id_prefix
        self._sink = sink
        self._redactor = redactor
        self._clock = clock
        self._on_finished = on_finished
        self._ids = itertools.count(1)
        self._changed: dict[str, Chain] | None = None
        self._headlines = headlines
        """Whether `ChainOpened` and `ChainChanged` are announced (a reader that wants only the final
        headlines, read from the store, goes without: each is a copy of the headline)."""
        self.finished = 0
        """Chains finished so far (a reader that goes without headlines learns of ends by it)."""
        self.client_names: BoundedMap = BoundedMap()
        """Session id -> the client's name, so every chain of a session shows who sent it."""
        self._gap: Chain | None = None
        """The last `DROPPED_METHOD` chain, widened while it is the newest chain."""
        self._gap_counts = (0, 0)
        """The observations and client exchanges it stands for."""
        self._gap_why = ""
        """Why they were dropped (a gap is widened only by drops for the same reason)."""

    # -- opening and filing ----------------------------------------------------------------------

    def open(
        self,
        ex: Exchange,
        *,
        method: str | None,
        name: str | None,
        ident: RequestId | None,
        client_name: str | None = None,
        user_agent: str | None = None,
    ) -> Chain:
        """Start a chain on an exchange, carrying over any note the exchange was holding for it.

        The client is named in the opening headline (the name it declared, else its session's, else
        its User-Agent), so a watcher sees who sent a call while it still runs.
        """
        now = self._clock()
        session = ex.session
        if client_name is None and session:
            client_name = self.client_names.get(session)
        summary = ChainSummary(
            id=f"{self._id_prefix}{next(self._ids)}",
            started=now,
            session=self._redactor.token(session) if session else None,
            client_name=client_name if client_name is not None else user_agent,
            client_era=ex.client_era,
            upstream_era=ex.upstream_era,
            client_transport=ex.client_transport,
            upstream_transport=ex.upstream_transport,
            mode=ex.mode,
            method=method,
            name=name and self._redactor.scrub(name),  # a client's own token in a tool name stays masked
            jsonrpc_id=ident,
        )
        if ex.pending_note:
            summary.notes.append(ex.pending_note)
            ex.pending_note = None
        if ex.began_earlier:
            summary.notes.append(BEGAN_EARLIER)
        chain = self.store.open(summary)
        chain.answered_by_proxy = ex.answered_by_proxy
        ex.chains.append(summary.id)
        if self._headlines:
            self._sink(ChainOpened(chain=summary.model_copy()))
        return chain

    def dropped(self, began: float, ended: float, observations: int, exchanges: int, why: str) -> None:
        """Stand a `DROPPED_METHOD` chain where observations were dropped unbuilt (`why` says what
        bounded them), so a reader of the list sees the gap rather than a history that looks whole;
        drops one after another for the same reason, with no chain built between them, widen the one
        chain."""
        gap = self._gap
        if gap is not None and self.store.newest() is gap and why == self._gap_why:
            summary = gap.summary
            observations += self._gap_counts[0]
            exchanges += self._gap_counts[1]
            began, ended = min(began, summary.started), max(ended, summary.ended or ended)
        else:
            summary = ChainSummary(
                id=f"{self._id_prefix}{next(self._ids)}",
                started=began,
                method=DROPPED_METHOD,
                status=ChainStatus.INCOMPLETE,
            )
            gap = self._gap = self.store.open(summary)
            if self._headlines:
                self._sink(ChainOpened(chain=summary.model_copy()))
        self._gap_counts = (observations, exchanges)
        self._gap_why = why
        summary.started, summary.ended = began, ended
        summary.duration_ms = round((ended - began) * 1000, 3)
        summary.notes = [
            f"{observations} observations of about {exchanges} client exchanges made in this time were "
            f"dropped before anything built them into chains ({why}): their chains are not in this list; "
            "a capture, where one is written, holds them"
        ]
        self.changed(gap)

    def pass_number(self) -> None:
        """Use up the next chain number without a chain: a reader whose capture lost a chain's opening
        line (cut or garbled) keeps the numbers of the chains after it, so `r7` names the same chain
        whether or not an earlier line could be read."""
        next(self._ids)

    @staticmethod
    def attach(chain: Chain, ex: Exchange) -> None:
        """Note that an exchange carries traffic of an existing chain."""
        if chain.summary.id not in ex.chains:
            ex.chains.append(chain.summary.id)

    def file(self, chain: Chain, record: MessageRecord, *, invalid: bool) -> None:
        """Keep a record in its chain, count it in the headline, and tell the observers.

        A message that joins a chain already ended (a legacy client's `notifications/initialized`
        after its `initialize` was answered) changes a headline no status change will announce again,
        so it is announced here: a chain's last `chain_changed` is always its headline."""
        self.store.add(chain, record)
        self.count(chain, record.direction, record.size, invalid=invalid)
        self._sink(MessageRecorded(chain_id=chain.summary.id, message=record))
        if chain.summary.ended is not None:
            self.changed(chain)

    @staticmethod
    def count(chain: Chain, direction: Direction, size: int, *, invalid: bool) -> None:
        """Count one message in the chain's headline (filed, or counted by a builder keeping no records)."""
        summary = chain.summary
        summary.messages += 1
        if direction is Direction.TO_SERVER:
            summary.bytes_to_server += size
        else:
            summary.bytes_to_client += size
        if invalid:
            summary.invalid = True

    # -- timing and status -----------------------------------------------------------------------

    @staticmethod
    def start_waiting(chain: Chain, now: float) -> None:
        """Start the chain's client-wait clock (a nested request or `input_required` is outstanding)."""
        if chain.wait_started is None:
            chain.wait_started = now

    def stop_waiting(self, chain: Chain) -> None:
        """Stop the chain's client-wait clock and add the wait to its headline."""
        if chain.wait_started is not None:
            chain.summary.client_wait_ms += (self._clock() - chain.wait_started) * 1000
            chain.wait_started = None

    def finish(
        self,
        chain: Chain,
        status: ChainStatus,
        error: str | None,
        now: float,
        *,
        answered: float | None = None,
    ) -> None:
        """End a chain with its final status, splitting its duration into client wait and upstream time.

        `answered` is when the server answered a stream's request (a GET stream's or a DELETE's response
        head; a listen's acknowledgement, when none is given): the upstream's time ends there, and the
        rest of the chain is the stream staying open. A chain the proxy answered itself has no upstream
        time (`upstream_ms` None): the rest is the proxy's own.
        """
        if answered is None:
            answered = chain.acknowledged
        self.stop_waiting(chain)
        if status is ChainStatus.ERROR and chain.cancelled:
            status = ChainStatus.CANCELLED  # the error answers the client's cancel (or is the cut)
        summary = chain.summary
        summary.status = status
        summary.error = error
        summary.ended = now
        summary.duration_ms = round((now - summary.started) * 1000, 3)
        rest = max(0.0, summary.duration_ms - summary.client_wait_ms - summary.held_ms)
        if chain.answered_by_proxy:
            summary.upstream_ms = None
        else:
            upstream = rest if answered is None else min(rest, max(0.0, (answered - summary.started) * 1000))
            summary.upstream_ms = round(upstream, 3)
            summary.stream_ms = round(rest - upstream, 3)
        summary.client_wait_ms = round(summary.client_wait_ms, 3)
        self.finished += 1
        self._on_finished(summary.id)
        self.changed(chain)

    # -- announcing ------------------------------------------------------------------------------

    def changed(self, chain: Chain) -> None:
        """Announce a chain's new headline, or hold it while a message is being filed."""
        if not self._headlines:
            return
        if self._changed is not None:
            self._changed[chain.summary.id] = chain
            return
        self._sink(ChainChanged(chain=chain.summary.model_copy()))

    @contextmanager
    def changes_held(self) -> Iterator[None]:
        """Announce the headline changes made in the block once, after it, so they count its message."""
        if not self._headlines:
            yield
            return
        self._changed = {}
        try:
            yield
        finally:
            changed, self._changed = self._changed, None
            for chain in changed.values():
                self.changed(chain)

    def session_event(
        self,
        session: str,
        state: str,
        name: str | None = None,
        version: str | None = None,
        *,
        minted: bool = False,
    ) -> None:
        """Announce that a session opened or ended (its id redacted); `minted` when the proxy made it."""
        self._session_moved(
            SessionChanged.model_validate(
                {
                    "ts": self._clock(),
                    "session": self._redactor.token(session),
                    "state": state,
                    "client_name": name,
                    "protocol_version": version,
                    "side": "client" if minted else "both",
                }
            )
        )

    def upstream_session_event(
        self, name: str, state: str, *, principal: str, capabilities: str, version: str | None
    ) -> None:
        """Announce a change of one of a bridge's own upstream sessions (its name is no secret)."""
        self._session_moved(
            SessionChanged.model_validate(
                {
                    "ts": self._clock(),
                    "session": name,
                    "state": state,
                    "protocol_version": version,
                    "side": "upstream",
                    "principal": self._redactor.fingerprint(principal),
                    "capabilities": capabilities,
                }
            )
        )

    def _session_moved(self, event: SessionChanged) -> None:
        """Keep the session with the store while it is open (a feed's history tells of it), and
        announce its change."""
        self.store.session_moved(event)
        self._sink(event)

    def continuation_event(
        self,
        chain_id: str,
        state: str,
        *,
        principal: str | None,
        pending_keys: list[str],
        age_ms: float,
        outcome: str | None = None,
    ) -> None:
        """Announce a parked upstream call's change of state, for the continuations view (and keep
        it with the store while the call is parked, for a feed's history)."""
        event = ContinuationChanged.model_validate(
            {
                "ts": self._clock(),
                "chain_id": chain_id,
                "state": state,
                "principal": principal and self._redactor.fingerprint(principal),
                "pending_keys": pending_keys,
                "age_ms": age_ms,
                "outcome": outcome,
            }
        )
        self.store.continuation_moved(event)
        self._sink(event)
