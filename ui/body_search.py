"""The chain list's filter, and the search of the bodies an indexed capture's chains do not hold.

An indexed capture's chain holds its messages only while it is shown (`MAX_LOADED` of them), yet the
filter's `body:` and free-text terms search every chain, as `mcp-proxy export --q` does over the same
file. So when the filter holds such terms, a search reads the chains' messages back in a thread (a
few chains at a time, newest first, each chain's messages let go once searched), notes on each chain
which of the terms its bodies hold (`ChainEntry.found`), and hands over what it found every so often:
the list shows the chains found as they come, and the status bar says how far the search is. Only
chains whose headline leaves the outcome open are read (`method:tools/call body:paris` reads the
`tools/call` chains alone).

Until a chain is searched the filter shows it only when its bodies cannot change the outcome, so a
chain never shows and then goes (`-body:paris` waits for the search too). Memory stays bounded: one
small number per chain, and the messages of one batch of chains at a time.

No Textual here: the main screen runs `search_bodies` as a worker and applies what it yields.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from proxy.flows.query import Query, Term, bodies_text, body_found
from ui.model import ChainEntry, RecordLoader

UNSEARCHED: Final = -1
"""`ChainEntry.found` of a chain whose bodies no search has read for the current filter."""

BATCH: Final = 128
"""Chains read back per step of the search (a step runs in a thread, some milliseconds; the screen
reads a chain it shows between two chains' reads)."""

HAND_OVER_EVERY: Final = 0.3
"""Seconds between two hand-overs of what the search found."""

REDRAW_SHARE: Final = 0.25
"""The most of the screen's time that redrawing the list for what the search found may take: a list
of thousands of rows takes a good part of a second to redraw, so it is redrawn less often."""


@dataclass(slots=True)
class ListFilter:
    """The filter as the chain list applies it: the query, and how far the search of unheld bodies is."""

    query: Query = field(default_factory=Query)
    to_search: int = 0
    """Chains the search of bodies reads (0: none, the filter needs no search)."""
    searched: int = 0
    """Of those, the chains read so far."""
    failed: str | None = None
    """Why the search stopped before its end, if it did."""

    @property
    def terms(self) -> tuple[Term, ...]:
        """The terms the search looks for, in the order of `ChainEntry.found`'s bits."""
        return self.query.body_terms

    @property
    def searching(self) -> bool:
        """True while the search has chains left to read."""
        return self.searched < self.to_search and self.failed is None

    def wants(self, entry: ChainEntry, now: float | None = None) -> bool:
        """Whether the list shows the chain: its bodies searched where it holds them or a search read
        them, and otherwise only when they cannot change the outcome."""
        query = self.query
        if not query.active:
            return True
        if entry.bodies_held:
            return query.matches(entry.summary, now, entry.search_text)
        if entry.found != UNSEARCHED:
            found = entry.found
            terms = self.terms
            return query.matches_found(entry.summary, now, lambda term: bool(found >> terms.index(term) & 1))
        return query.verdict(entry.summary, now) is True

    def start(self, chains: Iterable[ChainEntry], now: float | None = None) -> list[ChainEntry]:
        """Forget what an earlier search found; the chains this filter must read, newest first."""
        todo: list[ChainEntry] = []
        query, terms = self.query, self.terms
        for entry in chains:
            entry.found = UNSEARCHED
            if terms and not entry.bodies_held and query.verdict(entry.summary, now) is None:
                todo.append(entry)
        todo.reverse()
        self.to_search, self.searched, self.failed = len(todo), 0, None
        return todo

    def took(self, found: Sequence[tuple[ChainEntry, int]]) -> bool:
        """Note what a step of the search found; True when a chain it read is now shown."""
        for entry, bits in found:
            entry.found = bits
        self.searched += len(found)
        return any(self.wants(entry) for entry, _ in found)


@dataclass(slots=True)
class RedrawPace:
    """When the list may be redrawn next for what the search found, so that redrawing takes at most
    `REDRAW_SHARE` of the time (the clock is the caller's)."""

    last_end: float = float("-inf")
    last_cost: float = 0.0

    def wait(self, now: float) -> float:
        """Seconds from `now` until the next redraw is due (0: now)."""
        gap = max(HAND_OVER_EVERY, self.last_cost * (1 - REDRAW_SHARE) / REDRAW_SHARE)
        return max(0.0, self.last_end + gap - now)

    def drew(self, started: float, ended: float) -> None:
        """A redraw ran from `started` to `ended`."""
        self.last_end, self.last_cost = ended, ended - started


def found_bits(terms: Sequence[Term], text: str) -> int:
    """Which of the terms bodies given as `text` hold (bit i for the i-th)."""
    return sum(1 << i for i, term in enumerate(terms) if body_found(term, text))


def _search_batch(load: RecordLoader, terms: Sequence[Term], chains: Sequence[Sequence[int]]) -> list[int]:
    return [found_bits(terms, bodies_text(load(records))) for records in chains]


async def search_bodies(
    load: RecordLoader, terms: Sequence[Term], todo: Sequence[ChainEntry]
) -> AsyncIterator[list[tuple[ChainEntry, int]]]:
    """Read the chains' messages back, a batch at a time in a thread, and yield which terms each holds,
    every `HAND_OVER_EVERY` seconds and at the end. Cancelling stops it after the batch being read."""
    found: list[tuple[ChainEntry, int]] = []
    handed = time.monotonic()
    for start in range(0, len(todo), BATCH):
        batch = todo[start : start + BATCH]
        records = [entry.records or () for entry in batch]
        found.extend(zip(batch, await asyncio.to_thread(_search_batch, load, terms, records), strict=True))
        if time.monotonic() - handed >= HAND_OVER_EVERY:
            yield found
            found, handed = [], time.monotonic()
    if found:
        yield found
