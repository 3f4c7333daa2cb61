"""Clients on a message channel (stdio, HTTP+SSE) served through the proxy's engines as Streamable HTTP.

A stdio client writes JSON-RPC lines and reads them back; an HTTP+SSE client POSTs its messages and
reads every answer from one GET stream. Neither sends the Streamable HTTP requests the relay and the
bridges serve, so `ChannelClientShell` makes them: each message becomes one exchange, served by the
same code the front serves an HTTP client's request with (`serve_outcome`: the era probe, a bridge or
the pass-through relay), through a `ChannelSide` that reads the response the engine writes and sends
its messages back on the channel. Pass-through, both bridges, the fault rules and every observation
apply unchanged; the chains say which transport the client used (`ChannelSide.transport`).

What each message becomes, and what an answer teaches, is `proxy.engine.mirror.ChannelClient`'s to
decide; this module carries its orders out and owns the tasks.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Protocol

from proxy.config import Settings
from proxy.engine.mirror import (
    Cancel,
    ChannelClient,
    EndSession,
    OpenStream,
    Order,
    Post,
    Reply,
    no_answer_reason,
)
from proxy.framing.classify import Rejection, Route
from proxy.framing.http import header, is_sse
from proxy.framing.sse import SseDecoder, SseEvent, SseTooLarge
from proxy.logs import get_logger
from proxy.transport.channel_lane import Lane, LaneExchange
from proxy.transport.channel_upstream import ChannelUpstream
from proxy.transport.client_side import ClientGone, ClientSide
from proxy.transport.faults import gated_relay
from proxy.transport.relay import PassthroughRelay, RelayContext
from proxy.transport.routing import Router, classify_request
from proxy.transport.tasks import spawn
from proxy.wire import errors
from proxy.wire.jsonrpc import Body, Kind, Message, RequestId, dumps, error_response, parse_body

CLOSE_GRACE = 2.0
"""Seconds a closing channel gives its session's DELETE (and its cancelled exchanges) to finish."""

_ids = itertools.count(1)
_PREFIXES = {"stdio": "s", "sse": "e"}
"""Exchange ids by client transport, apart from the front's (`x1`)."""


async def serve_outcome(
    router: Router,
    relays: RelayContext,
    side: ClientSide,
    next_exchange: Callable[[], str],
    outcome: Route | Rejection,
    received: int,
) -> None:
    """Serve one client request to its end: probe if due, then a bridge, or the (gated) relay.

    The one dispatch every request takes that is not served on the front's fast path.
    """
    if isinstance(outcome, Route):
        probed = router.needs_probe(outcome)
        await router.ensure_probed(outcome)
        refusal = router.off_endpoint(outcome)  # the probe may have found HTTP+SSE behind the URL
        if refusal is None and probed:
            refusal = router.out_of_reach(outcome)
        if refusal is not None:
            PassthroughRelay(relays, side, next_exchange()).refuse_route(outcome, refusal, received=received)
            return
        bridge = router.bridge_for(outcome)
        if bridge is not None:
            await bridge.serve(side, next_exchange(), outcome)
            return
    exchange = next_exchange()
    relay = gated_relay(relays, side, exchange, outcome) or PassthroughRelay(relays, side, exchange)
    await relay.run(outcome, received=received)


class ChannelOut(Protocol):
    """Where a channel client's messages go: its stdout, or its GET stream's queue."""

    def send(self, data: bytes) -> None:
        """Send one message's JSON (holding no raw newline); never waits. Raises ClientGone."""

    async def room(self) -> None:
        """Wait while the client reads more slowly than messages come. Raises ClientGone."""


@dataclass(frozen=True, slots=True)
class Serving:
    """What serving a channel client's exchanges needs: the settings, the router, the relays' context."""

    settings: Settings
    router: Router
    relays: RelayContext

    @property
    def path(self) -> str:
        """The path every made request names: the upstream's MCP endpoint's."""
        return self.relays.upstream.base_path


