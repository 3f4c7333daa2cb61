"""The bridge driver: runs one era-converting engine, carrying out its commands across exchanges and legs.

Unlike pass-through, a bridge's client exchanges and upstream legs are not one-to-one: a call's SSE
stream stays open while the client answers on other POSTs, and an upstream leg may outlive the client
exchange that caused it. So the driver keeps every open exchange and leg by id. Engine calls are
synchronous and never interleave; each client exchange has its own queue of writes, carried out in
order by that exchange's handler task, so the engine never waits on a socket.

The driver decides nothing of the protocol: whether a cut SSE leg is resumed (ResumeLeg), when a
round window closes (StartTimer; a due timer is fed behind the inputs already received), and what
changed in parked calls and upstream sessions (ObserveContinuation, ObserveSession) are the
engine's orders, which the driver carries out: it waits, reopens, writes and hands observations on.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable, Container
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

from proxy import SERVER_SOFTWARE
from proxy.engine.commands import (
    BridgeCommand,
    CancelTimer,
    CloseLeg,
    DeleteSession,
    EndClientResponse,
    Log,
    ObserveContinuation,
    ObserveSession,
    OpenLegStream,
    RecheckUpstreamEra,
    ReplyJson,
    ResumeLeg,
    SendLeg,
    SendSse,
    StartSse,
    StartTimer,
)
from proxy.engine.events import (
    AnsweredForClient,
    BridgeEvent,
    ClientConnectionClosed,
    ClientDisconnected,
    ClientRequestReceived,
    LegCut,
    LegEnded,
    LegFailed,
    LegMessage,
    LegResponded,
    Stopping,
    TimerFired,
)
from proxy.engine.faults import fault_outcome
from proxy.engine.oauth_origin import Origins
from proxy.engine.passthrough import ERA_REFUSALS, leg_suspicion
from proxy.flows.events import BRIDGE_ERAS, Channel, Direction, Mode, Side
from proxy.flows.observations import (
    PROXY_STOPPING,
    AnsweredByProxy,
    ContinuationMoved,
    ExchangeClosed,
    ExchangeOpened,
    InvalidBody,
    LegClosed,
    LegHeadSeen,
    LegLinked,
    LegMessageSeen,
    LegOpened,
    MessageSeen,
    ResponseHeadSeen,
    UpstreamSessionMoved,
)
from proxy.flows.proxy_notes import answered_for_client, answerer
from proxy.flows.sink import ObservationSink
from proxy.framing.classify import DEPTH_CEILING, Route, beyond_encoding
from proxy.framing.http import Upstream, header, is_sse
from proxy.framing.sse import SseDecoder, SseEvent, SseTooLarge, encode_json_event
from proxy.logs import get_logger, traffic_line
from proxy.transport.bridge_faults import Edited, bridged_client_faults
from proxy.transport.bridge_holds import BridgeHolds, Outcome
from proxy.transport.client_side import ClientGone, ClientSide, answer_headers, cut_outcome
from proxy.transport.origin_rewrites import OriginRewrites, challenged
from proxy.transport.response_budget import OVER_BUDGET, Hold, ResponseBudget, read_held, refused_message
from proxy.transport.tasks import spawn
from proxy.transport.upstream_pool import UpstreamClient, UpstreamError, UpstreamResponse
from proxy.wire.cors import CorsAnswers, origin_of
from proxy.wire.joined_headers import recorded
from proxy.wire.jsonrpc import (
    Kind,
    Message,
    classify_value,
    dumps,
    member_sizes,
    parse_body,
    parse_event_text,
)
from proxy.wire.python_json import NOT_REENCODABLE
from proxy.wire.versions import Era

_OWN_HEADERS = ("accept", "content-type", "content-length")
"""Headers an answer the proxy POSTs upstream sets itself (it is JSON, and takes JSON or SSE back)."""

if TYPE_CHECKING:  # the relay's module routes to the bridges: a type only, never an import cycle
    from proxy.transport.relay import RelayContext

_SSE_HEADERS = (
    ("Content-Type", "text/event-stream"),
    ("Cache-Control", "no-cache"),
    ("X-Accel-Buffering", "no"),
    ("Server", SERVER_SOFTWARE),
)
DEFAULT_MAX_MESSAGE_BYTES = 32 * 1024 * 1024
"""The `max_bridged_message_bytes` setting's default."""
_LEAST_GRACE = 0.001
"""Shortest wait a due timer grants legs to feed what they hold unread (a 0 s timer's included)."""
_TOO_DEEP = (
    f"its message is JSON nested deeper than {DEPTH_CEILING} levels, more than the proxy can re-encode"
)


class BridgeEngine(Protocol):
    """What the driver needs of an engine: `handle`, and whether a client session is its own."""

    def handle(self, event: BridgeEvent) -> list[BridgeCommand]: ...

    def joins(self, leg: str, msg: Message) -> str | None:
        """The leg whose chain a message arriving on `leg` joins instead of its own (observation
        files it there), asked before the message is handled."""
        ...

    def undelivered(self, leg: str, msg: Message) -> str | None:
        """Why a message arriving on `leg` reaches no client though it was meant for clients (observation
        files the note with it), asked before the message is handled; None when nothing is to say."""
        ...

    @property
    def client_sessions(self) -> Container[str]:
        """The client sessions this engine minted (their requests must come back to it): the router
        reads it on every request, so it is a plain attribute, not a call."""
        ...


