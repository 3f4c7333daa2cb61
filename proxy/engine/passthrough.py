"""The pass-through engine: same era on both sides, so the proxy forwards bytes and only observes.

Theory of operation: a routed client request becomes one upstream request with hop-by-hop headers
dropped and `Host` rewritten; the upstream's head goes back with its status unchanged and its body is
relayed byte for byte. Faults become proxy answers: unreachable -> 502, too slow -> 504 (each with a
JSON-RPC error carrying the request id when it could be read); a client that leaves aborts the
upstream request, since the client's own connection is what pass-through mirrors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.engine.commands import (
    CloseUpstream,
    Command,
    EndClientResponse,
    Log,
    RelayBody,
    RespondToClient,
    SendUpstream,
    StartClientResponse,
)
from proxy.engine.events import (
    ClientDisconnected,
    ClientRequestReceived,
    EngineEvent,
    TimerFired,
    UpstreamEnded,
    UpstreamFailed,
    UpstreamMessageReceived,
    UpstreamResponded,
)
from proxy.framing.http import Upstream, forward_request_headers, forward_response_headers, header, is_sse
from proxy.framing.status import gateway_error
from proxy.wire.jsonrpc import RequestId

_FAULT_STATUS = {"unreachable": 502, "timeout": 504}
_FAULT_TEXT = {
    "unreachable": "upstream MCP server unreachable",
    "timeout": "upstream MCP server did not answer in time",
}


@dataclass
class PassthroughEngine:
    """Forwards each exchange unchanged; its only state is which exchanges are in flight."""

    upstream: Upstream
    _open: dict[str, RequestId | None] = field(default_factory=dict)
    _started: set[str] = field(default_factory=set)

    def __repr__(self) -> str:
        return f"PassthroughEngine(upstream={self.upstream.url!r}, open={sorted(self._open)})"

    def handle(self, event: EngineEvent) -> list[Command]:
        """Decide what the transport does next for one observed fact."""
        match event:
            case ClientRequestReceived(exchange, route):
                self._open[exchange] = route.request_id
                headers = tuple(forward_request_headers(route.headers, self.upstream))
                path = self.upstream.path_for(route.path)
                return [SendUpstream(exchange, route.http_method, path, headers, route.raw)]
            case UpstreamResponded(exchange, status, headers):
                self._started.add(exchange)
                length = header(headers, "content-length")
                keep = length is not None and not is_sse(header(headers, "content-type"))
                out = tuple(forward_response_headers(headers, keep_length=keep))
                size = int(length) if keep and length is not None and length.isdigit() else None
                return [StartClientResponse(exchange, status, out, size), RelayBody(exchange)]
            case UpstreamMessageReceived():
                return []
            case UpstreamEnded(exchange):
                self._forget(exchange)
                return [EndClientResponse(exchange)]
            case UpstreamFailed(exchange, reason, detail):
                return self._fault(exchange, reason, detail)
            case ClientDisconnected(exchange):
                self._forget(exchange)
                return [CloseUpstream(exchange), EndClientResponse(exchange, "client_disconnected")]
            case TimerFired():
                return []
        return []

    def _fault(self, exchange: str, reason: str, detail: str) -> list[Command]:
        ident = self._open.get(exchange)
        started = exchange in self._started
        self._forget(exchange)
        log = Log("upstream_fault", "warning", {"exchange": exchange, "reason": reason, "detail": detail})
        if started or reason not in _FAULT_STATUS:
            return [log, CloseUpstream(exchange), EndClientResponse(exchange, f"upstream_{reason}")]
        status, body = gateway_error(
            _FAULT_STATUS[reason], ident, f"{_FAULT_TEXT[reason]}: {detail}".rstrip(": ")
        )
        return [
            log,
            CloseUpstream(exchange),
            RespondToClient(exchange, status, body),
            EndClientResponse(exchange, f"upstream_{reason}"),
        ]

    def _forget(self, exchange: str) -> None:
        self._open.pop(exchange, None)
        self._started.discard(exchange)

    @property
    def in_flight(self) -> int:
        """Exchanges not yet finished (tests assert this drains to zero)."""
        return len(self._open)
