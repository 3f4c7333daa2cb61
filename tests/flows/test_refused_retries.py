"""A retry the server refuses for its `requestState` is a harmless attempt inside the call's chain.

The bridge (or a 2026-07-28 server in pass-through) answers such a retry -32602 and touches nothing;
the chain it claimed keeps its status and rounds, and the proper retry that follows continues it.
"""

from __future__ import annotations

from typing import Any

import pytest

from proxy.flows.bus import EventBus
from proxy.flows.chains import ChainBuilder
from proxy.flows.events import ChainChanged, ChainStatus, Direction, FlowEvent
from proxy.flows.redact import Redactor
from proxy.flows.sink import ObservationSink
from proxy.flows.store import ChainStore
from tests.flows.calls import Calls
from tests.flows.refused_play import refused_bridge_retry, refused_passthrough_retry


class _Clock:
    now = 7000.0


PLAYS = {"mrtr_to_legacy": refused_bridge_retry, "2026-07-28 pass-through": refused_passthrough_retry}


def _play(play: Any) -> tuple[ChainStore, list[FlowEvent]]:
    clock, store, events = _Clock(), ChainStore(), list[FlowEvent]()
    redactor = Redactor(key=b"test-key")
    builder = ChainBuilder(store, events.append, redactor, clock=lambda: clock.now)
    sink = ObservationSink(builder, redactor, bus=EventBus(), clock=lambda: clock.now)
    play(Calls(sink), clock)
    sink.build()
    return store, events


@pytest.mark.parametrize("play", PLAYS.values(), ids=PLAYS.keys())
def test_a_refused_retry_leaves_one_ok_chain_with_the_rounds_of_the_accepted_retries(play: Any) -> None:
    store, _ = _play(play)
    [chain] = list(store)
    summary = chain.summary
    assert summary.status is ChainStatus.OK
    assert summary.error is None
    assert summary.rounds == 2
    assert summary.jsonrpc_id == 3
    assert not any("no chain is waiting" in note for note in summary.notes)


@pytest.mark.parametrize("play", PLAYS.values(), ids=PLAYS.keys())
def test_the_refused_attempt_stays_visible_in_the_chain_and_noted(play: Any) -> None:
    store, _ = _play(play)
    [chain] = list(store)
    requests = [m.jsonrpc_id for m in chain.messages if m.direction is Direction.TO_SERVER and m.method]
    assert 2 in requests
    assert 3 in requests
    refused = [m for m in chain.messages if m.jsonrpc_id == 2 and m.direction is Direction.TO_CLIENT]
    assert refused
    assert all(m.round == 2 for m in refused)
    [note] = [n for n in chain.summary.notes if "refused" in n]
    assert "id 2" in note
    assert "-32602" in note
    assert "kept waiting" in note


@pytest.mark.parametrize("play", PLAYS.values(), ids=PLAYS.keys())
def test_the_refusal_never_shows_the_chain_ended(play: Any) -> None:
    _, events = _play(play)
    headlines = [e.chain for e in events if isinstance(e, ChainChanged)]
    assert all(h.status is not ChainStatus.ERROR for h in headlines)
    assert [h.status for h in headlines if h.ended is not None] == [ChainStatus.OK]
    waiting_after_refusal = next(h for h in headlines if any("refused" in n for n in h.notes))
    assert waiting_after_refusal.rounds == 1
    assert waiting_after_refusal.status in (ChainStatus.PARKED, ChainStatus.WAITING_CLIENT)
