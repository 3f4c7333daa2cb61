"""Prometheus metrics for the admin API, counted from observations without building any chain.

Counters move as the observation sink hands each observation to `OpCounter` (`metric_ops`), which
follows client operations (what a chain is elsewhere) just far enough to count them: no records, no
redaction, no bus, so the admin API on costs the traffic little, and the counts never depend on
whether anyone watches chains. Gauges that describe the present (open streams and exchanges, parked
continuations, bus queues) are read when Prometheus scrapes. Every proxy has its own
`CollectorRegistry`, so several proxies can run in one process (the tests do) without sharing a counter.

Label values are bounded: the method label takes the protocol's own method names and at most
`MAX_METHOD_LABELS` other distinct names, then `other`, so a client inventing method names cannot
grow the registry without limit, nor take the labels of the methods every client sends.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from typing import Any, Final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from proxy.flows.bus import EventBus, Subscription
from proxy.flows.endpoint import Endpoint
from proxy.flows.events import ProxyInfo
from proxy.flows.retries import RETRY_WINDOW
from proxy.flows.store import ChainStore
from proxy.transport.admin_refusals import REFUSED_WHYS, UNAUTHORIZED_WHYS
from proxy.transport.metric_ops import (
    CHAINS,
    ENDED_ROW,
    ERRORS,
    LATENCY_BUCKETS,
    OBSERVED,
    OTHER,
    PROXY_LABELS,
    REQUESTS,
    SUM,
    BeganRow,
    EndedRow,
    OpCounter,
)
from proxy.transport.unreadable import CAUSES as UNREADABLE_CAUSES
from proxy.wire.mcp import SPEC_METHODS

CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
"""The Content-Type of `/metrics` (Prometheus text format 0.0.4, what `generate_latest` writes)."""

MAX_METHOD_LABELS = 100
"""Distinct method label values kept before further names are counted as `other`."""

ALWAYS_LABELLED: Final = SPEC_METHODS - PROXY_LABELS
"""Client method names outside the bound: the protocol's methods."""

STREAM_REFUSALS: Final = ("max_streams_per_client", "max_sse_sessions_per_client", "max_sse_sessions")
"""The settings a client stream is refused by: each a sample of `mcp_proxy_client_streams_refused`."""

_LABEL_TEXT = re.compile(r"[A-Za-z(][A-Za-z0-9_/. ()-]{0,63}")


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
        observations_dropped: Callable[[], int] = lambda: 0,
        observations_queued: Callable[[], tuple[int, int]] = lambda: (0, 0),
        calls_left_out: Callable[[], int] = lambda: 0,
        otlp_spans: Callable[[], dict[str, int]] = dict,
        client_timeouts: Callable[[], dict[str, int]] = dict,
        client_unreadable: Callable[[], dict[str, int]] = dict,
        admin_unauthorized: Callable[[], dict[str, int]] = dict,
        admin_refused: Callable[[], dict[str, int]] = dict,
        client_connections: Callable[[], tuple[int, dict[str, int]]] = lambda: (0, {}),
        client_streams_refused: Callable[[], dict[str, int]] = dict,
        capture_failed: Callable[[], bool | None] = lambda: None,
        retry_window: float = RETRY_WINDOW,
        sweep: Callable[[], None] = lambda: None,
        endpoint: Endpoint | None = None,
    ) -> None:
        """`retry_window` is how long a pass-through call answered `input_required` waits for its retry
        (`continuation_ttl`); `sweep` ends the waits that ran out by now, in the chains and the counters
        alike (the observation sink's), before a scrape reads them; `endpoint` names the MCP endpoint's
        paths (requests to any other path are plain HTTP, counted apart and never as errors)."""
        self.registry = CollectorRegistry(auto_describe=False)
        self._methods: set[str] = set()
        self.counts = _Counts()
        """The counters, as plain numbers: read into metric families only when Prometheus scrapes."""
        self.counting = OpCounter(self, retry_window, endpoint)
        """Follows the observations (a listener of the observation sink while the admin API runs)."""
        self.retired_drops: dict[str, int] = {}
        reg = self.registry
        reg.register(self.counts)
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
                observations_dropped=observations_dropped,
                observations_queued=observations_queued,
                calls_left_out=calls_left_out,
                otlp_spans=otlp_spans,
                client_timeouts=client_timeouts,
                client_unreadable=client_unreadable,
                admin_unauthorized=admin_unauthorized,
                admin_refused=admin_refused,
                client_connections=client_connections,
                client_streams_refused=client_streams_refused,
                capture_failed=capture_failed,
                waiting_on_client=lambda: self._waiting_on_client(sweep),
            )
        )

    def _waiting_on_client(self, sweep: Callable[[], None]) -> int:
        """The operations waiting on the client once the waits that ran out by now are ended."""
        sweep()
        return self.counting.waiting_on_client()

    def render(self) -> bytes:
        """The registry in Prometheus text format."""
        return generate_latest(self.registry)

    def retire(self, sub: Subscription) -> None:
        """Keep the drop count of a subscription that is going away, so the counter never goes down."""
        if sub.dropped_total:
            self.retired_drops[sub.name] = self.retired_drops.get(sub.name, 0) + sub.dropped_total

    # -- what `OpCounter` tells ----------------------------------------------------------------------

    def label(self, method: str) -> str:
        """The label counted for a client's method (`OpCounter` remembers it per name)."""
        return self.method_label(method)

    def rows(self, label: str, era: str, mode: str) -> tuple[BeganRow, EndedRow]:
        """The rows `OpCounter` counts an operation into: begun by (label, era, mode), ended by
        (label, mode)."""
        began, ended = self.counts.began, self.counts.ended
        began_row = began.get((label, era, mode))
        if began_row is None:
            began_row = began[(label, era, mode)] = [0, 0]
        ended_row = ended.get((label, mode))
        if ended_row is None:
            ended_row = ended[(label, mode)] = [0.0] * ENDED_ROW
        return began_row, ended_row

    def rounds_taken(self, mode: str, added: int) -> None:
        """A bridged operation took more rounds."""
        key, rounds = (mode,), self.counts.rounds
        rounds[key] = rounds.get(key, 0) + added

    def session(self, state: str) -> None:
        """A session changed state."""
        key, sessions = (state,), self.counts.sessions
        sessions[key] = sessions.get(key, 0) + 1

    def method_label(self, method: str) -> str:
        """A bounded label value for a client's method name: the protocol's own names always keep
        theirs, so names a client invents never push them into `other`, and a name that is one of the
        proxy's own labels (`(http)`, `none`, ...) is `other`, so no client writes into those."""
        if method in self._methods or method in ALWAYS_LABELLED:
            return method
        if (
            len(self._methods) >= MAX_METHOD_LABELS
            or method in PROXY_LABELS
            or not _LABEL_TEXT.fullmatch(method)
        ):
            return OTHER
        self._methods.add(method)
        return method


