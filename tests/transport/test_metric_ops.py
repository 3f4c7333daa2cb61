"""Metrics counted from observations agree with the chains the builder makes of the same observations.

Each scripted play (a JSON call, a call with a nested request, an invalid body and a dropped stream, a
bridged call parked and resumed, look-alike MRTR retries, calls never retried) runs into a sink
nobody watches with the metrics listening; the chains built afterwards say what the counters must hold.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from proxy.flows.endpoint import Endpoint
from proxy.flows.events import DECIDED, ChainChanged, ChainOpened, ChainStatus, Mode, SessionChanged
from proxy.flows.observations import Observation
from proxy.flows.retries import RETRY_WINDOW
from proxy.transport.metric_ops import CHAINS, ERRORS, PLAIN_HTTP, OpCounter
from proxy.transport.metrics import ProxyMetrics
from tests.flows.plain_play import ENDPOINT, oauth_login
from tests.flows.stream_play import listens
from tests.flows.test_sink import ASK_NAME, SCENARIOS, Play, Rig, ask_name, modern_round
from tests.transport.test_admin import bare_metrics


def _from_chains(rig: Rig) -> dict[str, Any]:
    """What the counters would hold if they were counted from the chains' events."""
    opened: Counter[tuple[str, ...]] = Counter()
    errors: Counter[tuple[str, ...]] = Counter()
    rounds: Counter[tuple[str, ...]] = Counter()
    latency: dict[tuple[str, ...], float] = {}
    sessions: Counter[tuple[str, ...]] = Counter()
    final = {}
    for event in rig.events:
        if isinstance(event, SessionChanged):
            sessions[(event.state,)] += 1
        if isinstance(event, ChainOpened):
            chain = event.chain
            opened[(chain.method or "none", chain.client_era, chain.mode.value)] += 1
        if isinstance(event, ChainChanged):
            final[event.chain.id] = event.chain
    for chain in final.values():
        key = (chain.method or "none", chain.mode.value)
        if chain.mode in (Mode.LEGACY_TO_MRTR, Mode.MRTR_TO_LEGACY):
            rounds[(chain.mode.value,)] += chain.rounds
        if chain.status is ChainStatus.ERROR:
            errors[key] += 1
        if chain.status in DECIDED and chain.jsonrpc_id is not None:
            latency[key] = round(latency.get(key, 0.0) + chain.upstream_ms / 1000, 6)
    return {"chains": opened, "errors": errors, "rounds": rounds, "latency": latency, "sessions": sessions}