@dataclass
class _LegStream:
    """What a leg's reader saw of its SSE body: the last event id and `retry`, which a LegCut reports."""

    sse: bool = False
    channel: Channel = Channel.SSE
    """What its events are observed on: `get_sse` on a GET stream, `sse` on a POST's response."""
    last_id: str | None = None
    retry_ms: int | None = None
    sent: str | None = None
    """The JSON-RPC method of the POST the leg sent while its refused answer awaits judging
    (`leg_suspicion`); None once judged, or for a leg whose answer is no refusal."""
    unread: bytes = b""
    """A JSON body that held no JSON-RPC message (a refusal's words), for the engine to quote."""


@dataclass
class _Exchange:
    """An open client exchange: the client's side of it, and the writes queued for it.

    The writes are a queue its handler can look into: a stream's head goes out with the event queued
    behind it, and a last event with the stream's end, one write(2) each instead of two.
    """

    client: ClientSide
    route: Route | None = None
    """The client's request (an intercept hands the bridge an answer under its session)."""
    writes: deque[BridgeCommand] = field(default_factory=deque)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    done: bool = False
    answered: bool = False
    """A whole response was given to the client side (`ReplyJson`)."""
    edited: str | None = None
    """The note of the bridge's upstream call made from the client's request an intercept edited,
    until that call goes out."""
    reached: bool = False
    """A leg made for this exchange got a response head: the upstream saw the exchange's request."""

    def put(self, command: BridgeCommand) -> None:
        self.writes.append(command)
        self.ready.set()

    async def take(self) -> BridgeCommand:
        while not self.writes:
            self.ready.clear()
            await self.ready.wait()
        return self.writes.popleft()

    def take_if(self, kind: type[BridgeCommand]) -> BridgeCommand | None:
        """The next queued write when it is of this kind (taken off the queue), else None."""
        if self.writes and isinstance(self.writes[0], kind):
            return self.writes.popleft()
        return None

    def ending(self) -> EndClientResponse | None:
        """The queued end of the response when it comes next and the client is still there to get it."""
        end = self.writes[0] if self.writes else None
        if isinstance(end, EndClientResponse) and end.outcome != "client_disconnected":
            return end
        return None