class _Counts:
    """The counters as plain numbers (a `+= 1` on the traffic path), made metric families on a scrape.

    prometheus_client's own counters take a lock and check their state on every increment; these are
    only ever moved from the event loop's thread, so a dictionary does, and a scrape reads it. Plain
    dicts, not `collections.Counter`: an increment of a Counter costs three times a dict's.
    """

    def __init__(self) -> None:
        self.began: dict[tuple[str, str, str], BeganRow] = {}
        """(method, client era, mode) -> [chains opened, client requests] (`metric_ops.CHAINS`...)."""
        self.ended: dict[tuple[str, str], EndedRow] = {}
        """(method, mode) -> the latency histogram's count in each bucket (not cumulative), the sum
        of its observations, their number, then the errors (`metric_ops.SUM`...)."""
        self.rounds: CounterOf = {}
        self.sessions: CounterOf = {}

    @property
    def chains(self) -> CounterOf:
        """Chains opened, by (method, client era, mode)."""
        return {key: row[CHAINS] for key, row in self.began.items() if row[CHAINS]}

    @property
    def requests(self) -> CounterOf:
        """Client requests, by (method, client era, mode)."""
        return {key: row[REQUESTS] for key, row in self.began.items() if row[REQUESTS]}

    @property
    def errors(self) -> CounterOf:
        """Chains that ended in an error, by (method, mode)."""
        return {key: int(row[ERRORS]) for key, row in self.ended.items() if row[ERRORS]}

    @property
    def latency(self) -> dict[tuple[str, ...], list[float]]:
        """Per (method, mode) with upstream time observed: the count in each bucket, then the sum."""
        return {key: row[: SUM + 1] for key, row in self.ended.items() if row[OBSERVED]}

    def collect(self) -> Iterator[Metric]:
        """The counter and histogram families, with the names and meanings they always had."""
        yield _counters(
            self.requests, "mcp_proxy_requests", _DOCS["requests"], ["method", "client_era", "mode"]
        )
        yield _counters(self.chains, "mcp_proxy_chains", _DOCS["chains"], ["method", "client_era", "mode"])
        yield _counters(self.errors, "mcp_proxy_errors", _DOCS["errors"], ["method", "mode"])
        yield _counters(self.rounds, "mcp_proxy_bridged_rounds", _DOCS["rounds"], ["mode"])
        yield _counters(self.sessions, "mcp_proxy_sessions", _DOCS["sessions"], ["state"])
        histogram = HistogramMetricFamily(
            "mcp_proxy_upstream_latency_seconds", _DOCS["upstream"], labels=["method", "mode"]
        )
        for labels, row in sorted(self.latency.items()):
            cumulative, buckets = 0.0, []
            for bound, count in zip(LATENCY_BUCKETS, row, strict=False):
                cumulative += count
                buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
            histogram.add_metric(list(labels), buckets, row[-1])
        yield histogram


