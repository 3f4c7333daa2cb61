"""The upstream pool's interface over message channels: a stdio child, an HTTP+SSE server's sessions.

The relay, the bridges and the era probe speak Streamable HTTP to their upstream through
`request(...) -> UpstreamResponse`. `ChannelUpstream` offers that same call, so none of them knows
whether a socket or a channel is behind it: each request becomes an exchange of a channel's sans-IO
core (`proxy.engine.channel`), whose commands this shell carries out (writes to the channel, a
response head, body bytes, the end). Which channel a request goes to is
`proxy.engine.channel.sessions`' decision; starting, restarting and stopping channels is done here,
their I/O by the channel kinds (`stdio_upstream`, `sse_upstream`).

Bounded: session channels (`max_sessions`), restarts of dying channels per minute (`Restarts`),
server messages held for a GET stream (the core's backlog), each message's size (the channel kinds
enforce `max_body_bytes`), and body bytes held per response (a response past `HIGH_WATER` pauses
reading from its channel, as a pool connection pauses its socket).
"""

from __future__ import annotations

import asyncio
import http
import itertools
import math
import secrets
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from proxy.engine.channel.core import ChannelCore
from proxy.engine.channel.restarts import Restarts
from proxy.engine.channel.sessions import ChannelSessions, NewSession, Refused, Shared, ToSession
from proxy.engine.channel.vocab import (
    Answer,
    ChannelClosed,
    ChannelCommand,
    ChannelEvent,
    ChannelOversized,
    ChannelReceived,
    ChannelWriteFailed,
    CloseChannel,
    DeleteRequested,
    EndStream,
    ExchangeAbandoned,
    HeadDue,
    Headers,
    OpenStream,
    PostReceived,
    StreamMessage,
    StreamRequested,
    WriteChannel,
)
from proxy.engine.commands import Log
from proxy.framing.classify import peek_id
from proxy.framing.http import Upstream, header
from proxy.logs import get_logger
from proxy.transport.upstream_pool import PendingHead, UpstreamError, UpstreamResponse
from proxy.wire import errors
from proxy.wire.headers import SESSION_ID
from proxy.wire.jsonrpc import Body, Message, dumps, error_response

HEAD_HOLD = 1.0
"""Seconds a response head waits for the first message before the response starts as an SSE stream
(so a slow call is never cut by the upstream timeout, which bounds heads)."""

_RESTART_HINT = "the next request starts it again"
_SESSION_GONE_HINT = (
    "its session is gone: that client's next request gets 404 (Session not found), and its client "
    "initializes again, which starts it again"
)
"""The hint for a legacy client's own session (a child, or an HTTP+SSE session, per session): only
a new `initialize` opens another, so the shared child's wording would promise what does not happen."""
_LOST_HINT = "mcp-proxy stdio stops, so its client sees the server go"
_IN_FLIGHT_HINT = "{} in flight got a JSON-RPC error; "
"""What an exit's hint says first when it cut requests short (never when none was in flight)."""

PROBE_SESSION_ENDED = (
    "the server ended the session the proxy's era probe (server/discover) was in flight on, with no "
    "client request on it: a handshake-era server that drops a session at a method it does not know "
    "does so (the mcp 1.3.0 SDK's HTTP+SSE server), which is expected; clients get sessions of their own"
)
"""What an HTTP+SSE session's end under the era probe alone means (`ChannelUpstream.ended`)."""

SSE_HEAD = (("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"))
"""The head of a response that became an SSE stream (before the core's own headers)."""
SSE_EVENT = b"event: message\ndata: "
"""What goes before each message's JSON on such a stream (a blank line follows it)."""


_JSON_TYPE = (("Content-Type", "application/json"),)


class RefusedStart(UpstreamError):
    """A channel could not start because the upstream refused the request that opened it with an
    answer meant for the client (an HTTP+SSE server's 401 to the client's credentials): its status,
    head and body, which the client gets in place of a gateway error."""

    def __init__(self, detail: str, status: int, headers: Headers, body: bytes) -> None:
        super().__init__("unreachable", detail)
        self.status = status
        self.headers = headers
        self.body = body