class BridgeDriver:
    """Executes one bridge engine's commands; feeds it what the sockets report."""

    def __init__(
        self,
        engine: BridgeEngine,
        *,
        mode: Mode,
        upstream: Upstream,
        pool: Callable[[], UpstreamClient],
        observer: ObservationSink,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        responses: ResponseBudget | None = None,
    ) -> None:
        self.engine = engine
        self.max_message_bytes = max_message_bytes
        """Largest upstream message a leg holds to re-encode (a JSON body, or one SSE event)."""
        self.responses = responses if responses is not None else ResponseBudget()
        """The response bytes held across all clients (`max_response_bytes_in_flight`): each message a
        leg holds counts in it from its first byte until the engine has it."""
        self.mode = mode
        self.upstream = upstream
        self._pool = pool
        self.observer = observer
        self.exchanges: dict[str, _Exchange] = {}
        self.connections: set[str] = set()
        """Open client connections that brought this bridge a request (their close is news to it)."""
        self.legs: dict[str, asyncio.Task[Any]] = {}
        self.leg_exchange: dict[str, str] = {}
        self.timers: dict[str, asyncio.Handle] = {}
        self._reading: dict[str, UpstreamResponse] = {}
        """The response each leg is reading now (a due timer waits for what they hold unread)."""
        self._resumes: dict[str, ResumeLeg] = {}
        self.upstream_transport: Callable[[], str] = lambda: upstream.transport
        """How the upstream is spoken to now (`http`, `sse`, `stdio`): the probe may find `sse`."""
        self.suspect: Callable[[str], None] = _unheard
        """Told why an answer to the bridge's own request casts doubt on the upstream's era (the
        router's `suspect`, which probes again): the bridge's requests are all a replaced upstream meets."""
        self.restarted: Callable[[str], None] = _unheard
        """Told why the engine believes the upstream restarted or ended its session (the router's
        `restarted`, which probes its era again before the next request is routed)."""
        self.faults: RelayContext | None = None
        """Where the fault rules in force are found (`RelayContext.gate`), and the OAuth origin rewrite's
        setting and learned document paths, which a refusal's challenge follows; None: never consulted."""
        self.intercepts: BridgeHolds | None = None
        """Intercepts on the bridge's own messages (`proxy.transport.bridge_holds`); None: never asked."""
        self._leg_heads: dict[str, tuple[tuple[str, str], ...]] = {}
        """Request headers of open legs while intercepts are in force: an answer the proxy POSTs to
        the upstream's request on a leg goes with that leg's session."""
        self._standing: set[str] = set()
        """Open legs that are a session's own GET stream (kept while the session lives)."""
        self._cors = CorsAnswers()
        """The upstream's CORS answer by request origin: the bridge's own answers carry it."""
        self._stop_legs: list[asyncio.Task[Any]] | None = None
        """The upstream requests the engine started when the proxy began to stop (None: not yet)."""
        """A cut leg's resume order, between the LegCut that caused it and the leg's reader."""
        self.log = get_logger()

    # -- client side ------------------------------------------------------------------------------

    async def serve(self, client: ClientSide, exchange: str, route: Route) -> None:
        """Handle one client exchange to its end (the engine decides when that is).

        A response the proxy makes whole (`ReplyJson`) is left with the client side, which sends it
        once the exchange ends; a stream is written as the engine orders it.
        """
        ex = _Exchange(client, route)
        self.exchanges[exchange] = ex
        self._observe_client_request(exchange, client, route)
        relays = self.faults
        gate = relays.gate if relays is not None else None
        if gate is not None and relays is not None:  # fault rules are in force: they may hold or answer
            answer = await bridged_client_faults(
                gate, self.observer, exchange, route, self.mode, relays.holds, relays.desk
            )
            if isinstance(answer, Edited):  # an intercept's decision edited the client's message
                route = ex.route = answer.route
                ex.edited = answer.note
            elif answer is not None:
                status, message, note = answer
                self.exchanges.pop(exchange, None)
                data = self._observe_reply(exchange, status, message, (), note)
                _json_response(client, status, data, ())
                return
        holds = self.intercepts
        if holds is not None and holds.active:
            holds.client_request(exchange, route.body.messages)
        connection = client.connection
        self.connections.add(connection)
        self.feed(ClientRequestReceived(exchange, route, time.time(), client.peer, connection))
        try:
            while not ex.done:
                await self._write(exchange, ex, await ex.take())
        except asyncio.CancelledError as cancel:
            if not ex.done:
                ex.done = True
                self.feed(ClientDisconnected(exchange))
            self._close_observation(exchange, cut_outcome(cancel))
            raise
        finally:
            self.exchanges.pop(exchange, None)
            if holds is not None:
                holds.forget(exchange=exchange)
        if not ex.answered and not client.started:
            client.respond(500, b"", None, ())  # ended without an answer: the client is never left waiting

    async def _write(self, exchange: str, ex: _Exchange, cmd: BridgeCommand) -> None:
        holds = self.intercepts
        holding = holds is not None and holds.active
        if holding and holds is not None and isinstance(cmd, ReplyJson | SendSse) and cmd.message is not None:
            held = await self._held_for_client(exchange, ex, cmd, holds)
            if held is None:
                return
            cmd = held
        match cmd:
            case ReplyJson(_, status, message, headers, note, outcome):
                headers = self._cors.add_to(origin_of(ex.client.headers), headers)
                moves = self._challenge_moves(exchange, ex, status, headers)
                if moves is not None:
                    headers = moves.challenge_headers(headers)
                data = self._observe_reply(exchange, status, message, headers, note, outcome, moves)
                _json_response(ex.client, status, data, headers)
                ex.answered = ex.done = True
            case StartSse(_, headers):
                head = self._cors.add_to(origin_of(ex.client.headers), _sse_head(headers))
                sink = self.observer
                sink.emit(ResponseHeadSeen(sink.now(), exchange, 200, "text/event-stream", dict(head)))
                # The head goes out with the event queued behind it (unless an intercept may hold it).
                first = ex.take_if(SendSse) if not holding else None
                event = self._event(exchange, first) if isinstance(first, SendSse) else b""
                end = ex.ending() if first is not None else None
                try:
                    ex.client.start_now(200, None, head, None, event, end=end is not None)
                except ClientGone:
                    self._client_left(exchange, ex)
                    return
                if end is not None:
                    ex.writes.popleft()
                    await self._write(exchange, ex, end)
            case SendSse():
                if not ex.client.started:
                    return
                event = self._event(exchange, cmd)
                end = ex.ending()
                if end is not None:
                    ex.writes.popleft()
                    # The last event and the stream's end go out in one write.
                    await self._guard(exchange, ex, ex.client.write(event, end=True))
                    if not ex.done:
                        await self._write(exchange, ex, end)
                    return
                await self._guard(exchange, ex, ex.client.write(event))
            case EndClientResponse(_, outcome):
                if outcome != "client_disconnected":
                    if ex.client.started:
                        await self._guard(exchange, ex, ex.client.finish())  # a no-op once the end went out
                    elif not ex.answered:
                        self._end_unanswered(exchange, ex, outcome)
                ex.done = True
                self._close_observation(exchange, outcome)

    def _end_unanswered(self, exchange: str, ex: _Exchange, outcome: str | None) -> None:
        """End a client's request that gets no answer before anything went out, observed as it goes.

        A cancelled request gets none, as the protocol asks: its stream opens and ends with no event,
        what a server that drops a cancelled request sends (an error body would be a response to an id
        the client has forgotten). Anything else ends with a bare 500, so the client never waits on.
        """
        sink = self.observer
        origin = origin_of(ex.client.headers)
        if outcome == "cancelled":
            head = self._cors.add_to(origin, _sse_head(()))
            sink.emit(ResponseHeadSeen(sink.now(), exchange, 200, "text/event-stream", dict(head)))
            with contextlib.suppress(ClientGone):  # a client that left first is owed nothing
                ex.client.start_now(200, None, head, None, b"", end=True)
            return
        bare = self._cors.add_to(origin, ())
        sink.emit(ResponseHeadSeen(sink.now(), exchange, 500, None, dict(bare)))
        ex.client.respond(500, b"", None, bare)

    async def _held_for_client(
        self, exchange: str, ex: _Exchange, cmd: ReplyJson | SendSse, holds: BridgeHolds
    ) -> ReplyJson | SendSse | None:
        """A message the bridge sends the client, past the intercepts: what to write (None: nothing)."""
        assert cmd.message is not None
        route = ex.route
        outcome = await holds.to_client(exchange, cmd.message, route.session_id if route else None)
        if outcome.verb == "send":
            return cmd if outcome.message is cmd.message else replace(cmd, message=outcome.message)
        if isinstance(cmd, ReplyJson):  # a whole answer always goes out: nothing else ends the exchange
            return replace(cmd, status=202, message=None)
        if outcome.verb == "reply" and route is not None and route.session_id is not None:
            answer = classify_value(outcome.message)  # the bridge gets it as made in the client's place
            self.feed(AnsweredForClient(route.session_id, answer, answerer(outcome.by), outcome.dropped))
        return None

    def _event(self, exchange: str, cmd: SendSse) -> bytes:
        """One SSE event on the client's stream, observed as it goes out."""
        data = dumps(cmd.message)
        self._observe_client_bound(exchange, cmd.message, len(data), Channel.SSE, cmd.note)
        return encode_json_event(data, id=cmd.event_id)

    async def _guard(self, exchange: str, ex: _Exchange, write: Awaitable[None]) -> None:
        try:
            await write
        except ClientGone:
            self._client_left(exchange, ex)

    def _client_left(self, exchange: str, ex: _Exchange) -> None:
        """The client's connection closed under a write: the engine learns the client is gone."""
        if not ex.done:
            ex.done = True
            self.feed(ClientDisconnected(exchange))
            self._close_observation(exchange, "client_disconnected")

    # -- engine -----------------------------------------------------------------------------------

    def feed(self, event: BridgeEvent) -> None:
        """Give the engine one fact and carry out its orders (writes are queued per exchange)."""
        for command in self.engine.handle(event):
            self._do(command)

    def connection_closed(self, connection: str) -> None:
        """A client connection closed: the engine hears it when that connection brought it requests
        (and the proxy is not stopping, which ends everything anyway)."""
        if connection in self.connections:
            self.connections.discard(connection)
            if self._stop_legs is None:
                self.feed(ClientConnectionClosed(connection))

    def stopping(self) -> None:
        """The proxy is stopping: the engine ends what it holds. Calls whose clients still wait get
        their error on their own streams (before the front closes the connections), and upstream
        sessions a DELETE each; asked more than once, it acts once."""
        if self._stop_legs is not None:
            return
        before = set(self.legs)
        self.feed(Stopping(time.time()))
        self._stop_legs = [task for leg, task in self.legs.items() if leg not in before]

    async def release_upstream(self, seconds: float) -> None:
        """Wait at most `seconds` for the upstream requests `stopping` started (before the pool closes)."""
        self.stopping()
        if self._stop_legs:
            await asyncio.wait(self._stop_legs, timeout=seconds)

    def _do(self, command: BridgeCommand) -> None:
        match command:
            case ReplyJson(exchange) | StartSse(exchange) | SendSse(exchange) | EndClientResponse(exchange):
                ex = self.exchanges.get(exchange)
                if ex is not None and not ex.done:
                    ex.put(command)
                # An exchange already done was closed, and observed closed, by whoever ended it (its
                # answer, its end, or its client leaving): an order for it now has nothing to do.
            case SendLeg(leg, exchange, headers, message, related):
                self.leg_exchange[leg] = exchange
                if related is not None:
                    self.observer.emit(LegLinked(self.observer.now(), leg, related))
                self._observe_leg(
                    leg,
                    exchange,
                    message,
                    Direction.TO_SERVER,
                    len(dumps(message)),
                    Channel.POST,
                    self._edit_note(exchange, message),
                )
                query = self._query(exchange)
                holds = self.intercepts
                if holds is not None and holds.active:
                    self._leg_heads[leg] = headers
                    held = self._run_held_leg(holds, leg, exchange, query, headers, message)
                    self.legs[leg] = spawn(held, name=f"leg-{leg}")
                    return
                run = self._run_leg(leg, query, "POST", headers, dumps(message), message.get("method"))
                self.legs[leg] = spawn(run, name=f"leg-{leg}")
            case DeleteSession(leg, headers):
                self.leg_exchange[leg] = ""
                self._observe_bodiless(leg, "", "DELETE")
                run = self._run_leg(leg, "", "DELETE", headers, b"")
                self.legs[leg] = spawn(run, name=f"leg-{leg}")
            case OpenLegStream(leg, exchange, headers, standing):
                self.leg_exchange[leg] = exchange
                if standing:
                    self._standing.add(leg)
                if self.intercepts is not None and self.intercepts.active:
                    self._leg_heads[leg] = headers
                self._observe_bodiless(leg, exchange, "GET")
                run = self._run_leg(leg, self._query(exchange), "GET", headers, b"")
                self.legs[leg] = spawn(run, name=f"leg-{leg}")
            case ResumeLeg(leg):
                self._resumes[leg] = command  # carried out by the leg's reader, which fed the cut
            case CloseLeg(leg, outcome):
                self._resumes.pop(leg, None)
                self._forget_leg(leg)
                task = self.legs.pop(leg, None)
                self.leg_exchange.pop(leg, None)
                if task is not None:  # else its reader is ending it, and observes it closed with its cause
                    self.observer.emit(LegClosed(self.observer.now(), leg, outcome))
                    task.cancel()
            case StartTimer(timer, seconds):
                self._cancel_timer(timer)
                loop = asyncio.get_running_loop()
                until = loop.time() + seconds + max(seconds, _LEAST_GRACE)
                self.timers[timer] = loop.call_later(seconds, self._fire, timer, until)
            case CancelTimer(timer):
                self._cancel_timer(timer)
            case ObserveContinuation(exchange, continuation, state, principal, pending, age_ms, stopped):
                sink = self.observer
                outcome = PROXY_STOPPING if stopped else None
                sink.emit(
                    ContinuationMoved(
                        sink.now(), exchange, continuation, state, principal, tuple(pending), age_ms, outcome
                    )
                )
            case ObserveSession(session, state, principal, capabilities, version):
                sink = self.observer
                sink.emit(UpstreamSessionMoved(sink.now(), session, state, principal, capabilities, version))
            case Log(event, level, fields):
                getattr(self.log, level)(event, mode=self.mode.value, **fields)
            case RecheckUpstreamEra(reason):
                self.restarted(reason)

    def _fire(self, timer: str, until: float) -> None:
        """A timer fell due: feed TimerFired once the legs have fed what had reached the proxy by then.

        The loop runs due timers before it reads its sockets (uvloop) or before the callbacks that
        carry what it read, so a timer fed at once could overtake a leg message that arrived inside
        the window. While a leg holds unread bytes the check runs again behind them, up to `until`
        (one more timer length: a leg whose reading is paused cannot hold a timer back for longer).
        """
        loop = asyncio.get_running_loop()
        if loop.time() < until and any(resp.unread() for resp in self._reading.values()):
            self.timers[timer] = loop.call_soon(self._fire, timer, until)
            return
        self.timers.pop(timer, None)
        self.feed(TimerFired(timer, time.time()))

    def _cancel_timer(self, timer: str) -> None:
        handle = self.timers.pop(timer, None)
        if handle is not None:
            handle.cancel()

    # -- upstream legs ----------------------------------------------------------------------------

    def _query(self, exchange: str) -> str:
        """The raw query of the client request behind the leg (the pool puts it after the upstream's)."""
        ex = self.exchanges.get(exchange)
        return ex.client.raw_query if ex is not None else ""

    async def _run_leg(
        self,
        leg: str,
        query: str,
        method: str,
        headers: tuple[tuple[str, str], ...],
        body: bytes,
        sent: Any = None,
    ) -> None:
        """Send one leg and feed what comes back; a cut SSE body is reopened while the engine says so.
        `sent` is the method of the JSON-RPC request the leg carries, whose refusal is judged."""
        resp = await self._open_leg(leg, query, method, headers, body)
        if resp is None:
            return
        sink = self.observer  # before the engine hears of it: an error status may close the leg at once
        head = recorded(resp.headers)
        sink.emit(LegHeadSeen(sink.now(), leg, resp.status, resp.header("content-type"), head))
        served = self.exchanges.get(self.leg_exchange.get(leg, ""))
        if served is not None:
            served.reached = True
            self._cors.learn(origin_of(served.client.headers), resp.headers)
        self.feed(LegResponded(leg, resp.status, tuple(resp.headers), time.time()))
        stream = _LegStream(channel=Channel.GET_SSE if method == "GET" else Channel.SSE)
        if isinstance(sent, str) and resp.status in ERA_REFUSALS:
            stream.sent = sent
        while True:
            self._reading[leg] = resp
            fault = "cut"
            try:
                await self._read_leg(leg, resp, stream)
                cut: str | None = None
                resp.release()  # read to its end: the connection carries the next leg
            except UpstreamError as exc:
                cut = str(exc) or type(exc).__name__
                fault = exc.kind
                self._judge(stream, resp.status, None)
            except SseTooLarge as exc:
                cut = f"an upstream SSE event larger than {exc.limit} bytes (max_bridged_message_bytes)"
            finally:
                self._reading.pop(leg, None)
                resp.close()  # a no-op once released; drops a connection whose body was not read out
            if not stream.sse or fault == OVER_BUDGET:  # the proxy gave up on it: no resume brings it back
                self._leg_done(
                    leg,
                    LegFailed(leg, fault, cut, time.time())
                    if cut is not None
                    else LegEnded(leg, time.time(), stream.unread),
                )
                return
            resume = self._leg_cut(leg, LegCut(leg, stream.last_id, stream.retry_ms, cut, time.time()))
            if resume is None:
                return
            await asyncio.sleep(resume.delay_s)
            resp = await self._open_leg(leg, query, "GET", resume.headers, b"")
            if resp is None:
                return

    async def _run_held_leg(
        self,
        holds: BridgeHolds,
        leg: str,
        exchange: str,
        query: str,
        headers: tuple[tuple[str, str], ...],
        message: dict[str, Any],
    ) -> None:
        """A leg whose message an intercept may hold: sent as decided, or answered in the upstream's place."""
        outcome = await holds.to_upstream(leg, exchange, message)
        if outcome.verb == "send":
            await self._run_leg(leg, query, "POST", headers, dumps(outcome.message))
            return
        if outcome.verb == "reply":  # the bridge reads the answer as the upstream's JSON body
            self.feed(LegResponded(leg, 200, (("Content-Type", "application/json"),), time.time()))
            if leg in self.legs:
                self.feed(LegMessage(leg, classify_value(outcome.message), None, time.time()))
        else:  # a notification or an answer dropped: as the upstream's 202
            self.feed(LegResponded(leg, 202, (), time.time()))
        self._leg_done(leg, LegEnded(leg, time.time()))

    async def _answer_upstream(self, leg: str, served: str, outcome: Outcome) -> None:
        """POST the answer `outcome` made to the upstream's request on `leg`, as the client would, with
        the leg's session; recorded first as the server's leg of the exchange its question's chain is on
        (that of the leg `served`: `leg`, or the call a GET stream's question was given to), noted whose
        it is."""
        sink = self.observer
        answer = outcome.message
        made = classify_value(answer)
        exchange = self.leg_exchange.get(served, "")
        note = answered_for_client(outcome.by or "", outcome.dropped)
        sink.emit(
            MessageSeen(
                sink.now(), exchange, made, len(dumps(answer)), Direction.TO_SERVER, Channel.POST,
                Side.UPSTREAM, note=note, answered_by=outcome.by,
            )
        )  # fmt: skip
        heads = [(k, v) for k, v in self._leg_heads.get(leg, ()) if k.lower() not in _OWN_HEADERS]
        heads += [("Accept", "application/json, text/event-stream"), ("Content-Type", "application/json")]
        try:
            resp = await self._pool().request(
                "POST",
                self.upstream.base_path,
                tuple(heads),
                dumps(answer),
                self._query(self.leg_exchange.get(leg, "")),
            )
            try:
                with self.responses.hold() as hold:
                    await read_held(
                        resp, self.max_message_bytes, "the upstream's reply to an intercept's answer", hold
                    )
            finally:
                resp.close()
        except (TimeoutError, UpstreamError) as exc:
            self.log.warning("intercept_answer_failed", mode=self.mode.value, leg=leg, detail=str(exc)[:300])

    async def _leg_message(self, leg: str, msg: Message, sse_id: str | None) -> None:
        """Feed the engine one upstream message, past the intercepts when any is in force."""
        holds = self.intercepts
        if holds is not None and holds.active:
            served = self.engine.joins(leg, msg) or leg  # asked before the hold, as its observation was
            outcome = await holds.from_upstream(leg, self.leg_exchange.get(leg, ""), msg)
            if outcome.verb == "reply":
                await self._answer_upstream(leg, served, outcome)
                return
            if outcome.verb == "skip" or leg not in self.legs:
                return
            msg = outcome.message
        self.feed(LegMessage(leg, msg, sse_id, time.time()))

    async def _open_leg(
        self, leg: str, query: str, method: str, headers: tuple[tuple[str, str], ...], body: bytes
    ) -> UpstreamResponse | None:
        """A leg's request to the upstream's MCP endpoint, with the client's `query` after the URL's own."""
        pool = self._pool()
        try:
            return await pool.request(method, self.upstream.base_path, headers, body, query)
        except TimeoutError:
            self._leg_done(
                leg, LegFailed(leg, "timeout", f"no response head within {pool.head_timeout}s", time.time())
            )
        except UpstreamError as exc:
            if exc.never_sent:
                self._never_reached(leg, exc.kind)
            self._leg_done(leg, LegFailed(leg, exc.kind, str(exc) or type(exc).__name__, time.time()))
        return None

    def _never_reached(self, leg: str, reason: str) -> None:
        """Record the exchange behind `leg` as answered by the proxy when none of its legs reached the
        upstream: its chains took no upstream time, as a relayed request to an unreachable upstream."""
        exchange = self.leg_exchange.get(leg, "")
        served = self.exchanges.get(exchange)
        if served is not None and not served.reached:
            self.observer.emit(AnsweredByProxy(self.observer.now(), exchange, reason))

    async def _read_leg(self, leg: str, resp: UpstreamResponse, stream: _LegStream) -> None:
        """Feed the engine the messages of a leg's body, each counted in the response budget from its
        first byte until the engine has it (given back however the read ends)."""
        with self.responses.hold() as hold:
            if is_sse(resp.header("content-type")):
                stream.sse = True
                self._judge(stream, resp.status, None)
                await self._read_events(leg, resp, stream, hold)
                return
            what = "upstream message (max_bridged_message_bytes)"
            raw = await read_held(resp, self.max_message_bytes, what, hold)
            await self._leg_json(leg, resp, stream, raw)

    async def _read_events(self, leg: str, resp: UpstreamResponse, stream: _LegStream, hold: Hold) -> None:
        """An SSE body's events, each message fed on as it completes; the event still arriving, and
        those completed and not yet fed, count in `hold`."""
        decoder = SseDecoder(self.max_message_bytes)
        async for chunk in resp.chunks():
            items = decoder.feed(chunk)
            held = decoder.pending_bytes + sum(len(item.data) for item in items if isinstance(item, SseEvent))
            if held > hold.size and not hold.settle(held):
                raise refused_message(hold, f"an upstream SSE event of at least {held} bytes")
            for item in items:
                if isinstance(item, SseEvent):
                    await self._leg_event(leg, item, stream)
            hold.settle(decoder.pending_bytes)  # never more than it held: always granted

    async def _leg_json(self, leg: str, resp: UpstreamResponse, stream: _LegStream, raw: bytearray) -> None:
        """Feed the engine the messages of a leg's whole JSON body."""
        self._judge(stream, resp.status, raw)
        body = parse_body(raw)
        messages = body.messages
        if resp.status >= 400 and all(msg.kind is Kind.INVALID for msg in messages):
            stream.unread = bytes(raw)  # no JSON-RPC message (`{"error": "invalid_token"}` is none either)
        if beyond_encoding(raw, (msg.raw for msg in messages)):
            raise UpstreamError("cut", _TOO_DEEP)
        if body.non_finite:
            raise UpstreamError("cut", NOT_REENCODABLE)
        for msg in messages:
            if leg in self.legs:
                self._observe_leg_msg(leg, msg, len(raw), Channel.JSON)
                await self._leg_message(leg, msg, None)

    async def _leg_event(self, leg: str, item: SseEvent, stream: _LegStream) -> None:
        if item.id is not None:
            stream.last_id = item.id
        if item.retry is not None:
            stream.retry_ms = item.retry
        if not item.carries_message or leg not in self.legs:
            return
        msg, non_finite = parse_event_text(item.data)
        if beyond_encoding(item.data, (msg.raw,)):
            raise UpstreamError("cut", _TOO_DEEP)
        if non_finite:
            raise UpstreamError("cut", NOT_REENCODABLE)
        self._observe_leg_msg(leg, msg, len(item.data), stream.channel)
        await self._leg_message(leg, msg, item.id)

    def _judge(self, stream: _LegStream, status: int, body: bytes | bytearray | None) -> None:
        """A refused request of the bridge's own, judged once with its body (None: by its status)."""
        sent, stream.sent = stream.sent, None
        if sent is None:
            return
        era = Era(BRIDGE_ERAS[self.mode][1])
        if (doubt := leg_suspicion(sent, era, status, body, self.mode.value)) is not None:
            self.suspect(doubt)

    def _leg_cut(self, leg: str, event: LegCut) -> ResumeLeg | None:
        """Tell the engine a leg's SSE body stopped; its ResumeLeg keeps the leg, else the leg is over."""
        task = self.legs.pop(leg, None)
        if task is None:
            return None  # closed by the engine meanwhile
        self.feed(event)
        resume = self._resumes.pop(leg, None)
        if resume is not None:
            self.legs[leg] = task
            return resume
        self.leg_exchange.pop(leg, None)
        self._forget_leg(leg)
        outcome = fault_outcome("cut") if event.detail is not None else None
        self.observer.emit(LegClosed(self.observer.now(), leg, outcome))
        return None

    def _leg_done(self, leg: str, event: LegEnded | LegFailed) -> None:
        self._forget_leg(leg)
        if self.legs.pop(leg, None) is None:
            return
        self.feed(event)
        self.leg_exchange.pop(leg, None)
        outcome = fault_outcome(event.reason) if isinstance(event, LegFailed) else None
        self.observer.emit(LegClosed(self.observer.now(), leg, outcome))

    def _forget_leg(self, leg: str) -> None:
        self._standing.discard(leg)
        if self._leg_heads:
            self._leg_heads.pop(leg, None)
        if self.intercepts is not None:
            self.intercepts.forget(leg=leg)

    # -- observation ------------------------------------------------------------------------------

    def _observe_leg(
        self,
        leg: str,
        exchange: str,
        message: Any,
        direction: Direction,
        size: int,
        channel: Channel,
        note: str | None = None,
    ) -> None:
        msg = message if isinstance(message, Message) else classify_value(message)
        sink = self.observer
        sink.emit(LegMessageSeen(sink.now(), leg, exchange, msg, size, direction, channel, note=note))

    def _edit_note(self, exchange: str, message: dict[str, Any]) -> str | None:
        """The note of the bridge's first upstream call made from a client's request an intercept
        edited: the call of the client's method (not a session's `initialize` the bridge sends first)."""
        ex = self.exchanges.get(exchange)
        if ex is None or ex.edited is None or ex.route is None:
            return None
        first = ex.route.body.first
        if first is None or message.get("method") != first.method or "id" not in message:
            return None
        note, ex.edited = ex.edited, None
        return note

    def _observe_bodiless(self, leg: str, exchange: str, method: str) -> None:
        """A leg that sends no message: observed as it goes, since nothing on it names its method, with
        the transports of the exchange it serves (a DELETE serves none: its client's is the default)."""
        served = self.exchanges.get(exchange)
        client = served.client.transport if served is not None else "http"
        sink = self.observer
        sink.emit(LegOpened(sink.now(), leg, exchange, method, self.mode, client, self.upstream_transport()))

    def _observe_leg_msg(self, leg: str, msg: Message, size: int, channel: Channel) -> None:
        """An upstream message on `leg`, filed with the exchange of the leg whose chain it joins."""
        joins = self.engine.joins(leg, msg)
        exchange = self.leg_exchange.get(leg if joins is None else joins, "")
        note = self.engine.undelivered(leg, msg) if joins is None else None
        sink = self.observer
        seen = LegMessageSeen(sink.now(), leg, exchange, msg, size, Direction.TO_CLIENT, channel, joins, note)
        sink.emit(seen)

    def _observe_reply(
        self,
        exchange: str,
        status: int,
        message: dict[str, Any] | None,
        headers: tuple[tuple[str, str], ...],
        note: str | None = None,
        outcome: str | None = None,
        moves: OriginRewrites | None = None,
    ) -> bytes | None:
        """Record a whole answer the bridge makes; returns its body, encoded once for both (None: none)."""
        sink = self.observer
        content_type = "application/json" if message else None
        sink.emit(
            ResponseHeadSeen(
                sink.now(), exchange, status, content_type, answer_headers(content_type, headers)
            )
        )
        for rewrite in moves.take() if moves is not None else ():  # recorded after the head they changed
            sink.emit(rewrite)
        data = dumps(message) if message is not None else None
        if message is not None and data is not None:
            self._observe_client_bound(exchange, message, len(data), Channel.JSON, note)
        self._close_observation(exchange, outcome)
        return data

    def _challenge_moves(
        self, exchange: str, ex: _Exchange, status: int, headers: tuple[tuple[str, str], ...]
    ) -> OriginRewrites | None:
        """Where the `resource_metadata` of a refusal's challenge moves onto the proxy's origin, by the
        rules pass-through follows (`rewrite_oauth_origin`); None when nothing may move."""
        relays = self.faults
        if relays is None or not relays.rewrite_origin or not 400 <= status < 500 or not challenged(headers):
            return None
        host = header(ex.client.headers, "host")
        own = f"http://{host}" if host else relays.listen_url
        return OriginRewrites(Origins(self.upstream, own), self.observer, exchange, relays.documents)

    def _observe_client_request(self, exchange: str, client: ClientSide, route: Route) -> None:
        client_era, upstream_era = BRIDGE_ERAS[self.mode]
        sink = self.observer
        sink.emit(
            ExchangeOpened(
                sink.now(),
                exchange,
                http_method=client.method,
                path=client.path_qs,
                headers=recorded(client.headers),
                session=route.session_id,
                client_era=client_era,
                upstream_era=upstream_era,
                mode=self.mode,
                body_size=len(route.raw),
                client_transport=client.transport,
                upstream_transport=self.upstream_transport(),
                connection=client.connection,
            )
        )
        problem = route.body.parse_error
        if problem is not None and route.raw.strip():  # kept as it came, as pass-through keeps it
            sink.emit(InvalidBody(sink.now(), exchange, problem, len(route.raw), route.raw))
            return
        messages = route.body.messages
        for msg, size in zip(messages, member_sizes(messages, len(route.raw)), strict=True):
            sink.emit(
                MessageSeen(sink.now(), exchange, msg, size, Direction.TO_SERVER, Channel.POST, Side.CLIENT)
            )

    def _observe_client_bound(
        self, exchange: str, message: dict[str, Any], size: int, channel: Channel, note: str | None = None
    ) -> None:
        msg = classify_value(message)
        sink = self.observer
        sink.emit(
            MessageSeen(sink.now(), exchange, msg, size, Direction.TO_CLIENT, channel, Side.CLIENT, note=note)
        )

    def _close_observation(self, exchange: str, outcome: str | None) -> None:
        sink = self.observer
        summary = sink.close(ExchangeClosed(sink.now(), exchange, outcome))
        if summary is not None:
            traffic_line(self.log, "exchange", summary.log_fields(self.mode.value), summary.level)

    @property
    def open_streams(self) -> int:
        """Client exchanges whose SSE response is going out now (a call's stream, a GET stream)."""
        return sum(1 for ex in self.exchanges.values() if ex.client.started and not ex.done)

    def table_sizes(self) -> dict[str, int]:
        """Open exchanges, legs and timers (tests assert they drain); a session's own GET stream is
        counted apart, since it stays while the session lives."""
        standing = len(self._standing)
        return {
            "exchanges": len(self.exchanges),
            "legs": len(self.legs) - standing,
            "timers": len(self.timers),
            "session_streams": standing,
        }


def _unheard(_reason: str) -> None:
    """Where a driver nobody routes for sends its doubts (tests drive bridges without a router)."""


def _sse_head(headers: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """The head of an SSE response the proxy streams: its own fields, unless the engine sets them."""
    named = {name.lower() for name, _ in headers}
    return (*((k, v) for k, v in _SSE_HEADERS if k.lower() not in named), *headers)


def _json_response(
    client: ClientSide, status: int, data: bytes | None, headers: tuple[tuple[str, str], ...]
) -> None:
    """A complete response: the encoded JSON message, or an empty body (202); the proxy's own, named so."""
    if data is None:
        client.respond(status, b"", None, headers)
    else:
        client.respond(status, data, "application/json", headers)