class ChannelClientShell:
    """One client on a message channel: its messages served as exchanges, the answers sent back."""

    def __init__(
        self,
        serving: Serving,
        out: ChannelOut,
        *,
        transport: str,
        peer: str = "",
        client_headers: tuple[tuple[str, str], ...] = (),
        full: Callable[[], bool] | None = None,
    ) -> None:
        self.serving = serving
        self.out = out
        self.transport = transport
        self.peer = peer
        self.mirror = ChannelClient(client_headers, serving.settings.max_body_bytes)
        self.calls: dict[RequestId, Callable[[str], None]] = {}
        """How to close the exchange carrying each call in flight, recording an outcome (a
        cancellation does)."""
        self.tasks: set[asyncio.Task[None]] = set()
        self.posts: set[asyncio.Task[None]] = set()
        """The exchanges carrying the client's messages (its GET stream and DELETE are not among them)."""
        self.closed = False
        self.gone: str | None = None
        """Why the server the client talks to is gone for good (the shim's child exited), once it is:
        what is still to be sent is answered with that instead."""
        self.log = get_logger()
        self._prefix = _PREFIXES.get(transport, "c")
        self.connection = f"{self._prefix}k{next(_ids)}"
        """This client's channel: its one connection, as its exchanges record it
        (`ExchangeOpened.connection`) and the bridges know it (`ClientSide.connection`)."""
        upstream = serving.relays.pool
        self.lane: Lane | None = None
        """The direct lane to a stdio server (the shim), when the channel can say it is full (`full`)."""
        if full is not None and isinstance(upstream, ChannelUpstream) and upstream.transport == "stdio":
            self.lane = Lane(self, upstream, full)

    def next_exchange(self) -> str:
        """A fresh exchange id, apart from the front's (`x1`): `s1` for stdio, `e1` for HTTP+SSE."""
        return f"{self._prefix}{next(_ids)}"

    # -- what the channel brings ----------------------------------------------------------------------

    def receive(self, data: bytes) -> None:
        """One message from the client (a line, a POST body)."""
        self.carry_out(self.mirror.received(data))

    def oversized(self, size: int, head: bytes) -> None:
        """A message over `max_body_bytes` arrived (only its start was kept)."""
        self.carry_out(self.mirror.oversized(size, head))

    @property
    def in_flight(self) -> int:
        """Messages the client sent that are still being served: on an exchange of their own, or on
        the direct lane (a stdio shim's)."""
        return len(self.posts) + (len(self.lane.open) if self.lane is not None else 0)

    async def settled(self) -> None:
        """Wait until every message the client sent has been served: none in flight, none held back.

        A message held back (behind the `initialize` answer, say) goes out when the exchange it waits
        for ends, before that exchange's task is done, so looking again after each end sees it.
        """
        while self.posts or (self.lane is not None and self.lane.open):
            if self.posts:
                await asyncio.wait(list(self.posts), return_when=asyncio.FIRST_COMPLETED)
            elif self.lane is not None:
                await self.lane.settled()

    def server_gone(self, why: str) -> None:
        """The server is gone for good: a request not sent yet (held behind the one before it) gets
        an error naming why, and the session is not ended upstream at the close (it is over)."""
        self.gone = why

    async def close(self, outcome: str = "client_disconnected") -> None:
        """The channel ended: cancel what is in flight, end the session, wait (bounded) for both.

        `outcome` is what the exchanges cut here record: the client leaving, or the proxy stopping.
        """
        if self.closed:
            return
        self.closed = True
        orders = self.mirror.close()
        if self.gone is not None:
            orders = [order for order in orders if not isinstance(order, EndSession)]
        pending = list(self.tasks)
        for task in pending:
            task.cancel(outcome)
        if self.lane is not None:
            self.lane.close(outcome)
        self.carry_out(orders)
        waiting = list(self.tasks)
        if waiting:
            await asyncio.wait(waiting, timeout=CLOSE_GRACE)
        self.serving.router.connection_closed(self.connection)

    # -- orders -----------------------------------------------------------------------------------

    def carry_out(self, orders: list[Order]) -> None:
        for order in orders:
            match order:
                case Post() if self.gone is not None:
                    self._refuse(order, self.gone)
                case OpenStream() if self.gone is not None:
                    pass  # no server is left to stream from
                case Post():
                    if self.lane is not None and self.lane.post(order) is not None:
                        continue
                    side = ChannelSide(self, order.seq, "POST", order.headers, order.calls, order.parsed)
                    task = self._start(side, order.body, f"{self.transport}-post")
                    close = functools.partial(_close_exchange, task, side)
                    self.posts.add(task)
                    task.add_done_callback(self.posts.discard)
                    for ident in order.calls:
                        self.calls[ident] = close
                case Reply(data, problem):
                    self.log.warning("client_protocol_error", transport=self.transport, problem=problem)
                    self._send(data)
                case OpenStream(headers):
                    self._start(ChannelSide(self, 0, "GET", headers, ()), b"", f"{self.transport}-get")
                case Cancel(ident, outcome):
                    found = self.calls.get(ident)
                    if found is not None:
                        found(outcome)
                case EndSession(headers):
                    self._start(ChannelSide(self, 0, "DELETE", headers, ()), b"", f"{self.transport}-delete")

    def _refuse(self, order: Post, why: str) -> None:
        """Answer a message the gone server never gets: its calls get errors naming why, and the
        mirror hears that its POST ended, so what waited behind it (a request behind a notification)
        is answered in turn rather than dropped at the close."""
        for ident in order.calls:
            self._send(dumps(error_response(ident, errors.UPSTREAM_UNAVAILABLE, why)))
        self.carry_out(self.mirror.ended(order.seq, (), why))

    def lane_started(self, exchange: LaneExchange) -> None:
        """A POST took the direct lane: its calls are cancelled by closing that exchange."""
        for ident in exchange.calls:
            self.calls[ident] = exchange.abandon

    def lane_ended(self, exchange: LaneExchange) -> None:
        for ident in exchange.calls:
            self.calls.pop(ident, None)

    def _start(self, side: ChannelSide, body: bytes, name: str) -> asyncio.Task[None]:
        task: asyncio.Task[None] = spawn(self._exchange(side, body), name=name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def _exchange(self, side: ChannelSide, body: bytes) -> None:
        serving = self.serving
        outcome = classify_request(
            serving.settings, side.method, serving.path, side.headers, body, side.parsed
        )
        try:
            await serve_outcome(serving.router, serving.relays, side, self.next_exchange, outcome, len(body))
            side.flush()
        except asyncio.CancelledError:
            if not side.cancelled:
                raise
        finally:
            for ident in side.calls:
                self.calls.pop(ident, None)
            if not side.cancelled and not self.closed:
                unanswered = tuple(ident for ident in side.calls if ident in side.unanswered)
                self.carry_out(self.mirror.ended(side.seq, unanswered, side.why()))

    def refused_unanswerable(self, status: int, sent: Body | None, error: Message) -> None:
        """The upstream refused a POST that carried no request (a notification, the client's answer to
        a server's question): JSON-RPC answers neither, so the refusal is logged, never sent. Over HTTP
        it is the POST's status, which never reaches the client's JSON-RPC stream either; on a channel,
        an error with no id, or under the id of the client's answer, would be taken for the answer to a
        request of the client's own."""
        first = sent.first if sent is not None else None
        self.log.warning(
            "client_message_refused",
            transport=self.transport,
            status=status,
            sent=(first.method or "a response") if first is not None else "a message",
            error=str(error.error.get("message", "")),
            action="not sent to the client: JSON-RPC answers no notification or response",
        )

    def _send(self, data: bytes) -> None:
        if self.closed:
            return
        with suppress(ClientGone):
            self.out.send(data)


def _close_exchange(task: asyncio.Task[None], side: ChannelSide, outcome: str) -> None:
    """Close an exchange in a task: a cancellation (the client gets no answer for it), recorded as
    `outcome` (the message the task is cancelled with, read back by `cut_outcome`)."""
    side.cancelled = True
    task.cancel(outcome)


class ChannelSide:
    """The client side of one made exchange: the response the engine writes, read back into messages.

    A JSON body is read whole, an SSE body event by event; each message goes to the channel as it is
    complete. A response the proxy made (`respond`) goes out when the exchange ends (`flush`), as on
    the front.
    """

    __slots__ = (
        "_body",
        "_decoder",
        "_pending",
        "_size",
        "broken",
        "calls",
        "cancelled",
        "connection",
        "headers",
        "method",
        "owner",
        "parsed",
        "path_qs",
        "peer",
        "problem",
        "seq",
        "started",
        "status",
        "transport",
        "unanswered",
    )

    raw_query = ""

    def __init__(
        self,
        owner: ChannelClientShell,
        seq: int,
        method: str,
        headers: tuple[tuple[str, str], ...],
        calls: tuple[RequestId, ...],
        parsed: Body | None = None,
    ) -> None:
        self.owner = owner
        self.parsed = parsed
        """The request's body decoded, when the mirror decoded it (it is not decoded again)."""
        self.seq = seq
        self.method = method
        self.path_qs = owner.serving.path
        self.transport = owner.transport
        """How the client reached the proxy (`stdio`, `sse`): shown with its chains."""
        self.peer = owner.peer
        self.connection = owner.connection
        self.headers = headers
        self.calls = calls
        self.unanswered = set(calls)
        self.started = False
        self.broken = False
        self.cancelled = False
        self.status = 0
        self.problem = ""
        """Why the answer may be missing (an error the upstream sent without the call's id, say)."""
        self._decoder: SseDecoder | None = None
        self._body: list[bytes] = []
        self._size = 0
        self._pending: tuple[int, bytes, tuple[tuple[str, str], ...]] | None = None

    # -- ClientSide -----------------------------------------------------------------------------

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
        self._check()
        self._begin(status, headers)
        self._feed(first)
        if end:
            self._end()

    def send_whole(
        self, status: int, reason: str | None, headers: tuple[tuple[str, str], ...], body: bytes
    ) -> None:
        if self.owner.closed:
            self.broken = True
            return
        self._begin(status, headers)
        self._feed(body)
        self._end()

    async def write(self, chunk: bytes, *, end: bool = False) -> None:
        self._check()
        self._feed(chunk)
        if end:
            self._end()
        await self.owner.out.room()

    async def finish(self) -> None:
        self._check()
        self._end()

    def respond(
        self, status: int, body: bytes, content_type: str | None, headers: tuple[tuple[str, str], ...]
    ) -> None:
        items = (*headers, ("Content-Type", content_type)) if content_type is not None else headers
        self._pending = (status, body, items)

    def flush(self) -> None:
        """Send a response the proxy made (`respond`), once the exchange is done."""
        pending, self._pending = self._pending, None
        if pending is not None and not self.started and not self.owner.closed:
            status, body, headers = pending
            self._begin(status, headers)
            self._feed(body)
            self._end()

    def cut(self) -> None:
        self.broken = True
        self.problem = self.problem or "the upstream's response was cut short"

    def withdraw_head(self) -> bool:
        """A channel client's head is taken at once (`_begin`): none is ever held back."""
        return False

    def close_after_answer(self) -> None:
        """A channel client's exchanges share its one channel, which outlives any of them."""

    # -- reading the response back ---------------------------------------------------------------

    def _check(self) -> None:
        if self.owner.closed:
            raise ClientGone("the client's channel closed")

    def _begin(self, status: int, headers: tuple[tuple[str, str], ...]) -> None:
        self.started = True
        self.status = status
        if is_sse(header(headers, "content-type")):
            self._decoder = SseDecoder(self.owner.serving.settings.max_bridged_message_bytes)
        owner = self.owner
        if self.seq:
            owner.carry_out(owner.mirror.head(self.seq, headers))

    def _feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        decoder = self._decoder
        if decoder is None:
            self._size += len(chunk)
            if self._size <= self.owner.serving.settings.max_bridged_message_bytes:
                self._body.append(chunk)
            return
        try:
            items = decoder.feed(chunk)
        except SseTooLarge as exc:
            items = list(exc.items)
            self.problem = str(exc)
        for item in items:
            if isinstance(item, SseEvent) and item.event == "message" and item.carries_message:
                self._deliver(item.data.encode())

    def _end(self) -> None:
        if self._decoder is not None:
            self._decoder = None
            return
        body, self._body = b"".join(self._body), []
        if self._size > self.owner.serving.settings.max_bridged_message_bytes:
            self.problem = f"its answer of {self._size} bytes exceeds max_bridged_message_bytes"
        elif body.strip() and (self.method == "POST" and self.status != 202):
            self._deliver(body)
        elif not 200 <= self.status < 300:
            self.problem = self.problem or f"HTTP {self.status}"

    def _deliver(self, data: bytes) -> None:
        """Send the messages of one JSON body or SSE event to the client, learning what they teach."""
        parsed = parse_body(data)
        if parsed.parse_error is not None:
            self.problem = f"HTTP {self.status} with a body that is not JSON-RPC ({parsed.parse_error})"
            return
        owner = self.owner
        whole = len(parsed.messages) == 1
        for msg in parsed.messages:
            if msg.kind is Kind.ERROR and msg.id is None and self.unanswered:
                # Refused before the call was read (an id-less 4xx error): the client gets its error
                # under the call's id once the exchange ends.
                self.problem = f"HTTP {self.status}: {msg.error.get('message', '')}"
                continue
            if msg.kind is Kind.ERROR and self.method == "POST" and not self.calls:
                owner.refused_unanswerable(self.status, self.parsed, msg)
                continue
            if msg.is_response and msg.id in self.unanswered:
                self.unanswered.discard(msg.id)
            owner._send(_one_line(data) if whole else dumps(msg.raw))
            if self.seq:
                owner.carry_out(owner.mirror.delivered(self.seq, msg))

    def why(self) -> str:
        """What the client hears when its call got no answer."""
        return no_answer_reason(self.problem, self.status)


def _one_line(data: bytes) -> bytes:
    """A message's JSON with no raw line break in it (a stdio line, an SSE `data:` line)."""
    if b"\n" in data or b"\r" in data:
        return dumps(parse_body(data).messages[0].raw)
    return data.strip()
