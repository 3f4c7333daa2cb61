"""The lean front server: client connections on asyncio protocols, read by the HTTP/1.1 core.

Why not aiohttp's server: it spends more CPU on each request before and after a handler runs than
everything else the proxy does for a small `tools/call`. An exchange needs a request parsed and a
response written back, not aiohttp's request objects, middlewares and writers, so this server reads
requests itself and serves every one of them: each is classified and routed once, then given through
`FrontSide` (the `ClientSide` of the exchange) to the pass-through relay or to a bridge's driver.
Requests on one connection are served one at a time, in order, whatever their route; a connection's
deadlines and limits are the same whatever it carried before.

The HTTP/1.1 core (`proxy.framing.h1.RequestReader`, httptools inside) turns each read into events:
requests read to their end, a body cut over its limit, a refusal. Bounded like aiohttp's server:
request line and headers (431 past `MAX_HEAD_BYTES`; trailers count toward it and are dropped, never
merged into the headers), bodies (413 past the configured limit, answered as soon as the limit is
crossed; a chunked body's framing and extensions count toward it), requests queued behind one in
progress (reading pauses past `MAX_QUEUED` requests or `max_pipelined_bytes`), client connections
(503 past `max_client_connections`), streams one client address holds open (429 past
`max_streams_per_client`: no deadline ends a stream), big body bytes held across all clients (503 past
`max_body_bytes_in_flight`, counted from a request's head by its declared length, three times over
once a bridge takes it, and freed once it is answered; bodies under `COUNTED_BODY` are not counted).
Every wait on a client has a deadline (`head_read_timeout`, `body_read_timeout`,
`keepalive_timeout`), kept by one periodic sweep over the connections rather than a timer per
request, so the hot path only notes the time.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import itertools
import time
from collections import Counter, deque
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, cast

from proxy import SERVER_SOFTWARE
from proxy.config import Settings
from proxy.engine.gate.drain import RETRY_AFTER_S, continues_work, draining_refusal
from proxy.flows.observations import PROXY_STOPPING
from proxy.framing.classify import Rejection, Route, peek_id
from proxy.framing.h1 import MAX_HEAD_BYTES as MAX_HEAD_BYTES
from proxy.framing.h1 import MAX_HEADERS as MAX_HEADERS
from proxy.framing.h1 import BodyTooLarge, EndOfRequest, Refusal, Request, RequestReader
from proxy.framing.h1 import encode_response_head as _head
from proxy.framing.status import gateway_error, too_large
from proxy.framing.target import Target, TargetProblem, check_target, refuse_target
from proxy.logs import get_logger
from proxy.transport.channel_client import serve_outcome
from proxy.transport.client_side import ClientGone
from proxy.transport.client_slots import ClientSlots
from proxy.transport.faults import gated_relay
from proxy.transport.pushed_stream import PushedStream
from proxy.transport.relay import PassthroughRelay, RelayContext, Started
from proxy.transport.routing import ProbeFirst, Router, classify_request
from proxy.transport.sse_clients import SseClients
from proxy.transport.unreadable import cause_of, log_unreadable
from proxy.transport.upstream_pool import PendingHead
from proxy.wire.jsonrpc import RequestId, dumps
from proxy.wire.mcp import LISTEN

MAX_QUEUED = 16
"""Complete requests waiting behind the one being served before reading from the client pauses."""

SWEEP_MAX = 1.0
"""Longest pause between two sweeps for expired waits; shorter timeouts sweep more often."""
TIMEOUT_LOG_EVERY = 1.0
"""Seconds between two `client_timeout` warnings of one setting (the refusals between are counted)."""

COUNTED_BODY = 64 * 1024
"""Bodies at least this big count toward `max_body_bytes_in_flight`: the bound is there for the big
ones, and smaller ones, bounded by the connection cap and `max_pipelined_bytes`, cost the traffic path
nothing for it."""

BRIDGED_COPIES = 2
"""Copies of a counted body a bridge holds besides the bytes read (the decoded value and the
message re-encoded for the other side): what a bridged body counts toward `max_body_bytes_in_flight`
on top of itself."""

LINGER = 1.0
"""Seconds a refused connection (503, over the connection cap) is given to read its answer and leave."""


class _Request(Request):
    """One request as read from the client (`proxy.framing.h1.Request`), and what serving it adds."""

    __slots__ = ("charged", "continue_sent", "refusal")

    def __init__(self, began: float) -> None:
        super().__init__(began)
        self.refusal: Rejection | None = None
        """Answered without going upstream (its body is not read): a body over the limit, say."""
        self.charged = 0
        """Its body bytes counted in `FrontServer.body_bytes_held` (declared at its head, or as read)."""
        self.continue_sent = False
        """The 100 for `continue_wanted` went out (once the responses before it had)."""


class FrontServer:
    """Listens for clients and serves every MCP request, pass-through and bridged."""

    def __init__(self, settings: Settings, relays: RelayContext, router: Router) -> None:
        self.settings = settings
        self.relays = relays
        self.router = router
        self._ids = itertools.count(1)
        self._connection_ids = itertools.count(1)
        self.connections: set[FrontConnection] = set()
        self.refusing: set[FrontConnection] = set()
        """Connections refused over the cap, still given a moment to read their 503."""
        self.timeouts: Counter[str] = Counter()
        """Requests refused 408 because the client was too slow, by the setting whose wait ran out."""
        self.unreadable: Counter[str] = Counter()
        """Requests the HTTP/1.1 reader refused (400, 431, 501, 505), by cause (`transport.unreadable`)."""
        self.over_cap: Counter[str] = Counter()
        """Connections refused past `max_client_connections`: `answered` (a 503), or `cut` (past as many
        refusals still lingering as the cap itself)."""
        self.body_bytes_held = 0
        """Body bytes of the requests read or being read and not yet answered, across all clients: what
        `max_body_bytes_in_flight` bounds."""
        self.floods = relays.floods
        """When each kind of refusal's last line was written, and the refusals since then that wrote
        none (`unlogged_since_said`); the relays' own floods are summed up in the same table."""
        per_client = settings.streams_per_client
        self.streams = ClientSlots("max_streams_per_client", "streams", per_client, self.floods)
        """The long-lived streams each client address holds (GET, `subscriptions/listen`): no deadline
        ends them, so one address gets a share of the connections, not all of them."""
        self.server: asyncio.Server | None = None
        self.draining = False
        """A SIGTERM drain is under way: new work is refused 503, and every connection closes once its
        response ends (`begin_drain`)."""
        self.sse_clients: SseClients | None = None
        """The HTTP+SSE (2024-11-05) clients' paths and sessions (None: not served)."""
        self.now: Callable[[], float] = time.monotonic
        self._sweep: asyncio.TimerHandle | None = None
        shortest = min(settings.head_read_timeout, settings.body_read_timeout, settings.keepalive_timeout)
        self.sweep_every = min(SWEEP_MAX, shortest / 4)

    async def start(self, host: str, port: int) -> int:
        """Listen (port 0 picks a free one); returns the bound port."""
        loop = asyncio.get_running_loop()
        self.now = loop.time
        self.server = await loop.create_server(
            lambda: FrontConnection(self), host, port, reuse_address=True, backlog=4096
        )
        self._sweep = loop.call_later(self.sweep_every, self.sweep)
        sockets = self.server.sockets
        return int(sockets[0].getsockname()[1]) if sockets else port

    def unlogged_since_said(self, kind: str) -> int | None:
        """One refusal of this kind: None when a line for it was written within `TIMEOUT_LOG_EVERY`
        seconds (this one is counted for the next line), else how many went unlogged since (a flood
        of refusals must not flood the log; `/metrics` counts every one)."""
        return self.floods.due(kind, self.now(), every=TIMEOUT_LOG_EVERY)

    def streams_refused(self) -> dict[str, int]:
        """Streams refused since the start, by the setting that refused them (`/metrics`)."""
        counts = {self.streams.setting: self.streams.refused}
        if self.sse_clients is not None:
            counts.update(self.sse_clients.refused)
        return counts

    def full(self) -> bool:
        """As many client connections are open as `max_client_connections` allows."""
        return len(self.connections) >= self.settings.max_client_connections

    def next_exchange(self) -> str:
        """A fresh exchange id (unique within this process), pass-through and bridged alike."""
        return f"x{next(self._ids)}"

    def next_connection(self) -> str:
        """A fresh client connection id (unique within this process, never reused)."""
        return f"k{next(self._connection_ids)}"

    def sweep(self) -> None:
        """Close every connection that waited on its client past the deadline for what it waits for."""
        # The next sweep is due whatever happens below: a failure here must not end every deadline.
        self._sweep = asyncio.get_running_loop().call_later(self.sweep_every, self.sweep)
        now = self.now()
        for conn in list(self.connections):
            try:
                conn.expire(now)
            except Exception:
                get_logger().exception("front_sweep_failed")
                conn.abort()

    def begin_drain(self) -> None:
        """A drain begins: keep listening, close idle connections, and from now on serve only requests
        that carry on a conversation under way (`proxy.engine.gate.drain`), each response ending its
        connection (`Connection: close`).

        Listening goes on because a client's next step in a conversation often needs a new connection
        (its others are busy with a response stream): its answer to a server's in-flight request, a
        request its SDK makes before reporting a result, its DELETE. Refusing the connection would
        cut the very conversation the drain waits for.
        """
        self.draining = True
        for conn in list(self.connections):
            if conn.idle:
                conn.close()

    def open_connections(self) -> int:
        """Client connections open now (a drain ends when they are gone, or at its grace)."""
        return len(self.connections)

    def stop_listening(self) -> None:
        """Take no new connections (the proxy is stopping); open ones go on."""
        if self.server is not None:
            self.server.close()

    async def close(self, grace: float) -> int:
        """Close idle connections now, give busy ones `grace` seconds, then cut them; how many busy
        ones were cut (a response still going out)."""
        self.stop_listening()
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for conn in list(self.connections):
            if not conn.busy:
                conn.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        # Exchanges served without a task have nothing to await: a shutdown polls them.
        while any(conn.busy for conn in self.connections) and loop.time() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        cut = sum(conn.busy for conn in self.connections)
        for conn in [*self.connections, *self.refusing]:
            conn.abort(PROXY_STOPPING)
        if self.server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), timeout=grace)
            self.server = None
        return cut


