"""The view model: flow events in, chains/sessions/counters out, with replays merged and bounds kept."""

from __future__ import annotations

import json

from proxy.flows.events import (
    ChainStatus,
    ContinuationChanged,
    Direction,
    Lagged,
    MessageRecorded,
    SessionChanged,
    Side,
)
from tests.ui.helpers import BASE, finished, info, message, opened, summary, tour_events
from ui.model import BEHIND_UNREAD, Changes, ViewModel, chain_key


def test_a_chain_opened_then_messages_then_a_change_builds_one_entry() -> None:
    model = ViewModel()

    first = model.apply(opened("c1"))
    model.apply(message("c1", 1))
    last = model.apply(finished("c1", ms=40))

    key = chain_key(summary("c1"))
    assert first.added == [key]
    assert last.updated == {key}
    entry = model.get(key)
    assert entry is not None
    assert entry.summary.status is ChainStatus.OK
    assert [m.seq for m in entry.messages] == [1]
    assert model.messages_seen == 1


def test_a_history_replay_after_reconnect_merges_instead_of_doubling() -> None:
    model = ViewModel()
    history = [opened("c1"), message("c1", 1), message("c1", 2), finished("c1")]
    model.apply_all(history)

    again = model.apply_all(history)

    assert len(model.chains) == 1
    assert [m.seq for m in next(iter(model.chains.values())).messages] == [1, 2]
    assert again.added == []


def test_a_restarted_proxy_reusing_chain_ids_gets_new_rows() -> None:
    model = ViewModel()
    model.apply_all([opened("c1"), message("c1", 1)])

    model.apply_all([opened("c1", started=BASE + 60), message("c1", 1, body={"fresh": True})])

    assert len(model.chains) == 2
    old, new = model.chains.values()
    assert len(old.messages) == 1
    assert new.messages[0].body == {"fresh": True}


def test_the_oldest_chains_are_evicted_past_the_bound() -> None:
    model = ViewModel(max_chains=2)
    model.apply_all([opened("c1"), opened("c2", started=BASE + 1)])

    changes = model.apply(opened("c3", started=BASE + 2))

    assert [e.summary.id for e in model.chains.values()] == ["c2", "c3"]
    assert changes.removed == {chain_key(summary("c1"))}
    assert model.evicted == 1


def test_a_message_after_the_last_headline_is_counted_once_and_leaves_the_event_alone() -> None:
    model = ViewModel()
    done = finished("c1", messages=2, bytes_to_server=10, bytes_to_client=20)
    model.apply_all([opened("c1"), message("c1", 1, size=10), message("c1", 2, size=20), done])

    late = model.apply(message("c1", 3, size=5, direction=Direction.TO_SERVER, kind="notification"))

    entry = model.get(chain_key(summary("c1")))
    assert entry is not None
    assert late.updated == {entry.key}
    assert (entry.summary.messages, entry.summary.bytes_to_server) == (3, 15)
    assert done.chain.messages == 2  # the bus's event, which other subscribers read, is not changed


def test_a_history_replay_headline_already_counting_its_messages_is_not_counted_again() -> None:
    model = ViewModel()

    model.apply_all([opened("c1", messages=2, bytes_to_server=30), message("c1", 1), message("c1", 2)])

    (entry,) = model.chains.values()
    assert (entry.summary.messages, entry.summary.bytes_to_server) == (2, 30)


ROWS = [{"a": n} for n in range(4000)]
"""About 40 KiB of JSON that decodes to about a megabyte of dicts."""


def rows_message(chain_id: str, seq: int) -> MessageRecorded:
    return message(chain_id, seq, body=ROWS, size=len(json.dumps(ROWS, separators=(",", ":"))))


def test_chains_past_the_memory_bound_go_oldest_first_weighed_as_their_decoded_bodies() -> None:
    model = ViewModel(max_bytes=4 * 1024 * 1024)
    for n in range(1, 11):
        model.apply_all([opened(f"c{n}", started=BASE + n), rows_message(f"c{n}", 1)])

    kept = [e.summary.id for e in model.chains.values()]
    assert 2 <= len(kept) <= 5  # ten chains of 40 KiB of text each would all fit by their length
    assert kept[-1] == "c10"
    assert model.evicted == 10 - len(kept)
    assert 0 < model.weight <= 4 * 1024 * 1024


def test_a_chain_alone_past_the_memory_bound_keeps_its_newest_messages_and_searches_them() -> None:
    model = ViewModel(max_bytes=3 * 1024 * 1024)
    model.apply(opened("c1"))
    entry = model.chains[chain_key(summary("c1"))]
    model.apply(rows_message("c1", 1))
    assert '{"a": 0}' in entry.search_text()
    for seq in range(2, 9):
        model.apply(rows_message("c1", seq))

    seqs = [m.seq for m in entry.messages]
    assert seqs == list(range(9 - len(seqs), 9))
    assert entry.dropped == 8 - len(seqs)
    assert entry.search_text().count('{"a": 0}') == len(seqs)  # built again from what is kept
    assert model.weight == entry.weight <= 3 * 1024 * 1024
    model.clear()
    assert model.weight == 0


