"""The bounded chain store: a ring buffer of chains, each holding a bounded list of its messages.

Old chains fall off the front when the store is full, in chains or (given `max_bytes`) in the memory
their messages are estimated to hold: a record keeps its body decoded, and 64 KiB of JSON can be a
megabyte and more of Python objects, so a bound in chains alone bounds nothing. A chain past its
message bound (or alone past the memory bound) keeps its headline current and counts the messages
it no longer holds. A chain that falls off while it is
still open (a long call with many newer chains opened meanwhile) is held aside until it has ended and
its exchange has closed (`release`), so its
later progress and result still join it and the admin API still finds it by id; past
`max_unfinished` such chains the oldest is let go and counted in `abandoned`.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, MutableSequence
from dataclasses import dataclass, field

from proxy.flows.events import (
    ChainSummary,
    ContinuationChanged,
    Direction,
    MessageRecord,
    SessionChanged,
    Side,
)
from proxy.flows.exchanges import BoundedMap, ExchangeFacts
from proxy.wire.weight import value_weight

SESSION_ENDS = frozenset({"ended", "expired"})
"""The states a session's change ends it with (it is open after any other)."""

RECORD_WEIGHT = 1024
"""A record's own memory beyond its body (the model, its headers, its strings), about."""


def record_weight(record: MessageRecord) -> int:
    """Estimated memory a record holds: itself and its body (a truncated body is its preview text)."""
    body = record.body
    if record.truncated:
        preview = body.get("preview") if isinstance(body, dict) else None
        return RECORD_WEIGHT + (len(preview) if isinstance(preview, str) else 0)
    return RECORD_WEIGHT + value_weight(body, record.size, unlooked=0)


def sent_in_place(messages: MutableSequence[MessageRecord], made: MessageRecord) -> None:
    """`made` went upstream in place of a client's request the proxy relays (an intercept's edit): the
    client's own record of that request, relayed unchanged until then, travelled its first leg only
    (client → proxy), so it becomes the client's side. Every list of a chain's records keeps this one
    rule: the store's, and a viewer's that builds its own from the records it is sent. An answer the
    proxy sent the server in the client's place (an intercept's, to the server's request) replaces no
    request: the client's request of the same id is left as relayed.
    """
    if made.side is not Side.UPSTREAM or made.direction is not Direction.TO_SERVER or made.jsonrpc_id is None:
        return
    for i in range(len(messages) - 1, -1, -1):
        old = messages[i]
        if (
            old.side is Side.BOTH
            and old.direction is Direction.TO_SERVER
            and old.exchange == made.exchange
            and old.jsonrpc_id == made.jsonrpc_id
            and (old.kind == "request") is (made.kind == "request")
        ):
            messages[i] = old.model_copy(update={"side": Side.CLIENT})
            return


@dataclass(slots=True)
class Chain:
    """One logical client operation: its headline and the messages that belong to it."""

    summary: ChainSummary
    messages: deque[MessageRecord]
    dropped_messages: int = 0
    seq: int = 0
    wait_started: float | None = None
    waiting_on: int = 0
    upstream_requests: int = 0
    signature: tuple[str, str | None, str] | None = None
    """Method, name/uri and argument digest of the originating request (matches MRTR retries)."""
    rounds_after: int | None = None
    """The rounds to go back to once the message being filed is (a refused retry's answer)."""
    cancelled: bool = False
    """The client cancelled it: a failure that ends it is the cancel's doing (status `cancelled`)."""
    answered_by_proxy: bool = False
    """The proxy answered its request itself and the upstream never saw it: it has no upstream time."""
    acknowledged: float | None = None
    """When a `subscriptions/listen`'s acknowledgement reached the client: its answer, after which its
    stream only stays open (the rest of its time is stream time, not the upstream's)."""
    exchanges: dict[str, ExchangeFacts] = field(default_factory=dict)
    """What no record holds of each exchange (or bridge leg) its records travelled on, by id: as many
    as the chain holds messages at most. An exchange that carried several chains shares one object
    among them."""
    weight: int = 0
    """Estimated memory of the messages it holds, when its store bounds memory (else 0)."""
    weights: deque[int] = field(default_factory=deque)
    """Each held message's part of `weight`, in order (empty when its store bounds no memory)."""

    def note_exchange(self, key: str, facts: ExchangeFacts) -> None:
        """Keep the facts of one more exchange or leg its records travelled on (past the bound, the
        latest ones are not kept)."""
        if key not in self.exchanges and len(self.exchanges) < (self.messages.maxlen or 0):
            self.exchanges[key] = facts

    def add(self, record: MessageRecord, weight: int = 0) -> int:
        """Append a message, counting (not keeping) those past the bound; how much its weight grew."""
        gone = 0
        if len(self.messages) == self.messages.maxlen:
            self.dropped_messages += 1
            if self.weights:
                gone = self.weights.popleft()
        sent_in_place(self.messages, record)
        self.messages.append(record)
        if weight:
            self.weights.append(weight)
            self.weight += weight - gone
        return weight - gone

    def drop_oldest(self) -> int:
        """Let go of its oldest message (counted like one past the bound); the weight that went."""
        self.messages.popleft()
        self.dropped_messages += 1
        gone = self.weights.popleft() if self.weights else 0
        self.weight -= gone
        return gone

    def next_seq(self) -> int:
        """The sequence number of the next message in this chain."""
        self.seq += 1
        return self.seq


