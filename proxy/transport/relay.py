"""The pass-through relay: one client exchange forwarded upstream and back, observed on the way.

Straight-line on purpose. The bridges run event-driven engines because they juggle rounds, parked
calls and nested requests; pass-through has one request, one response and three ways to fail, and a
per-exchange state machine (events, commands, dispatch) would cost more CPU than the relaying
itself. Every decision is a pure function in `proxy.engine.passthrough`; this class is the one
executor that carries them out, in order, whichever way the front serves the exchange: from a done
callback without a task (`answered`, the hot path), or in a task (`relay`); an SSE body answered
without a task goes on without one too, from the upstream connection's reads (`PushedStream`, which
runs the steps written here: `streamed`, `body_ended_now`). The front only chooses between those;
the order of the steps is written here once. Typed observations (to the sink) carry parsed copies,
never holding the bytes back: a body that arrived whole goes to the client in one write with its
head, a stream goes chunk by chunk as it comes. An exchange of OAuth discovery whose URLs move between
the upstream's origin and the proxy's gets an `OriginRewrites` (`proxy.transport.origin_rewrites`); the
steps here only say where its rewrites happen and when they are recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator
from typing import Any, NamedTuple

from proxy.engine.faults import fault_outcome, setup_fault
from proxy.engine.flood_lines import FloodLines
from proxy.engine.gate.rules import FaultGate
from proxy.engine.oauth_origin import DocumentPaths, Origins
from proxy.engine.passthrough import (
    BODY_CUT,
    BodyEnd,
    ClientHead,
    body_end,
    client_head,
    era_suspicion,
    fault_answer,
    sends_whole,
    upstream_request,
)
from proxy.flows.events import Channel, Direction, Mode, Side
from proxy.flows.observations import (
    REFUSED,
    AnsweredByProxy,
    BodyNotInspected,
    BytesOut,
    EventIdSeen,
    ExchangeClosed,
    ExchangeOpened,
    InvalidBody,
    MessageSeen,
    Observation,
    ResponseHeadSeen,
)
from proxy.flows.sink import ObservationSink
from proxy.framing.classify import Rejection, Route
from proxy.framing.http import Upstream, header
from proxy.logs import get_logger, traffic_line
from proxy.transport.body_deadlines import BODY_STALLED
from proxy.transport.client_side import ClientGone, ClientSide, answer_headers, cut_outcome
from proxy.transport.holds import Holds
from proxy.transport.intercept_desk import InterceptDesk
from proxy.transport.observe import INSPECT_LIMIT, BodyObserver, json_messages, too_large
from proxy.transport.origin_rewrites import OriginRewrites, challenged, is_discovery, read_document
from proxy.transport.response_budget import ResponseBudget
from proxy.transport.routing import Router
from proxy.transport.upstream_pool import PendingHead, UpstreamClient, UpstreamError, UpstreamResponse
from proxy.wire.headers import SESSION_ID
from proxy.wire.joined_headers import recorded
from proxy.wire.jsonrpc import Message, RequestId, dumps, member_sizes, parse_body

# Enum members read through their class cost about ten times a module constant's on Python 3.11
# (the enum metaclass's attribute hook): the traffic path reads these.
_BOTH = Side.BOTH
_CLIENT = Side.CLIENT
_GET_SSE = Channel.GET_SSE
_JSON = Channel.JSON
_LOCAL = Mode.LOCAL
_PASSTHROUGH = Mode.PASSTHROUGH
_POST = Channel.POST
_SSE = Channel.SSE
_TO_CLIENT = Direction.TO_CLIENT
_TO_SERVER = Direction.TO_SERVER

_LOG = get_logger()

_HEADLESS = {"unsendable": "unsendable", "head_too_large": "head_too_large", "cut": "bad_response"}
"""The fault of a request that got no usable head, by the transport's kind (any other: unreachable).
A server that took the connection and then closed it or sent a malformed head was reached: telling
the user to check that it runs would send them the wrong way."""

_NEVER_SENT = frozenset(("unreachable", "unsendable", "tls_refused", "wrong_scheme"))
"""Faults of a request the upstream never got: no connection to it, or a head that could not be framed."""

Rest = Coroutine[Any, Any, None]
"""What remains of an exchange once its head went out: the body to stream, in a task."""


class Started(NamedTuple):
    """A response whose head went out and whose body remains to stream."""

    upstream: UpstreamResponse
    sent: bytes
    """Body bytes that went out with the head."""


class RelayContext:
    """What every pass-through exchange uses: where requests go, where observations go, what is counted."""

    __slots__ = (
        "desk",
        "documents",
        "floods",
        "gate",
        "holds",
        "inspect_limit",
        "listen_url",
        "observations",
        "open_streams",
        "pool",
        "relaying",
        "responses",
        "rewrite_origin",
        "router",
        "upstream",
        "upstream_timeout",
    )

    def __init__(
        self,
        *,
        upstream: Upstream,
        pool: UpstreamClient,
        observations: ObservationSink,
        router: Router,
        upstream_timeout: float,
        inspect_limit: int = INSPECT_LIMIT,
        responses: ResponseBudget | None = None,
        rewrite_origin: bool = True,
    ) -> None:
        self.upstream = upstream
        self.pool = pool
        self.observations = observations
        """Where the relay reports what it sees (queued, or built into chains when someone watches)."""
        self.router = router
        self.upstream_timeout = upstream_timeout
        self.inspect_limit = inspect_limit
        """The largest response body, or SSE event, read for the chain (`max_inspected_bytes`)."""
        self.responses = responses if responses is not None else ResponseBudget()
        """The response bytes held across all exchanges, pass-through's and the bridges' alike
        (`max_response_bytes_in_flight`)."""
        self.rewrite_origin = rewrite_origin
        """Move the upstream's origin onto the client's in OAuth discovery, and back in the `resource`
        a client sends (`rewrite_oauth_origin`, `proxy.engine.oauth_origin`)."""
        self.documents = DocumentPaths()
        """The paths whose JSON answers are discovery documents: the well-known ones and those the
        upstream's challenges named (learned as the relay moves them)."""
        self.listen_url = ""
        """The proxy's own base URL once it listens (`http://127.0.0.1:8080`), for rewritten redirects."""
        self.open_streams = 0
        """SSE response streams being relayed now."""
        self.relaying = 0
        """Exchanges between their upstream request and their end (drained to zero when idle)."""
        self.gate: FaultGate | None = None
        """The fault rules in force (`proxy.transport.faults`); None while there are none, so an
        exchange pays one attribute read for the feature."""
        self.holds = Holds()
        """Where a fault's delays wait: released when the proxy drains or stops."""
        self.desk: InterceptDesk | None = None
        """Where messages intercept rules picked are held (`proxy.transport.intercept_desk`)."""
        self.floods = FloodLines()
        """When each kind of line a flood repeats was last written (upstream faults, clients'
        refusals), so a flood is one line a second (`proxy.engine.flood_lines`)."""


