"""Warnings the proxy logs once it has started, about settings that hide a problem or give a secret
away, or about a bound one of them set that traffic reached.

Each names the setting to change; none stops the proxy.
"""

from __future__ import annotations

from proxy.config import Settings
from proxy.engine.flood_lines import FloodLine
from proxy.flows.redact import Redactor
from proxy.flows.sink import ObservationSink
from proxy.framing.http import Upstream
from proxy.logs import get_logger, warn_whatever_the_level


def warn_of_settings_at_start(settings: Settings, upstream: Upstream, redactor: Redactor) -> None:
    """Warn of an HTTP+SSE-looking upstream the forced era keeps unprobed, and of built-in redaction
    entries `unredact_headers` dropped (whatever the log level: it lets secrets through)."""
    log = get_logger()
    if _sse_url_unprobed(settings, upstream):
        log.warning(
            "upstream_transport_unknown",
            upstream=upstream.shown,
            hint="--upstream-era skips the probe that tells an HTTP+SSE server (a URL ending in /sse) "
            "from a Streamable HTTP one: if this is an HTTP+SSE server, add --upstream-transport sse",
        )
    if settings.unredact_headers:
        kept = {
            name: patterns
            for name in settings.unredact_headers
            if (patterns := redactor.masking_patterns(name))
        }
        hint = (
            "headers and query parameters these built-in entries masked now reach logs, "
            "captures, the admin feed and exports in clear (unredact_headers)"
        )
        if kept:
            named = "; ".join(f"{name} by {', '.join(map(repr, found))}" for name, found in kept.items())
            hint += f"; still masked by a pattern (drop the pattern too to read them): {named}"
        warn_whatever_the_level("redaction_defaults_dropped", entries=settings.unredact_headers, hint=hint)


def _sse_url_unprobed(settings: Settings, upstream: Upstream) -> bool:
    """Whether the era is forced (no probe) on an upstream URL that looks like an HTTP+SSE one,
    with no transport named: the probe is what finds that transport, so it would go unspoken."""
    return (
        settings.upstream_era != "auto"
        and settings.upstream_transport == "auto"
        and upstream.transport == "http"
        and upstream.base_path.rstrip("/").endswith("/sse")
    )


DROPS_LINE_EVERY = 60.0
"""Seconds between two `observations_dropped` lines: the first drop is said at once, later ones at
most once a minute (counted meanwhile), since a queue that stays full drops again every few calls."""


class DroppedObservations:
    """Logs the observations the sink dropped unbuilt: the first drop, then at most once a minute."""

    def __init__(self, sink: ObservationSink, settings: Settings) -> None:
        self._sink = sink
        self._max_chains = settings.max_chains
        self._max_bytes = settings.max_chain_store_bytes
        self._line = FloodLine()
        self._unsaid = 0

    def __call__(self, dropped: int, at: float) -> None:
        """`dropped` observations were just dropped, the last of them made at `at`."""
        self._unsaid += dropped
        if self._line.due(at, every=DROPS_LINE_EVERY) is None:
            return
        sink, dropped, self._unsaid = self._sink, self._unsaid, 0
        get_logger().warning(
            "observations_dropped",
            dropped=dropped,
            dropped_total=sink.dropped,
            queued=sink.pending,
            queued_bytes=sink.pending_bytes,
            backlog=sink.backlog,
            max_chains=self._max_chains,
            max_chain_store_bytes=self._max_bytes,
            hint="nothing read chains while traffic filled the queue of observations waiting to be built "
            "(10 x max_chains observations, or max_chain_store_bytes / 2 of bodies): the oldest finished "
            "ones were dropped, their chains never reach /api/chains or the feed (a `(dropped)` chain "
            "stands there; a capture, where one is written, holds them). Keep a feed attached "
            "(tui --attach), read /api/chains more often than the queue fills, or raise max_chains",
        )


class LeftOutCalls:
    """Logs that plain calls are being left out of the chains while nobody watches them live: at the
    first sweep after the first, then at most once a minute with how many since (the metrics and the
    round-trip lines count every call)."""

    def __init__(self, sink: ObservationSink) -> None:
        self._sink = sink
        self._line = FloodLine()
        self._said = 0

    def __call__(self, left_out: int, at: float) -> None:
        """`left_out` calls were left out so far, the sweep that saw it at `at`."""
        if self._line.due(at, every=DROPS_LINE_EVERY) is None:
            return
        since, self._said = left_out - self._said, left_out
        get_logger().info(
            "calls_left_out",
            left_out=since,
            left_out_total=left_out,
            unwatched_history_rate=self._sink.unwatched.rate,
            hint="nobody watches chains live and the traffic passes unwatched_history_rate: the chains "
            "keep that many calls a second that succeed plainly (and every call that fails or asks a "
            "question), and a `(dropped)` chain stands for the rest; the metrics, the log lines and a "
            "capture count every call. Attach a watcher (tui --attach) to see every call, or set "
            "unwatched_history_rate to 0 to leave none out (the queue's own bound, 10 x max_chains "
            "observations, still drops the oldest when nothing reads the chains)",
        )
