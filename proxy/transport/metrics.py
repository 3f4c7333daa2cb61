"""Prometheus metrics for the admin API, fed by a bus subscription and never by the traffic path.

Counters move when the metrics task reads flow events off its own bounded bus queue, so a slow
scrape or a busy metrics consumer can only lag (its drops are counted too), never slow a request.
Gauges that describe the present (open streams and exchanges, parked continuations, bus queues) are
read when Prometheus scrapes. Every proxy has its own `CollectorRegistry`, so several proxies can
run in one process (the tests do) without sharing a counter.

Label values are bounded: the method label takes at most `MAX_METHOD_LABELS` distinct names, then
`other`, so a client inventing method names cannot grow the registry without limit.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from proxy.flows.bus import EventBus, Subscription
from proxy.flows.events import (
    ChainChanged,
    ChainOpened,
    ChainStatus,
    ChainSummary,
    Direction,
    FlowEvent,
    MessageRecorded,
    Mode,
    ProxyInfo,
    SessionChanged,
    Side,
)
from proxy.flows.store import ChainStore

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
"""The Content-Type of `/metrics` (Prometheus text format 0.0.4, what `generate_latest` writes)."""

MAX_METHOD_LABELS = 100
"""Distinct method label values kept before further names are counted as `other`."""

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, float("inf"))
"""Histogram buckets (seconds) for upstream time per chain: MCP calls range from ms to a minute."""

_LABEL_TEXT = re.compile(r"[A-Za-z(][A-Za-z0-9_/. ()-]{0,63}")
_FINISHED = (ChainStatus.OK, ChainStatus.ERROR)
_BRIDGED = (Mode.LEGACY_TO_MRTR, Mode.MRTR_TO_LEGACY)


@dataclass(slots=True)
class _Tracked:
    """What the metrics remember about a chain between its events."""

    method: str
    client_era: str
    mode: str
    rounds: int
    finished: bool = False


class ProxyMetrics:
    """One proxy's registry: counters fed by `observe`, present-state gauges read at scrape time."""

    def __init__(
        self,
        store: ChainStore,
        bus: EventBus,
        *,
        open_streams: Callable[[], int],
        open_exchanges: Callable[[], int],
        info: Callable[[], ProxyInfo],
        continuations: Callable[[], int],
        feed_clients: Callable[[], int],
        draining: Callable[[], bool],
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self._methods: set[str] = set()
        self._chains: OrderedDict[str, _Tracked] = OrderedDict()
        self._bound = max(1, store.max_chains) * 2
        self.retired_drops: dict[str, int] = {}
        reg = self.registry
        self.requests = Counter(
            "mcp_proxy_requests",
            "JSON-RPC requests received from clients, by method, client era and how the proxy handled them.",
            ["method", "client_era", "mode"],
            registry=reg,
        )
        self.chains = Counter(
            "mcp_proxy_chains",
            "Chains (logical client operations) opened, by method, client era and mode.",
            ["method", "client_era", "mode"],
            registry=reg,
        )
        self.errors = Counter(
            "mcp_proxy_errors",
            "Chains that ended in an error (JSON-RPC error, tool isError, HTTP failure), by method and mode.",
            ["method", "mode"],
            registry=reg,
        )
        self.rounds = Counter(
            "mcp_proxy_bridged_rounds",
            "Rounds of bridged chains (a bridged call answered without asking the client counts one).",
            ["mode"],
            registry=reg,
        )
        self.sessions = Counter(
            "mcp_proxy_sessions",
            "Legacy session events (opened, ended, expired, reinitialized).",
            ["state"],
            registry=reg,
        )
        self.upstream = Histogram(
            "mcp_proxy_upstream_latency_seconds",
            "Time a finished chain spent upstream (its duration less the time waiting on the client).",
            ["method", "mode"],
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        reg.register(
            _PresentState(
                store,
                bus,
                open_streams=open_streams,
                open_exchanges=open_exchanges,
                info=info,
                continuations=continuations,
                feed_clients=feed_clients,
                draining=draining,
                retired=self.retired_drops,
            )
        )

    def render(self) -> bytes:
        """The registry in Prometheus text format."""
        return generate_latest(self.registry)

    def retire(self, sub: Subscription) -> None:
        """Keep the drop count of a subscription that is going away, so the counter never goes down."""
        if sub.dropped_total:
            self.retired_drops[sub.name] = self.retired_drops.get(sub.name, 0) + sub.dropped_total

    async def consume(self, sub: Subscription) -> None:
        """Read the metrics subscription until it closes."""
        async for event in sub:
            self.observe(event)

    def observe(self, event: FlowEvent) -> None:
        """Move the counters for one flow event."""
        match event:
            case ChainOpened(chain=summary):
                self.chains.labels(*self._track(summary, count_rounds=True)).inc()
            case MessageRecorded(chain_id=chain_id, message=message):
                if (
                    message.direction is Direction.TO_SERVER
                    and message.kind == "request"
                    and message.side is not Side.UPSTREAM
                ):
                    tracked = self._chains.get(chain_id)
                    era, mode = (tracked.client_era, tracked.mode) if tracked else ("unknown", "unknown")
                    self.requests.labels(self.method_label(message.method), era, mode).inc()
            case ChainChanged(chain=summary):
                self._changed(summary)
            case SessionChanged(state=state):
                self.sessions.labels(state).inc()
            case _:
                pass

    def method_label(self, method: str | None) -> str:
        """A bounded label value for a method name."""
        if method is None:
            return "none"
        if method in self._methods:
            return method
        if len(self._methods) >= MAX_METHOD_LABELS or not _LABEL_TEXT.fullmatch(method):
            return "other"
        self._methods.add(method)
        return method

    def _track(self, summary: ChainSummary, *, count_rounds: bool) -> tuple[str, str, str]:
        tracked = _Tracked(
            method=self.method_label(summary.method),
            client_era=summary.client_era,
            mode=summary.mode.value,
            rounds=0,
        )
        self._chains[summary.id] = tracked
        while len(self._chains) > self._bound:
            self._chains.popitem(last=False)
        if count_rounds:
            self._count_rounds(tracked, summary)
        else:
            tracked.rounds = summary.rounds
        return tracked.method, tracked.client_era, tracked.mode

    def _count_rounds(self, tracked: _Tracked, summary: ChainSummary) -> None:
        if summary.mode in _BRIDGED and summary.rounds > tracked.rounds:
            self.rounds.labels(tracked.mode).inc(summary.rounds - tracked.rounds)
        tracked.rounds = max(tracked.rounds, summary.rounds)

    def _changed(self, summary: ChainSummary) -> None:
        tracked = self._chains.get(summary.id)
        if tracked is None:  # opened before this subscription, or forgotten past the bound
            self._track(summary, count_rounds=False)
            tracked = self._chains[summary.id]
        self._count_rounds(tracked, summary)
        if tracked.finished or summary.status not in _FINISHED:
            return
        tracked.finished = True
        if summary.status is ChainStatus.ERROR:
            self.errors.labels(tracked.method, tracked.mode).inc()
        if summary.jsonrpc_id is not None:  # requests only: notifications and streams have no latency
            self.upstream.labels(tracked.method, tracked.mode).observe(summary.upstream_ms / 1000)


class _PresentState:
    """A collector for what is true now: read on each scrape, never maintained on the traffic path."""

    def __init__(
        self,
        store: ChainStore,
        bus: EventBus,
        *,
        open_streams: Callable[[], int],
        open_exchanges: Callable[[], int],
        info: Callable[[], ProxyInfo],
        continuations: Callable[[], int],
        feed_clients: Callable[[], int],
        draining: Callable[[], bool],
        retired: dict[str, int],
    ) -> None:
        self._store = store
        self._bus = bus
        self._open_streams = open_streams
        self._open_exchanges = open_exchanges
        self._info = info
        self._continuations = continuations
        self._feed_clients = feed_clients
        self._draining = draining
        self._retired = retired

    def collect(self) -> Iterator[Metric]:
        """Yield the present-state metric families."""
        store = self._store
        yield _gauge(
            "mcp_proxy_open_streams", "SSE response streams being relayed now.", self._open_streams()
        )
        yield _gauge("mcp_proxy_open_exchanges", "Client HTTP exchanges in flight.", self._open_exchanges())
        yield _gauge(
            "mcp_proxy_parked_continuations",
            "Upstream calls parked between MRTR rounds (modern client, legacy server bridge).",
            self._continuations(),
        )
        yield _gauge("mcp_proxy_chains_stored", "Chains held in the ring buffer.", len(store))
        yield _counter("mcp_proxy_chains_evicted", "Chains dropped from the full ring buffer.", store.evicted)
        yield _gauge(
            "mcp_proxy_chains_held",
            "Open chains the ring let go, kept until they end (max_unfinished_chains).",
            store.held,
        )
        yield _counter(
            "mcp_proxy_chains_abandoned",
            "Open chains let go past max_unfinished_chains (their messages are still in the capture).",
            store.abandoned,
        )
        yield _gauge("mcp_proxy_feed_clients", "Clients attached to the live feed.", self._feed_clients())
        yield _gauge("mcp_proxy_draining", "1 while a SIGTERM drain is under way.", int(self._draining()))
        yield from self._bus_families()
        yield self._about()

    def _bus_families(self) -> Iterator[Metric]:
        drops = dict(self._retired)
        depth: dict[str, int] = {}
        for sub in self._bus.subscribers:
            drops[sub.name] = drops.get(sub.name, 0) + sub.dropped_total
            depth[sub.name] = depth.get(sub.name, 0) + len(sub)
        dropped = CounterMetricFamily(
            "mcp_proxy_bus_dropped_events",
            "Flow events dropped for a slow observer (traffic never waits), by subscriber.",
            labels=["subscriber"],
        )
        for name, value in sorted(drops.items()):
            dropped.add_metric([name], value)
        yield dropped
        queued = GaugeMetricFamily(
            "mcp_proxy_bus_queue_depth",
            "Flow events waiting in each observer's queue.",
            labels=["subscriber"],
        )
        for name, value in sorted(depth.items()):
            queued.add_metric([name], value)
        yield queued
        yield _counter(
            "mcp_proxy_bus_published_events", "Flow events published on the bus.", self._bus.published
        )

    def _about(self) -> Metric:
        info = self._info()
        about = GaugeMetricFamily(
            "mcp_proxy_info",
            "Always 1: the proxy's version, the upstream's era and the bridge setting as labels.",
            labels=["version", "upstream_era", "bridge"],
        )
        about.add_metric([info.version, info.upstream_era, info.bridge], 1)
        return about


def _gauge(name: str, doc: str, value: float) -> Metric:
    return GaugeMetricFamily(name, doc, value=value)


def _counter(name: str, doc: str, value: float) -> Metric:
    return CounterMetricFamily(name, doc, value=value)


def continuations_of(engine: Any) -> int:
    """Parked continuations in a bridge engine that reports `table_sizes()["continuations"]`, else 0."""
    sizes = getattr(engine, "table_sizes", None)
    if not callable(sizes):
        return 0
    value = sizes().get("continuations", 0)
    return value if isinstance(value, int) else 0