def off_endpoint(upstream: Upstream, path: str, transport: str) -> str:
    """Why a request to `path` reaches no server: a channel upstream (an HTTP+SSE or stdio server) has
    one MCP endpoint, which the proxy serves at `upstream.base_path` and `/`, and no other path."""
    shown = path if len(path) <= 200 else path[:200] + "..."
    return (
        f"this proxy serves MCP at {upstream.shown_path} (and /) only: its upstream is an "
        f"{'HTTP+SSE' if transport == 'sse' else transport} server, with no path "
        f"but its MCP endpoint; {shown} is not it, point the client at {upstream.shown_path}"
    )


def off_endpoint_answer(upstream: Upstream, path: str, transport: str, body: bytes) -> dict[str, Any]:
    """The JSON-RPC error a request off the endpoint gets (its id, when its body names one);
    `transport` is the upstream's (`sse`, `stdio`)."""
    return error_response(peek_id(body), errors.INVALID_REQUEST, off_endpoint(upstream, path, transport))


class ChannelEvents(Protocol):
    """What a channel reports to the one that owns it."""

    def received(self, data: bytes) -> None:
        """One message's bytes arrived from the peer."""

    def oversized(self, size: int, head: bytes, tail: bytes) -> None:
        """The peer sent a message over the size bound; it was dropped as it came."""

    def write_failed(self, exchange: str | None, detail: str) -> None:
        """A message written for `exchange` did not reach the peer."""

    def closed(self, reason: str, *, asked: bool, stderr: str = "") -> None:
        """The channel ended (`asked`: because `stop` was called); nothing more comes. `stderr` is
        the last of what a child process wrote there (bounded, secrets masked), to explain an exit."""


class Channel(Protocol):
    """One message channel's I/O (a stdio child, an HTTP+SSE session)."""

    async def start(self, headers: Iterable[tuple[str, str]] = ()) -> None:
        """Open the channel; UpstreamError("unreachable", why) when it cannot be opened.

        `headers` are those of the request that opened it (an HTTP+SSE session's GET carries them).
        """

    def write(
        self, data: bytes, exchange: str | None, headers: Iterable[tuple[str, str]] | None = None
    ) -> None:
        """Send one message (its JSON, no newline); a failure is reported through `write_failed`.

        `headers` are those of the request the message came in (None: a message of the proxy's own).
        """

    def stop(self, reason: str) -> None:
        """End the channel; `closed(..., asked=True)` follows."""

    async def stopped(self, grace: float) -> None:
        """Wait until the channel has ended, forcing it after `grace` seconds."""

    def probe_began(self) -> None:
        """The proxy's era probe is in flight on the channel: what the peer writes beside the protocol
        meanwhile (a stdio child's stderr) is its answer to the proxy, and is logged as such."""

    def probe_ended(self, note: str | None, *, at_exit: bool = False) -> None:
        """The probe has its answer, or never will; `note` says how the peer took it (None: not as a
        server of either era does, so what it wrote meanwhile may say why, and shows as it is).
        `at_exit`: the proxy stops the channel for the probe, so what the peer writes until it ends
        (a silent server's traceback at its stdin's close) is the probe's too, summed up then."""

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


class DirectReceiver(Protocol):
    """Who takes one direct exchange's response as the core orders it (no HTTP response is made).

    `message` is the data decoded, when the core had it.
    """

    def answered(self, status: int, headers: Headers, body: bytes, message: Message | None) -> None:
        """The whole response: its status, the core's head, and its body (empty for none)."""

    def opened(self, headers: Headers) -> None:
        """The response is an SSE stream from now on (messages follow)."""

    def streamed(self, data: bytes, message: Message | None) -> None:
        """One message on the stream."""

    def ended(self) -> None:
        """The stream ended."""


ChannelFactory = Callable[[ChannelEvents], Channel]
"""Makes one channel (not started yet) that reports to the given owner."""


class _Link:
    """One exchange's response as the UpstreamResponse sees its connection."""

    __slots__ = ("exchange", "owner", "paused", "transport")

    def __init__(self, owner: ChannelSession, exchange: str) -> None:
        self.owner = owner
        self.exchange = exchange
        self.paused = False
        self.transport: asyncio.Transport | None = None

    def pause(self) -> None:
        if not self.paused:
            self.paused = True
            self.owner.pause(1)

    def resume(self) -> None:
        if self.paused:
            self.paused = False
            self.owner.pause(-1)

    def finish(self, *, reusable: bool) -> None:
        self.resume()
        self.owner.finished(self.exchange)


