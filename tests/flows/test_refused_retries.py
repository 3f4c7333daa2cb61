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
from proxy.flows.retries import UNKNOWN_STATE
from proxy.flows.sink import ObservationSink
from proxy.flows.store import ChainStore
from proxy.wire.jsonrpc import request
from tests.flows.calls import Calls
from tests.flows.refused_play import (
    BRIDGE_REFUSAL,
    MODERN_TO_LEGACY,
    PARK_HEADERS,
    STATE,
    park,
    refused_bridge_answer,
    refused_bridge_retry,
    refused_passthrough_retry,
    refused_retry,
    retry_request,
)


class _Clock:
    now = 7000.0


PLAYS = {
    "mrtr_to_legacy": refused_bridge_retry,
    "mrtr_to_legacy answer": refused_bridge_answer,
    "2026-07-28 pass-through": refused_passthrough_retry,
}


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


def _parked_twice_then_expired(obs: Any, clock: Any) -> None:
    """The call parks, a retry is refused, the proper retry is asked again, and the client never
    comes back: the parked call expires."""
    park(obs, clock, "x1", request(1, "tools/call", {"name": "ask_name", "arguments": {}}), STATE)
    clock.now += 1.0
    refused_retry(
        obs, "x2", retry_request(2, {"x": 1}, STATE), (PARK_HEADERS, BRIDGE_REFUSAL), **MODERN_TO_LEGACY
    )
    clock.now += 1.0
    park(obs, clock, "x3", retry_request(3, {}, STATE), "second-state")
    clock.now += 30.0
    gone = {"principal": None, "pending_keys": [], "age_ms": 30000.0}
    obs.continuation_changed("x1", continuation="continuation-2", state="expired", **gone)


def test_a_call_asked_again_after_a_refused_retry_never_stays_parked_once_its_continuation_expires() -> None:
    store, _ = _play(_parked_twice_then_expired)
    [chain] = list(store)
    assert chain.summary.status is ChainStatus.INCOMPLETE
    assert chain.summary.rounds == 2
    assert chain.summary.ended is not None


def test_a_retry_refused_after_its_call_ended_is_a_chain_of_its_own_and_leaves_the_call_as_it_ended() -> None:
    def play(obs: Any, clock: Any) -> None:
        _parked_twice_then_expired(obs, clock)
        clock.now += 1.0
        refused_retry(
            obs,
            "x4",
            retry_request(4, {}, "second-state"),
            (PARK_HEADERS, BRIDGE_REFUSAL),
            **MODERN_TO_LEGACY,
        )

    store, _ = _play(play)
    call, late = list(store)
    assert (call.summary.status, call.summary.rounds) == (ChainStatus.INCOMPLETE, 2)
    assert late.summary.status is ChainStatus.ERROR
    assert late.summary.jsonrpc_id == 4
    assert UNKNOWN_STATE in late.summary.notes
