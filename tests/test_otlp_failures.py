"""A batch the collector did not take is logged with the collector's URL and why: its status or the error.

The proxy's span sender posts to a loopback OTLP/HTTP receiver that refuses every export with 401 (a
collector wanting credentials), reached through the standard `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
with a key in its query, and to a port nothing listens on (a collector that is down).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.flows.span_records import SpanKind, SpanRecord
from proxy.record.otlp import SpanSender
from proxy.runtime_tracing import ExportFailureLog
from tests.otlp_receiver import OtlpReceiver, closed_port
from tests.peers.tls import TlsFiles, make_tls_files
from tests.transport.helpers import captured_logs

COLLECTOR_KEY = "collector-key-5521"


def span() -> SpanRecord:
    return SpanRecord("ping", SpanKind.SERVER, 0xABC, 0x1, None, 5.0, {"mcp.method.name": "ping"}, end=5.5)


def failed_once(endpoint: str | None) -> dict[str, object]:
    """Send one span through the proxy's sender and logger; the `otlp_export_failed` event it logs."""
    failures = ExportFailureLog()
    sender = SpanSender(endpoint, queue_size=8, on_failure=failures)
    failures.endpoint = sender.endpoint
    with captured_logs() as logged:
        try:
            sender.send(span())
            sender.flush()
        finally:
            sender.close(5.0)
    (event,) = [e for e in logged if e["event"] == "otlp_export_failed"]
    assert sender.counts()["export_failed"] == 1
    return event


def test_a_refused_export_is_logged_with_the_masked_endpoint_and_the_collectors_status(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with OtlpReceiver(status=401) as collector:
        url = f"{collector.url}/v1/traces?api_key={COLLECTOR_KEY}"
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url)
        event = failed_once(None)
        # It was asked, at the URL as given, and said no.
        assert [r.path for r in collector.requests] == [f"/v1/traces?api_key={COLLECTOR_KEY}"]

    assert event["endpoint"] == f"http://127.0.0.1:{collector.port}/v1/traces?api_key=<redacted>"
    assert event["reason"] == "HTTP 401 Unauthorized"
    assert COLLECTOR_KEY not in str(event)
    assert event["spans_lost"] == 1


def test_an_export_to_a_collector_that_is_down_is_logged_with_the_exception_class_and_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1")  # one quick try, not ten seconds of them
    down = closed_port()

    event = failed_once(down)

    assert event["endpoint"] == f"{down}/v1/traces"
    reason = str(event["reason"])
    kind, _, message = reason.partition(": ")
    assert kind.endswith("Error"), reason
    assert message, reason
    assert "batch due to timeout, max retries or shutdown" not in reason


@pytest.fixture
def no_requests_ca(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither CA variable of `requests` set, as in the image (a developer's machine may set them)."""
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("no_requests_ca")
def test_a_collector_signed_by_a_ca_only_ssl_cert_file_names_gets_a_hint_naming_the_otlp_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tls = make_tls_files(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(tls.ca))  # what makes an https upstream work
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1")
    with OtlpReceiver(tls=tls) as collector:
        event = failed_once(collector.url)

    assert "CERTIFICATE_VERIFY_FAILED" in str(event["reason"])
    hint = str(event["hint"])
    assert "OTEL_EXPORTER_OTLP_CERTIFICATE" in hint
    assert "SSL_CERT_FILE is set, but only the proxy's own connections to the upstream read it" in hint
    assert "traffic is not affected" in hint


@pytest.mark.usefixtures("no_requests_ca")
def test_the_ca_given_with_otel_exporter_otlp_certificate_gets_the_spans_to_that_collector(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tls = make_tls_files(tmp_path)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(tls.ca))
    with OtlpReceiver(tls=tls) as collector:
        sender = SpanSender(collector.url, queue_size=8, on_failure=ExportFailureLog())
        try:
            sender.send(span())
            sender.flush()
        finally:
            sender.close(5.0)
        assert [s.name for s in collector.spans()] == ["ping"]
    assert sender.counts().get("export_failed", 0) == 0


def _collector_and_other_ca(tmp_path: Path) -> tuple[TlsFiles, TlsFiles]:
    """A collector's certificate files, and a CA (with its own certificate) that did not sign them."""
    (tmp_path / "collector").mkdir()
    (tmp_path / "other").mkdir()
    return make_tls_files(tmp_path / "collector"), make_tls_files(tmp_path / "other")


@pytest.mark.usefixtures("no_requests_ca")
def test_a_collector_certificate_the_named_ca_does_not_sign_gets_a_hint_naming_that_variable_and_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tls, other = _collector_and_other_ca(tmp_path)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", str(other.ca))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1")
    with OtlpReceiver(tls=tls) as collector:
        event = failed_once(collector.url)

    assert f"not signed by the CA in OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE ({other.ca})" in str(event["hint"])


def test_a_requests_ca_bundle_that_overrides_the_otlp_certificate_is_named_in_the_hint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    tls, other = _collector_and_other_ca(tmp_path)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_CERTIFICATE", str(tls.ca))  # the right CA, and yet
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(other.ca))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1")
    with OtlpReceiver(tls=tls) as collector:
        event = failed_once(collector.url)

    hint = str(event["hint"])
    assert f"against REQUESTS_CA_BUNDLE ({other.ca})" in hint
    assert "unset REQUESTS_CA_BUNDLE and give the CA with OTEL_EXPORTER_OTLP_CERTIFICATE" in hint
