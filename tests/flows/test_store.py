"""The bounded chain store: a ring buffer of chains, each with a bounded list of messages."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from proxy.flows.events import ChainSummary, Channel, Direction, MessageRecord, Side
from proxy.flows.store import Chain, ChainStore


def summary(n: int) -> ChainSummary:
    return ChainSummary(id=f"c{n}", started=float(n))


def record(seq: int) -> MessageRecord:
    return MessageRecord(
        seq=seq,
        ts=0.0,
        side=Side.BOTH,
        direction=Direction.TO_SERVER,
        channel=Channel.POST,
        exchange="x",
        kind="r",
    )


def ids(chains: Iterable[Chain]) -> list[str]:
    return [chain.summary.id for chain in chains]


def test_the_oldest_chain_is_evicted_first_once_the_store_is_full() -> None:
    store = ChainStore(max_chains=3)
    for n in range(1, 6):
        store.open(summary(n))

    assert ids(store) == ["c3", "c4", "c5"]
    assert len(store) == 3
    assert store.evicted == 2
    assert store.held == 2, "still open: held aside until they end"
    for n in (1, 2):
        old = store.get(f"c{n}")
        assert old is not None
        old.summary.ended = 9.0
        store.release(f"c{n}")
    assert store.get("c1") is None
    assert store.get("c2") is None
    chain = store.get("c5")
    assert chain is not None
    assert chain.summary.id == "c5"


def test_recent_returns_the_newest_chains_oldest_first() -> None:
    store = ChainStore(max_chains=10)
    for n in range(1, 6):
        store.open(summary(n))

    assert ids(store.recent(2)) == ["c4", "c5"]
    assert ids(store.recent(100)) == ["c1", "c2", "c3", "c4", "c5"]
    assert store.recent(0) == []
    assert store.recent(-1) == []


def test_iterating_is_safe_while_chains_are_opened() -> None:
    store = ChainStore(max_chains=2)
    store.open(summary(1))
    store.open(summary(2))

    seen = []
    for chain in store:
        seen.append(chain.summary.id)
        store.open(summary(len(seen) + 10))

    assert seen == ["c1", "c2"]
    assert ids(store) == ["c11", "c12"]


def test_a_chain_past_its_message_bound_keeps_the_newest_and_counts_the_rest() -> None:
    store = ChainStore(max_chains=1, max_messages_per_chain=3)
    chain = store.open(summary(1))

    for seq in range(1, 6):
        chain.add(record(seq))

    assert [m.seq for m in chain.messages] == [3, 4, 5]
    assert chain.dropped_messages == 2


def test_next_seq_numbers_a_chains_messages_from_one() -> None:
    chain = ChainStore().open(summary(1))

    assert [chain.next_seq() for _ in range(3)] == [1, 2, 3]


def test_clear_forgets_every_chain() -> None:
    store = ChainStore()
    store.open(summary(1))
    store.clear()

    assert len(store) == 0
    assert store.get("c1") is None


@pytest.mark.parametrize(("max_chains", "max_messages"), [(0, 1), (1, 0), (-5, 10), (10, -1)])
def test_bounds_must_be_positive(max_chains: int, max_messages: int) -> None:
    with pytest.raises(ValueError, match="store bounds must be positive"):
        ChainStore(max_chains, max_messages)