class ChainStore:
    """Recent chains by id, oldest evicted first once `max_chains` is reached or (given) their
    messages pass `max_bytes` of estimated memory."""

    def __init__(
        self,
        max_chains: int = 2000,
        max_messages_per_chain: int = 500,
        max_unfinished: int = 10_000,
        *,
        max_bytes: int | None = None,
        on_gone: Callable[[Chain], None] | None = None,
    ) -> None:
        if max_chains <= 0 or max_messages_per_chain <= 0 or max_unfinished < 0:
            raise ValueError("store bounds must be positive")
        if max_bytes is not None and max_bytes <= 0:
            raise ValueError("the store's memory bound must be positive")
        self.max_bytes = max_bytes
        """Estimated memory all held messages may take (`record_weight`); None weighs nothing (a
        capture's reader, whose rings hold one message a chain)."""
        self.weight = 0
        """Estimated memory the held messages take now (0 when `max_bytes` is None)."""
        self._on_gone = on_gone
        """Hears of each chain let go for good (an export writes it then: nothing joins it later)."""
        self._chains: OrderedDict[str, Chain] = OrderedDict()
        self._held: OrderedDict[str, Chain] = OrderedDict()
        """Chains the ring let go while still open, until they end."""
        self.max_chains = max_chains
        self.max_messages = max_messages_per_chain
        self.max_unfinished = max_unfinished
        self.evicted = 0
        self.abandoned = 0
        """Open chains let go because more than `max_unfinished` were held (their later messages are
        still in the capture, which records observations, not chains)."""
        self.sessions: BoundedMap = BoundedMap()
        """Session -> (the change that opened it, its latest change), for each session open now: a
        client's with the server, one a bridge minted for its client, or a bridge's own with the
        upstream, oldest first. A feed's history tells a late reader of them, as of parked calls."""
        self.continuations: BoundedMap = BoundedMap()
        """Chain id -> the latest change of its call parked (or resumed) now by the MRTR->legacy
        bridge, oldest first; an ended one goes. A feed's history tells a late reader of them, as it
        tells of chains: their `parked` events may be long gone from any queue."""

    def session_moved(self, event: SessionChanged) -> None:
        """Keep a session while it is open (its opening and latest change); forget it once it ends."""
        sessions = self.sessions
        if event.state in SESSION_ENDS:
            sessions.pop(event.session, None)
            return
        known = sessions.get(event.session)
        sessions[event.session] = (known[0] if known is not None else event, event)

    def continuation_moved(self, event: ContinuationChanged) -> None:
        """Keep the latest state of a call while it is parked or resumed; forget it once it ends."""
        if event.state in ("parked", "resumed"):
            self.continuations[event.chain_id] = event
        else:
            self.continuations.pop(event.chain_id, None)

    def open(self, summary: ChainSummary) -> Chain:
        """Start holding a new chain, evicting the oldest when full."""
        chain = Chain(summary=summary, messages=deque(maxlen=self.max_messages))
        self._chains[summary.id] = chain
        while len(self._chains) > self.max_chains:
            self._evict_oldest()
        return chain

    def add(self, chain: Chain, record: MessageRecord) -> None:
        """Append a message to one of its chains, letting the oldest go while memory is over the bound."""
        if self.max_bytes is None:
            chain.add(record)
            return
        grew = chain.add(record, record_weight(record))
        chain_id = chain.summary.id
        if chain_id in self._chains or chain_id in self._held:
            self.weight += grew
            if self.weight > self.max_bytes:
                self._lighten(chain, self.max_bytes)

    def _lighten(self, keep: Chain, bound: int) -> None:
        """Let chains go, oldest first but `keep` (being filed) last, until the messages held fit
        `bound`; alone past it, `keep` lets its own oldest messages go."""
        keep_id = keep.summary.id
        while self.weight > bound:
            other = next((chain_id for chain_id in self._chains if chain_id != keep_id), None)
            if other is not None:
                self._evict(other)
                continue
            held = next((c for c in self._held.values() if c is not keep), None)
            if held is not None:
                self._abandon(held)
                continue
            if len(keep.messages) <= 1:
                return
            self.weight -= keep.drop_oldest()

    def _evict_oldest(self) -> None:
        self._evict(next(iter(self._chains)))

    def _evict(self, chain_id: str) -> None:
        """Let a chain out of the ring: held aside while open, else gone."""
        old = self._chains.pop(chain_id)
        self.evicted += 1
        if old.summary.ended is None:
            self._hold(chain_id, old)
        else:
            self._let_go(old)

    def _hold(self, chain_id: str, chain: Chain) -> None:
        held = self._held
        held[chain_id] = chain
        while len(held) > self.max_unfinished:
            _, gone = held.popitem(last=False)
            self.abandoned += 1
            self._let_go(gone)

    def _abandon(self, chain: Chain) -> None:
        del self._held[chain.summary.id]
        self.abandoned += 1
        self._let_go(chain)

    def _let_go(self, chain: Chain) -> None:
        self.weight -= chain.weight
        if self._on_gone is not None:
            self._on_gone(chain)

    def release(self, chain_id: str) -> None:
        """Stop holding a chain the ring let go if it has ended (its exchange or leg closed)."""
        if self._held:
            chain = self._held.get(chain_id)
            if chain is not None and chain.summary.ended is not None:
                del self._held[chain_id]
                self._let_go(chain)

    @property
    def held(self) -> int:
        """Open chains kept after the ring let them go."""
        return len(self._held)

    def get(self, chain_id: str) -> Chain | None:
        """The chain with this id (in the ring, or open and held aside), or None when unknown or gone."""
        return self.peek(chain_id)

    def peek(self, chain_id: str) -> Chain | None:
        """`get` by another name (the builder's)."""
        chain = self._chains.get(chain_id)
        if chain is None and self._held:
            chain = self._held.get(chain_id)
        return chain

    def __len__(self) -> int:
        return len(self._chains)

    def __iter__(self) -> Iterator[Chain]:
        return iter(list(self._chains.values()))

    def newest(self) -> Chain | None:
        """The chain opened last that the ring still holds (None when it holds none)."""
        chains = self._chains
        return chains[next(reversed(chains))] if chains else None

    def recent(self, limit: int) -> list[Chain]:
        """The newest `limit` chains, oldest first (what a late observer needs to catch up)."""
        if limit <= 0:
            return []
        chains = list(self._chains.values())
        return chains[-limit:]

    def unended(self) -> list[Chain]:
        """Every chain held whose end has not come (those held aside, then the ring's), oldest first."""
        return [c for c in (*self._held.values(), *self._chains.values()) if c.summary.ended is None]

    def drain(self) -> Iterator[Chain]:
        """Let go of every chain, oldest first (those held aside, then the ring), as a reader finishes."""
        while self._held:
            chain = self._held.popitem(last=False)[1]
            self.weight -= chain.weight
            yield chain
        while self._chains:
            chain = self._chains.popitem(last=False)[1]
            self.weight -= chain.weight
            yield chain

    def clear(self) -> None:
        """Forget every chain (admin/TUI 'clear')."""
        self._chains.clear()
        self._held.clear()
        self.weight = 0