def test_a_message_of_an_unknown_chain_opens_a_placeholder() -> None:
    model = ViewModel()

    model.apply(message("c9", 3, method="notifications/progress"))

    (entry,) = model.chains.values()
    assert entry.summary.id == "c9"
    assert entry.summary.notes == ["opened before this view started"]


def test_messages_past_the_per_chain_bound_are_counted_not_kept() -> None:
    model = ViewModel(max_messages=2)
    model.apply_all([opened("c1"), *(message("c1", n) for n in (1, 2, 3))])

    (entry,) = model.chains.values()
    assert len(entry.messages) == 2
    assert entry.dropped == 1
    assert not entry.whole  # an answer the tree misses may be among those counted


def test_lag_markers_add_up_and_are_flagged() -> None:
    model = ViewModel()

    changes = model.apply_all([Lagged(dropped=3), Lagged(dropped=4)])

    assert model.lagged_total == 7
    assert changes.lagged


def test_sessions_keep_their_history_and_client() -> None:
    model = ViewModel()
    model.apply_all(
        [
            SessionChanged(
                ts=BASE, session="s1", state="opened", client_name="claude", protocol_version="2025-11-25"
            ),
            SessionChanged(ts=BASE + 5, session="s1", state="expired"),
            SessionChanged(ts=BASE + 6, session="s1", state="reinitialized"),
        ]
    )

    entry = model.sessions["s1"]
    assert entry.client_name == "claude"
    assert entry.state == "reinitialized"
    assert [state for _, state in entry.history] == ["opened", "expired", "reinitialized"]


def test_an_upstream_session_keeps_whose_it_is_and_what_it_declared() -> None:
    model = ViewModel()
    model.apply_all(
        [
            SessionChanged(
                ts=BASE,
                session="upstream-2",
                state="opened",
                protocol_version="2025-11-25",
                side=Side.UPSTREAM,
                principal="0123456789abcdef",
                capabilities="elicitation.form sampling",
            ),
            SessionChanged(ts=BASE + 9, session="upstream-2", state="expired", side=Side.UPSTREAM),
        ]
    )

    entry = model.sessions["upstream-2"]
    assert (entry.side, entry.principal, entry.capabilities) == (
        "upstream",
        "0123456789abcdef",
        "elicitation.form sampling",
    )
    assert [state for _, state in entry.history] == ["opened", "expired"]


def test_parked_continuations_are_counted_until_they_end() -> None:
    model = ViewModel()
    model.apply(opened("c1"))

    model.apply(ContinuationChanged(ts=BASE, chain_id="c1", state="parked"))
    assert model.parked == 1
    assert next(iter(model.chains.values())).continuation == "parked"

    model.apply(ContinuationChanged(ts=BASE + 1, chain_id="c1", state="completed"))
    assert model.parked == 0


def test_a_catch_up_settles_rows_its_fresh_history_holds_no_headline_of() -> None:
    """A chain shown as running that ended while the view was behind, and is older than the fresh
    history the view reads, says its end was not read; the history's chains show their state now."""
    model = ViewModel()
    model.apply_all([info(), opened("c1"), opened("c2", started=BASE + 1), opened("c3", started=BASE + 2)])
    model.apply(ContinuationChanged(ts=BASE, chain_id="c3", state="parked"))

    model.resync()
    model.apply_all([info(), opened("c2", started=BASE + 1), finished("c3", started=BASE + 2)])

    old, running, ended = (
        model.chains[chain_key(summary(c, started=BASE + n))] for n, c in enumerate(("c1", "c2", "c3"))
    )
    assert old.summary.status is ChainStatus.INCOMPLETE
    assert old.summary.notes[-1] == BEHIND_UNREAD
    assert running.summary.status is ChainStatus.PENDING
    assert running.summary.notes == []
    assert ended.summary.status is ChainStatus.OK
    assert model.parked == 0

    model.apply(finished("c1"))  # a live end of the old one still comes through
    assert old.summary.status is ChainStatus.OK


def test_proxy_info_is_kept_per_listener() -> None:
    model = ViewModel()

    model.apply_all([info(), info(listen="http://127.0.0.1:9090")])

    assert len(model.proxies) == 2
    assert model.info is not None
    assert model.info.listen == "http://127.0.0.1:9090"


def test_clear_forgets_chains_but_keeps_proxy_info_and_lag() -> None:
    model = ViewModel()
    model.apply_all([info(), opened("c1"), Lagged(dropped=2)])

    changes = model.clear()

    assert changes.cleared
    assert not model.chains
    assert model.info is not None
    assert model.lagged_total == 2


def test_changes_merged_while_paused_forget_rows_that_came_and_went() -> None:
    held = Changes(added=["a"])
    held.merge(Changes(added=["b"], updated={"a"}))
    held.merge(Changes(removed={"a", "z"}))

    assert held.added == ["b"]
    assert held.removed == {"z"}
    assert "a" not in held.updated


def test_the_recorded_tour_builds_both_eras_and_a_session() -> None:
    model = ViewModel()

    model.apply_all(tour_events())

    modes = {e.summary.mode.value for e in model.chains.values()}
    assert modes == {"passthrough", "legacy_to_mrtr"}
    assert all(e.summary.status is not ChainStatus.PENDING for e in model.chains.values())
    assert len(model.sessions) == 1
    assert model.info is not None
    assert model.info.upstream_era == "modern"
