"""The bounded chain store: a ring buffer of chains, each with a bounded list of messages."""

from __future__ import annotations

from collections.abc import Iterable

import orjson
import pytest

from proxy.flows.events import ChainSummary, Channel, Direction, MessageRecord, Side
from proxy.flows.store import Chain, ChainStore, sent_in_place


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


# --- the memory bound ------------------------------------------------------------------------------

TINY_OBJECTS = [{"a": 1} for _ in range(4000)]
"""32 KiB of JSON, under the capture body limit, that decodes to about 0.75 MiB of dicts."""


def heavy(seq: int, body: object = None) -> MessageRecord:
    body = TINY_OBJECTS if body is None else body
    return record(seq).model_copy(update={"body": body, "size": len(orjson.dumps(body))})


def test_chains_past_the_memory_bound_go_oldest_first_weighed_by_their_decoded_bodies() -> None:
    gone: list[str] = []
    store = ChainStore(max_chains=100, max_bytes=4 * 1024 * 1024, on_gone=lambda c: gone.append(c.summary.id))
    for n in range(1, 11):
        chain = store.open(summary(n))
        chain.summary.ended = float(n)
        store.add(chain, heavy(1))

    # each body is 32 KiB of JSON: ten of them are 320 KiB of text but about 7.5 MiB of objects
    assert 3 <= len(store) <= 5
    assert ids(store)[-1] == "c10"
    assert gone == [f"c{n}" for n in range(1, 11 - len(store))]
    assert store.evicted == len(gone)
    assert store.weight <= store.max_bytes


def test_a_store_without_a_memory_bound_weighs_nothing() -> None:
    store = ChainStore(max_chains=100)
    for n in range(1, 11):
        store.add(store.open(summary(n)), heavy(1))

    assert len(store) == 10
    assert store.weight == 0


def test_open_chains_let_go_by_the_memory_bound_are_held_and_still_weighed_then_abandoned() -> None:
    store = ChainStore(max_chains=100, max_bytes=2 * 1024 * 1024)
    first = store.open(summary(1))  # open: a long call
    store.add(first, heavy(1))
    for n in range(2, 6):
        store.add(store.open(summary(n)), heavy(1))

    assert store.get("c1") is None  # held chains weigh too: the oldest open one was let go at last
    assert store.abandoned >= 1
    assert store.weight <= 2 * 1024 * 1024


def test_one_chain_past_the_memory_bound_keeps_its_newest_messages_and_counts_the_rest() -> None:
    store = ChainStore(max_chains=100, max_bytes=2 * 1024 * 1024)
    chain = store.open(summary(1))
    for seq in range(1, 9):
        store.add(chain, heavy(seq))

    kept = [m.seq for m in chain.messages]
    assert kept == list(range(9 - len(kept), 9))
    assert 1 <= len(kept) <= 3
    assert chain.dropped_messages == 8 - len(kept)
    assert store.weight == chain.weight <= 2 * 1024 * 1024


def test_a_truncated_body_weighs_its_preview_and_light_bodies_fill_the_ring_as_before() -> None:
    preview = {"$truncated": True, "size": 10**7, "preview": "[" + '{"a":1},' * 8000}
    store = ChainStore(max_chains=5, max_bytes=4 * 1024 * 1024)
    for n in range(1, 11):
        chain = store.open(summary(n))
        chain.summary.ended = float(n)
        store.add(chain, heavy(1, preview).model_copy(update={"truncated": True}))

    assert ids(store) == ["c6", "c7", "c8", "c9", "c10"]  # the ring's bound, not memory's, let go
    assert store.weight < 5 * 80 * 1024


def test_the_weight_goes_with_the_chains_drained_cleared_or_released() -> None:
    store = ChainStore(max_chains=2, max_bytes=64 * 1024 * 1024)
    for n in range(1, 5):
        store.add(store.open(summary(n)), heavy(1))
    assert store.weight > 0
    list(store.drain())
    assert store.weight == 0

    for n in range(1, 4):  # c1 and c2 open: the ring lets them go while open, so they are held
        store.add(store.open(summary(n)), heavy(1))
    assert store.held == 1
    held = store.get("c1")
    assert held is not None
    before = store.weight
    held.summary.ended = 1.0
    store.release("c1")
    assert store.weight == before - held.weight
    store.clear()
    assert store.weight == 0


def test_the_chain_being_filed_stays_while_older_and_newer_ones_go_past_the_memory_bound() -> None:
    store = ChainStore(max_chains=100, max_bytes=4 * 1024 * 1024)
    first = store.open(summary(1))  # a long call, the oldest
    store.add(first, heavy(1))
    for n in (2, 3):
        chain = store.open(summary(n))
        chain.summary.ended = float(n)
        store.add(chain, heavy(1))
    assert ids(store) == ["c1", "c2", "c3"]

    store.add(first, heavy(2))  # past the bound: the oldest other than the one filled goes

    assert ids(store) == ["c1", "c3"]
    assert [m.seq for m in first.messages] == [1, 2]


def _on_x1(side: Side, direction: Direction, kind: str, ident: int) -> MessageRecord:
    return MessageRecord(
        seq=0, ts=0.0, side=side, direction=direction, channel=Channel.POST, exchange="x1", kind=kind,
        jsonrpc_id=ident, method="tools/call" if kind == "request" else None, body={},
    )  # fmt: skip


def test_an_edit_makes_the_relayed_request_the_clients_and_an_answer_sent_for_the_client_does_not() -> None:
    # A server's question may share its id with the client's call on the same exchange: the answer the
    # proxy's intercept sent the server for it replaces no request of the client's.
    call = _on_x1(Side.BOTH, Direction.TO_SERVER, "request", 1)
    answered = [call]
    sent_in_place(answered, _on_x1(Side.UPSTREAM, Direction.TO_SERVER, "result", 1))
    edited = [call]
    sent_in_place(edited, _on_x1(Side.UPSTREAM, Direction.TO_SERVER, "request", 1))

    assert answered[0].side is Side.BOTH
    assert edited[0].side is Side.CLIENT