class _Exchange:
    """One request's response while it is being built: its head, then the response it feeds."""

    __slots__ = ("head", "response")

    def __init__(self, head: asyncio.Future[UpstreamResponse]) -> None:
        self.head = head
        self.response: UpstreamResponse | None = None


class ChannelSession:
    """One channel with its core: feeds the core what the channel and the callers report, and carries
    out the core's commands."""

    def __init__(self, owner: ChannelUpstream, session: str | None) -> None:
        self.owner = owner
        self.session = session
        self.core = ChannelCore(session=session, backlog=owner.backlog)
        self.channel = owner.factory(self)
        self.exchanges: dict[str, _Exchange] = {}
        self.direct: dict[str, DirectReceiver] = {}
        """Exchanges posted directly (`post_direct`), each with who takes its response."""
        self.headers_of: dict[str, Iterable[tuple[str, str]]] = {}
        """The request headers of each exchange in flight, for the messages written for it."""
        self.carried = False
        """A request reached it while its owner was watched (`ChannelUpstream.on_lost`)."""
        self.ended = False
        self._paused = 0
        self._log = get_logger()

    def feed(self, event: ChannelEvent) -> None:
        for command in self.core.handle(event):
            self._do(command)

    def _do(self, command: ChannelCommand) -> None:
        if isinstance(command, Answer | EndStream):
            self.headers_of.pop(command.exchange, None)
        if self.direct and self._to_direct(command):
            return
        match command:
            case WriteChannel(data, exchange):
                self.channel.write(data, exchange, self.headers_of.get(exchange) if exchange else None)
            case Answer(exchange, status, headers, body, _):
                ex = self.exchanges.pop(exchange, None)
                if ex is not None:
                    response = self._respond(
                        ex, exchange, status, [*headers, ("Content-Length", str(len(body)))]
                    )
                    if body:
                        response.feed(body)
                    response.end()
            case OpenStream(exchange, headers):
                ex = self.exchanges.get(exchange)
                if ex is not None:
                    self._respond(ex, exchange, 200, [*SSE_HEAD, *headers])
            case StreamMessage(exchange, data, _):
                ex = self.exchanges.get(exchange)
                if ex is not None and ex.response is not None:
                    ex.response.feed(SSE_EVENT + data + b"\n\n")
            case EndStream(exchange):
                ex = self.exchanges.pop(exchange, None)
                if ex is not None and ex.response is not None:
                    ex.response.end()
            case CloseChannel(reason):
                self.owner.stopping(self)
                self.channel.stop(reason)
            case Log(event, level, fields):
                getattr(self._log, level)(event, upstream=self.owner.shown, **fields)

    def _to_direct(self, command: ChannelCommand) -> bool:
        """Hand a command for a direct exchange to its receiver; False for any other command."""
        direct = self.direct
        match command:
            case Answer(name, status, headers, body, message) if name in direct:
                direct.pop(name).answered(status, headers, body, message)
            case OpenStream(name, headers) if name in direct:
                direct[name].opened(headers)
            case StreamMessage(name, data, message) if name in direct:
                direct[name].streamed(data, message)
            case EndStream(name) if name in direct:
                direct.pop(name).ended()
            case _:
                return False
        return True

    def _respond(
        self, ex: _Exchange, exchange: str, status: int, headers: list[tuple[str, str]]
    ) -> UpstreamResponse:
        response = UpstreamResponse(_Link(self, exchange), status, _reason(status), headers)
        ex.response = response
        if not ex.head.done():
            ex.head.set_result(response)
        return response

    # -- the callers' side -------------------------------------------------------------------------

    def finished(self, exchange: str) -> None:
        """A caller released or closed its response: one it dropped before its end was abandoned."""
        if self.exchanges.pop(exchange, None) is not None or self.direct.pop(exchange, None) is not None:
            self.feed(ExchangeAbandoned(exchange))
        self.headers_of.pop(exchange, None)

    def head_due(self, exchange: str) -> None:
        if exchange in self.exchanges or exchange in self.direct:
            self.feed(HeadDue(exchange))

    def post_direct(
        self,
        name: str,
        raw: bytes,
        parsed: Body,
        receiver: DirectReceiver,
        headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        """A POST's message written to the channel as an exchange whose response goes to `receiver`,
        not into an HTTP response (the receiver may be answered before this returns); `headers` are
        the request's."""
        self.direct[name] = receiver
        self.headers_of[name] = headers
        self.carried = self.carried or self.owner.on_lost is not None
        self.feed(PostReceived(name, raw, parsed))

    def pause(self, delta: int) -> None:
        before = self._paused
        self._paused += delta
        if before == 0 and self._paused > 0:
            self.channel.pause_reading()
        elif before > 0 and self._paused == 0:
            self.channel.resume_reading()

    # -- the channel's side (ChannelEvents) ---------------------------------------------------------

    def received(self, data: bytes) -> None:
        self.feed(ChannelReceived(data))

    def oversized(self, size: int, head: bytes, tail: bytes) -> None:
        self.feed(ChannelOversized(size, head, tail, self.owner.max_message_bytes))

    def write_failed(self, exchange: str | None, detail: str) -> None:
        if exchange is None:
            self._log.warning("upstream_write_failed", upstream=self.owner.shown, detail=detail)
            return
        self.feed(ChannelWriteFailed(exchange, detail))

    def closed(self, reason: str, *, asked: bool, stderr: str = "") -> None:
        if self.ended:
            return
        self.ended = True
        self.feed(ChannelClosed(reason))
        for ex in self.exchanges.values():  # the core answered them all; nothing may be left waiting
            if not ex.head.done():
                ex.head.set_exception(UpstreamError("cut", reason))
        self.exchanges.clear()
        self.headers_of.clear()
        direct, self.direct = self.direct, {}
        for receiver in direct.values():
            receiver.ended()
        core = self.core
        self.owner.ended(
            self, reason, asked=asked, stderr=stderr, in_flight=core.cut_short, probe_cut=core.probe_cut
        )


class ChannelUpstream:
    """The upstream pool's interface (`request`) over message channels that `factory` makes.

    `transport` names the kind (`stdio`, `sse`) for display. `max_message_bytes` is the bound the
    channels enforce on each message, named when one is refused.
    """

    def __init__(
        self,
        upstream: Upstream,
        factory: ChannelFactory,
        *,
        transport: str,
        head_timeout: float,
        max_sessions: int,
        restarts_per_minute: int,
        max_message_bytes: int,
        backlog: int = 256,
        head_hold: float = HEAD_HOLD,
    ) -> None:
        self.upstream = upstream
        self.factory = factory
        self.transport = transport
        self.head_timeout = head_timeout
        self.max_message_bytes = max_message_bytes
        self.backlog = backlog
        self.head_hold = head_hold
        self.shown = upstream.shown
        self.sessions = ChannelSessions(lambda: secrets.token_hex(16), max_sessions, "max_upstream_children")
        self.restarts = Restarts(restarts_per_minute)
        self._shared: ChannelSession | None = None
        self._spare: ChannelSession | None = None
        """A channel the era probe started (it carries no session and no client request yet): the
        first request that needs a channel takes it, so the probe costs no process of its own."""
        self._spare_fresh = False
        """The spare's server saw nothing but a refused `server/discover`: a session may adopt it."""
        self._probed: ChannelSession | None = None
        """The spare while the probe's `server/discover` is in flight on it (no client's request is)."""
        self._stopping: set[ChannelSession] = set()
        """Channels asked to stop that have not ended yet (waited for before the probe starts one)."""
        self._starting: asyncio.Future[ChannelSession] | None = None
        self._by_session: dict[str, ChannelSession] = {}
        self._all: set[ChannelSession] = set()
        self._names = itertools.count(1)
        self._closed = False
        self.started = 0
        """Channels started so far (the first included)."""
        self.last_exit: tuple[float, str] | None = None
        """When a channel last ended on its own, and why (with its last stderr lines, if any)."""
        self._start_failed = ""
        """Why the last start failed ("" once one succeeds): logged once, not at every retry."""
        self.on_lost: Callable[[str], None] | None = None
        """Told why (the exit, the last stderr lines) when a channel that carried a request since this
        was set ends on its own: the shim (`mcp-proxy stdio -- CMD`) ends with its client's server,
        so the client sees it go, as it would without the proxy. Set once the start-up probe is
        done: the probe's own requests are no client's, and the probe's child that the first client
        takes carries from that client's first request on."""

    def request_nowait(
        self, method: str, path: str, headers: Iterable[tuple[str, str]], body: bytes, query: str = ""
    ) -> PendingHead | None:
        """Never at once: a channel's answer always comes later (the relay then awaits `request`)."""
        return None

    async def request(
        self, method: str, path: str, headers: Iterable[tuple[str, str]], body: bytes, query: str = ""
    ) -> UpstreamResponse:
        """One request as an exchange of the channel it belongs to; returns once its head is decided."""
        if self._closed:
            raise UpstreamError("unreachable", "the proxy is shutting down")
        if path not in self.upstream.endpoint_paths:
            return _whole(
                404, dumps(off_endpoint_answer(self.upstream, path, self.transport, body)), _JSON_TYPE
            )
        items = list(headers)
        placement = self.sessions.place(method, header(items, SESSION_ID), body)
        try:
            match placement:
                case Refused(status, answer):
                    return _whole(status, answer, _JSON_TYPE)
                case Shared():
                    session = await self._shared_session(items)
                case ToSession(name):
                    session = self._by_session[name]
                case NewSession(name):
                    session = await self._open(name, items)
        except RefusedStart as refused:  # the server's answer to the client's credentials: theirs
            return _whole(refused.status, refused.body, refused.headers)
        name = f"x{next(self._names)}"
        session.carried = session.carried or self.on_lost is not None
        return await self._exchange(session, name, _event(method, name, body), items)

    def direct_session(self, session: str | None) -> ChannelSession | None:
        """The running channel a request naming `session` (None: none) goes to, or None when the
        request must take `request` (the channel must be started, or the session is unknown)."""
        if self._closed:
            return None
        if session is None:
            shared = self._shared
            return shared if shared is not None and not shared.ended else None
        found = self._by_session.get(session)
        return found if found is not None and not found.ended else None

    async def probe_request(self, headers: Iterable[tuple[str, str]], body: bytes) -> UpstreamResponse:
        """The era probe's `server/discover`, on the running shared channel or else on the spare
        (started for it when there is none): the probe never adds a process beside another."""
        if self._closed:
            raise UpstreamError("unreachable", "the proxy is shutting down")
        items = list(headers)
        session = self.direct_session(None)
        if session is None:
            spare = self._spare
            if spare is None or spare.ended:
                await self.settle()
                spare = self._spare = await self._start(None, items)
                self._spare_fresh = False
            session = self._probed = spare
            spare.channel.probe_began()
        name = f"x{next(self._names)}"
        return await self._exchange(session, name, PostReceived(name, body), items)

    def probe_answered(self, note: str | None, *, at_exit: bool = False) -> None:
        """The probe's `server/discover` has its answer, or never will (`note` says how the server
        took it, None when not as a server of either era does): what the spare writes from now on is
        its server's own again. Only the spare is so marked: the
        running shared channel may carry clients' requests while the probe is in flight. `at_exit`:
        the probe stops the spare, and what it writes until then is the probe's too."""
        probed, self._probed = self._probed, None
        if probed is not None:
            probed.channel.probe_ended(note, at_exit=at_exit)

    def keep_spare_fresh(self) -> None:
        """The spare's server refused `server/discover` as a handshake-era server does: the first
        session's `initialize` goes to it (it saw no handshake yet)."""
        self._spare_fresh = self._spare is not None and not self._spare.ended

    async def drop_spare(self) -> None:
        """Stop the spare and wait until it has ended (before a channel that must not run beside it)."""
        spare, self._spare, self._spare_fresh = self._spare, None, False
        if spare is not None and not spare.ended:
            self._stop(spare, "the era probe is done with it")
        await self.settle()

    async def settle(self) -> None:
        """Wait until every channel asked to stop has ended (each forced after its own grace)."""
        stopping = [s for s in self._stopping if not s.ended]
        await asyncio.gather(*(s.channel.stopped(math.inf) for s in stopping), return_exceptions=True)

    def stopping(self, session: ChannelSession) -> None:
        """A channel was asked to stop (by the proxy, or by its core on a DELETE)."""
        if not session.ended:
            self._stopping.add(session)

    def _stop(self, session: ChannelSession, why: str) -> None:
        self.stopping(session)
        session.channel.stop(why)

    def release_shared(self, why: str) -> None:
        """Stop the shared channel while it carries nothing: the upstream serves no request that would
        use it. The era probe's `server/discover` starts it; a legacy-only server refuses that, and its
        2026-07-28 clients are bridged onto sessions of their own, so an idle child would only run
        beside them (and a server that allows one instance at a time would refuse them)."""
        shared = self._shared
        if shared is None or shared.ended or shared.exchanges:
            return
        self._shared = None
        self._stop(shared, why)

    def exchange_name(self) -> str:
        """A fresh name for an exchange of a channel's core."""
        return f"x{next(self._names)}"

    async def _exchange(
        self,
        session: ChannelSession,
        name: str,
        event: ChannelEvent | None,
        headers: Iterable[tuple[str, str]] = (),
    ) -> UpstreamResponse:
        if event is None:
            return _whole(405, b"", (("Allow", "GET, POST, DELETE"),))
        session.headers_of[name] = headers
        head: asyncio.Future[UpstreamResponse] = asyncio.get_running_loop().create_future()
        session.exchanges[name] = _Exchange(head)
        session.feed(event)
        if head.done():
            return head.result()
        timer = asyncio.get_running_loop().call_later(self.head_hold, session.head_due, name)
        try:
            return await head
        except asyncio.CancelledError:
            session.finished(name)
            raise
        finally:
            timer.cancel()

    async def _shared_session(self, headers: list[tuple[str, str]]) -> ChannelSession:
        shared = self._shared
        if shared is not None and not shared.ended:
            return shared
        spare, self._spare = self._spare, None
        if spare is not None and not spare.ended:  # the probe's child serves sessionless clients
            self._shared = spare
            return spare
        starting = self._starting
        if starting is None or starting.done():
            starting = self._starting = asyncio.get_running_loop().create_future()
            try:
                self._shared = await self._start(None, headers)
            except BaseException as exc:
                starting.set_exception(exc)
                starting.exception()  # retrieved: the waiters re-raise it
                self._starting = None
                raise
            starting.set_result(self._shared)
            return self._shared
        return await asyncio.shield(starting)

    async def _open(self, name: str, headers: list[tuple[str, str]]) -> ChannelSession:
        spare, fresh = self._spare, self._spare_fresh
        if spare is not None and fresh and not spare.ended and spare.core.idle:
            self._spare, self._spare_fresh = None, False
            spare.session = name
            spare.core.adopt_session(name)
            self._by_session[name] = spare
            return spare
        try:
            if spare is not None:  # it saw a 2026-07-28 request: never a session's, nor beside one
                await self.drop_spare()
            session = await self._start(name, headers)
        except BaseException:
            self.sessions.ended(name)
            raise
        self._by_session[name] = session
        return session

    async def _start(self, name: str | None, headers: list[tuple[str, str]]) -> ChannelSession:
        """Start a channel for a request with `headers`, waiting first as the restart budget says;
        refused past it."""
        now = time.monotonic()
        delay = self.restarts.delay(now)
        if delay is None:
            raise UpstreamError("unreachable", self.restarts.problem(now) or "restarting too often")
        if delay:
            await asyncio.sleep(delay)
        session = ChannelSession(self, name)
        self._all.add(session)
        try:
            await session.channel.start(headers)
        except RefusedStart:  # the server's answer to this request's credentials, which its client gets
            self._all.discard(session)
            raise
        except UpstreamError as exc:
            self._all.discard(session)
            if str(exc) != self._start_failed:
                self._start_failed = str(exc)
                get_logger().error("upstream_start_failed", upstream=self.shown, error=str(exc))
            raise
        except BaseException:
            self._all.discard(session)
            raise
        self._start_failed = ""
        self.started += 1
        return session

    def ended(
        self,
        session: ChannelSession,
        reason: str,
        *,
        asked: bool,
        stderr: str = "",
        in_flight: int = 0,
        probe_cut: int = 0,
    ) -> None:
        """A channel closed: forget it; one that died on its own counts against the restart budget.

        `in_flight`: the requests its end answered with a JSON-RPC error, which the warning
        counts (and mentions only when there were some). `probe_cut`: the era probe's own requests
        it cut short; an HTTP+SSE session that ends under those alone is the probe's
        (`_probe_session_ended`)."""
        self._all.discard(session)
        self._stopping.discard(session)
        if session is self._shared:
            self._shared = None
        if session is self._spare:
            self._spare, self._spare_fresh = None, False
        if session.session is not None:
            self._by_session.pop(session.session, None)
            self.sessions.ended(session.session)
        if not asked and not self._closed:
            now = time.monotonic()
            self.last_exit = (now, f"{reason}; its last stderr lines: {stderr}" if stderr else reason)
            lost = self.on_lost if session.carried else None
            if probe_cut and not in_flight and lost is None and self.transport != "stdio":
                self._probe_session_ended(reason)
                return
            self.restarts.exited(now)
            hint = _LOST_HINT if lost is not None else self._restart_hint(session)
            if in_flight:
                hint = _IN_FLIGHT_HINT.format(_requests(in_flight)) + hint
            get_logger().warning(
                "upstream_exited",
                upstream=self.shown,
                transport=self.transport,
                reason=reason,
                session=session.session is not None,
                in_flight=in_flight,
                hint=hint,
                **({"stderr": stderr} if stderr else {}),
            )
            if lost is not None:
                lost(self.last_exit[1])

    @staticmethod
    def _restart_hint(session: ChannelSession) -> str:
        """What a client does next after `session` went: a session's client initializes again; the
        shared channel's next request starts a new one."""
        return _SESSION_GONE_HINT if session.session is not None else _RESTART_HINT

    def _probe_session_ended(self, reason: str) -> None:
        """One info line for an HTTP+SSE session the server ended while the era probe's request was
        the only one on it: the server's answer to the probe, which cut no client's request and takes
        no restart from the budget (a server crash is a stdio child's exit, still warned of)."""
        get_logger().info(
            "upstream_probe_session_ended",
            upstream=self.shown,
            transport=self.transport,
            reason=reason,
            note=PROBE_SESSION_ENDED,
        )

    def exited_since(self, since: float) -> str | None:
        """Why a channel ended on its own at or after `since` (monotonic), or None."""
        last = self.last_exit
        return last[1] if last is not None and last[0] >= since else None

    @property
    def start_failure(self) -> str:
        """Why the last start of a channel failed (the command is not installed, say); "" once one
        started."""
        return self._start_failed

    def problem(self) -> str | None:
        """Why no channel can be started now (readiness), or None."""
        return self.restarts.problem(time.monotonic())

    async def aclose(self, grace: float) -> None:
        """Stop every channel (a stdio child: stdin closed, SIGTERM, SIGKILL after `grace` seconds)."""
        self._closed = True
        sessions = list(self._all)
        for session in sessions:
            session.channel.stop("the proxy is stopping")
        await asyncio.gather(*(s.channel.stopped(grace) for s in sessions), return_exceptions=True)


def _event(method: str, name: str, body: bytes) -> ChannelEvent | None:
    if method == "POST":
        return PostReceived(name, body)
    if method == "GET":
        return StreamRequested(name)
    if method == "DELETE":
        return DeleteRequested(name)
    return None


class _Done:
    """The link of a response made whole at once (nothing feeds it later)."""

    __slots__ = ("paused", "transport")

    def __init__(self) -> None:
        self.paused = False
        self.transport: asyncio.Transport | None = None

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass

    def finish(self, *, reusable: bool) -> None:
        pass


def _whole(status: int, body: bytes, headers: tuple[tuple[str, str], ...]) -> UpstreamResponse:
    response = UpstreamResponse(
        _Done(), status, _reason(status), [*headers, ("Content-Length", str(len(body)))]
    )
    if body:
        response.feed(body)
    response.end()
    return response


def _reason(status: int) -> str:
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


def _requests(count: int) -> str:
    return "1 request" if count == 1 else f"{count} requests"
