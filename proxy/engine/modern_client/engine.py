"""The MRTR->legacy bridge: a 2026-07-28 (MRTR) client in front of a 2025-era server.

Theory of operation. Toward the client the engine is a 2026-07-28 server: it validates every POST as
one (`validation`), answers `server/discover` from the upstream's InitializeResult, refuses
what 2026 removed (404) and anything but POST (405), stamps results for 2026 eyes (`answers`)
and serves `subscriptions/listen` (`listen`). Toward the upstream it is a legacy client with
sessions of its own (`sessions`, `upstream_session`): one per caller (principal: the hash of its
`Authorization`; callers without one share a session, or with `anonymous_per_connection` each
client connection has its own, closed with it) and declared capability set, each opened with that
caller's credentials and an `initialize` declaring exactly the input kinds the 2026 request
declared, so a legacy server that checks its session's capabilities takes the path it would take
for that client (asks the LLM instead of the user, say) and no caller rides a session another
caller opened. Requests wait until their session is open; a 404 on a session (or a 400 whose error
names no request, the TypeScript SDK's answer to a session it does not know) re-initializes it
transparently and re-sends the request once, killing only the calls parked on that session.
Sessions are bounded (`max_sessions`: the least recently used idle one is DELETEd to make room, or
the request is refused naming the setting) and closed (DELETE) after `session_ttl` unused.

The heart is the continuation (`rounds`): a legacy server asks its questions in flight on a
call's SSE stream, a 2026 client can only be asked by ending its request with `input_required`.
So the bridge parks the live upstream call, hands the client a sealed `requestState` (`tokens`),
and when the retry brings the answers, posts them upstream as responses to the nested requests and
goes on draining the same upstream stream for the retry. Parts share one set of tables
(`state.MrtrContext`); `table_sizes()` shows all of them, `continuations_view()` shows the
parked calls for the admin API (never a token, a session id or a credential). What the observer
hears of parked calls and upstream sessions it hears as orders (ObserveContinuation,
ObserveSession), given at the end of the event that changed them. A call's stream that a legacy
server closes after an event id, before the answer, is resumed with GET + `Last-Event-ID`
(`proxy.engine.resume`).

Decisions worth knowing: the per-request capability gate (`rounds`) stays as a backstop for
servers that ask whatever their session declared; keys are `elicitation-N` / `sampling-N` /
`roots-N` per call; a rejected `requestState` is -32602 "Invalid or expired requestState" with HTTP
400 and `data.reason: "invalid_request_state"` (the 2026 status for -32602; the precise reason is
logged only), and an answer that is no result of its question is -32602 with `data.reason:
"invalid_input_responses"`: either way the call stays parked, and a chain builder reads the reason;
`ttlMs: 0` / `cacheScope: "private"` on cacheable results; `instance` is written into every token
so several proxies behind one entry point can route a retry to the one holding the call (a token
minted by another instance is refused, never resumed). The engine never reads a clock: "now" is
`ClientRequestReceived.at`, and every wait is a StartTimer.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import Any, Final

from proxy.engine.commands import BridgeCommand, CloseLeg, EndClientResponse, Log, ReplyJson
from proxy.engine.events import (
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
    UpstreamEraProbed,
)
from proxy.engine.faults import BEFORE_ANY_HEAD, ended_by_fault, fault_text
from proxy.engine.modern_client import stream_logs
from proxy.engine.modern_client.calls import CallDriver
from proxy.engine.modern_client.continuations import ContinuationTable, EndedContinuations
from proxy.engine.modern_client.exits import forget
from proxy.engine.modern_client.listen import ListenEmulator
from proxy.engine.modern_client.sessions import IDLE_TIMER, SessionKeeper
from proxy.engine.modern_client.state import LegRef, MrtrContext, describe
from proxy.engine.modern_client.stream_asks import StreamAsks
from proxy.engine.modern_client.tokens import StateSealer
from proxy.engine.modern_client.upstream_session import SessionKey, SessionPool, session_key
from proxy.engine.modern_client.validation import removed, validate
from proxy.engine.origins import challenges, refused
from proxy.engine.tool_headers import ToolHeaders
from proxy.framing.classify import Route
from proxy.framing.http import Upstream
from proxy.wire import errors
from proxy.wire.jsonrpc import Kind, Message, error_response
from proxy.wire.mcp import META_CLIENT_CAPABILITIES, request_meta
from proxy.wire.python_json import NOT_REENCODABLE

Commands = list[BridgeCommand]


class MrtrToLegacyEngine:
    """Plays a 2026-07-28 server toward the client and a legacy client toward the upstream."""

    def __init__(
        self,
        upstream: Upstream,
        new_id: Callable[[str], str],
        *,
        state_key: bytes,
        max_rounds: int = 10,
        continuation_ttl: float = 300.0,
        max_continuations: int = 1000,
        max_per_principal: int = 100,
        max_per_client: int = 100,
        round_window: float = 0.02,
        instance: str = "",
        max_sessions: int = 100,
        session_ttl: float = 300.0,
        keep_streams: bool = False,
        anonymous_per_connection: bool = False,
    ) -> None:
        self.upstream = upstream
        table = ContinuationTable(max_continuations, max_per_principal, max_per_client)
        sealer = StateSealer(state_key, instance)
        pool = SessionPool(max_sessions)
        self._ctx = MrtrContext(
            new_id,
            sealer,
            table,
            max_rounds,
            continuation_ttl,
            round_window,
            pool,
            session_ttl,
            keep_streams=keep_streams,
            anonymous_per_connection=anonymous_per_connection,
            ended=EndedContinuations(max_continuations),
        )
        self._listen = ListenEmulator(self._ctx)
        self.client_sessions: Container[str] = frozenset()
        """None: 2026-07-28 clients have no sessions (the upstream sessions are the proxy's own)."""
        self._calls = CallDriver(self._ctx, self._listen.broadcast)
        self._rounds = self._calls.rounds
        self._asks = StreamAsks(self._ctx, self._rounds, self._listen.refuse)
        self._sessions = SessionKeeper(self._ctx, self._calls, self._listen)

    def __repr__(self) -> str:
        ctx = self._ctx
        calls = ", ".join(f"{key}:{call!r}" for key, call in ctx.calls.items())
        legs = ", ".join(f"{leg}:{ref.purpose}" for leg, ref in ctx.legs.items())
        return (
            f"MrtrToLegacyEngine(upstream={self.upstream.shown!r}, sessions={ctx.pool!r}, calls=[{calls}], "
            f"continuations={ctx.table!r}, legs=[{legs}], timers={sorted(ctx.timers)}, "
            f"listeners={len(ctx.listeners)})"
        )

    def table_sizes(self) -> dict[str, int]:
        """The size of every internal table; a finished flow leaves only idle upstream sessions."""
        return self._ctx.table_sizes()

    def sessions_view(self) -> list[dict[str, Any]]:
        """Every upstream session, least recently used first: its key (principal hash prefix and
        capability set), state and users; never its id or a credential."""
        return [link.describe() for link in self._ctx.pool]

    def continuations_view(self, now: float | None = None) -> list[dict[str, Any]]:
        """Every parked (or resuming) call, oldest first, as the admin API and TUI show it.

        `now` (epoch seconds, from the caller's clock) adds `age_ms`; without it the view has only
        `parked_at`, the arrival time of the request that was answered `input_required`.
        """
        ctx = self._ctx
        calls = (ctx.calls.get(ctx.table.call_of(cid) or "") for cid in ctx.table.ids())
        return [describe(call, now) for call in calls if call is not None]

    def handle(self, event: BridgeEvent) -> Commands:
        """Decide what the transport does next for one observed fact.

        Changes of parked calls and upstream sessions the event caused come last, as observations
        (ObserveContinuation, ObserveSession), once the orders that carry out the change are given.
        """
        commands = self._handle(event)
        if self._ctx.pool.orphans:  # a call that ended may leave a closed connection's session unused
            commands = [*commands, *self._sessions.close_orphans()]
        if self._ctx.observed:
            commands = [*commands, *self._ctx.observed]
            self._ctx.observed.clear()
        return commands

    def _handle(self, event: BridgeEvent) -> Commands:
        match event:
            case ClientRequestReceived(exchange, route, at, peer, connection):
                return self._on_client(exchange, route, at, peer, connection)
            case ClientDisconnected(exchange):
                return self._on_disconnect(exchange)
            case ClientConnectionClosed(connection):
                return self._sessions.connection_closed(connection)
            case LegResponded(leg, status, headers, at=at):
                return self._on_leg_head(leg, status, headers, at)
            case LegMessage(leg, message, at=at):
                return self._on_leg_message(leg, message, at)
            case LegEnded(leg, at, body):
                ref = self._ctx.legs.get(leg)
                if ref is not None and refused(ref.status) and ref.said is None and ref.purpose in _REFUSABLE:
                    return self._on_refused(leg, ref, body, at)
                return self._on_leg_lost(leg, "the response ended without a JSON-RPC answer", at)
            case LegFailed(leg, reason, detail, at):
                if reason == "unreachable":  # what comes back may be another server
                    self._doubt_sessions()
                lost = self._on_leg_lost(
                    leg,
                    fault_text(reason, detail),
                    at,
                    refused=reason == "unsendable",
                    answered=reason not in BEFORE_ANY_HEAD,
                )
                return ended_by_fault(lost, reason)
            case LegCut(leg, last_event_id, retry_ms, detail, at):
                return self._on_leg_cut(leg, last_event_id, retry_ms, detail, at)
            case TimerFired(timer) if timer.startswith(IDLE_TIMER):
                return self._sessions.on_timer(timer)
            case TimerFired(timer, at):
                return self._rounds.on_timer(timer, at)
            case UpstreamEraProbed():
                self._doubt_sessions()  # probed again: the server may have restarted
            case Stopping(at):
                return self._on_stopping(at)
        return []

    def _doubt_sessions(self) -> None:
        """Every session's next `server/discover` pings it first: the upstream may have restarted."""
        for link in self._ctx.pool:
            link.doubted = True

    def _on_stopping(self, at: float) -> Commands:
        """The proxy is stopping: parked calls end with it, said so (nobody can come back for them,
        and their clients had not: observed `expired`, stopped, as nothing failed), resumed ones are
        observed ended, and every upstream session is DELETEd, which ends the calls it carries."""
        commands: Commands = []
        for call in list(self._ctx.calls.values()):
            if call.phase == "parked" and call.continuation is not None:
                leg = call.leg
                why = {"call": call.key, "continuation": call.continuation, "why": "the proxy is stopping"}
                commands.append(Log("bridge_continuation_dead", "warning", why))
                commands.extend(forget(self._ctx, call, at, parked_end="stopped"))
                if leg is not None:
                    commands.append(CloseLeg(leg, "proxy_stopping"))
            elif call.continuation is not None and call.observed is not None:
                self._ctx.observe_continuation(call, "ended")
        return [*commands, *self._sessions.end_all()]

    # -- the client side -----------------------------------------------------------------------

    def _on_client(
        self, exchange: str, route: Route, at: float, peer: str = "", connection: str = ""
    ) -> Commands:
        if route.http_method != "POST":
            text = f"Method not allowed: {route.http_method} (2026-07-28 serves POST only)"
            refusal = error_response(None, errors.INVALID_REQUEST, text)
            return [ReplyJson(exchange, 405, refusal, (("Allow", "POST"),))]
        body = route.body
        msg = body.first
        if body.batch and not body.messages:  # `[]`: JSON, but no request in it (JSON-RPC 2.0: -32600)
            return [_bad(exchange, errors.INVALID_REQUEST, "Invalid Request: empty batch")]
        if body.parse_error is not None or msg is None:
            return [_bad(exchange, errors.PARSE_ERROR, f"Parse error: {body.parse_error}")]
        if body.non_finite:  # re-encoded, NaN would reach the other side as null
            text = f"Parse error: {NOT_REENCODABLE}"
            error = error_response(None if body.batch else msg.id, errors.PARSE_ERROR, text)
            return [ReplyJson(exchange, 400, error)]
        if body.batch:
            return [_bad(exchange, errors.INVALID_REQUEST, "Invalid Request: 2026-07-28 has no batches")]
        if msg.kind is Kind.NOTIFICATION:
            return [ReplyJson(exchange, 202, None)]  # nothing a 2026 client may notify means anything here
        if msg.kind is not Kind.REQUEST:
            why = msg.problem or "a 2026-07-28 client must not POST responses"
            return [_bad(exchange, errors.INVALID_REQUEST, f"Invalid Request: {why}")]
        return self._on_request(exchange, route, msg, at, peer, connection)

    def _on_request(
        self, exchange: str, route: Route, msg: Message, at: float, peer: str, connection: str
    ) -> Commands:
        assert msg.id is not None
        assert msg.method is not None
        caps = request_meta(msg.params).get(META_CLIENT_CAPABILITIES)
        key = session_key(route.headers, caps, connection if self._ctx.anonymous_per_connection else "")
        link = self._ctx.pool.get(key)
        tools = link.tools if link is not None else ToolHeaders()
        refusal = validate(msg.method, msg.params, route.headers, tools) or removed(msg.method)
        if refusal is not None:
            return [ReplyJson(exchange, refusal.status, refusal.body(msg.id))]
        commands = self._serve(exchange, route, msg, at, peer, key, caps)
        return [*commands, *self._sessions.shared_by(key, connection)]

    def _serve(
        self, exchange: str, route: Route, msg: Message, at: float, peer: str, key: SessionKey, caps: Any
    ) -> Commands:
        """Serve a valid request on the session of `key` (a retry: on its parked call's session)."""
        assert msg.id is not None
        if msg.method == "server/discover":
            return self._sessions.discovers.start(exchange, msg.id, key, caps, route.headers)
        if msg.method == "subscriptions/listen":
            refused = self._listen.register(exchange, msg, route.headers)
            return refused or self._sessions.start_listen(exchange, key, caps, route.headers)
        if "requestState" in msg.params:
            return self._rounds.resume(exchange, msg, route.headers, at)
        call = self._calls.register(exchange, msg, route.headers, at, peer)
        return self._sessions.start_call(call, key, caps)

    def _on_disconnect(self, exchange: str) -> Commands:
        """The client left: a 2026 client's closed stream is a cancellation of that request."""
        key = self._ctx.serving.get(exchange)
        call = self._ctx.calls.get(key) if key is not None else None
        if call is not None:
            return self._calls.on_disconnect(call)
        if exchange in self._ctx.listeners:
            return self._listen.close(exchange, "client_disconnected")
        if self._sessions.discovers.left(exchange):
            return [EndClientResponse(exchange, "client_disconnected")]
        return []

    # -- upstream legs -------------------------------------------------------------------------

    def _on_leg_head(
        self, leg: str, status: int, headers: tuple[tuple[str, str], ...], at: float = 0.0
    ) -> Commands:
        ref = self._ctx.legs.get(leg)
        if ref is None:
            return []
        ref.status = status
        ref.challenge = challenges(status, headers)
        if ref.purpose != "close":  # a DELETE carries the opener's headers, not a client's request
            self._ctx.callers.learn(ref.caller, status)
        if ref.purpose == "check":
            return self._sessions.discovers.on_check_head(leg, ref, status, at)
        if ref.purpose == "initialize":
            self._sessions.on_initialize_head(ref, headers)
        elif ref.purpose == "initialized":
            trouble = {"status": status} if status >= 400 else None
            return self._sessions.on_initialized(leg, ref, trouble)
        elif ref.purpose == "notice":
            self._ctx.drop_leg(leg)
            if status >= 400:
                return [
                    Log("bridge_notice_refused", "warning", {"leg": leg, "what": ref.what, "status": status})
                ]
        elif ref.purpose == "close":
            return self._sessions.on_close_answer(leg, status)
        elif ref.purpose == "call" and status == 404:
            return self._sessions.call_not_found(leg, ref, "404", at)
        elif ref.purpose == "stream":
            return self._listen.on_stream_head(leg, status)
        return []

    def joins(self, leg: str, msg: Message) -> str | None:
        """The leg whose chain a message arriving on `leg` joins instead of its own: a question or a
        log message on a session's GET stream goes to the one call it is given to."""
        return self._asks.placed_on(leg, msg) or stream_logs.placed_on(self._ctx, leg, msg)

    def undelivered(self, leg: str, msg: Message) -> str | None:
        """Why a change notification on a session's GET stream reaches no listening client (the note
        observation files with it), asked before the message is handled; None when it is delivered."""
        return self._listen.undelivered(leg, msg)

    def _on_leg_message(self, leg: str, msg: Message, at: float = 0.0) -> Commands:
        ref = self._ctx.legs.get(leg)
        if ref is None:
            return []
        if ref.resumable is not None:
            ref.resumable.saw(msg.id, msg.is_response)
        if ref.purpose == "call":
            if ref.status == 400 and msg.kind is Kind.ERROR and msg.id is None:
                ref.said = _said(msg)
                # The TypeScript SDK's servers answer a session they do not know with 400 and an
                # error naming no request (the Python SDK's with 404): the call never ran there.
                lost = self._sessions.call_not_found(leg, ref, f"400 ({ref.said})", at)
                if lost:
                    return lost
            return self._calls.on_message(leg, ref, msg)
        if ref.purpose == "stream":
            placed = self._asks.on_message(leg, msg)
            if placed is None:
                placed = stream_logs.on_message(self._ctx, leg, msg)
            return placed if placed is not None else self._listen.on_stream_message(leg, msg)
        if ref.purpose == "initialize":
            return self._sessions.on_initialize_answer(leg, ref, msg)
        if ref.purpose == "check" and msg.kind is Kind.ERROR:
            words = str(msg.error.get("message") or "")
            if refused(ref.status):
                return self._sessions.discovers.on_check_refused(leg, ref, words.encode(), ref.status or 400)
            self._ctx.drop_leg(leg)
            return self._sessions.discovers.check_failed(
                ref, f"the upstream answered ping with an error: {words}"
            )
        return []

    def _on_leg_cut(
        self, leg: str, last_id: str | None, retry_ms: int | None, detail: str | None, at: float = 0.0
    ) -> Commands:
        """A leg's SSE body stopped: resume an unanswered request's stream (`resume`), else it is lost."""
        ref = self._ctx.legs.get(leg)
        if ref is None:
            return []
        order = ref.resumable.resume(leg, last_id, retry_ms) if ref.resumable is not None else None
        if order is not None:
            assert ref.resumable is not None
            fields = {"leg": leg, "last_event_id": last_id, "attempt": ref.resumable.resumes}
            return [Log("leg_resumed", "info", fields), order]
        if detail is None:
            return self._on_leg_lost(leg, "the response ended without a JSON-RPC answer", at)
        return ended_by_fault(self._on_leg_lost(leg, fault_text("cut", detail), at), "cut")

    def _on_leg_lost(
        self, leg: str, why: str, at: float = 0.0, *, refused: bool = False, answered: bool = True
    ) -> Commands:
        """A leg ended or failed at `at`; `refused`: its head could not be framed (the client's input);
        `answered`: the failure came after a response (its status is quoted), not before any."""
        ref = self._ctx.legs.get(leg)
        if ref is None:
            return []
        if answered and ref.status is not None:
            why = f"{why} (HTTP {ref.status}{': ' + ref.said if ref.said else ''})"
        if ref.purpose == "call":
            return self._calls.on_lost(leg, ref, why, at, refused=refused)
        if ref.purpose == "stream":
            return self._listen.on_stream_lost(leg, why)
        if ref.purpose == "close":
            return self._sessions.on_close_answer(leg, None, why)
        if ref.purpose == "initialized":
            return self._sessions.on_initialized(leg, ref, {"why": why})
        self._ctx.drop_leg(leg)
        if ref.purpose == "initialize":
            link = self._ctx.pool.named(ref.owner)
            return self._sessions.initialize_failed(link, why) if link is not None else []
        if ref.purpose == "check":
            return self._sessions.discovers.check_failed(ref, why)
        return [Log("bridge_notice_failed", "warning", {"leg": leg, "what": ref.what, "why": why})]

    def _on_refused(self, leg: str, ref: LegRef, body: bytes, at: float) -> Commands:
        """The upstream answered a leg carrying a client's request with a 4xx and no JSON-RPC
        message: it refused the request itself, and the client hears that refusal, not a failure."""
        if ref.purpose == "call":
            return self._calls.on_refused(leg, ref, body, at)
        if ref.purpose == "check":
            return self._sessions.discovers.on_check_refused(leg, ref, body, ref.status or 400)
        self._ctx.drop_leg(leg)
        link = self._ctx.pool.named(ref.owner)
        return self._sessions.initialize_refused(link, ref, body) if link is not None else []


_REFUSABLE: Final = frozenset({"call", "check", "initialize"})
"""Legs whose refusal the client that asked hears as the server's (a stream's or a notice's is logged)."""


def _said(msg: Message) -> str:
    """The text of an error that names no request, bounded (it is quoted in logs and faults)."""
    text = msg.error.get("message")
    return str(text)[:200] if text else "an error naming no request"


def _bad(exchange: str, code: int, text: str) -> ReplyJson:
    return ReplyJson(exchange, 400, error_response(None, code, text))
