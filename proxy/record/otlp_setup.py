"""Whether OpenTelemetry tracing is on, and loading its optional SDK: nothing here imports the SDK.

Tracing is on when `otlp_endpoint` is set, or when the standard `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
or `OTEL_EXPORTER_OTLP_ENDPOINT` variable names a collector; `OTEL_SDK_DISABLED=true` turns it off
whatever else says. The SDK comes with the `otel` extra; without it, `load_sender` raises
`OtlpUnavailable` naming the extra to install.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final

from proxy import install_hint

if TYPE_CHECKING:
    from proxy.record.otlp import SpanSender

EXTRA: Final = install_hint("otel")
"""The extra that brings the OpenTelemetry SDK and its OTLP/HTTP exporter."""


class OtlpUnavailable(RuntimeError):
    """Tracing is asked for, but the OpenTelemetry SDK is not installed."""


ENDPOINT_VARS: Final = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
"""The standard variables naming a collector for traces, the first set one winning."""


def env_endpoint(environ: Mapping[str, str]) -> str | None:
    """The collector the standard variables name for traces, if any."""
    return next((environ[name] for name in ENDPOINT_VARS if environ.get(name)), None)


def sdk_disabled(environ: Mapping[str, str]) -> bool:
    """`OTEL_SDK_DISABLED=true`: the standard switch that turns every OpenTelemetry SDK off."""
    return environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def tracing_wanted(endpoint: str | None, environ: Mapping[str, str]) -> bool:
    """Whether spans are exported: an endpoint set here or in the standard variables, the SDK not disabled."""
    return not sdk_disabled(environ) and bool(endpoint or env_endpoint(environ))


SDK_MODULES: Final = ("opentelemetry.sdk.trace", "opentelemetry.exporter.otlp.proto.http.trace_exporter")
"""What tracing imports from the extra."""


def missing_sdk() -> str | None:
    """The message `OtlpUnavailable` would carry when the SDK is not installed, found without importing it."""
    for name in SDK_MODULES:
        try:
            found = importlib.util.find_spec(name)
        except (ModuleNotFoundError, ValueError):  # a parent package missing, or blocked
            found = None
        if found is None:
            return (
                f"OpenTelemetry tracing needs the SDK and its OTLP exporter ({name} is not installed): "
                f"{EXTRA}"
            )
    return None


def load_sender(
    endpoint: str | None, *, queue_size: int, on_failure: Callable[[int, str], None] | None = None
) -> SpanSender:
    """A running span sender (the processor's thread started); `OtlpUnavailable` without the SDK."""
    try:
        from proxy.record.otlp import SpanSender
    except ImportError as exc:
        missing = exc.name or "opentelemetry"
        raise OtlpUnavailable(
            f"OpenTelemetry tracing needs the SDK and its OTLP exporter ({missing} is not installed): {EXTRA}"
        ) from None
    return SpanSender(endpoint, queue_size=queue_size, on_failure=on_failure)
