"""The pass-through relay: one client exchange forwarded upstream and back, observed on the way.

Straight-line on purpose. The bridges run event-driven engines because they juggle rounds, parked
calls and nested requests; pass-through has one request, one response and three ways to fail, and
on the benchmark machine a per-exchange state machine (events, commands, dispatch) cost more CPU than
the relaying itself (issue 7). The decisions stay pure in `proxy.engine.passthrough`; this class
does the I/O in order and feeds the observations (`FactLog`) with parsed copies, never holding the
bytes back: a body that arrived whole goes to the client in one write with its head, a stream goes
chunk by chunk as it comes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from proxy.engine.passthrough import (
    ClientHead,
    client_head,
    fault_answer,
    fault_outcome,
    upstream_request,
)
from proxy.flows.events import Channel, Direction
from proxy.framing.classify import Rejection, Route
from proxy.framing.http import header, is_sse
from proxy.logs import get_logger, info_line
from proxy.transport.client_side import ClientGone, ClientSide
from proxy.transport.observe import INSPECT_LIMIT, NOT_INSPECTED, BodyObserver, observe_json
from proxy.transport.state import ProxyState
from proxy.transport.upstream_pool import PendingHead, UpstreamError, UpstreamResponse
from proxy.wire.headers import SESSION_ID
from proxy.wire.jsonrpc import Message, RequestId, dumps, parse_body
from proxy.wire.versions import Era

_LOG = get_logger()


class PassthroughRelay:
    """Relays one exchange between a client and the upstream, and reports what it saw."""

    __slots__ = ("client", "counted", "ended", "exchange", "state", "upstream")

    def __init__(self, state: ProxyState, client: ClientSide, exchange: str) -> None:
        self.state = state
        self.client = client
        self.exchange = exchange
        self.upstream: UpstreamResponse | None = None
        self.ended = False
        self.counted = False
        """Counted in `state.relaying` (from the upstream request to the end)."""

    async def run(self, outcome: Route | Rejection, *, received: int) -> None:
        """Handle the exchange to its end; a client that leaves mid-way is cleaned up, never leaked.

        `received` is how many body bytes were read (for a refused body, those read before refusing).
        A request that cannot be routed yet (the upstream was out of reach at the last era probe) is
        answered 503 without going upstream.
        """
        router = self.state.router
        if isinstance(outcome, Route) and router is not None and (problem := router.unroutable()):
            self.refuse_unroutable(outcome, problem, received=received)
            return
        route = self.open(outcome, received=received)
        if route is not None:
            await self.relay(route)

    def open(self, outcome: Route | Rejection, *, received: int) -> Route | None:
        """Record the request; a refused one is answered here (None), a routed one is returned."""
        state, client = self.state, self.client
        era = outcome.era.value if isinstance(outcome, Route) else "unknown"
        state.facts.open_exchange(
            self.exchange,
            http_method=client.method,
            path=client.path_qs,
            headers=dict(client.headers),
            session=outcome.session_id if isinstance(outcome, Route) else header(client.headers, SESSION_ID),
            client_era=era,
            upstream_era=era,
            body_size=received,
        )
        if isinstance(outcome, Rejection):
            state.facts.mark_invalid(self.exchange, f"refused: {outcome.reason}", size=received, body=b"")
            self._answer(outcome.status, outcome.body)
            self._close(outcome.reason)
            return None
        self._observe_client(outcome)
        state.relaying += 1
        self.counted = True
        return outcome

    def _upstream_call(self, route: Route) -> tuple[str, str, tuple[tuple[str, str], ...], bytes, str]:
        """Method, client path, headers, body and client query of the upstream request for the route."""
        send = upstream_request(route, self.client.raw_query)
        return send.http_method, send.path, send.headers, send.body, send.query

    def send_now(self, route: Route) -> PendingHead | None:
        """Send the upstream request on a warm connection at once; None when none is idle.

        A request that cannot be framed also gets None here: `relay` meets the same refusal and
        answers it.
        """
        try:
            return self.state.pool.request_nowait(*self._upstream_call(route))
        except UpstreamError:
            return None

    async def relay(self, route: Route) -> None:
        """After `open`: the upstream request and its response, to the end of the exchange."""
        with self._given_up_on_failure():
            try:
                upstream = await self.state.pool.request(*self._upstream_call(route))
            except TimeoutError:
                self.timed_out(route)
                return
            except UpstreamError as exc:
                self.unreachable(route, exc)
                return
            await self.deliver(route, upstream)

    async def stream_started(self, upstream: UpstreamResponse, sent: bytes) -> None:
        """`stream` for a response whose head (and `sent`, the body so far) went out elsewhere."""
        with self._given_up_on_failure():
            await self.stream(upstream, sent)

    @contextlib.contextmanager
    def _given_up_on_failure(self) -> Iterator[None]:
        """Cancelled (client gone, shutdown) or broken by a bug: the exchange ends, recorded, not leaked."""
        try:
            yield
        except asyncio.CancelledError:
            self.abandon()
            raise
        except Exception:
            self.abandon("proxy_error")
            raise

    def refuse_unroutable(self, route: Route, problem: str, *, received: int) -> None:
        """Record the request and answer 503: the upstream's era is unknown and it cannot be reached."""
        if self.open(route, received=received) is not None:
            self._fault("era_unknown", problem, route.request_id, retry_after=1)

    def timed_out(self, route: Route) -> None:
        """No head within the upstream timeout: 504."""
        detail = f"no response head within {self.state.settings.upstream_timeout}s"
        self._fault("timeout", detail, route.request_id)

    def unreachable(self, route: Route, exc: UpstreamError) -> None:
        """The upstream could not be reached, closed before its head or sent one over the limit (502),
        or the request head could not be framed (400: nothing was sent)."""
        reason = exc.kind if exc.kind in ("unsendable", "head_too_large") else "unreachable"
        self._fault(reason, _describe(exc), route.request_id)

    def head(self, route: Route, upstream: UpstreamResponse) -> ClientHead:
        """The upstream's head arrived: what the client gets (record it with `headed` once sent)."""
        self.upstream = upstream
        self._check_verdict(route, upstream.status)
        status = upstream.status
        if 300 <= status < 400:
            return client_head(status, upstream.headers, (self.state.upstream, self._own_origin()))
        return client_head(status, upstream.headers)

    def _own_origin(self) -> str:
        """The proxy's origin as this client addressed it (its `Host`), else the address it listens on."""
        host = header(self.client.headers, "host")
        return f"http://{host}" if host else self.state.listen_url

    def headed(self, head: ClientHead, upstream: UpstreamResponse) -> None:
        """Record the response head."""
        self.state.facts.response_head(
            self.exchange,
            status=head.status,
            content_type=header(head.headers, "content-type"),
            headers=dict(upstream.headers),
        )

    @staticmethod
    def whole_body(upstream: UpstreamResponse, head: ClientHead) -> bytes | None:
        """The body when it arrived with the head and is what the head declared, else None (stream it).

        A HEAD answer or a 204 declares a length it does not carry: those take the streaming path,
        which knows to send no body.
        """
        length = head.content_length
        if length is None or not upstream.complete or upstream.buffered != length:
            return None
        return upstream.body_if_complete()

    def delivered_whole(self, upstream: UpstreamResponse, body: bytes) -> None:
        """The whole body went out with its head: observe it and end the exchange."""
        if is_sse(upstream.header("content-type")):
            observer = self._observer(upstream, sse=True)
            observer.feed(body)
            self._observed(observer)
        else:
            self._observe_json(body)
        self.upstream = None
        upstream.release()
        self._finish(None)

    async def deliver(self, route: Route, upstream: UpstreamResponse) -> None:
        """The response to the client, relayed as it arrives (see `stream`)."""
        head = self.head(route, upstream)
        self.headed(head, upstream)
        try:
            await self.client.start(head.status, upstream.reason, head.headers, head.content_length)
        except ClientGone:
            self._gone()
            return
        await self.stream(upstream)

    def _observe_json(self, body: bytes) -> None:
        if len(body) > INSPECT_LIMIT:
            _LOG.info("body_not_inspected", exchange=self.exchange, problem=NOT_INSPECTED)
            return
        observe_json(body, self._observe_upstream)

    async def stream(self, upstream: UpstreamResponse, sent: bytes = b"") -> None:
        """Relay the body chunk by chunk as it arrives (a started response), observing each.

        `sent`: body bytes that already went out with the head; they are observed first.
        """
        state, client = self.state, self.client
        sse = is_sse(upstream.header("content-type"))
        observer = self._observer(upstream, sse=sse)
        if sent:
            observer.feed(sent)
        if sse:
            state.open_streams += 1
        try:
            async for chunk in upstream.chunks():
                try:
                    await client.write(chunk)
                except ClientGone:
                    observer.feed(chunk)
                    self._gone()
                    return
                observer.feed(chunk)
        except UpstreamError as exc:
            observer.finish()
            self._cut(exc)
            return
        finally:
            if sse:
                state.open_streams -= 1
        self._observed(observer)
        await self._end(None)

    def _observed(self, observer: BodyObserver) -> None:
        """The body ended: the observer reports its last messages, and says if it could not look."""
        observer.finish()
        if observer.problem:
            _LOG.info("body_not_inspected", exchange=self.exchange, problem=observer.problem)

    def _observer(self, upstream: UpstreamResponse, *, sse: bool) -> BodyObserver:
        facts, exchange = self.state.facts, self.exchange
        return BodyObserver(
            sse=sse,
            sink=self._observe_upstream,
            on_extra_bytes=lambda size: facts.add_bytes_out(exchange, size),
            channel=Channel.GET_SSE if self.client.method == "GET" else Channel.SSE,
            on_event_id=lambda sse_id: facts.note_event_id(exchange, sse_id),
            declared_size=upstream.content_length,
        )

    # -- observation ----------------------------------------------------------------------------

    def _observe_client(self, route: Route) -> None:
        facts = self.state.facts
        messages = route.body.messages
        if route.body.parse_error and route.raw.strip():
            facts.mark_invalid(self.exchange, route.body.parse_error, size=len(route.raw), body=route.raw)
            return
        single = len(messages) == 1
        for msg in messages:
            size = len(route.raw) if single else len(dumps(msg.raw))
            facts.message(self.exchange, msg, size=size, direction=Direction.TO_SERVER, channel=Channel.POST)

    def _observe_upstream(self, msg: Message, size: int, channel: Channel, sse_id: str | None) -> None:
        self.state.facts.message(
            self.exchange, msg, size=size, direction=Direction.TO_CLIENT, channel=channel, sse_id=sse_id
        )

    def _check_verdict(self, route: Route, status: int) -> None:
        """An era-level refusal (a handshake or a 2026 request turned away) may mean the upstream changed."""
        router = self.state.router
        if router is None or status not in (400, 404, 405):
            return
        if route.method == "initialize" or route.era is Era.MODERN:
            router.suspect(
                f"HTTP {status} for {route.method or route.http_method} from a {route.era.value} client"
            )

    # -- endings --------------------------------------------------------------------------------

    def _answer(
        self, status: int, body: dict[str, object] | None, headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        """Answer the client with a whole response the proxy made (a refusal or a gateway error)."""
        data = dumps(body) if body is not None else b""
        facts = self.state.facts
        content_type = "application/json" if body is not None else None
        facts.response_head(self.exchange, status=status, content_type=content_type, headers={})
        if body is not None:
            msg = parse_body(data).first
            if msg is not None:
                facts.message(
                    self.exchange,
                    msg,
                    size=len(data),
                    direction=Direction.TO_CLIENT,
                    channel=Channel.JSON,
                    note="answered by the proxy",
                )
        self.client.respond(status, data, content_type, headers)

    def _fault(
        self, reason: str, detail: str, request_id: RequestId | None, *, retry_after: int | None = None
    ) -> None:
        """The upstream failed before its head: the client gets a gateway error."""
        _LOG.warning("upstream_fault", exchange=self.exchange, reason=reason, detail=detail)
        answer = fault_answer(reason, detail, request_id)
        if answer is not None:
            extra = (("Retry-After", str(retry_after)),) if retry_after is not None else ()
            self._answer(answer.status, answer.body, extra)
        self._finish(fault_outcome(reason))

    def _cut(self, exc: UpstreamError) -> None:
        """The upstream broke off a body already under way: break the client's off the same way.

        A clean end would pass a truncated body off as complete (and leave a client that was promised a
        Content-Length waiting for bytes that never come); closing the connection after flushing what
        was relayed tells the client its body was cut, as the upstream told us.
        """
        _LOG.warning("upstream_fault", exchange=self.exchange, reason="cut", detail=_describe(exc))
        self._close_upstream()
        self.client.cut()
        self._finish(fault_outcome("cut"))

    def _gone(self) -> None:
        """The client left: the upstream request is dropped with it."""
        self._close_upstream()
        self._finish("client_disconnected")

    async def _end(self, outcome: str | None) -> None:
        if self.ended:
            return
        try:
            await self.client.finish()
        except ClientGone:
            outcome = outcome or "client_disconnected"
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            upstream.release()
        self._finish(outcome)

    def abandon(self, outcome: str = "client_disconnected") -> None:
        """The exchange was given up (client gone, shutdown): drop the upstream request, record it."""
        self._close_upstream()
        self._finish(outcome)

    def _close_upstream(self) -> None:
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            upstream.close()

    def _finish(self, outcome: str | None) -> None:
        if self.ended:
            return
        self.ended = True
        if self.counted:
            self.counted = False
            self.state.relaying -= 1
        self._close(outcome)

    def _close(self, outcome: str | None) -> None:
        summary = self.state.facts.close_exchange(self.exchange, outcome)
        if summary is not None:
            info_line(_LOG, "exchange", {"mode": "passthrough", **summary.log_fields()})


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text[:300]
