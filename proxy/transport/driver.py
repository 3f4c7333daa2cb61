"""The driver: for one client exchange, feeds engine events and carries out the engine's commands.

It is the only place that awaits on sockets for traffic. Observation (the chain builder) is fed from
here with parsed copies; the bytes themselves are relayed as they arrive.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import structlog
from aiohttp import web

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
    UpstreamEnded,
    UpstreamFailed,
    UpstreamResponded,
)
from proxy.flows.events import Channel, Direction
from proxy.framing.classify import Rejection, Route, classify
from proxy.framing.http import header, is_sse
from proxy.logs import get_logger, info_line
from proxy.transport.bridge import BridgeDriver
from proxy.transport.client_side import AiohttpSide, ClientGone, ClientSide
from proxy.transport.observe import BodyObserver
from proxy.transport.state import STATE, ProxyState
from proxy.transport.upstream_pool import UpstreamError, UpstreamResponse
from proxy.wire.headers import SESSION_ID
from proxy.wire.jsonrpc import Message, dumps, parse_body
from proxy.wire.versions import Era


async def read_bounded(request: web.Request, limit: int) -> bytes:
    """Read the request body, stopping one byte past `limit` (the caller answers 413 then)."""
    declared = request.content_length
    if declared is not None and declared > limit:
        return await request.content.read(limit + 1)
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = await request.content.readany()
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


async def handle(request: web.Request) -> web.StreamResponse:
    """aiohttp handler for every proxied path and method (connections the lean front handed over)."""
    state = request.app[STATE]
    exchange = state.next_exchange()
    raw = await read_bounded(request, state.settings.max_body_bytes)
    headers = tuple(request.headers.items())
    outcome = classify_request(state, request.method, request.rel_url.raw_path, headers, raw)
    bridge = await bridge_for(state, outcome)
    if bridge is not None:
        assert isinstance(outcome, Route)
        return await bridge.serve(request, exchange, outcome)
    side = AiohttpSide(request)
    await ExchangeDriver(state, side, exchange).run(outcome, received=len(raw))
    return side.final()


def classify_request(
    state: ProxyState, method: str, path: str, headers: tuple[tuple[str, str], ...], raw: bytes
) -> Route | Rejection:
    """Route or refuse one client request (the path as sent, percent-encoded)."""
    return classify(method, path, headers, raw, max_body=state.settings.max_body_bytes)


async def bridge_for(state: ProxyState, outcome: Route | Rejection) -> BridgeDriver | None:
    """The bridge that serves this request, or None when it passes through."""
    router = state.router
    if router is None or not isinstance(outcome, Route):
        return None
    await router.ensure_probed()
    return router.bridge_for(outcome)


_LOG = get_logger()


class ExchangeDriver:
    """Runs one exchange: the engine decides, this class does."""

    def __init__(self, state: ProxyState, client: ClientSide, exchange: str) -> None:
        self.state = state
        self.client = client
        self.exchange = exchange
        self.upstream: UpstreamResponse | None = None
        self.ended = False
        self.route: Route | None = None
        self.log = _LOG

    async def run(self, outcome: Route | Rejection, *, received: int) -> None:
        """Handle the exchange to its end; a client that leaves mid-way is cleaned up, never leaked.

        `received` is how many body bytes were read (for a refused body, those read before refusing).
        """
        builder = self.state.facts
        items = dict(self.client.headers)
        session = header(items, SESSION_ID)
        era = outcome.era.value if isinstance(outcome, Route) else "unknown"
        builder.open_exchange(
            self.exchange,
            http_method=self.client.method,
            path=self.client.path_qs,
            headers=items,
            session=session,
            client_era=era,
            upstream_era=era,
            body_size=received,
        )
        if isinstance(outcome, Rejection):
            builder.mark_invalid(self.exchange, f"refused: {outcome.reason}", size=received, body=b"")
            await self._respond(outcome.status, outcome.body, ())
            self._close(outcome.reason)
            return
        self.route = outcome
        self._observe_client(outcome)
        structlog.contextvars.bind_contextvars(exchange=self.exchange)
        try:
            await self.execute(self.state.engine.handle(ClientRequestReceived(self.exchange, outcome)))
        except asyncio.CancelledError:
            self._abandon()
            raise

    def _observe_client(self, route: Route) -> None:
        builder = self.state.facts
        messages = route.body.messages
        if route.body.parse_error and route.raw.strip():
            builder.mark_invalid(self.exchange, route.body.parse_error, size=len(route.raw), body=route.raw)
            return
        for msg in messages:
            size = len(route.raw) if len(messages) == 1 else len(dumps(msg.raw))
            chain_id = builder.message(
                self.exchange, msg, size=size, direction=Direction.TO_SERVER, channel=Channel.POST
            )
            if chain_id is not None:
                structlog.contextvars.bind_contextvars(chain_id=chain_id)

    async def feed(self, event: EngineEvent) -> None:
        """Give the engine one fact and carry out what it orders."""
        await self.execute(self.state.engine.handle(event))

    async def execute(self, commands: list[Command]) -> None:
        """Carry out the engine's orders in sequence."""
        for command in commands:
            await self._do(command)

    async def _do(self, command: Command) -> None:
        match command:
            case SendUpstream():
                await self._send_upstream(command)
            case StartClientResponse(_, status, headers, length):
                await self._start_response(status, headers, length)
            case RelayBody():
                await self._relay()
            case RespondToClient(_, status, body, headers):
                await self._respond(status, body, headers)
            case CloseUpstream():
                self._close_upstream()
            case EndClientResponse(_, outcome):
                await self._end(outcome)
            case Log(event, level, fields):
                getattr(self.log, level)(event, **fields)

    async def _send_upstream(self, cmd: SendUpstream) -> None:
        state = self.state
        target = state.upstream.origin + cmd.path
        query = self.client.raw_query
        if query and "?" not in cmd.path:
            target += "?" + query
        # Sent as the client sent it (percent-encoded): `%2F` stays `%2F`.
        try:
            self.upstream = await state.pool.request(cmd.http_method, target, cmd.headers, cmd.body)
        except TimeoutError:
            await self.feed(
                UpstreamFailed(
                    self.exchange, "timeout", f"no response head within {state.settings.upstream_timeout}s"
                )
            )
            return
        except UpstreamError as exc:
            await self.feed(UpstreamFailed(self.exchange, "unreachable", _describe(exc)))
            return
        self._check_verdict(self.upstream.status)
        await self.feed(UpstreamResponded(self.exchange, self.upstream.status, tuple(self.upstream.headers)))

    def _check_verdict(self, status: int) -> None:
        """An era-level refusal (a handshake or a 2026 request turned away) may mean the upstream changed."""
        route, router = self.route, self.state.router
        if router is None or route is None or status not in (400, 404, 405):
            return
        if route.method == "initialize" or route.era is Era.MODERN:
            router.suspect(
                f"HTTP {status} for {route.method or route.http_method} from a {route.era.value} client"
            )

    async def _start_response(
        self, status: int, headers: tuple[tuple[str, str], ...], length: int | None
    ) -> None:
        upstream_headers = dict(self.upstream.headers) if self.upstream is not None else {}
        self.state.facts.response_head(
            self.exchange,
            status=status,
            content_type=header(headers, "content-type"),
            headers=upstream_headers,
        )
        try:
            await self.client.start(status, self.upstream.reason if self.upstream else None, headers, length)
        except ClientGone:
            await self.feed(ClientDisconnected(self.exchange))

    async def _relay(self) -> None:
        upstream, client = self.upstream, self.client
        if upstream is None or not client.started or self.ended:
            return
        sse = is_sse(upstream.header("content-type"))
        channel = Channel.GET_SSE if client.method == "GET" else Channel.SSE
        observer = BodyObserver(
            sse=sse,
            sink=self._observe_upstream,
            on_extra_bytes=self._extra_bytes,
            channel=channel,
            on_event_id=lambda sse_id: self.state.facts.note_event_id(self.exchange, sse_id),
            declared_size=upstream.content_length,
        )
        if sse:
            self.state.open_streams += 1
        try:
            async for chunk in upstream.chunks():
                try:
                    await client.write(chunk)
                except ClientGone:
                    observer.feed(chunk)
                    await self.feed(ClientDisconnected(self.exchange))
                    return
                observer.feed(chunk)
        except UpstreamError as exc:
            observer.finish()
            await self.feed(UpstreamFailed(self.exchange, "cut", _describe(exc)))
            return
        finally:
            if sse:
                self.state.open_streams -= 1
        observer.finish()
        if observer.problem:
            self.log.info("body_not_inspected", problem=observer.problem)
        await self.feed(UpstreamEnded(self.exchange))

    def _observe_upstream(self, msg: Message, size: int, channel: Channel, sse_id: str | None) -> None:
        self.state.facts.message(
            self.exchange, msg, size=size, direction=Direction.TO_CLIENT, channel=channel, sse_id=sse_id
        )

    def _extra_bytes(self, size: int) -> None:
        self.state.facts.add_bytes_out(self.exchange, size)

    async def _respond(
        self, status: int, body: dict[str, Any] | None, headers: tuple[tuple[str, str], ...]
    ) -> None:
        data = dumps(body) if body is not None else b""
        self.state.facts.response_head(
            self.exchange,
            status=status,
            content_type="application/json" if body is not None else None,
            headers={},
        )
        if body is not None:
            msg = parse_body(data).first
            if msg is not None:
                self.state.facts.message(
                    self.exchange,
                    msg,
                    size=len(data),
                    direction=Direction.TO_CLIENT,
                    channel=Channel.JSON,
                    note="answered by the proxy",
                )
        self.client.respond(status, data, "application/json" if body is not None else None, headers)

    def _close_upstream(self) -> None:
        if self.upstream is not None:
            self.upstream.close()

    async def _end(self, outcome: str | None) -> None:
        if self.ended:
            return
        self.ended = True
        if self.client.started and outcome != "client_disconnected":
            if outcome is not None and outcome.startswith("upstream_"):
                self._cut_client()
            else:
                try:
                    await self.client.finish()
                except ClientGone:
                    outcome = outcome or "client_disconnected"
        if self.upstream is not None:
            self.upstream.release()
        self._close(outcome)

    def _cut_client(self) -> None:
        """The upstream broke off a body already under way: break the client's off the same way.

        A clean end would pass a truncated body off as complete (and leave a client that was promised a
        Content-Length waiting for bytes that never come); closing the connection after flushing what
        was relayed tells the client its body was cut, as the upstream told us.
        """
        self.client.cut()

    def _abandon(self) -> None:
        """The handler was cancelled (client gone or shutdown): drop upstream, record, log."""
        for command in self.state.engine.handle(ClientDisconnected(self.exchange)):
            if isinstance(command, CloseUpstream):
                self._close_upstream()
        if not self.ended:
            self.ended = True
            self._close("client_disconnected")

    def _close(self, outcome: str | None) -> None:
        summary = self.state.facts.close_exchange(self.exchange, outcome)
        structlog.contextvars.unbind_contextvars("exchange", "chain_id")
        if summary is None:
            return
        info_line(self.log, "exchange", {"mode": "passthrough", **summary.log_fields()})


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text[:300]


def now() -> float:
    """The proxy's wall clock (injected into the pure rooms)."""
    return time.time()
