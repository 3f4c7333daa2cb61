"""An OTLP/HTTP trace receiver for the tests: records every request's raw bytes, decodes them with the
OpenTelemetry protobuf definitions (`opentelemetry-proto`), and two collectors that fail.

A fake, named as one: no OpenTelemetry Collector binary installs from the package registries here, so
the tests receive what a collector would, byte for byte, and decode it with the official message
types; given another status, it answers every export with it (a collector that refuses).
`silent_collector` accepts connections and never answers (a hung collector);
`closed_port` is a port nothing listens on (a collector that is down).
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tests.peers.tls import TlsFiles

KINDS = {
    Span.SPAN_KIND_SERVER: "server",
    Span.SPAN_KIND_CLIENT: "client",
    Span.SPAN_KIND_INTERNAL: "internal",
}


@dataclass(frozen=True)
class Received:
    """One export request as it arrived."""

    path: str
    headers: dict[str, str]
    """Header names in lower case."""
    body: bytes


@dataclass(frozen=True)
class DecodedSpan:
    """One span of an export request, in plain Python values."""

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    status_code: int
    status_message: str
    flags: int
    resource: dict[str, Any] = field(compare=False)


class OtlpReceiver:
    """A loopback OTLP/HTTP receiver on a free port; `spans()` decodes everything it was sent."""

    def __init__(self, status: int = 200, tls: TlsFiles | None = None) -> None:
        """`status`: what every export is answered (401: a collector that wants credentials it lacks).
        `tls`: serve HTTPS with that certificate (a collector signed by a private CA)."""
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(size)
                headers = {name.lower(): value for name, value in self.headers.items()}
                with receiver._lock:
                    receiver.requests.append(Received(self.path, headers, body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the tests read what was received, not an access log."""

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.scheme = "http"
        if tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(tls.cert, tls.key)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            self.scheme = "https"
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver", daemon=True)

    @property
    def url(self) -> str:
        """The base URL (the exporter adds /v1/traces)."""
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def spans(self) -> list[DecodedSpan]:
        """Every span received so far, decoded from the raw request bodies."""
        with self._lock:
            bodies = [r.body for r in self.requests]
        return [span for body in bodies for span in decode(body)]

    def raw(self) -> bytes:
        """Every request body received, concatenated (for looking for what must never be sent)."""
        with self._lock:
            return b"".join(r.body for r in self.requests)


def decode(body: bytes) -> list[DecodedSpan]:
    """The spans of one OTLP/HTTP protobuf export request."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    out = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: value_of(kv.value) for kv in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.append(
                    DecodedSpan(
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        name=span.name,
                        kind=KINDS.get(span.kind, str(span.kind)),
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        attributes={kv.key: value_of(kv.value) for kv in span.attributes},
                        status_code=span.status.code,
                        status_message=span.status.message,
                        flags=span.flags,
                        resource=resource,
                    )
                )
    return out


def value_of(value: AnyValue) -> Any:
    """A protobuf AnyValue as a Python value."""
    which = value.WhichOneof("value")
    return getattr(value, which) if which is not None else None


@contextmanager
def silent_collector() -> Iterator[str]:
    """A collector that accepts connections, reads nothing back and never answers; yields its base URL."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)

    thread = threading.Thread(target=accept, name="silent-collector", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        for conn in held:
            conn.close()
        listener.close()


def closed_port() -> str:
    """The base URL of a loopback port nothing listens on (bound, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"
