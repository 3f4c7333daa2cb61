"""Tracing: the span follower fed by every observation, and the OTLP sender it hands spans to.

Started and stopped by `proxy.runtime.Proxy`; the spans themselves are made in `proxy.flows.spans`
and encoded and sent in `proxy.record`.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from proxy.addresses import env_otlp_refusal
from proxy.config import Settings
from proxy.flows.endpoint import Endpoint
from proxy.flows.redact import Redactor
from proxy.flows.sink import ObservationSink
from proxy.flows.spans import SpanFollower
from proxy.framing.http import Upstream, masked_url
from proxy.logs import get_logger
from proxy.record.otlp_setup import OtlpUnavailable, export_failure_hint, load_sender, tracing_wanted

if TYPE_CHECKING:
    from proxy.record.otlp import SpanSender

OTLP_CLOSE_TIMEOUT = 2.0
"""Seconds `stop` gives the span exporter to send what is queued before it is let go."""

EXPORT_FAILURE_LOG_INTERVAL = 60.0
"""Seconds between two log lines about spans the collector did not take (the first is logged at once)."""


class Tracing:
    """Spans of every observation for the OTLP exporter while tracing is asked for; nothing otherwise."""

    def __init__(
        self, settings: Settings, upstream: Upstream, redactor: Redactor, observations: ObservationSink
    ) -> None:
        self._settings = settings
        self._upstream = upstream
        self._redactor = redactor
        self._observations = observations
        self._spans: SpanSender | None = None
        """The OTLP span sender while tracing is on (`proxy.record.otlp.SpanSender`, loaded lazily)."""
        self._follower: SpanFollower | None = None

    def start(self) -> None:
        """Follow every observation into spans for the OTLP exporter, when tracing is asked for."""
        settings = self._settings
        if not tracing_wanted(settings.otlp_endpoint, os.environ):
            return
        refused = None if settings.otlp_endpoint else env_otlp_refusal(os.environ)
        if refused is not None:
            # A standard variable may be set for every program in the environment: the proxy runs,
            # without traces, as when the SDK it asks for is missing.
            get_logger().warning(
                "otlp_refused",
                error=refused,
                hint="an OTEL_EXPORTER_OTLP_* variable asks for traces; the proxy runs without them",
            )
            return
        failures = ExportFailureLog()
        try:
            sender = load_sender(
                settings.otlp_endpoint, queue_size=settings.otlp_queue_size, on_failure=failures
            )
        except OtlpUnavailable as exc:
            if settings.otlp_endpoint:
                raise
            get_logger().warning(
                "otlp_unavailable",
                error=str(exc),
                hint="an OTEL_EXPORTER_OTLP_* variable asks for traces; the proxy runs without them",
            )
            return
        failures.endpoint = sender.endpoint
        upstream = self._upstream
        self._follower = SpanFollower(
            sender.send,
            self._redactor,
            upstream_host=upstream.host,
            upstream_port=upstream.port,
            endpoint=Endpoint(upstream.base_path),
        )
        self._observations.listeners.append(self._follower.observe_all)
        self._observations.sweepers.append(self._follower.sweep)
        self._spans = sender
        get_logger().info(
            "otlp_tracing", endpoint=masked_url(sender.endpoint), queue=settings.otlp_queue_size
        )

    def counts(self) -> dict[str, int]:
        """Spans sent and dropped (by reason) while tracing is on; empty when it is off."""
        return dict(self._spans.counts()) if self._spans is not None else {}

    async def stop(self) -> None:
        """Detach the follower, send its held spans as they stand, and give the sender
        `OTLP_CLOSE_TIMEOUT` to send what is queued."""
        if self._follower is not None:
            self._observations.listeners.remove(self._follower.observe_all)
            self._observations.sweepers.remove(self._follower.sweep)
            self._follower.release_all()  # no cancel comes any more: held spans go as they stand
            self._follower = None
        if self._spans is not None:
            sender, self._spans = self._spans, None
            await asyncio.to_thread(sender.close, OTLP_CLOSE_TIMEOUT)


EXPORT_FAILED_HINT = (
    "the collector did not take these spans; traffic is not affected "
    "(mcp_proxy_otlp_spans_dropped_total counts them)"
)
"""The hint of an export failure whose reason says nothing more specific."""


class ExportFailureLog:
    """What the span exporter's thread calls when a batch did not reach the collector: a warning at the
    first failure, then at most one per `EXPORT_FAILURE_LOG_INTERVAL` with the spans lost since.

    Each warning names the collector's URL (`endpoint`, credentials masked; set once the exporter
    knows it) and the last failure's reason: the collector's HTTP status, or the exception that
    stopped the request. Its hint says what to do when the reason tells (a collector certificate
    signed by a CA the exporter does not trust), and always that the traffic is not affected.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.endpoint = ""
        self._clock = clock
        self._lost = 0
        self._last: float | None = None

    def __call__(self, count: int, reason: str) -> None:
        self._lost += count
        now = self._clock()
        if self._last is None or now - self._last >= EXPORT_FAILURE_LOG_INTERVAL:
            get_logger().warning(
                "otlp_export_failed",
                endpoint=masked_url(self.endpoint) or "(unknown)",
                spans_lost=self._lost,
                reason=masked_url(reason),
                hint="; ".join(filter(None, (export_failure_hint(reason, os.environ), EXPORT_FAILED_HINT))),
            )
            self._lost, self._last = 0, now
