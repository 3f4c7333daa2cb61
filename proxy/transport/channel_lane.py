"""The direct lane: a channel client's message to a channel upstream of the same era, without HTTP.

A stdio client in front of a stdio server (the shim) is served, like every channel client, by making
each message a Streamable HTTP exchange for the pass-through relay, which the channel upstream turns
back into a line for its child; the answer takes the same shapes back. When nothing in between
needs the HTTP shape (the message passes through, no fault or intercept rule is in force, the
client's session runs on a channel already started), the lane skips it: the message, decoded once
by the client's mirror, goes to the channel core as it is (`ChannelSession.post_direct`), and what the core
orders for its response (a whole answer, or a stream of messages) comes straight back here, each
message decoded once by the core. Everything the HTTP shape decided is still decided where it was:
the mirror (`proxy.engine.mirror`) orders and learns, the core (`proxy.engine.channel`) routes the
server's messages, aliases ids, cancels, fails calls when the child dies or sends too much. What the
lane does itself is what the relay and the channel side did: it reports the same observations in
the same order (so chains, the round-trip log line, the capture and watchers see the same exchange),
and writes each message to the client as one line. When the client reads more slowly than the
server writes, the channel stops being read until the client has caught up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from proxy.engine.mirror import Post, no_answer_reason
from proxy.engine.passthrough import era_suspicion
from proxy.flows.events import Channel, Direction, Side
from proxy.flows.observations import (
    BodyNotInspected,
    BytesOut,
    ExchangeClosed,
    ExchangeOpened,
    MessageSeen,
    Observation,
    ResponseHeadSeen,
)
from proxy.framing.classify import Route
from proxy.framing.http import header
from proxy.logs import get_logger, traffic_line
from proxy.transport.channel_upstream import SSE_EVENT, SSE_HEAD, ChannelSession, ChannelUpstream
from proxy.transport.client_side import ClientGone
from proxy.transport.observe import json_messages, too_large
from proxy.transport.routing import classify_request
from proxy.transport.tasks import spawn
from proxy.wire.joined_headers import recorded
from proxy.wire.jsonrpc import Kind, Message, RequestId, dumps, parse_body

if TYPE_CHECKING:
    from proxy.transport.channel_client import ChannelClientShell

# Enum members read through their class cost about ten times a module constant's on Python 3.11
# (the enum metaclass's attribute hook): every message passes here.
_JSON = Channel.JSON
_POST = Channel.POST
_SSE = Channel.SSE
_TO_CLIENT = Direction.TO_CLIENT
_TO_SERVER = Direction.TO_SERVER
_BOTH = Side.BOTH
_ERROR = Kind.ERROR
_SSE_TYPE = "text/event-stream"
_FRAMING = len(SSE_EVENT) + 2
"""Bytes of SSE framing around each message on a stream (`event: message`, `data: `, the blank line)."""

_LOG = get_logger()


class Lane:
    """One channel client's direct lane to its channel upstream (see the module docstring).

    `full` tells whether the client's channel holds more than it should (the client reads slowly).
    """

    def __init__(
        self, shell: ChannelClientShell, upstream: ChannelUpstream, full: Callable[[], bool]
    ) -> None:
        self.shell = shell
        self.upstream = upstream
        self.full = full
        self.open: dict[LaneExchange, None] = {}
        """Exchanges between their message and their end, oldest first."""
        self._waiting: asyncio.Task[None] | None = None
        self._due: asyncio.TimerHandle | None = None
        self._emptied: asyncio.Future[None] | None = None
        """Resolved when the last open exchange ends, for whoever waits in `settled`."""
        """One timer for every held head (the oldest's); one per exchange would cost each message."""

    def post(self, order: Post) -> LaneExchange | None:
        """Serve the POST on the lane; None when it must take the HTTP shape (nothing was done)."""
        parsed = order.parsed
        if not order.direct or parsed is None:
            return None
        serving = self.shell.serving
        relays = serving.relays
        if relays.gate is not None or relays.pool is not self.upstream:
            return None  # a fault or intercept rule may concern it: the gated relay serves it
        route = classify_request(serving.settings, "POST", serving.path, order.headers, order.body, parsed)
        if not isinstance(route, Route) or not serving.router.passes_through(route):
            return None
        session = self.upstream.direct_session(route.session_id)
        if session is None:
            return None
        exchange = LaneExchange(self, session, order, route)
        self.open[exchange] = None
        self.shell.lane_started(exchange)
        exchange.start()
        if not exchange.done and self._due is None:
            self._arm(exchange.began)
        return exchange

    def _arm(self, began: float) -> None:
        loop = asyncio.get_running_loop()
        self._due = loop.call_at(began + self.upstream.head_hold, self._heads_due)

    def _heads_due(self) -> None:
        """Heads held as long as a channel lets them wait start now (as SSE streams, as the HTTP shape
        does); the timer is armed again for the oldest still held."""
        self._due = None
        now = asyncio.get_running_loop().time()
        hold = self.upstream.head_hold
        for exchange in list(self.open):
            if exchange.headed or exchange.done:
                continue
            if now - exchange.began < hold:
                self._arm(exchange.began)
                return
            exchange.session.head_due(exchange.name)

    def sent(self, session: ChannelSession) -> None:
        """A message went to the client: while the client's channel is full, the server is not read."""
        if self._waiting is None and self.full():
            session.pause(1)
            self._waiting = spawn(self._wait_room(session), name="lane-room")

    async def _wait_room(self, session: ChannelSession) -> None:
        try:
            await self.shell.out.room()
        except ClientGone:
            pass
        finally:
            session.pause(-1)
            self._waiting = None

    async def settled(self) -> None:
        """Wait until no exchange is open on the lane (the end of stdin waits for their answers)."""
        while self.open:
            if self._emptied is None or self._emptied.done():
                self._emptied = asyncio.get_running_loop().create_future()
            await self._emptied

    def ended(self, exchange: LaneExchange) -> None:
        """An exchange is over: it leaves the open ones; the last to leave wakes `settled`."""
        self.open.pop(exchange, None)
        if not self.open and self._emptied is not None and not self._emptied.done():
            self._emptied.set_result(None)

    def close(self, outcome: str = "client_disconnected") -> None:
        """The client's channel ended: every open exchange is given up, recording `outcome`."""
        for exchange in list(self.open):
            exchange.abandon(outcome)
        if self._due is not None:
            self._due.cancel()
            self._due = None


class LaneExchange:
    """One message on the lane and its response (the `DirectReceiver` of its channel exchange)."""

    __slots__ = (
        "began",
        "calls",
        "cancelled",
        "done",
        "exchange",
        "headed",
        "lane",
        "name",
        "problem",
        "route",
        "sent_at",
        "seq",
        "session",
        "sse",
        "status",
        "unanswered",
    )

    def __init__(self, lane: Lane, session: ChannelSession, order: Post, route: Route) -> None:
        self.lane = lane
        self.session = session
        self.route = route
        self.seq = order.seq
        self.calls = order.calls
        self.unanswered = set(order.calls)
        self.exchange = lane.shell.next_exchange()
        """The exchange's id in observations (`s1`), as the HTTP shape would have had."""
        self.name = lane.upstream.exchange_name()
        """Its name in the channel core."""
        self.headed = False
        self.sse = False
        self.done = False
        self.cancelled = False
        self.status = 0
        self.problem = ""
        self.began = 0.0
        """When its message went to the channel (the loop's clock): its head is held from then."""
        self.sent_at: float | None = None
        """When the request went out, until it is reported."""

    def start(self) -> None:
        """Hand the message to the channel, then report it: the server may work meanwhile, and the
        request is still reported before anything of its response (`_reported`)."""
        relays = self.lane.shell.serving.relays
        relays.relaying += 1
        self.began = asyncio.get_running_loop().time()
        self.sent_at = relays.observations.now()
        route = self.route
        self.session.post_direct(self.name, route.raw, route.body, self, route.headers)
        self._reported()

    def _reported(self) -> None:
        """Report the request (once), as the relay does before it sends it upstream."""
        if self.sent_at is None:
            return
        t, self.sent_at = self.sent_at, None
        route = self.route
        shell = self.lane.shell
        relays = shell.serving.relays
        sink = relays.observations
        era = str(route.era)
        raw = route.raw
        exchange = self.exchange
        sink.emit_all(
            (
                ExchangeOpened(
                    t,
                    exchange,
                    http_method="POST",
                    path=shell.serving.path,
                    headers=recorded(route.headers),
                    session=route.session_id,
                    client_era=era,
                    upstream_era=era,
                    body_size=len(raw),
                    client_transport=shell.transport,
                    upstream_transport=relays.router.transport,
                    connection=shell.connection,
                ),
                MessageSeen(t, exchange, route.body.messages[0], len(raw), _TO_SERVER, _POST),
            )
        )

    # -- DirectReceiver ----------------------------------------------------------------------------

    def answered(
        self, status: int, headers: tuple[tuple[str, str], ...], body: bytes, message: Message | None
    ) -> None:
        if self.done:
            return
        self._head(status, headers, body)
        if body.strip() and status != 202:
            self._deliver(body, message)
        elif not 200 <= status < 300:
            self.problem = self.problem or f"HTTP {status}"
        sink = self.lane.shell.serving.relays.observations
        exchange = self.exchange
        whole = [*headers, ("Content-Length", str(len(body)))]
        batch: list[Observation] = [
            ResponseHeadSeen(sink.now(), exchange, status, header(headers, "content-type"), dict(whole))
        ]
        limit = self.lane.shell.serving.relays.inspect_limit
        if len(body) > limit:
            reason = too_large(f"a response body of {len(body)} bytes", limit)
            batch += [
                BytesOut(sink.now(), exchange, len(body)),
                BodyNotInspected(sink.now(), exchange, reason),
            ]
            _LOG.info("body_not_inspected", exchange=exchange, reason=reason)
        elif message is not None:
            batch.append(MessageSeen(sink.now(), exchange, message, len(body), _TO_CLIENT, _JSON))
        else:
            for msg, size, channel in json_messages(body)[1]:
                batch.append(MessageSeen(sink.now(), exchange, msg, size, _TO_CLIENT, channel))
        self._finish(None, batch)

    def opened(self, headers: tuple[tuple[str, str], ...]) -> None:
        if self.done:
            return
        self._head(200, headers)
        self.sse = True
        relays = self.lane.shell.serving.relays
        relays.open_streams += 1
        sink = relays.observations
        whole = dict((*SSE_HEAD, *headers))
        sink.emit_all((ResponseHeadSeen(sink.now(), self.exchange, 200, _SSE_TYPE, whole),))

    def streamed(self, data: bytes, message: Message | None) -> None:
        if self.done:
            return
        msg = self._deliver(data, message)
        sink = self.lane.shell.serving.relays.observations
        # Sized as the SSE decoder of the HTTP shape sized it: the event's data as text.
        size = len(data) if data.isascii() else len(data.decode("utf-8", "replace"))
        extra = len(data) + _FRAMING - size
        now = sink.now()
        seen: list[Observation] = []
        if msg is not None:
            seen.append(MessageSeen(now, self.exchange, msg, size, _TO_CLIENT, _SSE))
        if extra > 0:
            seen.append(BytesOut(now, self.exchange, extra))
        sink.emit_all(seen)
        self.lane.sent(self.session)

    def ended(self) -> None:
        if self.done:
            return
        if not self.headed:
            self.problem = self.problem or "the upstream's channel closed"
        self._finish(None, [])

    # -- the client's side -------------------------------------------------------------------------

    def abandon(self, outcome: str = "client_disconnected") -> None:
        """The client gave the call up (a 2026-07-28 cancellation) or left, or the proxy is stopping
        (`outcome` says which): the channel is told, and the exchange ends as a gone client's does."""
        if self.done:
            return
        self.cancelled = True
        self.session.finished(self.name)
        self._finish(outcome, [])

    def _head(self, status: int, headers: tuple[tuple[str, str], ...], body: bytes | None = None) -> None:
        """The response head is decided: the mirror learns of it. `body` is a whole answer's (None
        for a stream), read with the status for what it says of the upstream's era."""
        self._reported()
        self.headed = True
        self.status = status
        shell = self.lane.shell
        if (doubt := era_suspicion(self.route, status, body)) is not None:
            shell.serving.router.suspect(doubt)
        shell.carry_out(shell.mirror.head(self.seq, headers))

    def _deliver(self, data: bytes, message: Message | None) -> Message | None:
        """One message to the client as a line; what it teaches goes to the mirror. Returns it decoded."""
        if message is None:
            parsed = parse_body(data)
            if parsed.parse_error is not None or len(parsed.messages) != 1:
                self.problem = f"HTTP {self.status} with a body that is not one JSON-RPC message"
                return None
            message = parsed.messages[0]
        if message.kind is _ERROR and message.id is None and self.unanswered:
            self.problem = f"HTTP {self.status}: {message.error.get('message', '')}"
            return message
        if message.kind is _ERROR and not self.calls:
            self.lane.shell.refused_unanswerable(self.status, self.route.body, message)
            return message
        if message.is_response and message.id in self.unanswered:
            self.unanswered.discard(message.id)
        shell = self.lane.shell
        line = dumps(message.raw) if b"\n" in data or b"\r" in data else data.strip()
        shell._send(line)
        shell.carry_out(shell.mirror.delivered(self.seq, message))
        return message

    def _finish(self, outcome: str | None, before: list[Observation]) -> None:
        """The exchange is over: its last observations and its round-trip line; an unanswered call
        gets the proxy's error, as in the HTTP shape."""
        self._reported()
        self.done = True
        lane = self.lane
        lane.ended(self)
        shell = lane.shell
        relays = shell.serving.relays
        relays.relaying -= 1
        if self.sse:
            relays.open_streams -= 1
        sink = relays.observations
        summary = sink.close(ExchangeClosed(sink.now(), self.exchange, outcome), before)
        if summary is not None:
            traffic_line(_LOG, "exchange", summary.log_fields("passthrough"), summary.level)
        shell.lane_ended(self)
        if not self.cancelled and not shell.closed:
            unanswered: tuple[RequestId, ...] = tuple(i for i in self.calls if i in self.unanswered)
            shell.carry_out(shell.mirror.ended(self.seq, unanswered, self._why()))
        if not self.cancelled:
            lane.sent(self.session)

    def _why(self) -> str:
        return no_answer_reason(self.problem, self.status)