@pytest.mark.parametrize("play", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_the_counters_of_a_play_are_what_its_chains_say(play: Play) -> None:
    rig, metrics = Rig(), bare_metrics()
    rig.sink.listeners.append(metrics.counting.observe_all)
    rig.sink.sweepers.append(metrics.counting.sweep)  # as the admin server wires it
    play(rig.facts, rig.clock)
    assert rig.events == []  # nobody watched: counted without a chain
    rig.sink.build()

    counts = metrics.counts
    counted = {
        "chains": Counter(counts.chains),
        "errors": Counter(counts.errors),
        "rounds": Counter(counts.rounds),
        "latency": {key: round(row[-1], 6) for key, row in counts.latency.items()},
        "sessions": Counter(counts.sessions),
    }
    assert counted == _from_chains(rig)


def test_a_get_declined_with_405_counts_no_error_and_one_refused_with_404_counts_one() -> None:
    rig, metrics = Rig(), bare_metrics()
    rig.sink.listeners.append(metrics.counting.observe_all)
    SCENARIOS["declined-and-refused-streams"](rig.facts, rig.clock)
    assert sum(metrics.counts.errors.values()) == 1


def test_lookalike_retries_leave_no_call_waiting_on_the_client() -> None:
    rig, metrics = Rig(), bare_metrics()
    rig.sink.listeners.append(metrics.counting.observe_all)
    SCENARIOS["lookalike-retries"](rig.facts, rig.clock)

    assert metrics.counting.waiting_on_client(rig.clock.now) == 0
    assert sum(row[CHAINS] for key, row in metrics.counts.began.items() if key[0] == "tools/call") == 6


def test_a_call_never_retried_stops_waiting_on_the_client_when_its_window_runs_out_without_traffic() -> None:
    rig, metrics = Rig(), bare_metrics()
    rig.sink.listeners.append(metrics.counting.observe_all)
    modern_round(rig.facts, rig.clock, "x1", ask_name(1), ASK_NAME, connection="k1")
    asked = rig.clock.now

    assert metrics.counting.waiting_on_client(asked + RETRY_WINDOW - 1) == 1
    assert metrics.counting.waiting_on_client(asked + RETRY_WINDOW + 1) == 0
    assert sum(row[ERRORS] for row in metrics.counts.ended.values()) == 0


@pytest.mark.parametrize("watched", [False, True], ids=["built-on-read", "built-live"])
def test_on_a_quiet_proxy_a_sweep_ends_a_call_never_retried_in_the_chains_and_the_gauge_alike(
    watched: bool,
) -> None:
    rig, metrics = Rig(), bare_metrics()
    rig.sink.listeners.append(metrics.counting.observe_all)
    rig.sink.sweepers.append(metrics.counting.sweep)
    live = rig.bus.subscribe("tui", 100) if watched else None
    modern_round(rig.facts, rig.clock, "x1", ask_name(1), ASK_NAME, connection="k1")
    rig.sink.build()
    (waiting,) = rig.chains()
    assert waiting.summary.status is ChainStatus.WAITING_CLIENT

    rig.clock.now += RETRY_WINDOW + 1  # no observation comes: only the proxy's sweep runs
    rig.sink.sweep()

    assert waiting.summary.status is ChainStatus.INCOMPLETE  # what /api/chains and the feed show
    assert metrics.counting.waiting_on_client() == 0  # what the gauge says
    if live is not None:  # a watching TUI hears of it without a read
        assert rig.events[-1].chain.status is ChainStatus.INCOMPLETE  # type: ignore[attr-defined]


def test_plain_http_requests_beside_the_endpoint_count_as_http_chains_and_never_as_errors() -> None:
    rig, metrics = Rig(endpoint=Endpoint(ENDPOINT)), bare_metrics()
    metrics.counting = OpCounter(metrics, endpoint=Endpoint(ENDPOINT))
    rig.sink.listeners.append(metrics.counting.observe_all)

    oauth_login(rig.facts, rig.clock)

    counts = metrics.counts
    assert dict(counts.chains) == {(PLAIN_HTTP, "unknown", "passthrough"): 5}
    assert dict(counts.requests) == {}
    assert dict(counts.errors) == {}
    assert sum(counts.latency[(PLAIN_HTTP, "passthrough")][:-1]) == 5  # each one timed, the 400 too


def test_a_listens_open_stream_is_not_measured_as_upstream_latency() -> None:
    """Only a listen's time up to its acknowledgement is the upstream's (0.25 s passed through, none
    when the bridge serves it): the seconds its client then listens are not."""
    rig, metrics = Rig(), bare_metrics()
    rig.sink.listeners.append(metrics.counting.observe_all)

    listens(rig.facts, rig.clock)

    latency = {mode: round(row[-1], 6) for (method, mode), row in metrics.counts.latency.items()}
    assert latency == {"passthrough": 0.5, "mrtr_to_legacy": 0.0}


def _counted(metrics: ProxyMetrics) -> dict[str, Any]:
    counts = metrics.counts
    return {
        "chains": dict(counts.chains),
        "requests": dict(counts.requests),
        "errors": dict(counts.errors),
        "latency": {key: [round(n, 6) for n in row] for key, row in counts.latency.items()},
        "rounds": dict(counts.rounds),
        "sessions": dict(counts.sessions),
    }


@pytest.mark.parametrize("play", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_the_counters_are_the_same_whatever_batches_the_observations_come_in(play: Play) -> None:
    """A relay hands over an exchange's opening with its request, then its head, answer and close:
    counted whole, those batches must count what the same observations count one by one, at whatever
    offset the batches fall."""
    rig = Rig()
    seen: list[Observation] = []
    rig.sink.listeners.append(seen.extend)
    play(rig.facts, rig.clock)
    one_by_one = bare_metrics()
    for obs in seen:
        one_by_one.counting.observe_all((obs,))
    one_by_one.counting.sweep(rig.clock.now)

    for offset in range(5):
        batched = bare_metrics()
        batches = [seen[:offset]] if offset else []
        at, size = offset, 2
        while at < len(seen):
            batches.append(seen[at : at + size])
            at, size = at + size, 5 - size  # 2, 3, 2, 3, ...: the relay's batches of a small call
        for batch in batches:
            batched.counting.observe_all(batch)
        batched.counting.sweep(rig.clock.now)
        assert _counted(batched) == _counted(one_by_one), f"batches from offset {offset}"