class PassthroughRelay:
    """Relays one exchange between a client and the upstream, and reports what it saw."""

    __slots__ = (
        "batch",
        "client",
        "counted",
        "ctx",
        "encoding",
        "ended",
        "exchange",
        "observer",
        "opened",
        "origin",
        "sse",
        "trailers",
        "unjudged",
        "upstream",
    )

    def __init__(self, ctx: RelayContext, client: ClientSide, exchange: str) -> None:
        self.ctx = ctx
        self.client = client
        self.exchange = exchange
        self.upstream: UpstreamResponse | None = None
        self.ended = False
        self.counted = False
        """Counted in `ctx.relaying` (from the upstream request to the end)."""
        self.sse = False
        """The upstream's body is an SSE stream (read from its head once)."""
        self.encoding: str | None = None
        """The upstream body's `Content-Encoding` (read from its head once): observed decoded."""
        self.batch: list[Observation] = []
        """Observations made and not yet handed to the sink: they go together when the relay next
        waits (the request before it goes upstream, each streamed chunk) or at the exchange's end,
        so a watcher sees each in order and no later than the relay waits."""
        self.unjudged: tuple[Route, int] | None = None
        """The route and status of a JSON answer whose body was still arriving with its head: what
        it says of the upstream's era is read once the body has gone by (`doubt`)."""
        self.opened: Route | None = None
        """The request relayed (set by `open`): a gateway error made after its head carries its id."""
        self.trailers: list[tuple[str, str]] = []
        """The trailer fields of the upstream's chunked body, once it ended whole: recorded with the
        exchange's end, never sent to the client (RFC 9110, 6.5.1: not merged into its head)."""
        self.origin: OriginRewrites | None = None
        """The exchange's OAuth origin rewrites (`_rewrites`), begun by the first made or considered;
        None for the traffic that needs none."""
        self.observer: BodyObserver | None = None
        """The observer of the response body (`_observer`): an exchange given up before the body's
        end counts what it relayed (`BodyObserver.give_up`); what it keeps counts in
        `max_response_bytes_in_flight` until the exchange ends (`_finish` gives it back)."""

    async def run(self, outcome: Route | Rejection, *, received: int) -> None:
        """Handle the exchange to its end; a client that leaves mid-way is cleaned up, never leaked.

        `received` is how many body bytes were read (for a refused body, those read before refusing).
        A request that cannot be routed yet (the upstream was out of reach at the last era probe) is
        answered 503 without going upstream.
        """
        if isinstance(outcome, Route) and (problem := self.ctx.router.unroutable()):
            self.refuse_unroutable(outcome, problem, received=received)
            return
        route = self.open(outcome, received=received)
        if route is not None:
            await self.relay(route)

    def open(self, outcome: Route | Rejection, *, received: int) -> Route | None:
        """Record the request; a refused one is answered here (None), a routed one is returned."""
        if isinstance(outcome, Rejection):
            self._refused(outcome, received)
            return None
        ctx, client = self.ctx, self.client
        self.opened = outcome
        era = str(outcome.era)  # its value, cheaper than .value
        sink = ctx.observations
        # Positional, in the fields' order: a class called with keywords costs a dict of them on 3.11.
        self._emit(
            ExchangeOpened(
                sink.now(),
                self.exchange,
                client.method,
                client.path_qs,
                recorded(client.headers),
                outcome.session_id,
                era,  # the client's
                era,  # the upstream's: the same, passed through
                _PASSTHROUGH,
                received,  # body_size
                client.transport,
                ctx.router.transport,
                client.connection,
            )
        )
        self._observe_client(outcome)
        if self.origin is not None:  # a `resource` moved on its way upstream (`send_now`) before this
            self._say_rewrites(self.origin)
        self._flush()
        ctx.relaying += 1
        self.counted = True
        return outcome

    def _upstream_call(self, route: Route) -> tuple[str, str, tuple[tuple[str, str], ...], bytes, str]:
        """Method, client path, headers, body and client query of the upstream request for the route."""
        send = upstream_request(route, self.client.raw_query)
        query, body = send.query, send.body
        if self.ctx.rewrite_origin and route.path not in self.ctx.upstream.endpoint_paths:
            query, body = self._rewrites().resource_moved(route, query, body)
        return send.http_method, send.path, send.headers, body, query

    def send_now(self, route: Route) -> PendingHead | None:
        """Send the upstream request on a warm connection at once; None when none is idle.

        A request that cannot be framed also gets None here: `relay` meets the same refusal and
        answers it.
        """
        try:
            return self.ctx.pool.request_nowait(*self._upstream_call(route))
        except UpstreamError:
            return None

    async def relay(self, route: Route) -> None:
        """After `open`, in a task: the upstream request and its response, to the end of the exchange."""
        with self.given_up_on_failure():
            try:
                upstream = await self.ctx.pool.request(*self._upstream_call(route))
            except (TimeoutError, UpstreamError) as exc:
                self.failed(route, exc)
                return
            rest = self.headed(route, upstream)
            if rest is not None:
                await rest

    def answered(self, route: Route, pending: PendingHead) -> Started | None:
        """After `send_now`, from the head's done callback: the same steps as `relay`, without a task.

        Returns the response whose body remains to stream (None: the exchange ended here); the caller
        streams it (`stream_started`, in a task, or from the upstream's reads: `PushedStream`).
        """
        try:
            upstream = pending.result()
        except (TimeoutError, UpstreamError) as exc:
            self.failed(route, exc)
            return None
        return self.head_out(route, upstream)

    def failed(self, route: Route, exc: TimeoutError | UpstreamError) -> None:
        """No head came: 504 past the upstream timeout, else the fault `no_head` describes."""
        if isinstance(exc, UpstreamError):
            self.no_head(route, exc)
        else:
            self.timed_out(route)

    def headed(self, route: Route, upstream: UpstreamResponse) -> Rest | None:
        """The upstream's head arrived: `head_out`, then what remains to stream (None: nothing)."""
        started = self.head_out(route, upstream)
        return None if started is None else self.stream_started(started)

    def head_out(self, route: Route, upstream: UpstreamResponse) -> Started | None:
        """The upstream's head arrived: the client's head goes out with what of the body is here.

        What the client gets goes out first; it is recorded after. Returns the response whose body
        remains to stream, or None when the exchange ended (the body went out whole with its head). The
        head's record is handed on with the first of the body's (`observer_for`), in one batch.
        """
        head = self._take_head(upstream)
        if self.ctx.rewrite_origin and self.client.method == "GET" and self._is_document(route, head):
            if not upstream.complete:
                self._rewrites().held = head  # nothing goes out until the document is read (`stream_started`)
                return Started(upstream, b"")
            self._document_out(head, upstream, upstream.take_buffered())
            return None
        client = self.client
        whole = sends_whole(head.content_length, upstream.buffered, upstream.complete)
        body = upstream.body_if_complete() if whole else None
        if body is not None:
            if head.content_encoding is not None:  # judged once decoded (`_observed`)
                self.unjudged = (route, upstream.status)
            elif (doubt := era_suspicion(route, upstream.status, body)) is not None:  # inline: every answer
                self.ctx.router.suspect(doubt)
            client.send_whole(head.status, upstream.reason, head.headers, body)
            self._record_head(head, upstream)
            self._delivered_whole(upstream, body)
            return None
        first, end = upstream.take_buffered(), upstream.complete
        if (end or head.sse) and head.content_encoding is None:
            self.doubt(route, upstream.status, first if end else None)
        else:
            self.unjudged = (route, upstream.status)
        if not self._started(head, upstream, head.content_length, first, end=end, flush=False):
            return None
        if end:
            self._delivered_whole(upstream, first)  # a chunked body that had all arrived
            return None
        return Started(upstream, first)

    def _take_head(self, upstream: UpstreamResponse) -> ClientHead:
        """The upstream's head, taken and made the client's."""
        self.upstream = upstream
        head = self._client_head(upstream)
        self.sse = head.sse
        self.encoding = head.content_encoding
        return head

    def doubt(self, route: Route, status: int, body: bytes | bytearray | None) -> None:
        """An answer the route's era does not explain asks for a probe. `body` is the whole answer
        (None: an SSE stream, or a body cut off or not kept, and the status alone decides)."""
        if (doubt := era_suspicion(route, status, body)) is not None:
            self.ctx.router.suspect(doubt)

    def _started(
        self,
        head: ClientHead,
        upstream: UpstreamResponse,
        length: int | None,
        first: bytes = b"",
        *,
        end: bool = False,
        flush: bool = True,
    ) -> bool:
        """Send the client's head with `first` of the body, and record it; False when the client left
        (the exchange is then over). `flush` False: the caller hands the record on with what follows."""
        try:
            self.client.start_now(head.status, upstream.reason, head.headers, length, first, end=end)
        except ClientGone:
            self._record_head(head, upstream)
            self._gone()
            return False
        self._record_head(head, upstream)
        if flush:
            self._flush()
        return True

    async def stream_started(self, started: Started) -> None:
        """`stream` for a response whose head (and the body so far) went out already, or a discovery
        document's whose head was held back (`OriginRewrites.held`)."""
        with self.given_up_on_failure():
            origin = self.origin
            if origin is not None and (held := origin.held) is not None:
                origin.held = None
                await self._document_read(held, started.upstream)
                return
            await self.stream(started.upstream, started.sent)

    def _is_document(self, route: Route, head: ClientHead) -> bool:
        """A discovery document whose URLs are read and moved (a compressed or over-large one is relayed
        as it came, and said so)."""
        ctx = self.ctx
        return is_discovery(route, head, ctx.upstream, ctx.documents) and self._rewrites().readable(
            head, ctx.inspect_limit
        )

    async def _document_read(self, head: ClientHead, upstream: UpstreamResponse) -> None:
        """Read a discovery document whose body came after its head (bounded by `max_inspected_bytes`),
        then send it rewritten; one past the bound, or cut short, goes on as it came."""
        limit = self.ctx.inspect_limit
        data, cut = await read_document(upstream, limit)
        if cut is None and len(data) <= limit:
            self._document_out(head, upstream, data)
            return
        if cut is None:
            self._rewrites().left_as_is(too_large("a document", limit))
        if not self._started(head, upstream, head.content_length, data, flush=False):
            return
        observer = self.observer_for(upstream, data)
        if cut is not None:
            self._broken_off(BODY_CUT, observer, cut)
            return
        await self.stream_on(upstream, observer)

    def _document_out(self, head: ClientHead, upstream: UpstreamResponse, body: bytes) -> None:
        """Send a whole discovery document with its URLs on the upstream's origin moved to the client's
        (without the server's `ETag` and digests once its bytes changed); the server's document and
        head are what is recorded, with what was moved."""
        data, headers = self._rewrites().document(head, body, self.ctx.inspect_limit)
        self.client.send_whole(head.status, upstream.reason, headers, data)
        self._record_head(head, upstream)
        self._delivered_whole(upstream, body)

    @contextlib.contextmanager
    def given_up_on_failure(self) -> Iterator[None]:
        """Cancelled (client gone, shutdown) or broken by a bug: the exchange ends, recorded, not leaked."""
        try:
            yield
        except asyncio.CancelledError as cancel:
            self.abandon(cut_outcome(cancel))
            raise
        except Exception:
            self.abandon("proxy_error")
            raise

    def refuse_unroutable(self, route: Route, problem: str, *, received: int) -> None:
        """Record the request and answer 503: the upstream's era is unknown and it cannot be reached
        (502 when what stops the probe is the upstream's TLS certificate, or a scheme the upstream does
        not speak: no retry gets past those)."""
        refused = self.ctx.router.problem
        setup = setup_fault(refused)
        if setup is not None:  # no retry gets past it: a gateway error, not "not yet"
            self._opened_here(route, received, setup)
            self._fault(setup, refused, route.request_id)
        else:
            self._opened_here(route, received, "era_unknown")
            self._fault("era_unknown", problem, route.request_id, retry_after=1)

    def refuse_draining(self, route: Route, refusal: Rejection, retry_after: int, *, received: int) -> None:
        """Record new work a draining proxy takes no more of, and answer its 503 with `Retry-After`."""
        self._opened_here(route, received, refusal.reason)
        self._answer(refusal.status, refusal.body, (("Retry-After", str(retry_after)),))
        self._finish(refusal.reason)

    def refuse_route(self, route: Route, refusal: Rejection, *, received: int) -> None:
        """Record a routed request the proxy answers itself (`refusal`), never sending it upstream."""
        self._opened_here(route, received, refusal.reason)
        self._answer(refusal.status, refusal.body)
        self._finish(refusal.reason)

    def _refused(self, refusal: Rejection, received: int) -> None:
        """Record a request `classify` refused, and answer it."""
        self._opened_here(None, received, refusal.reason)
        sink = self.ctx.observations
        self._emit(InvalidBody(sink.now(), self.exchange, REFUSED + refusal.reason, received, b""))
        retry = refusal.retry_after
        self._answer(refusal.status, refusal.body, () if retry is None else (("Retry-After", str(retry)),))
        self._close(refusal.reason)

    def _opened_here(self, route: Route | None, received: int, reason: str) -> None:
        """Record a request the proxy answers itself, never sending it upstream (`route` None: one
        `classify` refused): mode `local`, and the upstream's era as far as the proxy knows it (what
        `mcp_proxy_info` says), not the client's, which only a passed-through answer would confirm."""
        ctx, client, sink = self.ctx, self.client, self.ctx.observations
        router = ctx.router
        self._emit(
            ExchangeOpened(
                sink.now(),
                self.exchange,
                client.method,
                client.path_qs,
                recorded(client.headers),
                route.session_id if route is not None else header(client.headers, SESSION_ID),
                str(route.era) if route is not None else "unknown",
                router.eras.label,
                _LOCAL,
                received,
                client.transport,
                router.transport,
                client.connection,
            )
        )
        if route is not None:
            self._observe_client(route)
        self._emit(AnsweredByProxy(sink.now(), self.exchange, reason))

    def timed_out(self, route: Route) -> None:
        """No head within the upstream timeout: 504."""
        detail = f"no response head within {self.ctx.upstream_timeout}s"
        self._fault("timeout", detail, route.request_id)

    def no_head(self, route: Route, exc: UpstreamError) -> None:
        """The upstream could not be reached, was reached but closed or broke its answer before a
        usable head, or sent one over the limit (502), or the request head could not be framed (400:
        nothing was sent)."""
        reason = _HEADLESS.get(exc.kind, "unreachable")
        detail = _describe(exc)
        if reason == "unreachable":  # a setup to fix, whatever the era probe knew
            reason = setup_fault(detail) or reason
        if reason in _NEVER_SENT:
            self._emit(AnsweredByProxy(self.ctx.observations.now(), self.exchange, reason))
        self._fault(reason, detail, route.request_id)

    def _client_head(self, upstream: UpstreamResponse) -> ClientHead:
        """The upstream's head as the client gets it (a redirect to the upstream moves onto the proxy,
        and so does a challenge's `resource_metadata`)."""
        status = upstream.status
        if 300 <= status < 400:
            head = client_head(status, upstream.headers, (self.ctx.upstream, self._own_origin()))
            if header(head.headers, "location") != upstream.header("location"):
                self._rewrites().rewrote(_TO_CLIENT, "Location")
            return head
        head = client_head(status, upstream.headers)
        if 400 <= status < 500 and self.ctx.rewrite_origin and challenged(head.headers):
            return self._rewrites().challenges_moved(head)
        return head

    def _rewrites(self) -> OriginRewrites:
        """The exchange's origin rewrites, begun when the first is made or considered."""
        origin = self.origin
        if origin is None:
            origins = Origins(self.ctx.upstream, self._own_origin())
            ctx = self.ctx
            origin = self.origin = OriginRewrites(origins, ctx.observations, self.exchange, ctx.documents)
        return origin

    def _say_rewrites(self, origin: OriginRewrites) -> None:
        """Record the origin rewrites made so far, after the record of what they changed."""
        for rewrite in origin.take():
            self._emit(rewrite)

    def _own_origin(self) -> str:
        """The proxy's origin as this client addressed it (its `Host`), else the address it listens on."""
        host = header(self.client.headers, "host")
        return f"http://{host}" if host else self.ctx.listen_url

    def _record_head(self, head: ClientHead, upstream: UpstreamResponse) -> None:
        sink, headers = self.ctx.observations, recorded(upstream.headers)
        self._emit(ResponseHeadSeen(sink.now(), self.exchange, head.status, head.content_type, headers))
        if self.origin is not None:
            self._say_rewrites(self.origin)

    def _delivered_whole(self, upstream: UpstreamResponse, body: bytes) -> None:
        """The whole body went out with its head: observe it and end the exchange."""
        if self.sse or self.encoding is not None:
            observer = self._observer(upstream, sse=self.sse)
            observer.feed(body)
            self._observed(observer)
        else:
            self._observe_json(body)
        self.upstream = None
        self.trailers = upstream.trailers
        upstream.release()
        self._finish(None)

    def _observe_json(self, body: bytes) -> None:
        limit = self.ctx.inspect_limit
        if len(body) > limit:
            self._emit(BytesOut(self.ctx.observations.now(), self.exchange, len(body)))
            self.not_inspected(too_large(f"a response body of {len(body)} bytes", limit))
            return
        for msg, size, channel in json_messages(body)[1]:
            self._observe_upstream(msg, size, channel, None)

    async def stream(self, upstream: UpstreamResponse, sent: bytes = b"") -> None:
        """Relay the body chunk by chunk as it arrives (a started response), observing each.

        `sent`: body bytes that already went out with the head; they are observed first.
        """
        await self.stream_on(upstream, self.observer_for(upstream, sent))

    def observer_for(self, upstream: UpstreamResponse, sent: bytes = b"") -> BodyObserver:
        """The observer of a streamed body, shown `sent` (what went out with the head); what was
        recorded so far is handed on."""
        observer = self._observer(upstream, sse=self.sse)
        if sent:
            observer.feed(sent)
        self._flush()
        return observer

    async def stream_on(self, upstream: UpstreamResponse, observer: BodyObserver) -> None:
        """`stream` from here on, `observer` having seen what went out before."""
        ctx, client = self.ctx, self.client
        sse = self.sse
        if sse:
            ctx.open_streams += 1
        cut: UpstreamError | None = None
        gone: str | None = None
        try:
            async for chunk in upstream.chunks():
                try:
                    await client.write(chunk)
                except ClientGone as exc:
                    gone = exc.outcome
                observer.feed(chunk)
                self._flush()
                if gone is not None:
                    break
        except UpstreamError as exc:
            cut = exc
        finally:
            if sse:
                ctx.open_streams -= 1
        await self._body_ended(body_end(upstream_cut=cut is not None, client_gone=gone), observer, cut)

    async def _body_ended(self, end: BodyEnd, observer: BodyObserver, cut: UpstreamError | None) -> None:
        """Carry out how the body's end ends the exchange (`body_end` decides)."""
        if end.finish_client:
            self._observed(observer)
            self._flush()
            await self._end(end.outcome)  # the upstream connection, read to its end, goes back to the pool
            return
        self._broken_off(end, observer, cut)

    def streamed(self, observer: BodyObserver, chunks: Iterable[bytes], *, flush: bool = True) -> None:
        """Chunks went out to the client: observe them, and hand what was seen on (`flush` False: the
        exchange ends at once, and its end hands them on)."""
        for chunk in chunks:
            observer.feed(chunk)
        if flush:
            self._flush()

    def body_ended_now(
        self, end: BodyEnd, observer: BodyObserver, cut: UpstreamError | None, finish: Callable[[], None]
    ) -> None:
        """`_body_ended` for a client whose response `finish` ends at once: nothing waits, so what was
        recorded goes to the sink with the exchange's end, in one batch."""
        if not end.finish_client:
            self._broken_off(end, observer, cut)
            return
        self._observed(observer)
        if self.ended:
            return
        outcome = end.outcome
        try:
            finish()
        except ClientGone as exc:
            outcome = outcome or exc.outcome
        self._released(outcome)

    def _broken_off(self, end: BodyEnd, observer: BodyObserver, cut: UpstreamError | None) -> None:
        """The body ended early (upstream cut, client gone): close both as `end` says, and record it.

        An upstream that closes after a known-length head and before any of its body has sent the
        client nothing yet (the head waits for the body's first bytes): the client gets the 502 of an
        upstream that closed before its head, and the records say so, never the head it did not get.
        """
        stalled = cut is not None and cut.kind == BODY_STALLED
        if cut is not None and end.cut_client and self.client.withdraw_head():
            if stalled:  # nothing went out: the client gets the 504 of an upstream too slow to answer
                self._close_upstream()
                opened = self.opened
                request_id = opened.request_id if opened is not None else None
                self._fault(BODY_STALLED, str(cut), request_id, outcome="upstream_timeout")
                return
            self._closed_after_head(cut)
            return
        if cut is not None:
            observer.finish()
            self._fault_line(BODY_STALLED if stalled else "cut", _describe(cut))
        else:
            observer.give_up()
        if observer.not_inspected is not None:
            self.not_inspected(observer.not_inspected)
        self._close_upstream()
        if end.cut_client:
            self.client.cut()
        self._finish(end.outcome)

    def _closed_after_head(self, cut: UpstreamError) -> None:
        """The upstream closed after its head and before its body: 502 `upstream_bad_response`, the
        head it sent named in the answer's detail. The server's head stays recorded as taken; the
        502's head recorded after it replaces it as the one the client got."""
        upstream = self.upstream
        said = f"HTTP {upstream.status}" if upstream is not None else "a response head"
        if upstream is not None and upstream.content_length is not None:
            said += f" with Content-Length: {upstream.content_length}"
        self._close_upstream()
        detail = f"it sent {said}, then none of the body ({_describe(cut)})"
        opened = self.opened
        self._fault("bad_response", detail, opened.request_id if opened is not None else None)

    def _observed(self, observer: BodyObserver) -> None:
        """The body ended: the observer reports its last messages, and says if it could not look."""
        observer.finish()
        if self.unjudged is not None:
            (route, status), self.unjudged = self.unjudged, None
            self.doubt(route, status, observer.json_body)
        if observer.not_inspected is not None:
            self.not_inspected(observer.not_inspected)
        if observer.problem:
            _LOG.info("body_unfinished", exchange=self.exchange, problem=observer.problem)

    def not_inspected(self, reason: str) -> None:
        """The body, or the rest of it, went to the client unread: the exchange records why, so a
        request it may have answered is not taken for one the server left unanswered."""
        self._emit(BodyNotInspected(self.ctx.observations.now(), self.exchange, reason))
        _LOG.info("body_not_inspected", exchange=self.exchange, reason=reason)

    def _observer(self, upstream: UpstreamResponse, *, sse: bool) -> BodyObserver:
        sink, exchange, emit = self.ctx.observations, self.exchange, self._emit
        observer = self.observer = BodyObserver(
            sse=sse,
            sink=self._observe_upstream,
            on_extra_bytes=lambda size: emit(BytesOut(sink.now(), exchange, size)),
            channel=_GET_SSE if self.client.method == "GET" else _SSE,
            on_event_id=lambda sse_id: emit(EventIdSeen(sink.now(), exchange, sse_id)),
            declared_size=upstream.content_length,
            limit=self.ctx.inspect_limit,
            encoding=self.encoding,
            hold=self.ctx.responses.hold(),
        )
        return observer

    # -- observation ----------------------------------------------------------------------------

    def _emit(self, obs: Observation) -> None:
        """Keep an observation for the next flush (after the end, straight to the sink)."""
        if self.ended:
            self.ctx.observations.emit(obs)
        else:
            self.batch.append(obs)

    def _flush(self) -> None:
        if self.batch:
            batch, self.batch = self.batch, []
            self.ctx.observations.emit_all(batch, self.exchange)  # positional: keywords cost more

    def _observe_client(self, route: Route) -> None:
        sink = self.ctx.observations
        messages = route.body.messages
        if route.body.parse_error and route.raw.strip():
            problem = route.body.parse_error
            self._emit(InvalidBody(sink.now(), self.exchange, problem, len(route.raw), route.raw))
            return
        if len(messages) == 1:  # the common body: one message, the whole size
            self._emit(MessageSeen(sink.now(), self.exchange, messages[0], len(route.raw), _TO_SERVER, _POST))
            return
        for msg, size in zip(messages, member_sizes(messages, len(route.raw)), strict=True):
            self._emit(MessageSeen(sink.now(), self.exchange, msg, size, _TO_SERVER, _POST))

    def _observe_upstream(self, msg: Message, size: int, channel: Channel, sse_id: str | None) -> None:
        sink = self.ctx.observations
        self._emit(MessageSeen(sink.now(), self.exchange, msg, size, _TO_CLIENT, channel, _BOTH, sse_id))

    # -- endings --------------------------------------------------------------------------------

    def _answer(
        self, status: int, body: dict[str, object] | None, headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        """Answer the client with a whole response the proxy made (a refusal or a gateway error)."""
        data = dumps(body) if body is not None else b""
        sink = self.ctx.observations
        content_type = "application/json" if body is not None else None
        head = answer_headers(content_type, headers)
        self._emit(ResponseHeadSeen(sink.now(), self.exchange, status, content_type, head))
        if body is not None:
            msg = parse_body(data).first
            if msg is not None:
                self._emit(
                    MessageSeen(
                        sink.now(),
                        self.exchange,
                        msg,
                        len(data),
                        _TO_CLIENT,
                        _JSON,
                        _CLIENT,  # the proxy's own answer, never seen by the upstream
                        note="answered by the proxy",
                    )
                )
        self.client.respond(status, data, content_type, headers)

    def _fault(
        self,
        reason: str,
        detail: str,
        request_id: RequestId | None,
        *,
        retry_after: int | None = None,
        outcome: str | None = None,
    ) -> None:
        """The upstream failed before anything of its answer went out: the client gets a gateway error.
        The exchange ends with `outcome`, by default the fault's (`upstream_<reason>`)."""
        self._fault_line(reason, detail)
        answer = fault_answer(reason, detail, request_id)
        if answer is not None:
            extra = (("Retry-After", str(retry_after)),) if retry_after is not None else ()
            self._answer(answer.status, answer.body, extra)
        self._finish(outcome or fault_outcome(reason))

    def _fault_line(self, reason: str, detail: str) -> None:
        """Warn that the upstream failed this exchange, naming the upstream: at most one line a second
        for each reason, counting the rest (an upstream that is down fails every request, and each
        one's exchange line names it anyway)."""
        also = self.ctx.floods.due(f"upstream_fault {reason}", time.monotonic())
        if also is None:
            return
        fields = {"also_unlogged": also} if also else {}
        upstream = self.ctx.router.endpoint
        _LOG.warning(
            "upstream_fault",
            exchange=self.exchange,
            upstream=upstream,
            reason=reason,
            detail=detail,
            **fields,
        )

    def _gone(self) -> None:
        """The client left: the upstream request is dropped with it."""
        self._close_upstream()
        self._finish("client_disconnected")

    async def _end(self, outcome: str | None) -> None:
        if self.ended:
            return
        try:
            await self.client.finish()
        except ClientGone as exc:
            outcome = outcome or exc.outcome
        self._released(outcome)

    def _released(self, outcome: str | None) -> None:
        """The client's response ended: the upstream connection goes back, and the exchange ends."""
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            self.trailers = upstream.trailers
            upstream.release()
        self._finish(outcome)

    def abandon(self, outcome: str = "client_disconnected") -> None:
        """The exchange was given up (client gone, shutdown): drop the upstream request, record it,
        with the body bytes relayed so far."""
        if self.observer is not None and not self.ended:
            self.observer.give_up()
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
        if self.observer is not None:  # however the exchange ended, what its observer kept is given back
            self.observer.stop()
        if self.unjudged is not None:  # the body never went by whole: its status alone decides
            (route, status), self.unjudged = self.unjudged, None
            self.doubt(route, status, None)
        if self.counted:
            self.counted = False
            self.ctx.relaying -= 1
        self._close(outcome)

    def _close(self, outcome: str | None) -> None:
        sink = self.ctx.observations
        batch, self.batch = self.batch, []
        if self.origin is not None:  # a request whose answer never came: its rewrite still said
            batch += self.origin.take()
        trailers = recorded(self.trailers) if self.trailers else None
        closed = ExchangeClosed(sink.now(), self.exchange, outcome, trailers)
        summary = sink.close(closed, batch, whole=True)
        if summary is not None:
            traffic_line(_LOG, "exchange", summary.log_fields("passthrough"), summary.level)


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text[:300]