class FrontConnection(asyncio.Protocol):
    """One client connection on the lean server: requests in order, one served at a time."""

    def __init__(self, front: FrontServer) -> None:
        self.front = front
        self.name = front.next_connection()
        """This connection's id: recorded with each exchange it carries (`ExchangeOpened.connection`),
        and what the bridges know the connection by (`ClientSide.connection`)."""
        self.settings = front.settings
        self.reader = RequestReader(front.settings.max_body_bytes, front.now, _Request)
        """The HTTP/1.1 core reading this connection's requests (and keeping their bounds)."""
        self.transport: asyncio.Transport | None = None
        self.queue: deque[_Request] = deque()
        self.task: asyncio.Task[None] | None = None
        self.relay: PassthroughRelay | None = None
        """The exchange served without a task, waiting for its upstream head or streaming SSE."""
        self.pending: PendingHead | None = None
        self.stream: PushedStream | None = None
        """The SSE body of `relay`, going out from the upstream's reads."""
        self.closed = False
        self.cut_as = "client_disconnected"
        """What an exchange the connection's close ends records (`abort` says when it is not the client)."""
        """What an exchange cut with the connection records (the proxy's stop names itself)."""
        self.served = 0
        self.waiting_since = 0.0
        """Loop time the connection last began to wait on its client (connected, or a response ended)."""
        self._queued_bytes = 0
        self.held = 0
        """This connection's share of `FrontServer.body_bytes_held`, freed whole when it closes."""
        self._drain: asyncio.Future[None] | None = None
        self._reading_paused = False
        self._linger: asyncio.TimerHandle | None = None
        self._refusal_due: tuple[int, str] | None = None
        """Bytes the client sent behind its requests cannot be read: answered once those requests are."""
        self._stream_of: str | None = None
        """The address whose `FrontServer.streams` slot the request being served holds (a stream's)."""

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's
        if self.front.full():
            self._refuse_over_cap()
            return
        self.waiting_since = self.front.now()
        self.front.connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self.closed or self._refusal_due is not None:
            return
        events = self.reader.feed(data)
        for event in events:
            if isinstance(event, EndOfRequest):
                self._queue(event.request)
            elif isinstance(event, BodyTooLarge):
                self._dispatch_early(event.request)
            elif isinstance(event, Refusal):
                self._refuse_in_turn(event.status, event.reason, data)
                break
            elif (event.request.length or 0) >= COUNTED_BODY:
                self._hold_declared(event.request)
            # A RequestHead needs nothing at once: a 100 it asks for goes out from `_next`, below.
        events.clear()
        # Served once the whole chunk is parsed, never from inside the parser: a request served without
        # a task may end, and the next begin, before the parser returns.
        self._next()

    @property
    def current(self) -> _Request | None:
        """The request being read (its head or its body), if one has begun."""
        return self.reader.current

    def _queue(self, req: _Request) -> None:
        """A request read to its end waits its turn; reading pauses while too much is queued."""
        if req.too_large:  # counted over the limit on the wire in the read that ended it
            req.refusal = _too_large(req, self.settings.max_body_bytes)
        elif (
            req.size >= COUNTED_BODY
            and req.size > req.charged
            and req.refusal is None
            and not self._hold(req, req.size - req.charged)
        ):
            req.refusal = self._over_bodies_in_flight(req)  # a chunked body, known only now
        self.queue.append(req)
        self._queued_bytes += req.size
        if (
            self.transport is not None
            and not self._reading_paused
            and (len(self.queue) > MAX_QUEUED or self._queued_bytes > self.settings.max_pipelined_bytes)
        ):
            self._reading_paused = True
            self.transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.reader.release()
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
            self.front.refusing.discard(self)
        self.front.connections.discard(self)
        self.front.body_bytes_held -= self.held
        self.held = 0
        if self._stream_of is not None:
            self._give_back_stream()
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_exception(ClientGone("connection closed", self.cut_as))
        if self.task is not None:
            self.task.cancel()
        self._drop_relay()
        self.front.router.connection_closed(self.name)

    def _drop_relay(self) -> None:
        """The client left while its request waited for the upstream's head, or while its SSE stream
        went out without a task: drop the upstream request."""
        relay, self.relay = self.relay, None
        pending, self.pending = self.pending, None
        stream, self.stream = self.stream, None
        if pending is not None:
            pending.drop()
        if stream is not None:
            stream.abandon(self.cut_as)
        elif relay is not None:
            relay.abandon(self.cut_as)

    @property
    def idle(self) -> bool:
        """Nothing is being served, queued or read: a keep-alive connection waiting for a request."""
        return not self.busy and not self.queue and self.current is None and not self.closed

    @property
    def busy(self) -> bool:
        """A request is being served (in a task, or without one: waiting for its head, or streaming)."""
        return self.task is not None or self.relay is not None

    def pause_writing(self) -> None:
        if self._drain is None:
            self._drain = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)

    # deadlines
    def expire(self, now: float) -> None:
        """Close the connection if it has waited on its client for too long (called by the sweep).

        Only waits on the client count: while a request is served, the upstream's timeouts apply.
        The deadline runs from when the client became due to send: for a head, its first byte (or the
        end of the previous response, if it began earlier); for a body, the end of its head.
        """
        if self.busy or self.closed or self.queue:
            return
        settings = self.settings
        req = self.current
        if req is None:
            limit = settings.keepalive_timeout if self.served else settings.head_read_timeout
            if now - self.waiting_since > limit:
                self.close()  # nothing was begun: a plain close, as for any idle keep-alive connection
        elif not req.method:
            if now - max(req.began, self.waiting_since) > settings.head_read_timeout:
                seconds = settings.head_read_timeout
                self._timed_out("head_read_timeout", seconds)
                self._refuse(408, f"request head not received within {seconds} s (head_read_timeout)")
        elif now - max(req.head_done, self.waiting_since) > settings.body_read_timeout:
            seconds = settings.body_read_timeout
            self._timed_out("body_read_timeout", seconds)
            status, body = gateway_error(
                408,
                peek_id(b"".join(req.body)),
                f"request body not received within {seconds} s (body_read_timeout)",
                {"limit": seconds, "setting": "body_read_timeout"},
            )
            self._refuse(status, dumps(body).decode(), "application/json")

    def _timed_out(self, setting: str, seconds: float) -> None:
        """A slow client is refused 408: say who, and which wait ran out (no exchange records it).

        At most one line per setting every `TIMEOUT_LOG_EVERY` seconds, counting those it stands for:
        a flood of slow clients must not flood the log (`/metrics` counts every one).
        """
        front = self.front
        front.timeouts[setting] += 1
        also = front.unlogged_since_said(setting)
        if also is None:
            return
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        fields: dict[str, object] = {
            "peer": _peer(peer),
            "status": 408,
            "setting": setting,
            "seconds": seconds,
        }
        if also:
            fields["also_unlogged"] = also
        get_logger().warning("client_timeout", **fields)

    # serving
    def _hold_declared(self, req: _Request) -> None:
        """Count a body by its declared length from its head on; one that would pass
        `max_body_bytes_in_flight` is refused (503) without being read on."""
        length = cast(int, req.length)
        if length > self.settings.max_body_bytes or self._hold(req, length):
            return  # over max_body_bytes: refused 413 as it is read
        req.refusal = self._over_bodies_in_flight(req)
        if self.reader.current is req:  # still coming: read no more of it
            self.reader.stop(req)
            self._dispatch_early(req)
        # else it ended in this read: its EndOfRequest, next, queues it with its refusal

    def _hold(self, req: _Request, size: int) -> bool:
        """Count `size` more body bytes for `req` if `max_body_bytes_in_flight` allows them."""
        front = self.front
        if front.body_bytes_held + size > self.settings.max_body_bytes_in_flight:
            return False
        front.body_bytes_held += size
        self.held += size
        req.charged += size
        return True

    def _hold_bridged(self, req: _Request) -> bool:
        """Count a bridged body's copies too (`BRIDGED_COPIES`), if `max_body_bytes_in_flight` allows
        them; a body alone in flight is always let through, as it was when it was read."""
        extra = BRIDGED_COPIES * req.charged
        if self.front.body_bytes_held == req.charged:  # nothing else held: the bound cannot be kept lower
            front = self.front
            front.body_bytes_held += extra
            self.held += extra
            req.charged += extra
            return True
        return self._hold(req, extra)

    def _release(self, req: _Request) -> None:
        """An answered request's body bytes no longer count (its connection's close frees the rest)."""
        freed = min(req.charged, self.held)
        req.charged = 0
        self.held -= freed
        self.front.body_bytes_held -= freed

    def _over_bodies_in_flight(self, req: _Request) -> Rejection:
        """503 with Retry-After for a body the bound has no room for now, naming the setting (logged at
        most once a second, like the other refusals of a flood)."""
        limit = self.settings.max_body_bytes_in_flight
        front = self.front
        also = front.unlogged_since_said("max_body_bytes_in_flight")
        if also is not None:
            get_logger().warning(
                "request_bodies_refused",
                limit=limit,
                held=front.body_bytes_held,
                size=req.length if req.length is not None else req.size,
                also_unlogged=also or None,
                hint="raise max_body_bytes_in_flight if the proxy has the memory for these bodies",
            )
        status, body = gateway_error(
            503,
            peek_id(req.body[0] if req.body else b""),
            f"the proxy holds its limit of {limit} bytes of request bodies in flight "
            "(max_body_bytes_in_flight); retry shortly",
            {"limit": limit, "setting": "max_body_bytes_in_flight"},
        )
        return Rejection(status, body, "bodies in flight", RETRY_AFTER_S)

    def _dispatch_early(self, req: _Request) -> None:
        """A body over the limit: answer now (413), read no more, close after the answer."""
        limit = self.settings.max_body_bytes
        if (
            req.refusal is None and req.size <= limit
        ):  # cut by its wire count or declared length; a decoded body over it is
            req.refusal = _too_large(req, limit)  # refused by `classify`, after the target's checks
        if self.transport is not None:
            self.transport.pause_reading()
            self._reading_paused = True
        self.queue.append(req)

    def _next(self) -> None:
        if self.busy or self.closed:
            return
        if not self.queue:
            if self._refusal_due is not None:
                self._refuse(*self._refusal_due)
                return
            if self._reading_paused and self.transport is not None:
                self._reading_paused = False
                self.transport.resume_reading()
            self._send_continue()
            return
        req = self.queue.popleft()
        self._queued_bytes -= req.size
        checked = check_target(req.target.decode("latin-1"), req.hosts, http10=req.http10)
        side = FrontSide(self, req, checked if isinstance(checked, Target) else None)
        try:
            self._serve_now(req, side, checked if isinstance(checked, TargetProblem) else None)
        except Exception:
            self._failed(side)

    def _serve_now(self, req: _Request, side: FrontSide, problem: TargetProblem | None) -> None:
        """Route the request once, then serve it: without a task when it can be (the hot path).

        A pass-through request with a warm upstream connection is sent at once, and its answer handled
        in a done callback; the relay does the rest (`PassthroughRelay.answered`), and an SSE answer
        streams from the upstream's reads (`PushedStream`). Anything slower (a probe due, no idle
        connection, another streamed body, a client reading an SSE stream slowly, a bridged request)
        continues in a task, which the requests read behind it wait for.
        """
        front = self.front
        raw = req.body[0] if len(req.body) == 1 else _joined(req)
        outcome: Route | Rejection
        if req.refusal is not None:
            outcome = req.refusal
        elif problem is not None:
            outcome = refuse_target(problem, req.method, raw)
        else:
            routed = self._route(side, raw)
            if routed is None:
                return  # served already: an HTTP+SSE client's request, or new work while draining
            outcome = routed
        router = front.router
        if isinstance(outcome, Route) and (refusal := router.off_endpoint(outcome)) is not None:
            relay = PassthroughRelay(front.relays, side, front.next_exchange())
            relay.refuse_route(outcome, refusal, received=len(raw))
            self._served(side)
            return
        if not req.early and isinstance(outcome, Route):
            choice = router.choose(outcome)
            if isinstance(choice, ProbeFirst):
                self._run(side, self._probe_then_serve(side, outcome, len(raw)))
                return
            if choice is None:
                pass
            elif req.charged and not self._hold_bridged(req):
                outcome = self._over_bodies_in_flight(req)  # refused below, as the relay refuses
            else:
                self._run(side, choice.serve(side, front.next_exchange(), outcome))
                return
        relays, exchange = front.relays, front.next_exchange()
        if relays.gate is not None:  # fault rules are in force: the one check the gate costs
            gated = gated_relay(relays, side, exchange, outcome)
            if gated is not None:
                route = gated.open(outcome, received=len(raw))
                if route is None:
                    self._served(side)
                else:
                    self._run(side, gated.relay(route))
                return
        relay = PassthroughRelay(relays, side, exchange)
        # The upstream request goes first: recording it can wait, the upstream should not.
        pending = relay.send_now(outcome) if isinstance(outcome, Route) else None
        if pending is not None:  # held from now on: a failure below drops it with the connection
            self.relay, self.pending = relay, pending
        route = relay.open(outcome, received=len(raw))
        if route is None:  # refused: nothing went upstream
            self._served(side)
            return
        if pending is None:
            self._run(side, relay.relay(route))
            return
        pending.future.add_done_callback(lambda _f: self._answered(relay, route, side, pending))

    def _route(self, side: FrontSide, raw: bytes) -> Route | Rejection | None:
        """Classify a readable request; None once it is served here (an HTTP+SSE client's request, or
        new work refused while draining). A stream first takes one of its address's slots."""
        front, method = self.front, side.method
        path = side.path_qs.split("?", 1)[0]
        sse = front.sse_clients
        if method == "GET" and self._streams_at(path):
            refusal = self._take_stream(side, None)
            if refusal is not None:
                return refusal
        new_session = False
        if sse is not None and sse.wants(method, path, side.raw_query, side.headers):
            # While draining, a GET opens a new HTTP+SSE session: new work, refused below.
            new_session = method == "GET"
            if not (front.draining and new_session):
                self._serve_sse_client(sse, side, raw)
                return None
        outcome = classify_request(self.settings, method, path, side.headers, raw)
        if front.draining and isinstance(outcome, Route) and (new_session or not continues_work(outcome)):
            self._refuse_draining(side, outcome, len(raw))
            return None
        if method == "POST" and isinstance(outcome, Route) and outcome.method == LISTEN:
            return self._take_stream(side, outcome.request_id) or outcome
        return outcome

    def _streams_at(self, path: str) -> bool:
        """A GET to `path` may open a stream: one to the MCP endpoint, or an HTTP+SSE client's stream
        path. A GET anywhere else (OAuth metadata, say) is answered, never held open, so it takes no
        stream slot and is served to an address at its share too."""
        front = self.front
        if path in front.router.upstream.endpoint_paths:
            return True
        sse = front.sse_clients
        return sse is not None and path == sse.stream_path

    def _take_stream(self, side: FrontSide, ident: RequestId | None) -> Rejection | None:
        """A stream holds one of its address's `max_streams_per_client` slots until it is served;
        None once it has one, else the 429 that answers it. The refused connection closes after its
        answer: left open, it would hold a connection slot until `keepalive_timeout` for nothing."""
        streams, peer = self.front.streams, side.peer
        if streams.take(peer):
            self._stream_of = peer
            return None
        side.req.keep_alive = False
        return streams.refusal(peer, ident, self.front.now())

    def _give_back_stream(self) -> None:
        """The stream ended (answered, or its connection gone): its address's slot is free again."""
        peer, self._stream_of = self._stream_of, None
        if peer is not None:
            self.front.streams.give_back(peer)

    def _refuse_draining(self, side: FrontSide, route: Route, received: int) -> None:
        """New work while draining: recorded, and answered 503 with `Retry-After` (the connection closes)."""
        front = self.front
        refusal = draining_refusal(route, self.settings.drain_grace)
        relay = PassthroughRelay(front.relays, side, front.next_exchange())
        relay.refuse_draining(route, refusal, RETRY_AFTER_S, received=received)
        self._served(side)

    def _serve_sse_client(self, sse: SseClients, side: FrontSide, raw: bytes) -> None:
        """An HTTP+SSE client's stream (in a task, for as long as it is open) or one of its messages."""
        if side.method == "GET":
            self._run(side, sse.stream(side))
            return
        sse.message(side, raw)
        self._served(side)

    def _answered(self, relay: PassthroughRelay, route: Route, side: FrontSide, pending: PendingHead) -> None:
        """The upstream's head (or its failure) for a request served without a task.

        An SSE body goes on without a task too (`PushedStream`): its events go out from the upstream
        connection's reads. Any other body streams in a task.
        """
        if self.relay is not relay:
            return  # abandoned meanwhile (the client left)
        self.pending = None
        try:
            started = relay.answered(route, pending)
            if started is not None and relay.sse:
                self.stream = self._pushed(relay, side, started)  # the relay stays held (`busy`)
        except Exception:
            self.relay = self.stream = None
            relay.abandon("proxy_error")
            self._failed(side)
            return
        if self.stream is not None:
            self.stream.start()  # it may end here already (the whole rest had arrived)
            return
        self.relay = None
        if started is not None:
            self._run(side, relay.stream_started(started))
            return
        self._served(side)

    def _pushed(self, relay: PassthroughRelay, side: FrontSide, started: Started) -> PushedStream:
        """The rest of an SSE body, to stream from the upstream's reads; its end frees the connection."""

        def ended() -> None:
            self.relay = self.stream = None
            self._served(side)

        def slow(rest: Coroutine[Any, Any, None]) -> None:
            self.relay = self.stream = None
            self._run(side, rest)

        def failed() -> None:
            self.relay = self.stream = None
            self._failed(side)

        return PushedStream(relay, side, started, on_end=ended, on_slow=slow, on_failure=failed)

    async def _probe_then_serve(self, side: FrontSide, outcome: Route, received: int) -> None:
        """A probe is due before this request can be routed: probe, then bridge, relay or refuse."""
        front = self.front
        await serve_outcome(front.router, front.relays, side, front.next_exchange, outcome, received)

    def _run(self, side: FrontSide, work: Coroutine[Any, Any, None]) -> None:
        """Continue serving the request in a task (the slow paths)."""
        self.task = asyncio.get_running_loop().create_task(self._serve(side, work))

    async def _serve(self, side: FrontSide, work: Coroutine[Any, Any, None]) -> None:
        try:
            await work
        except asyncio.CancelledError:
            self.task = None
            return
        except Exception:
            self.task = None
            self._failed(side)
            return
        self.task = None
        self._served(side)

    def _served(self, side: FrontSide) -> None:
        """One request answered: on to the next, or close when the response ended the connection."""
        side.flush()
        if side.req.charged:
            self._release(side.req)
        if self._stream_of is not None:  # a stream's slot (most requests hold none)
            self._give_back_stream()
        if not side.req.keep_alive or side.broken or (self.front.draining and not self.queue):
            self.close()  # while draining, even a response begun before the drain ends its connection
            return
        self.served += 1
        self.waiting_since = self.front.now()
        self._next()

    def _failed(self, side: FrontSide) -> None:
        """A bug while serving: answer 500 if nothing went out yet, and close the connection."""
        get_logger().exception("front_exchange_failed")
        if not side.started:
            side.respond(500, b"", None, ())
            side.flush()
        self.close()

    def _send_continue(self) -> None:
        """The 100 for the request being read, but never inside a response still going out before it."""
        req = self.current
        if req is None or not req.continue_wanted or req.continue_sent:
            return
        if self.busy or self.queue or self.closed:
            return  # a response still to come goes first: the 100 would land before it
        if self.transport is not None:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            req.continue_sent = True

    def _refuse_in_turn(self, status: int, reason: str, read: bytes) -> None:
        """Unreadable bytes behind requests read whole: those are answered first, then the refusal.

        What the client sent before the bytes the parser refused are requests like any other (a
        bridged call's stream may still be going out): nothing more is read, and the refusal goes out
        and the connection closes once every answer before it has. `read` is the read refused.
        """
        self._unreadable(status, reason, read)
        if not self.busy and not self.queue:
            self._refuse(status, reason)
            return
        self._refusal_due = (status, reason)
        if self.transport is not None and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()

    def _unreadable(self, status: int, reason: str, read: bytes) -> None:
        """Count a refusal of the HTTP/1.1 reader by its cause, and log it when a line is due: no
        exchange records it, and a client sending `https://` to this port sees only a TLS error."""
        front = self.front
        cause = cause_of(status, read)
        front.unreadable[cause] += 1
        also = front.unlogged_since_said(f"unreadable:{cause}")
        if also is not None:
            peer = self.transport.get_extra_info("peername") if self.transport is not None else None
            log_unreadable(_peer(peer), status, reason, cause, also)

    def _refuse(self, status: int, text: str, content_type: str = "text/plain; charset=utf-8") -> None:
        """A request the proxy cannot read: answer plainly and close (the stream cannot be resynced)."""
        self.closed = True
        if self.transport is None or self.busy:
            self.abort()
            return
        body = text.encode("utf-8", "replace")
        headers = [("Content-Type", content_type), ("Connection", "close")]
        head = _head(status, None, headers, len(body), False)
        self.transport.write(head + body)
        self._linger_after_answer()

    def _linger_after_answer(self) -> None:
        """Shut the write side after an answer that ends the connection, and discard what the client
        still sends until it leaves or `LINGER` ends: closing outright with its bytes unread would
        reset the connection and could destroy the answer before the client reads it (a client still
        sending an oversized head would see a reset, not its 431). Past as many lingering
        connections as `max_client_connections`, the connection is closed at once."""
        transport = self.transport
        assert transport is not None
        front = self.front
        if len(front.refusing) >= self.settings.max_client_connections or not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        if self._reading_paused:  # read (and drop) what the client still sends
            self._reading_paused = False
            transport.resume_reading()
        front.refusing.add(self)
        self._linger = asyncio.get_running_loop().call_later(LINGER, transport.abort)

    def _refuse_over_cap(self) -> None:
        """Over `max_client_connections`: 503 at once, then a moment for the client to read it.

        The write side is shut after the answer and what the client sends is discarded until it
        leaves or `LINGER` ends: closing outright with its request unread would reset the connection
        and could destroy the answer before the client reads it. Past as many lingering refusals as
        the cap itself, connections are cut without an answer, so a flood holds no more sockets.
        """
        self.closed = True
        transport = self.transport
        assert transport is not None
        front = self.front
        limit = self.settings.max_client_connections
        cut = len(front.refusing) >= limit
        front.over_cap["cut" if cut else "answered"] += 1
        also = front.unlogged_since_said("max_client_connections")
        if also is not None:
            get_logger().warning(
                "client_connections_refused",
                limit=limit,
                how="cut without an answer" if cut else "503",
                also_unlogged=also or None,
                hint="raise max_client_connections if these clients are welcome",
            )
        if cut:
            transport.abort()
            return
        _, body = gateway_error(
            503,
            None,
            f"the proxy is serving its limit of {limit} client connections (max_client_connections); "
            "retry shortly",
            {"limit": limit, "setting": "max_client_connections"},
        )
        data = dumps(body)
        headers = [("Content-Type", "application/json"), ("Retry-After", "1"), ("Connection", "close")]
        transport.write(_head(503, None, headers, len(data), False) + data)
        self._linger_after_answer()

    def close(self) -> None:
        """Close after what was written has gone out."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self, outcome: str = "client_disconnected") -> None:
        """Close at once, dropping what was not yet sent; `outcome` is what the cut exchange records."""
        self.closed = True
        self.cut_as = outcome
        if self.task is not None:
            self.task.cancel(outcome)
        if self.transport is not None:
            self.transport.abort()

    @property
    def backed_up(self) -> bool:
        """The client reads more slowly than the upstream writes: send it no more before `drain`."""
        return self._drain is not None

    async def drain(self) -> None:
        """Wait while the client reads more slowly than the upstream writes."""
        drain = self._drain
        if drain is not None:
            await drain


def _joined(req: _Request) -> bytes:
    """The body read in pieces, as one: the pieces are let go, so a big body is not held twice while
    it is served."""
    raw = b"".join(req.body)
    req.body = [raw]
    return raw


def _too_large(req: _Request, limit: int) -> Rejection:
    """413 for a body over `max_body_bytes`, with the request's id when its start shows one."""
    return Rejection(*too_large(limit, peek_id(b"".join(req.body))), "body too large")


