"""The view model: what the TUI knows, built only by applying flow events to it.

Pure (no Textual, no clock, no I/O), so every rule about how events become rows is unit-tested
without an app. `ViewModel.apply` folds one event in and reports what changed in a `Changes`, which
the app hands down to its widgets so they touch only the rows that moved.

Chains are keyed by id *and* start time: a proxy that restarts counts its chain ids from `c1` again,
and an attached TUI that reconnects must keep the old chains apart from the new ones. A history
replay after a reconnect repeats events the model has already seen; they are merged, not doubled
(chains by key, messages by their per-chain sequence number).

An attached TUI whose proxy went away is `detach`ed: what the proxy said of itself is put aside, so
nothing shows it as current. The next `proxy_info` tells whether the same run came back (its run
tag) or another took the address; then the chains held so far stay, marked as from an earlier run
(the last calls before a crash or a restart are what a debugging user came for, and the new proxy
no longer has them), the counts start over for the new run, and the old run's parked calls, gone
with its process, are forgotten.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from proxy.flows.events import (
    UNFINISHED,
    ChainChanged,
    ChainOpened,
    ChainSummary,
    ContinuationChanged,
    Direction,
    FlowEvent,
    Lagged,
    MessageRecord,
    MessageRecorded,
    ProxyInfo,
    SessionChanged,
    Side,
    left_unfinished,
    same_run,
)
from proxy.flows.query import body_text
from proxy.flows.store import record_weight, sent_in_place
from ui.runs import Reattached

MAX_CHAINS = 5000
"""Chains the TUI keeps before dropping the oldest (the proxy's own store is bounded separately)."""

CAPTURE_CHAINS = 1_000_000
"""Chains the TUI keeps of a capture it opens: every chain of any capture of hours (a headline each;
an indexed capture's messages are read only while shown)."""

MAX_MESSAGES = 1000
"""Messages one chain keeps in the TUI; later ones are counted, not kept."""

MAX_BYTES = 256 * 1024 * 1024
"""Memory the messages the TUI keeps may take, estimated as their decoded bodies (`record_weight`):
past it the oldest chains go, as past `MAX_CHAINS`, and a chain alone past it keeps its newest."""

MAX_LOADED = 256
"""Chains of an indexed capture whose messages are held at once (read back when shown, let go after)."""

_ACTIVE_CONTINUATION = frozenset({"parked", "resumed"})

RUN_ENDED = "its proxy run ended before it did (the proxy stopped or another run took its place)"
"""The note on a chain an earlier proxy run left unfinished: no answer can come for it any more."""

BEHIND_UNREAD = "the view fell behind the proxy: how this chain went on was not read"
"""The note on a chain shown as unfinished when the view fell behind, which the fresh history it
read holds no headline of (too old for it): it may have ended meanwhile, or may still run."""

RecordLoader = Callable[[Sequence[int]], list[MessageRecord]]
"""Reads an indexed chain's messages back from where the index put them (`proxy.record.index`)."""


def chain_key(summary: ChainSummary) -> str:
    """The model's key for a chain: its id plus start time, unique across proxy restarts."""
    return f"{summary.id}@{summary.started:.6f}"


def session_key(event: SessionChanged, run: str | None) -> str:
    """The model's key for a session: a session the proxy holds itself (a bridge's upstream session,
    named `upstream-N` afresh by every run, or a client session it minted) ends with its run, so it
    is keyed by that run too; a client's session with the server keeps its key across runs, since
    the server may still serve it after the proxy restarted."""
    if event.side is Side.BOTH or not run:
        return event.session
    return f"{event.session}@{run}"


@dataclass(slots=True)
class ChainEntry:
    """One chain as the TUI holds it: the latest headline and the messages seen so far, in order."""

    key: str
    summary: ChainSummary
    messages: list[MessageRecord] = field(default_factory=list)
    last_seq: int = 0
    dropped: int = 0
    continuation: str | None = None
    """The latest continuation state (parked, resumed, completed, ...) for bridged calls that parked."""
    records: Sequence[int] | None = None
    """Where an indexed capture's chain keeps its messages; they are read only while it is shown."""
    earlier_run: ProxyInfo | None = None
    """The proxy run this chain came from, once another run took its place (None: the run shown now)."""
    weight: int = 0
    """Estimated memory of the messages it keeps from the feed (an indexed chain's, read back when
    shown, weigh nothing: `MAX_LOADED` bounds those)."""
    own_summary: bool = False
    """Whether `summary` is this entry's own copy (counted into), not the event's (which other
    subscribers of the same bus may still read)."""
    placeholder: bool = False
    """Made up from a message whose `chain_opened` this view never read (a lagged feed, a capture cut
    at the front): its start is the message's, not the chain's, until a headline says otherwise."""

    found: int = -1
    """Which body-searching terms of the filter a search of its messages read back found (bit i for
    the i-th of `Query.body_terms`); -1 until searched (`ui.body_search`)."""

    _text: str = ""
    """Lower-cased JSON of the kept messages' bodies, built the first time a filter searches them."""
    _searched: int = 0
    """How many of the kept messages `_text` holds."""

    @property
    def whole(self) -> bool:
        """Whether the view keeps every message of the chain it was given: none was counted instead
        of kept (past `max_messages` or `max_bytes`, or left out of an index) and none of an indexed
        chain's was cut when read back. A request without an answer in a chain not whole may have
        had its answer among those let go."""
        if self.dropped:
            return False
        return self.records is None or len(self.messages) >= len(self.records)

    def search_text(self) -> str:
        """Every kept body as lower-cased JSON, one per line (what `body:` and free text search).

        Built on the first search and extended as messages arrive, so a chain nobody searches costs
        nothing and a chain searched again costs only its new messages.
        """
        if self._searched < len(self.messages):
            fresh = [body_text(r.body) for r in self.messages[self._searched :]]
            self._text = "\n".join([self._text, *fresh]) if self._text else "\n".join(fresh)
            self._searched = len(self.messages)
        return self._text

    @property
    def bodies_held(self) -> bool:
        """Whether its kept messages are all its bodies: a chain of a feed, or an indexed one read back
        now (or with none). An indexed chain not read back holds none of its messages."""
        return self.records is None or not self.records or bool(self.messages)

    def forget_search(self) -> None:
        """Let the search text go (its oldest messages went): the next search builds it again."""
        self._text = ""
        self._searched = 0

    def message(self, seq: int) -> MessageRecord | None:
        """The kept message with this sequence number, if any."""
        for record in self.messages:
            if record.seq == seq:
                return record
        return None


@dataclass(slots=True)
class SessionEntry:
    """One legacy session: who holds it and its history (opened -> reinitialized -> ended/expired).

    A client's session (`side` both) or one the MRTR->legacy bridge holds with the upstream
    (`side` upstream), which also shows whose it is (`principal`, a hash prefix) and what its
    `initialize` declared (`capabilities`).
    """

    session: str
    client_name: str | None
    protocol_version: str | None
    state: str
    opened: float
    changed: float
    history: list[tuple[float, str]] = field(default_factory=list)
    side: str = "both"
    principal: str | None = None
    capabilities: str | None = None
    earlier_run: bool = False
    """Last heard of from a proxy run before the one attached now: its state is as that run last
    said (a session the proxy itself held ended with that process; a server's may live on)."""


@dataclass(slots=True)
class Changes:
    """What one or more applied events changed, so widgets redraw only that."""

    added: list[str] = field(default_factory=list)
    updated: set[str] = field(default_factory=set)
    removed: set[str] = field(default_factory=set)
    info: bool = False
    sessions: bool = False
    lagged: bool = False
    cleared: bool = False

    def merge(self, other: Changes) -> None:
        """Fold a later change set into this one (the view collects them while it is paused)."""
        if other.cleared:
            self.added.clear()
            self.updated.clear()
            self.removed.clear()
            self.cleared = True
        self.added.extend(k for k in other.added if k not in self.added)
        self.updated |= other.updated
        for key in other.removed:
            if key in self.added:
                self.added.remove(key)  # came and went while nobody looked
            else:
                self.removed.add(key)
            self.updated.discard(key)
        self.info |= other.info
        self.sessions |= other.sessions
        self.lagged |= other.lagged

    def __bool__(self) -> bool:
        return (
            bool(self.added or self.updated or self.removed or self.info or self.sessions or self.lagged)
            or self.cleared
        )


MAX_RUNS = 1000
"""Run tags a model remembers (a capture of many restarts counts up to this many)."""


class ViewModel:
    """Chains, sessions, continuations and counters, built from flow events and nothing else."""

    def __init__(
        self, max_chains: int = MAX_CHAINS, max_messages: int = MAX_MESSAGES, max_bytes: int = MAX_BYTES
    ) -> None:
        self.max_chains = max_chains
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.weight = 0
        """Estimated memory of the messages kept from the feed (`ChainEntry.weight`, summed)."""
        self.chains: OrderedDict[str, ChainEntry] = OrderedDict()
        self.proxies: dict[str, ProxyInfo] = {}
        self.sessions: OrderedDict[str, SessionEntry] = OrderedDict()
        self.continuations: dict[str, ContinuationChanged] = {}
        self.messages_seen = 0
        self.events_applied = 0
        self.lagged_total = 0
        self.evicted = 0
        self._current: dict[str, str] = {}
        self._loader: RecordLoader | None = None
        self._loaded: OrderedDict[str, ChainEntry] = OrderedDict()
        self.lost: dict[str, ProxyInfo] = {}
        """What the proxies said of themselves before the feed lost them (empty while attached)."""
        self.reattached: Reattached | None = None
        """What the last reconnection found (None before any)."""
        self.earlier = 0
        """Chains held from earlier proxy runs (marked, not counted with the run shown now)."""
        self.runs: OrderedDict[str, None] = OrderedDict()
        """Proxy runs the feed has spoken for, by run tag (a capture written by several; bounded)."""
        self._run: str | None = None
        """The run tag of the last `proxy_info`: the run whose events come now."""

    # -- reading ------------------------------------------------------------------------------

    @property
    def info(self) -> ProxyInfo | None:
        """The most recent ProxyInfo (a single proxy's identity, or the last one of several); while
        the feed is lost, the last one it had (what recorded the chains shown)."""
        proxies = self.proxies or self.lost
        return next(reversed(proxies.values()), None) if proxies else None

    @property
    def parked(self) -> int:
        """Upstream calls currently parked by the modern-client -> legacy-server bridge."""
        return sum(1 for c in self.continuations.values() if c.state == "parked")

    def get(self, key: str) -> ChainEntry | None:
        """The chain with this key, or None once evicted or cleared (an indexed chain's messages read now)."""
        entry = self.chains.get(key)
        if entry is not None and entry.records is not None:
            self._load(entry)
        return entry

    @property
    def loader(self) -> RecordLoader | None:
        """Reads an indexed capture's chain's messages back (None until an index is loaded)."""
        return self._loader

    def _load(self, entry: ChainEntry) -> None:
        """Read an indexed chain's messages, letting go of those of the chain shown longest ago."""
        loaded = self._loaded
        if entry.key in loaded:
            loaded.move_to_end(entry.key)
            return
        if self._loader is not None and entry.records:
            entry.messages = self._loader(entry.records)[: self.max_messages]
            entry.last_seq = max((m.seq for m in entry.messages), default=0)
        loaded[entry.key] = entry
        while len(loaded) > MAX_LOADED:
            _, old = loaded.popitem(last=False)
            old.messages = []
            old.last_seq = 0
            old.forget_search()  # its text goes with its messages, or every chain shown would keep it

    def load_index(
        self,
        chains: Iterable[tuple[ChainSummary, Sequence[int], int]],
        events: Iterable[FlowEvent],
        loader: RecordLoader,
    ) -> Changes:
        """Show every chain of an indexed capture instead of what was shown; messages are read when shown.

        `chains` are (headline, where its messages are, messages not indexed); `events` the capture's
        other events (proxy info, sessions, continuations), applied after the chains.
        """
        self.clear()
        self._loader = loader
        self._loaded.clear()
        for summary, records, dropped in sorted(chains, key=lambda c: c[0].started):
            key = chain_key(summary)
            self.chains[key] = ChainEntry(key=key, summary=summary, dropped=dropped, records=records)
            self._current[summary.id] = key
            self.messages_seen += summary.messages
        changes = Changes(cleared=True, sessions=True, info=True)
        for event in events:
            self._apply(event, changes)
        self._evict(changes)
        changes.added.clear()  # `cleared` redraws everything
        changes.removed.clear()
        return changes

    # -- writing ------------------------------------------------------------------------------

    def apply_all(self, events: Iterable[FlowEvent]) -> Changes:
        """Apply events in order and return everything they changed together."""
        changes = Changes()
        for event in events:
            self._apply(event, changes)
        return changes

    def apply(self, event: FlowEvent) -> Changes:
        """Apply one event and return what it changed."""
        changes = Changes()
        self._apply(event, changes)
        return changes

    def detach(self) -> Changes:
        """The feed lost its proxy: put aside what it said of itself until a `proxy_info` says who is back.

        Its parked calls go too: no count of the lost run is shown as current, and a proxy that
        answers again tells of the calls parked then in its history.
        """
        if self.proxies:
            self.lost = dict(self.proxies)
            self.proxies.clear()
        self.continuations.clear()
        return Changes(info=True)

    def resync(self) -> Changes:
        """The feed reads a fresh history of the same proxy (it fell behind): what the view shows as
        unfinished may have ended unread, and would stand so forever.

        The parked calls held now go (that history tells of every call parked now), and every
        unfinished chain is settled as `incomplete` with `BEHIND_UNREAD` as its note: the history
        gives each of its chains the headline it has now, so only a chain older than it keeps that
        note, and a live event of one still running gives it its real state again.
        """
        changes = self.settle(BEHIND_UNREAD)
        changes.info = True
        return changes

    def clear(self) -> Changes:
        """Forget chains, sessions and continuations (the user's 'clear'); proxy info and lag stay."""
        self.earlier = 0
        self.chains.clear()
        self.sessions.clear()
        self.continuations.clear()
        self._current.clear()
        self._loaded.clear()
        self.messages_seen = 0
        self.weight = 0
        return Changes(cleared=True, sessions=True, info=True)

    def settle(self, note: str) -> Changes:
        """Show every unfinished chain as `incomplete`, with `note` saying why: its feed ended for good
        (a capture read to its end, a proxy that stopped), so no later event can end it."""
        settled = False
        for entry in self.chains.values():
            if entry.summary.status in UNFINISHED:
                _settle(entry, note)
                settled = True
        # Nothing is parked once nothing more can come: a call parked at the end never resumes here.
        info = bool(self.continuations)
        self.continuations.clear()
        # Redrawn whole: an indexed capture's chain would otherwise be read back to redraw its row.
        return Changes(cleared=settled, info=info)

    def _apply(self, event: FlowEvent, changes: Changes) -> None:
        self.events_applied += 1
        if isinstance(event, ChainOpened | ChainChanged):
            self._upsert(event.chain, changes)
        elif isinstance(event, MessageRecorded):
            self._message(event.chain_id, event.message, changes)
        elif isinstance(event, SessionChanged):
            self._session(event)
            changes.sessions = True
        elif isinstance(event, ContinuationChanged):
            self._continuation(event, changes)
        elif isinstance(event, Lagged):
            self.lagged_total += event.dropped
            changes.lagged = True
        elif isinstance(event, ProxyInfo):
            if self.lost:
                self._reattach(event, changes)
            self.proxies[event.listen] = event
            if event.run:
                self._run = event.run
                self.runs[event.run] = None
                self.runs.move_to_end(event.run)
                if len(self.runs) > MAX_RUNS:
                    self.runs.popitem(last=False)
            changes.info = True

    def _reattach(self, info: ProxyInfo, changes: Changes) -> None:
        """A proxy answers again: the same run, or another whose chains must be kept apart."""
        lost, self.lost = self.lost, {}
        if any(same_run(before, info) for before in lost.values()):
            self.reattached = Reattached(info, same=True)
            self.proxies.update(lost)
            return
        earlier = next(reversed(lost.values()))
        self.reattached = Reattached(info, same=False, earlier=earlier)
        for entry in self.chains.values():
            if entry.earlier_run is None:
                entry.earlier_run = earlier
                if entry.summary.status in UNFINISHED:
                    _settle(entry, RUN_ENDED)
        self.earlier = len(self.chains)
        for session in self.sessions.values():
            session.earlier_run = True
        self.messages_seen = 0
        self.lagged_total = 0  # the new run dropped nothing for this TUI (the earlier chains are dimmed)
        self.continuations.clear()  # parked calls ended with the process that held them
        self._current.clear()  # a message of the new run never lands in an old chain
        changes.cleared = True
        changes.sessions = True

    def _upsert(self, summary: ChainSummary, changes: Changes) -> ChainEntry:
        key = chain_key(summary)
        entry = self.chains.get(key)
        if entry is None:
            entry = self._placeholder_of(summary.id)
            if entry is not None:  # the chain's own headline at last: one row, under its real start
                self._rekey(entry, key, changes)
        if entry is None:
            entry = ChainEntry(key=key, summary=summary)
            self.chains[key] = entry
            self._current[summary.id] = key
            changes.added.append(key)
            self._evict(changes)
        else:
            entry.summary = summary
            entry.own_summary = False
            if key not in changes.added:
                changes.updated.add(key)
        return entry

    def _placeholder_of(self, chain_id: str) -> ChainEntry | None:
        key = self._current.get(chain_id)
        entry = self.chains.get(key) if key is not None else None
        return entry if entry is not None and entry.placeholder else None

    def _rekey(self, entry: ChainEntry, key: str, changes: Changes) -> None:
        """File a placeholder under the key its chain's headline gives (its row is drawn anew)."""
        old = entry.key
        del self.chains[old]
        if old in changes.added:
            changes.added.remove(old)
        else:
            changes.removed.add(old)
        changes.updated.discard(old)
        entry.key = key
        entry.placeholder = False
        self.chains[key] = entry
        self._current[entry.summary.id] = key
        changes.added.append(key)

    def _evict(self, changes: Changes) -> None:
        while len(self.chains) > self.max_chains:
            self._evict_chain(next(iter(self.chains)), changes)

    def _evict_chain(self, key: str, changes: Changes) -> None:
        entry = self.chains.pop(key)
        if self._current.get(entry.summary.id) == key:
            del self._current[entry.summary.id]
        if entry.earlier_run is not None:
            self.earlier -= 1
        self.evicted += 1
        self.weight -= entry.weight
        if key in changes.added:
            changes.added.remove(key)
        else:
            changes.removed.add(key)
        changes.updated.discard(key)

    def _lighten(self, keep: ChainEntry, changes: Changes) -> None:
        """Past `max_bytes`: the oldest chains but `keep` (being filled) go, then `keep`'s oldest messages."""
        while self.weight > self.max_bytes:
            other = next((key for key in self.chains if key != keep.key), None)
            if other is not None:
                self._evict_chain(other, changes)
            elif len(keep.messages) > 1:
                gone = record_weight(keep.messages.pop(0))
                keep.weight -= gone
                self.weight -= gone
                keep.dropped += 1
                keep.forget_search()
            else:
                return

    def _message(self, chain_id: str, record: MessageRecord, changes: Changes) -> None:
        key = self._current.get(chain_id)
        entry = self.chains.get(key) if key else None
        if entry is None:
            # Its chain_opened was lost (a lagged feed, a capture cut at the front): keep the message.
            placeholder = ChainSummary(id=chain_id, started=record.ts, method=record.method)
            placeholder.notes.append("opened before this view started")
            entry = self._upsert(placeholder, changes)
            entry.placeholder = True
        if record.seq and record.seq <= entry.last_seq:
            return  # a history replay repeating what this view already holds
        entry.last_seq = max(entry.last_seq, record.seq)
        self.messages_seen += 1
        _count(entry, record)
        if len(entry.messages) >= self.max_messages:
            entry.dropped += 1
        else:
            sent_in_place(entry.messages, record)
            entry.messages.append(record)
            weight = record_weight(record)
            entry.weight += weight
            self.weight += weight
            if self.weight > self.max_bytes:
                self._lighten(entry, changes)
        if entry.key not in changes.added:
            changes.updated.add(entry.key)

    def _session(self, event: SessionChanged) -> None:
        key = session_key(event, self._run)
        entry = self.sessions.get(key)
        if entry is None:
            entry = SessionEntry(
                session=event.session,
                client_name=event.client_name,
                protocol_version=event.protocol_version,
                state=event.state,
                opened=event.ts,
                changed=event.ts,
                side=event.side.value,
            )
            self.sessions[key] = entry
        entry.state = event.state
        entry.changed = event.ts
        entry.earlier_run = False
        entry.client_name = event.client_name or entry.client_name
        entry.protocol_version = event.protocol_version or entry.protocol_version
        entry.principal = event.principal or entry.principal
        entry.capabilities = event.capabilities or entry.capabilities
        if (event.ts, event.state) not in entry.history:
            entry.history.append((event.ts, event.state))
        while len(self.sessions) > self.max_chains:
            self.sessions.popitem(last=False)

    def _continuation(self, event: ContinuationChanged, changes: Changes) -> None:
        if event.state in _ACTIVE_CONTINUATION:
            self.continuations[event.chain_id] = event
        else:
            self.continuations.pop(event.chain_id, None)
        key = self._current.get(event.chain_id)
        entry = self.chains.get(key) if key else None
        if entry is not None:
            entry.continuation = event.state
            if entry.key not in changes.added:
                changes.updated.add(entry.key)
        changes.info = True


def _count(entry: ChainEntry, record: MessageRecord) -> None:
    """Count a message its headline does not count yet, so the row agrees with the chain's messages.

    The proxy announces a headline when a chain's status moves, not for each message: a request still
    running, or a message after the final answer (`notifications/initialized`, the 202 to a POSTed
    answer), arrives after the last headline. A record's sequence number is its place in the chain,
    so a headline counting `messages` already counts records up to that number (a history replay's
    headline counts all of its messages, which are not counted twice).
    """
    summary = entry.summary
    if record.seq and record.seq <= summary.messages:
        return
    if not entry.own_summary:
        summary = entry.summary = summary.model_copy()
        entry.own_summary = True
    summary.messages += 1
    if record.direction is Direction.TO_SERVER:
        summary.bytes_to_server += record.size
    else:
        summary.bytes_to_client += record.size


def _settle(entry: ChainEntry, note: str) -> None:
    """End an unfinished chain as `incomplete`, on a copy of its headline (the event's may be shared)."""
    entry.summary = left_unfinished(entry.summary, note)
    entry.own_summary = True
