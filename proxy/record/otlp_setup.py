"""Whether OpenTelemetry tracing is on, and loading its optional SDK: nothing here imports the SDK.

Tracing is on when `otlp_endpoint` is set, or when the standard `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
or `OTEL_EXPORTER_OTLP_ENDPOINT` variable names a collector; `OTEL_SDK_DISABLED=true` turns it off
whatever else says. The SDK comes with the `otel` extra; without it, `load_sender` raises
`OtlpUnavailable` naming the extra to install.

The traces URL is built here too, as the OTLP exporter specification says: `otlp_endpoint` and
`OTEL_EXPORTER_OTLP_ENDPOINT` are base URLs, `/v1/traces` joined to their path (a query stays the
query: `http://c:4318?tenant=a` posts to `/v1/traces?tenant=a`, where a string append would bury the
path in the query's value); `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is used as it is.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit, urlunsplit

from proxy import install_hint

if TYPE_CHECKING:
    from proxy.record.otlp import SpanSender

EXTRA: Final = install_hint("otel")
"""The extra that brings the OpenTelemetry SDK and its OTLP/HTTP exporter."""


class OtlpUnavailable(RuntimeError):
    """Tracing is asked for, but the OpenTelemetry SDK is not installed."""


ENDPOINT_VARS: Final = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
"""The standard variables naming a collector for traces, the first set one winning."""


TRACES_PATH: Final = "/v1/traces"
"""Where an OTLP/HTTP collector takes traces, below its base URL."""


def endpoint_var(environ: Mapping[str, str]) -> str | None:
    """The standard variable that names the collector for traces, if one does."""
    return next((name for name in ENDPOINT_VARS if environ.get(name)), None)


def env_endpoint(environ: Mapping[str, str]) -> str | None:
    """The collector the standard variables name for traces, if any (as written in the variable)."""
    var = endpoint_var(environ)
    return environ[var] if var is not None else None


def _with_traces_path(base: str) -> str:
    """`base` with `/v1/traces` joined to its path; its query and fragment kept where they were."""
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + TRACES_PATH))


def traces_url(endpoint: str) -> str:
    """`otlp_endpoint`'s traces URL: as given when its path already ends in /v1/traces, else joined."""
    parts = urlsplit(endpoint)
    path = parts.path.rstrip("/")
    if path.endswith(TRACES_PATH):
        return urlunsplit(parts._replace(path=path))
    return _with_traces_path(endpoint)


def env_traces_url(environ: Mapping[str, str]) -> str | None:
    """The traces URL the standard variables name: the traces variable as it is, else the base one's."""
    var = endpoint_var(environ)
    if var is None:
        return None
    return environ[var] if var == ENDPOINT_VARS[0] else _with_traces_path(environ[var])


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


CA_VARIABLES: Final = ("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE")
"""The standard variables naming the CA file the OTLP exporter trusts the collector's certificate by,
the first set one winning, as the SDK's exporter reads them."""

REQUESTS_CA_VARIABLES: Final = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
"""The variables the exporter's HTTP client (`requests`) reads for its CA file, the first set one
winning; set, one wins over the OTLP variables too (`requests` lets it replace the file the exporter
gave its session)."""

CERTIFICATE_REFUSED: Final = ("CERTIFICATE_VERIFY_FAILED", "certificate verify failed")
"""OpenSSL's words, in an export's failure, for a collector certificate nobody trusted."""


def export_failure_hint(reason: str, environ: Mapping[str, str]) -> str | None:
    """What to do about an export that failed for `reason`, when the reason says more than "the
    collector did not take them": a collector certificate signed by a CA the exporter does not trust.

    The exporter (the SDK's, over `requests`) trusts certifi's bundle, or the CA file the OTLP
    variables name, or, over both, the file `REQUESTS_CA_BUNDLE` names; `SSL_CERT_FILE`, which makes
    the upstream's https work, does not reach it.
    """
    if not any(words in reason for words in CERTIFICATE_REFUSED):
        return None
    bundle = next((name for name in REQUESTS_CA_VARIABLES if environ.get(name)), None)
    if bundle is not None:
        return (
            f"the exporter checked the collector's certificate against {bundle} ({environ[bundle]}), "
            "which its HTTP client (requests) prefers to OTEL_EXPORTER_OTLP_CERTIFICATE: add the "
            f"collector's CA to that file, or unset {bundle} and give the CA with "
            "OTEL_EXPORTER_OTLP_CERTIFICATE"
        )
    named = next((name for name in CA_VARIABLES if environ.get(name)), None)
    if named is not None:
        return (
            f"the collector's certificate is not signed by the CA in {named} ({environ[named]}): "
            "point it at the PEM file of the CA that signs the collector's certificate"
        )
    hint = (
        "the collector's certificate is signed by a CA the exporter does not trust: give that CA's PEM "
        "file with OTEL_EXPORTER_OTLP_CERTIFICATE (or OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE)"
    )
    if environ.get("SSL_CERT_FILE"):
        hint += "; SSL_CERT_FILE is set, but only the proxy's own connections to the upstream read it"
    return hint