class FrontSide:
    """The client side of one exchange on a front connection (the `ClientSide` the relay and bridges use)."""

    transport = "http"

    def __init__(self, conn: FrontConnection, req: _Request, target: Target | None) -> None:
        """`target` is the checked request target (None: refused, the path is recorded as sent)."""
        self.conn = conn
        self.connection = conn.name
        self.req = req
        self.method = req.method
        path_qs = req.target.decode("latin-1") if target is None else target.path_qs
        self.path_qs = path_qs
        self.raw_query = path_qs.split("?", 1)[1] if "?" in path_qs else ""
        self.headers = tuple(req.headers)
        if target is not None and target.host is not None:
            # An absolute-form target names the host the client meant; its `Host` field is ignored.
            host = target.host
            self.headers = tuple(
                (k, host if len(k) == 4 and k.lower() == "host" else v) for k, v in req.headers
            )
        self.started = False
        self.broken = False
        self._pending: bytes | None = None
        self._chunked = False
        self._no_body = False

    def _transport(self) -> asyncio.Transport:
        transport = self.conn.transport
        if transport is None or self.conn.closed or transport.is_closing():
            raise ClientGone("connection closed", self.conn.cut_as)
        return transport

    def _closing_headers(self, headers: list[tuple[str, str]], close_delimited: bool) -> None:
        if not self.req.keep_alive or close_delimited or self.conn.front.draining:
            headers.append(("Connection", "close"))
            self.broken = True  # the connection ends with this response
        elif self.req.http10:
            headers.append(("Connection", "keep-alive"))

    @property
    def peer(self) -> str:
        """The client's address without its port: per-client bounds count a client, not its connections."""
        transport = self.conn.transport
        name = transport.get_extra_info("peername") if transport is not None else None
        return str(name[0]) if isinstance(name, tuple) and name else ""

    def start_now(
        self,
        status: int,
        reason: str | None,
        headers: tuple[tuple[str, str], ...],
        length: int | None,
        first: bytes = b"",
        *,
        end: bool = False,
    ) -> None:
        """`start` without a wait: the head goes out with the body bytes already here, in one write.

        `first` is the start of the body (an SSE stream's first event usually arrives with its head);
        `end` says it is all of it, so a chunked body's end goes in the same write. A known-length
        head with no bytes yet waits for them.
        """
        transport = self._transport()
        head = self._begin(status, reason, headers, length)
        if self._no_body:
            transport.write(head)
            return
        if not first and not end and length is not None:
            self._pending = head  # goes out with the first body bytes, in one write
            return
        data = b"%x\r\n%b\r\n" % (len(first), first) if self._chunked and first else first
        if end and self._chunked:
            data += b"0\r\n\r\n"
            self._chunked = False  # finish() has nothing left to end
        transport.write(head + data)

    def send_whole(
        self, status: int, reason: str | None, headers: tuple[tuple[str, str], ...], body: bytes
    ) -> None:
        """A relayed response whose body is all here: head and body in one write, nothing to wait on.

        A client gone meanwhile is left to the connection's close; the exchange still ends as served.
        """
        try:
            transport = self._transport()
        except ClientGone:
            self.broken = True
            return
        head = self._begin(status, reason, headers, len(body))
        transport.write(head if self._no_body else head + body)

    def _begin(
        self, status: int, reason: str | None, headers: tuple[tuple[str, str], ...], length: int | None
    ) -> bytes:
        """Frame the response head for the client's connection (length, chunking or close)."""
        items = [(k, v) for k, v in headers if len(k) != 14 or k.lower() != "content-length"]
        self._no_body = self.method == "HEAD" or status in (204, 304) or 100 <= status < 200
        close_delimited = length is None and self.req.http10 and not self._no_body
        self._chunked = length is None and not self._no_body and not close_delimited
        self._closing_headers(items, close_delimited)
        self.started = True
        return _head(status, reason, items, length, self._chunked)

    def write_now(self, chunks: Iterable[bytes], *, end: bool = False) -> bool:
        transport = self._transport()
        if self._no_body:
            if end:
                self.finish_now()
            return self.conn.backed_up
        if self._chunked:
            data = b"".join([b"%x\r\n%b\r\n" % (len(chunk), chunk) for chunk in chunks if chunk])
            if end:
                data += b"0\r\n\r\n"
                self._chunked = False  # finish_now() has nothing left to end
        else:
            data = b"".join(chunks)
        pending, self._pending = self._pending, None
        if pending is not None:
            data = pending + data
        if data:
            transport.write(data)
        return self.conn.backed_up

    async def drain(self) -> None:
        self._transport()
        await self.conn.drain()

    async def write(self, chunk: bytes, *, end: bool = False) -> None:
        transport = self._transport()
        if self._no_body or not chunk:
            if end:
                await self.finish()
            return
        data = b"%x\r\n%b\r\n" % (len(chunk), chunk) if self._chunked else chunk
        if end and self._chunked:
            data += b"0\r\n\r\n"
            self._chunked = False  # finish() has nothing left to end
        pending, self._pending = self._pending, None
        transport.write(pending + data if pending is not None else data)
        await self.conn.drain()

    async def finish(self) -> None:
        self.finish_now()

    def finish_now(self) -> None:
        transport = self._transport()
        pending, self._pending = self._pending, None
        tail = b"0\r\n\r\n" if self._chunked else b""
        self._chunked = False  # ended once: a second finish() writes nothing
        if pending is not None or tail:
            transport.write((pending or b"") + tail)

    def respond(
        self, status: int, body: bytes, content_type: str | None, headers: tuple[tuple[str, str], ...]
    ) -> None:
        items = list(headers)
        if content_type is not None:
            items.append(("Content-Type", content_type))
        items.append(("Date", email.utils.formatdate(usegmt=True)))
        items.append(("Server", SERVER_SOFTWARE))
        self._closing_headers(items, False)
        head = _head(status, None, items, len(body), False)
        self._pending = head if self.method == "HEAD" else head + body

    def flush(self) -> None:
        """Send a whole response the proxy made (`respond`), once the relay is done."""
        pending, self._pending = self._pending, None
        if pending is not None and not self.started:
            with contextlib.suppress(ClientGone):
                self._transport().write(pending)

    def cut(self) -> None:
        self.broken = True
        self.conn.close()

    def close_after_answer(self) -> None:
        self.req.keep_alive = False

    def withdraw_head(self) -> bool:
        """Take back a known-length head still waiting for its body's first bytes (`start_now`)."""
        if not self.started or self._pending is None:
            return False
        self._pending = None
        self.started = self.broken = self._chunked = self._no_body = False
        return True


def _peer(address: Any) -> str:
    """A client's address as `host:port` (`[host]:port` for IPv6), or `unknown`."""
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = address[0], address[1]
        return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
    return "unknown"
