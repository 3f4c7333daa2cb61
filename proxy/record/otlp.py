"""Spans to an OpenTelemetry collector over OTLP/HTTP, through the SDK's batch processor and exporter.

The optional `otel` extra (`pip install -e '.[otel]'` in the checkout): this module imports the SDK, so it
is itself imported only when tracing is on. `SpanSender.send` runs on the event loop for each span
the follower (`proxy.flows.spans`) finishes and hands it to the SDK's `BatchSpanProcessor`, whose own
thread batches the spans, encodes them (`proxy.record.otlp_encode`: a small fraction of the SDK
encoder's cost) and posts them with the SDK's OTLP/HTTP exporter's client. Nothing waits on the
collector: past `queue_size` spans not yet taken by the exporter, a span is dropped and counted
(`queue_full`), and a batch the exporter could not deliver (collector down, slow, refusing) is
counted too (`export_failed`); `/metrics` shows both. The SDK's own log lines are kept off the
terminal (the TUI may own it); failures reach the caller's `on_failure` instead, with the reason.

The endpoint: `otlp_endpoint` when set (a base URL gets `/v1/traces` joined to its path), else the
standard `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` as it is or `OTEL_EXPORTER_OTLP_ENDPOINT` with the
same path joined (`proxy.record.otlp_setup` builds both; the SDK's own reading appends the path to the
whole string, query included); headers, timeout, compression and TLS files come from the standard
`OTEL_EXPORTER_OTLP_*` variables, and the resource from `OTEL_SERVICE_NAME` and
`OTEL_RESOURCE_ATTRIBUTES`.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Final, cast

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.environment_variables import OTEL_BSP_MAX_EXPORT_BATCH_SIZE
from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags, TraceState
from opentelemetry.trace import SpanKind as OtelKind

from proxy import __version__
from proxy.flows.span_records import SpanKind, SpanRecord
from proxy.record.otlp_encode import SpanEncoder
from proxy.record.otlp_setup import env_traces_url, traces_url

DEFAULT_QUEUE: Final = 2048
"""Spans waiting for the exporter before new ones are dropped (the SDK's own default)."""

_KINDS: Final = {SpanKind.SERVER: OtelKind.SERVER, SpanKind.CLIENT: OtelKind.CLIENT}
_SAMPLED: Final = TraceFlags(TraceFlags.SAMPLED)
_UNSET: Final = Status(StatusCode.UNSET)


def _env_int(name: str, default: int) -> int:
    try:
        value = int(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


class _Reasons(logging.Handler):
    """Keeps the SDK exporter's last log message: the reason an export failed (refused, timed out)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last = ""

    def emit(self, record: logging.LogRecord) -> None:
        self.last = record.getMessage()[:300]


_REASONS = _Reasons()


def _quiet_sdk_logs() -> None:
    """Keep the SDK's log lines off stderr (the TUI may own the terminal); keep their text for reasons."""
    sdk = logging.getLogger("opentelemetry")
    sdk.propagate = False
    if _REASONS not in sdk.handlers:
        sdk.addHandler(_REASONS)


class _Queued:
    """A span record waiting in the SDK's queue: the processor reads only `context` (is it sampled)."""

    __slots__ = ("record",)

    context: Final = SpanContext(1, 1, False, _SAMPLED)
    """Every queued span is sampled: the follower drops the others before they are made."""

    def __init__(self, record: SpanRecord) -> None:
        self.record = record


class _Counting(SpanExporter):
    """On the processor's thread: encodes a batch, posts it, counts what it took and what failed."""

    def __init__(
        self,
        inner: SpanExporter,
        on_failure: Callable[[int, str], None] | None,
        readable: Callable[[SpanRecord], ReadableSpan],
        encoder: SpanEncoder,
    ) -> None:
        self._inner = inner
        self._on_failure = on_failure
        self._readable = readable
        self._encoder = encoder
        self.taken = 0
        self.sent = 0
        self.failed = 0
        self._why: str | None = None
        """Why the batch being exported failed, from the HTTP client's answer (status or exception)."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.taken += len(spans)
        records = [queued.record for queued in cast(Sequence[_Queued], spans)]
        self._why = None
        try:
            result = self._post(records)
        except Exception as exc:  # an exporter bug must not kill the processor's thread
            result, self._why = SpanExportResult.FAILURE, _exception_text(exc)
        if result is SpanExportResult.SUCCESS:
            self.sent += len(spans)
        else:
            self.failed += len(spans)
            if self._on_failure is not None:
                self._on_failure(len(spans), self._why or _REASONS.last or "the exporter failed")
        return result

    def _post(self, records: list[SpanRecord]) -> SpanExportResult:
        """Our encoding over the OTLP exporter's HTTP client (retries, headers, TLS, compression and
        timeout as the standard variables set them); any other exporter gets the SDK's spans."""
        client = getattr(self._inner, "_client", None)
        if isinstance(self._inner, OTLPSpanExporter) and callable(getattr(client, "export", None)):
            if getattr(self._inner, "_shutdown", False):
                return SpanExportResult.FAILURE
            done = client.export(self._encoder.request(records))  # type: ignore[union-attr]
            if done.success:
                return SpanExportResult.SUCCESS
            self._why = _failure_text(done)
            return SpanExportResult.FAILURE
        return self._inner.export([self._readable(record) for record in records])

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


REASON_CHARS: Final = 300
"""Characters of a failure's reason kept (an exception's text can be long)."""


def _exception_text(exc: BaseException) -> str:
    """An exception as its class and message: `ConnectionError: ...`."""
    return f"{type(exc).__name__}: {exc}"[:REASON_CHARS]


def _failure_text(done: object) -> str | None:
    """Why the OTLP HTTP client's last attempt failed: the collector's status, else the exception.

    The SDK's own message for a batch that failed after its retries says only that they ran out; the
    client's result keeps what the collector answered (`HTTP 401 Unauthorized`) or what stopped the
    request (`ConnectionError: ...`).
    """
    status = getattr(done, "status_code", None)
    if isinstance(status, int) and status:
        text = getattr(done, "reason", None)
        return f"HTTP {status} {text}" if text else f"HTTP {status}"
    error = getattr(done, "error", None)
    return _exception_text(error) if isinstance(error, BaseException) else None


DEFAULT_SERVICE: Final = "mcp-debug-proxy"
"""The spans' `service.name` when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES` names one."""


def service_resource() -> Resource:
    """The spans' resource: the standard variables' attributes, the service named `DEFAULT_SERVICE`
    only when they name none (sidecars told apart by `OTEL_SERVICE_NAME` stay apart)."""
    resource = Resource.create({SERVICE_VERSION: __version__})
    name = resource.attributes.get(SERVICE_NAME)
    if not isinstance(name, str) or name.startswith("unknown_service"):  # the SDK's stand-in
        resource = resource.merge(Resource({SERVICE_NAME: DEFAULT_SERVICE}))
    return resource


class SpanSender:
    """Hands finished spans to the SDK's batch processor, bounded, and counts what was dropped."""

    def __init__(
        self,
        endpoint: str | None = None,
        *,
        queue_size: int = DEFAULT_QUEUE,
        on_failure: Callable[[int, str], None] | None = None,
        exporter: SpanExporter | None = None,
        schedule_delay_ms: float | None = None,
        batch: int | None = None,
    ) -> None:
        """`endpoint`: the collector's base or traces URL (None: the standard variables say where).
        `exporter` replaces the OTLP exporter (tests: the SDK's in-memory one). The batches' size and
        delay are the SDK's (512 spans, 5 s) unless given here or in OTEL_BSP_MAX_EXPORT_BATCH_SIZE
        and OTEL_BSP_SCHEDULE_DELAY; a batch is never larger than the queue."""
        _quiet_sdk_logs()
        self.queue_size = queue_size
        url = traces_url(endpoint) if endpoint else env_traces_url(os.environ)
        inner = exporter or OTLPSpanExporter(endpoint=url)
        self.endpoint = getattr(inner, "_endpoint", endpoint or "")
        self._resource = service_resource()
        self._scope = InstrumentationScope("mcp-debug-proxy", __version__)
        encoder = SpanEncoder(self._resource.attributes, "mcp-debug-proxy", __version__)
        self._counting = _Counting(inner, on_failure, self.readable, encoder)
        self._processor = BatchSpanProcessor(
            self._counting,
            max_queue_size=queue_size,
            schedule_delay_millis=schedule_delay_ms,
            max_export_batch_size=min(batch or _env_int(OTEL_BSP_MAX_EXPORT_BATCH_SIZE, 512), queue_size),
        )
        self._states: dict[str, TraceState] = {}
        self.handed = 0
        self.queue_full = 0

    def send(self, record: SpanRecord) -> None:
        """Queue one finished span for export; dropped and counted when the queue is full."""
        if self.handed - self._counting.taken >= self.queue_size:
            self.queue_full += 1
            return
        self.handed += 1
        # The processor only queues what it is given and reads its `context`; the span is encoded
        # on the processor's thread, off the event loop.
        self._processor.on_end(cast(ReadableSpan, _Queued(record)))

    def send_all(self, record: SpanRecord) -> None:
        """Queue one span, exporting what waits first when the queue is full (replaying a capture)."""
        if self.handed - self._counting.taken >= self.queue_size:
            self._processor.force_flush()
        self.send(record)

    def counts(self) -> dict[str, int]:
        """Spans sent, and dropped by reason: `queue_full` (never queued), `export_failed` (not delivered)."""
        return {
            "sent": self._counting.sent,
            "queue_full": self.queue_full,
            "export_failed": self._counting.failed,
        }

    def flush(self) -> None:
        """Export every queued span now, in this thread (waits for the collector)."""
        self._processor.force_flush()

    def close(self, timeout: float) -> None:
        """Stop the processor: what it exports within `timeout` seconds goes, the rest is let go.

        The processor's own shutdown waits for every queued batch, each up to the exporter's timeout
        (seconds, against a collector that never answers): it runs on a thread of its own, and past
        `timeout` the exporter is shut, which ends its retries and refuses what is left.
        """
        stopping = threading.Thread(target=self._processor.shutdown, name="otlp-shutdown", daemon=True)
        stopping.start()
        stopping.join(timeout)
        if stopping.is_alive():
            self._counting.shutdown()

    def readable(self, record: SpanRecord) -> ReadableSpan:
        """The SDK's span for a record (what any exporter but OTLP/HTTP is given)."""
        state = self._state(record.trace_state)
        context = SpanContext(record.trace_id, record.span_id, False, _SAMPLED, state)
        parent = (
            SpanContext(record.trace_id, record.parent_id, record.remote_parent, _SAMPLED, state)
            if record.parent_id is not None
            else None
        )
        return ReadableSpan(
            name=record.name,
            context=context,
            parent=parent,
            resource=self._resource,
            attributes=record.all_attributes(),
            kind=_KINDS[record.kind],
            status=Status(StatusCode.ERROR, record.error) if record.failed else _UNSET,
            start_time=int(record.start * 1e9),
            end_time=int(record.end * 1e9),
            instrumentation_scope=self._scope,
        )

    def _state(self, header: str | None) -> TraceState | None:
        if not header:
            return None
        state = self._states.get(header)
        if state is None:
            if len(self._states) > 1000:
                self._states.clear()
            state = self._states[header] = TraceState.from_header([header])
        return state
