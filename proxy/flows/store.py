"""The bounded chain store: a ring buffer of chains, each holding a bounded list of its messages.

Old chains fall off the front when the store is full; a chain past its message bound keeps its
headline current and counts the messages it no longer holds. A chain that falls off while it is
still open (a long call with many newer chains opened meanwhile) is held aside until it has ended and
its exchange has closed (`release`), so its
later progress and result still join it and the admin API still finds it by id; past
`max_unfinished` such chains the oldest is let go and counted in `abandoned`.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, MutableSequence
from dataclasses import dataclass, field

from proxy.flows.events import ChainSummary, Direction, MessageRecord, Side


def sent_in_place(messages: MutableSequence[MessageRecord], made: MessageRecord) -> None:
    """`made` went upstream in place of a client's request the proxy relays (an intercept's edit): the
    client's own record of that request, relayed unchanged until then, travelled its first leg only
    (client → proxy), so it becomes the client's side. Every list of a chain's records keeps this one
    rule: the store's, and a viewer's that builds its own from the records it is sent.
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
    exchange_ends: dict[str, float] = field(default_factory=dict)
    """When each exchange its records travelled on closed (a GET stream's end is in no record); as
    many as the chain holds messages at most."""
    exchange_outcomes: dict[str, str] = field(default_factory=dict)
    """How those exchanges ended, for the ones that closed with an outcome (the client left, say)."""

    def exchange_ended(self, exchange: str, at: float, outcome: str | None = None) -> None:
        """Note when (and, given, how) one of its exchanges closed (past the bound, the latest ones
        are not kept)."""
        if len(self.exchange_ends) < (self.messages.maxlen or 0):
            self.exchange_ends[exchange] = at
            if outcome is not None:
                self.exchange_outcomes[exchange] = outcome

    def add(self, record: MessageRecord) -> None:
        """Append a message, counting (not keeping) those past the bound."""
        if len(self.messages) == self.messages.maxlen:
            self.dropped_messages += 1
        sent_in_place(self.messages, record)
        self.messages.append(record)

    def next_seq(self) -> int:
        """The sequence number of the next message in this chain."""
        self.seq += 1
        return self.seq


class ChainStore:
    """Recent chains by id, oldest evicted first once `max_chains` is reached."""

    def __init__(
        self,
        max_chains: int = 2000,
        max_messages_per_chain: int = 500,
        max_unfinished: int = 10_000,
        *,
        on_gone: Callable[[Chain], None] | None = None,
    ) -> None:
        if max_chains <= 0 or max_messages_per_chain <= 0 or max_unfinished < 0:
            raise ValueError("store bounds must be positive")
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

    def open(self, summary: ChainSummary) -> Chain:
        """Start holding a new chain, evicting the oldest when full."""
        chain = Chain(summary=summary, messages=deque(maxlen=self.max_messages))
        self._chains[summary.id] = chain
        while len(self._chains) > self.max_chains:
            old_id, old = self._chains.popitem(last=False)
            self.evicted += 1
            if old.summary.ended is None:
                self._hold(old_id, old)
            elif self._on_gone is not None:
                self._on_gone(old)
        return chain

    def _hold(self, chain_id: str, chain: Chain) -> None:
        held = self._held
        held[chain_id] = chain
        while len(held) > self.max_unfinished:
            _, gone = held.popitem(last=False)
            self.abandoned += 1
            if self._on_gone is not None:
                self._on_gone(gone)

    def release(self, chain_id: str) -> None:
        """Stop holding a chain the ring let go if it has ended (its exchange or leg closed)."""
        if self._held:
            chain = self._held.get(chain_id)
            if chain is not None and chain.summary.ended is not None:
                del self._held[chain_id]
                if self._on_gone is not None:
                    self._on_gone(chain)

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

    def recent(self, limit: int) -> list[Chain]:
        """The newest `limit` chains, oldest first (what a late observer needs to catch up)."""
        if limit <= 0:
            return []
        chains = list(self._chains.values())
        return chains[-limit:]

    def drain(self) -> Iterator[Chain]:
        """Let go of every chain, oldest first (those held aside, then the ring), as a reader finishes."""
        while self._held:
            yield self._held.popitem(last=False)[1]
        while self._chains:
            yield self._chains.popitem(last=False)[1]

    def clear(self) -> None:
        """Forget every chain (admin/TUI 'clear')."""
        self._chains.clear()
        self._held.clear()