CounterOf = dict[tuple[str, ...], int]
"""Counts by label values."""

_DOCS = {
    "requests": "JSON-RPC requests received from clients, by method, client era "
    "and how the proxy handled them.",
    "chains": "Chains (logical client operations) opened, by method, client era and mode; plain HTTP "
    "requests to the server's other paths (OAuth's, say) count as method (http).",
    "errors": "Chains that ended in an error (JSON-RPC error, tool isError, HTTP failure), "
    "by method and mode; a chain the client cancelled is no error, nor is a plain HTTP request "
    "to the server's other paths.",
    "rounds": "Rounds of bridged chains (a bridged call answered without asking the client counts one).",
    "sessions": "Legacy session events (opened, ended, expired, reinitialized).",
    "upstream": "Time a finished chain spent upstream (its duration less the time waiting on the client).",
}


def _counters(counts: CounterOf, name: str, doc: str, labels: list[str]) -> Metric:
    family = CounterMetricFamily(name, doc, labels=labels)
    for values, value in sorted(counts.items()):
        family.add_metric(list(values), value)
    return family


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
        observations_dropped: Callable[[], int],
        observations_queued: Callable[[], tuple[int, int]],
        calls_left_out: Callable[[], int],
        otlp_spans: Callable[[], dict[str, int]],
        client_timeouts: Callable[[], dict[str, int]],
        client_unreadable: Callable[[], dict[str, int]],
        admin_unauthorized: Callable[[], dict[str, int]],
        admin_refused: Callable[[], dict[str, int]],
        client_connections: Callable[[], tuple[int, dict[str, int]]],
        client_streams_refused: Callable[[], dict[str, int]],
        capture_failed: Callable[[], bool | None],
        waiting_on_client: Callable[[], int],
    ) -> None:
        self._store = store
        self._capture_failed = capture_failed
        self._client_connections = client_connections
        """Client connections open now, and those refused past the cap by how (`answered`, `cut`)."""
        self._client_streams_refused = client_streams_refused
        self._otlp_spans = otlp_spans
        self._client_timeouts = client_timeouts
        self._client_unreadable = client_unreadable
        self._admin_unauthorized = admin_unauthorized
        self._admin_refused = admin_refused
        self._waiting_on_client = waiting_on_client
        self._observations_dropped = observations_dropped
        self._observations_queued = observations_queued
        """Observations waiting to be built into chains now, and the memory their bodies hold."""
        self._calls_left_out = calls_left_out
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
            "mcp_proxy_waiting_on_client",
            "Client operations waiting on the client now: a question the server asked (in flight or "
            "as input_required) not yet answered.",
            self._waiting_on_client(),
        )
        yield _gauge(
            "mcp_proxy_parked_continuations",
            "Upstream calls parked between MRTR rounds (modern client, legacy server bridge).",
            self._continuations(),
        )
        yield _gauge(
            "mcp_proxy_chains_stored",
            "Chains held in the ring buffer: those built so far (while nobody watches, observations wait "
            "in a queue, mcp_proxy_observations_queued, until an admin read or a feed builds them).",
            len(store),
        )
        yield _counter(
            "mcp_proxy_chains_evicted",
            "Chains dropped from the ring buffer, full in chains or in memory (max_chain_store_bytes).",
            store.evicted,
        )
        yield _gauge(
            "mcp_proxy_chain_store_bytes",
            "Memory the stored chains' messages take, estimated as their decoded bodies "
            "(max_chain_store_bytes).",
            store.weight,
        )
        yield _counter(
            "mcp_proxy_observations_dropped",
            "Observations dropped from the full queue before anyone built them into chains "
            "(their chains never reach the ring buffer; a capture, where one is written, keeps them).",
            self._observations_dropped(),
        )
        yield _counter(
            "mcp_proxy_calls_left_out",
            "Calls that succeeded plainly left out of the chains while nobody watched them live, past "
            "unwatched_history_rate (every other metric counts them; a watcher sees every call).",
            self._calls_left_out(),
        )
        queued, queued_bytes = self._observations_queued()
        yield _gauge(
            "mcp_proxy_observations_queued",
            "Observations waiting to be built into chains (while nobody watches, until an admin read or "
            "a feed builds them; 10 x max_chains bound them).",
            queued,
        )
        yield _gauge(
            "mcp_proxy_observations_queued_bytes",
            "Memory the queued observations' bodies take, estimated as their decoded bodies "
            "(max_chain_store_bytes / 2 bounds it).",
            queued_bytes,
        )
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
        yield _gauge(
            "mcp_proxy_asyncio_tasks",
            "Tasks alive on the proxy's event loop (counted at scrape time): one that only grows is a leak.",
            _tasks_alive(),
        )
        yield _gauge("mcp_proxy_draining", "1 while a SIGTERM drain is under way.", int(self._draining()))
        yield from self._bus_families()
        yield from self._otlp_families()
        yield self._timeouts()
        yield self._unreadable()
        yield self._unauthorized()
        yield _counts_by(
            "mcp_proxy_admin_refused",
            "Admin API requests refused for who asked, by why: foreign_host or foreign_origin (403, a "
            "web page's), beyond_loopback (403, steering without a token), not_json (415) or "
            "unreadable (400, not read as HTTP/1.1: a URL or header line too long, a malformed head).",
            "why",
            REFUSED_WHYS,
            self._admin_refused(),
        )
        yield from self._connections()
        failed = self._capture_failed()
        if failed is not None:
            yield _gauge(
                "mcp_proxy_capture_failed",
                "1 once writing the capture failed (a full disk, a lost mount; the log says why), until a "
                "SIGUSR1 reopens it; traffic goes on without it.",
                int(failed),
            )
        yield self._about()

    def _otlp_families(self) -> Iterator[Metric]:
        counts = self._otlp_spans()
        yield _counter(
            "mcp_proxy_otlp_spans_exported",
            "Spans the OTLP exporter delivered to the collector (0 while tracing is off).",
            counts.get("sent", 0),
        )
        yield _counts_by(
            "mcp_proxy_otlp_spans_dropped",
            "Spans never delivered to the collector, by reason: queue_full (the exporter's queue was full, "
            "so the span was never queued) or export_failed (the collector refused, failed or timed out); "
            "traffic never waits for either.",
            "reason",
            ("queue_full", "export_failed"),
            counts,
        )

    def _connections(self) -> Iterator[Metric]:
        open_now, refused = self._client_connections()
        yield _gauge("mcp_proxy_client_connections", "Client connections open now.", open_now)
        yield _counts_by(
            "mcp_proxy_client_connections_refused",
            "Client connections refused past max_client_connections: answered 503, or cut without an "
            "answer once as many refusals are still being answered as the cap itself.",
            "how",
            ("answered", "cut"),
            refused,
        )
        yield _counts_by(
            "mcp_proxy_client_streams_refused",
            "Client streams refused, by the setting that refused them: max_streams_per_client (429: the "
            "address holds its share of long-lived GET and subscriptions/listen streams), "
            "max_sse_sessions_per_client (429: its share of HTTP+SSE streams) or max_sse_sessions (503).",
            "setting",
            STREAM_REFUSALS,
            self._client_streams_refused(),
        )

    def _timeouts(self) -> Metric:
        return _counts_by(
            "mcp_proxy_client_timeouts",
            "Requests refused 408 because the client sent them too slowly, by the setting whose wait ran "
            "out: head_read_timeout (the request head) or body_read_timeout (its body).",
            "setting",
            ("head_read_timeout", "body_read_timeout"),
            self._client_timeouts(),
        )

    def _unreadable(self) -> Metric:
        return _counts_by(
            "mcp_proxy_client_requests_unreadable",
            "Requests refused because the proxy could not read them as HTTP/1.1 (answered, then the "
            "connection closed), by cause: tls_handshake (a client sent https:// to this plain-HTTP port), "
            "malformed (400), head_too_large (431), not_implemented (501: CONNECT, a transfer coding "
            "other than chunked) or http_version (505).",
            "cause",
            UNREADABLE_CAUSES,
            self._client_unreadable(),
        )

    def _unauthorized(self) -> Metric:
        return _counts_by(
            "mcp_proxy_admin_unauthorized",
            "Admin API requests refused 401 for the admin token, by why: missing (no Authorization), "
            "not_bearer (another scheme) or wrong_token.",
            "why",
            UNAUTHORIZED_WHYS,
            self._admin_unauthorized(),
        )

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


def _counts_by(
    name: str, doc: str, label: str, values: tuple[str, ...], counts: dict[str, int]
) -> CounterMetricFamily:
    """A counter with one sample per label value, each there from the start (0 until it counts)."""
    family = CounterMetricFamily(name, doc, labels=[label])
    for value in values:
        family.add_metric([value], counts.get(value, 0))
    return family


def _tasks_alive() -> int:
    """Tasks of the running event loop not done yet (0 when read outside one, as a test may)."""
    try:
        return len(asyncio.all_tasks())
    except RuntimeError:
        return 0


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
