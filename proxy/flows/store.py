"""The bounded chain store: a ring buffer of chains, each holding a bounded list of its messages.

Old chains fall off the front when the store is full; a chain past its message bound keeps its
headline current and counts the messages it no longer holds.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from proxy.flows.events import ChainSummary, MessageRecord


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
    rewrites: list[tuple[int, int]] = field(default_factory=list)
    signature: tuple[str, str | None, str] | None = None
    """Method, name/uri and argument digest of the originating request (matches MRTR retries)."""

    def add(self, record: MessageRecord) -> None:
        """Append a message, counting (not keeping) those past the bound."""
        if len(self.messages) == self.messages.maxlen:
            self.dropped_messages += 1
        self.messages.append(record)

    def next_seq(self) -> int:
        """The sequence number of the next message in this chain."""
        self.seq += 1
        return self.seq


class ChainStore:
    """Recent chains by id, oldest evicted first once `max_chains` is reached."""

    def __init__(self, max_chains: int = 2000, max_messages_per_chain: int = 500) -> None:
        if max_chains <= 0 or max_messages_per_chain <= 0:
            raise ValueError("store bounds must be positive")
        self._chains: OrderedDict[str, Chain] = OrderedDict()
        self.max_chains = max_chains
        self.max_messages = max_messages_per_chain
        self.evicted = 0
        self.before_read: Callable[[], None] | None = None
        """Called before every read, so observations still queued as facts are built first."""

    def open(self, summary: ChainSummary) -> Chain:
        """Start holding a new chain, evicting the oldest when full."""
        chain = Chain(summary=summary, messages=deque(maxlen=self.max_messages))
        self._chains[summary.id] = chain
        while len(self._chains) > self.max_chains:
            self._chains.popitem(last=False)
            self.evicted += 1
        return chain

    def get(self, chain_id: str) -> Chain | None:
        """The chain with this id, or None when unknown or already evicted."""
        if self.before_read is not None:
            self.before_read()
        return self._chains.get(chain_id)

    def peek(self, chain_id: str) -> Chain | None:
        """`get` for the builder itself: no `before_read` (it must not build facts from inside a build)."""
        return self._chains.get(chain_id)

    def __len__(self) -> int:
        if self.before_read is not None:
            self.before_read()
        return len(self._chains)

    def __iter__(self) -> Iterator[Chain]:
        if self.before_read is not None:
            self.before_read()
        return iter(list(self._chains.values()))

    def recent(self, limit: int) -> list[Chain]:
        """The newest `limit` chains, oldest first (what a late observer needs to catch up)."""
        if limit <= 0:
            return []
        if self.before_read is not None:
            self.before_read()
        chains = list(self._chains.values())
        return chains[-limit:]

    def clear(self) -> None:
        """Forget every chain (admin/TUI 'clear')."""
        if self.before_read is not None:
            self.before_read()
        self._chains.clear()
