"""The legacy->MRTR bridge: a 2025-era client in front of a 2026-07-28 (MRTR) server.

Theory of operation. Toward the client the engine is a legacy Streamable HTTP server: it answers
`initialize` itself (from the upstream's `server/discover`, kept for the result's `ttlMs` and for
its caller alone when `cacheScope` is private, and fetched again after an era probe or an
unreachable upstream, since the server may have changed), mints and
enforces its own `Mcp-Session-Id`, answers `ping` and `logging/setLevel` locally, and accepts the
client's POSTed answers to nested requests with 202. Toward the upstream it is a 2026-07-28 client:
every forwarded request is a *leg* (one POST, fresh JSON-RPC id) dressed with the per-request
`_meta` envelope and `Mcp-*` headers (`request`). Three parts share one set of tables
(`state.BridgeContext`):

- this module routes client HTTP requests and upstream events, owns sessions and discovery;
- `calls.CallDriver` carries each forwarded request through its MRTR rounds;
- `listen.ListenEmulator` backs a session's GET stream with `subscriptions/listen`.

Sessions live until DELETE, until they go unused for `session_idle` seconds, until room is needed
for a new one past `max_sessions` (the least recently used idle one goes), or until the era probe
finds that the upstream no longer speaks 2026-07-28 (it restarted in another era: the session is
retired); a forgotten or retired session's next request gets 404, which tells a legacy client to
initialize again. The sessions table is kept in
order of last use, so expiry only ever looks at its oldest entries. Everything else lives exactly
as long as the client request it serves, which `table_sizes()` lets tests verify. The engine is
sans-IO: the transport feeds events and executes the returned commands, ids come from the injected
`new_id`. A 2026-07-28 server's streams are not resumed: a cut one (LegCut) is the call's fault.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from typing import Any, Final

from proxy.engine.capabilities import can_subscribe, modern_client_capabilities, negotiate_version
from proxy.engine.commands import BridgeCommand, EndClientResponse, Log, ReplyJson
from proxy.engine.events import (
    AnsweredForClient,
    BridgeEvent,
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
from proxy.engine.flood_lines import FloodLine
from proxy.engine.legacy_client.calls import CallDriver
from proxy.engine.legacy_client.listen import ListenEmulator
from proxy.engine.legacy_client.request import Envelope, with_envelope
from proxy.engine.legacy_client.state import Answerer, BridgeContext, Discovery, LegRef, PendingInit, Session
from proxy.engine.origins import caller_of, challenges, refusal, refusal_log, refused, server_words
from proxy.engine.passthrough import fault_answer
from proxy.framing.classify import Route
from proxy.framing.http import Upstream, header, media_type
from proxy.wire import errors
from proxy.wire.headers import SESSION_ID
from proxy.wire.jsonrpc import Kind, Message, RequestId, error_response, result_response
from proxy.wire.python_json import NOT_REENCODABLE

Commands = list[BridgeCommand]

LOG_LEVELS: Final[frozenset[str]] = frozenset(
    {"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}
)
"""RFC 5424 severities, the values `logging/setLevel` accepts (2025-03-26 onward)."""

STOPPING_TEXT: Final = "the proxy is stopping: the call was cut off before the server answered; retry it"
"""How a call still running when the proxy stops fails, as the client sees it."""

RETIRED_THEN: Final = "each session's next request gets 404, so its client initializes again"
"""What `legacy_sessions_retired` says becomes of the sessions."""

SESSION_NOT_FOUND: Final = -32001
"""Legacy Streamable HTTP convention (TS SDK) for an unknown or terminated session, sent with 404."""


class LegacyToMrtrEngine:
    """Plays a legacy server toward the client and a 2026-07-28 client toward the upstream."""

    def __init__(
        self,
        upstream: Upstream,
        new_id: Callable[[str], str],
        max_rounds: int = 10,
        state_only_delay: float = 0.25,
        max_sessions: int = 10000,
        session_idle: float = 3600.0,
        max_sessions_per_client: int = 1000,
    ) -> None:
        self.upstream = upstream
        self.max_sessions = max_sessions
        self.max_per_client = max_sessions_per_client
        self._per_peer: dict[str, int] = {}
        """Sessions held per client address, so one address never fills the table and evicts others'."""
        self._dropped_lines = FloodLine()
        """`legacy_sessions_dropped` lines: a client opening sessions without end drops one a session,
        and behind a sidecar every client has the same address, so a second's worth is one line."""
        self.session_idle = session_idle
        self._ctx = BridgeContext(new_id)
        self.client_sessions: Container[str] = self._ctx.sessions
        """The sessions this bridge minted (the context's table itself, never replaced)."""
        self._calls = CallDriver(self._ctx, max_rounds, state_only_delay)
        self._listen = ListenEmulator(self._ctx)

    def __repr__(self) -> str:
        ctx = self._ctx
        calls = ", ".join(f"{x}:{c!r}" for x, c in ctx.calls.items())
        legs = ", ".join(f"{leg}:{ref.purpose}" for leg, ref in ctx.legs.items())
        return (
            f"LegacyToMrtrEngine(upstream={self.upstream.shown!r}, discovered={ctx.discovery is not None}, "
            f"sessions={len(ctx.sessions)}, pending_initialize={sorted(ctx.pending_init)}, "
            f"calls=[{calls}], legs=[{legs}], timers={sorted(ctx.timers)}, "
            f"get_streams={sorted(ctx.get_streams)})"
        )

    def continuations_view(self, now: float | None = None) -> list[dict[str, Any]]:
        """None: this bridge holds a call only while its client stream is open, never parked."""
        return []

    def table_sizes(self) -> dict[str, int]:
        """The size of every internal table; a finished flow leaves only its session (and caches)."""
        return self._ctx.table_sizes()

    def joins(self, leg: str, msg: Message) -> str | None:
        """Every upstream message here belongs to its own leg's chain (a 2026-07-28 server asks only
        in results of the call it answers)."""
        return None

    @staticmethod
    def undelivered(leg: str, msg: Message) -> str | None:
        """Nothing an upstream sends here goes undelivered unsaid (a 2026-07-28 server's listen stream
        carries only what it granted)."""
        return None

    def handle(self, event: BridgeEvent) -> Commands:
        """Decide what the transport does next for one observed fact."""
        match event:
            case ClientRequestReceived(exchange, route, at, peer):
                return self._on_client(exchange, route, at, peer)
            case ClientDisconnected(exchange):
                return self._on_disconnect(exchange)
            case AnsweredForClient(session_id, message, by, dropped):
                session = self._ctx.sessions.get(session_id)
                if session is None:
                    return []
                return self._calls.on_client_answer(session, message, Answerer(by, dropped))
            case LegResponded(leg, status, headers):
                self._on_leg_head(leg, status, headers)
                return []
            case LegMessage(leg, message, _, at):
                return self._on_leg_message(leg, message, at)
            case LegEnded(leg, _, body):
                ref = self._ctx.legs.get(leg)
                if ref is not None and refused(ref.status):
                    return self._on_refused(leg, ref, body)
                return self._on_leg_lost(leg, "the response ended without a JSON-RPC answer")
            case LegFailed(leg, reason, detail):
                if reason == "unreachable":  # what comes back may be another server
                    self._expire_discovery()
                failed = self._discovery_unreachable(leg, reason, detail)
                if failed is not None:
                    return failed
                lost = self._on_leg_lost(
                    leg,
                    fault_text(reason, detail),
                    refused=reason == "unsendable",
                    answered=reason not in BEFORE_ANY_HEAD,
                )
                return ended_by_fault(lost, reason)
            case LegCut(leg, _, _, detail):  # a 2026-07-28 server's streams are not resumed
                if detail is None:
                    return self._on_leg_lost(leg, "the response ended without a JSON-RPC answer")
                return ended_by_fault(self._on_leg_lost(leg, fault_text("cut", detail)), "cut")
            case TimerFired(timer):
                return self._calls.on_timer(timer)
            case UpstreamEraProbed(_, modern, label):
                self._expire_discovery()  # probed again: the server may have changed
                return [] if modern else self._retire_sessions(label)
            case Stopping():
                return self._calls.stop_all(STOPPING_TEXT)
        return []

    # -- client side ---------------------------------------------------------------------------

    def _on_client(self, exchange: str, route: Route, at: float, peer: str = "") -> Commands:
        if route.http_method == "POST":
            return self._on_post(exchange, route, at, peer)
        if route.http_method not in ("GET", "DELETE"):
            body = error_response(None, errors.INVALID_REQUEST, f"Method not allowed: {route.http_method}")
            return [ReplyJson(exchange, 405, body, (("Allow", "GET, POST, DELETE"),))]
        session, dropped = self._session_for(route, at)
        if session is None:
            return [*dropped, *self._session_refusal(exchange, route)]
        if route.http_method == "DELETE":
            return [*self._end_session(session), ReplyJson(exchange, 200, None)]
        if session.get_exchange is not None:
            text = "Conflict: only one SSE stream is allowed per session"
            return [ReplyJson(exchange, 409, error_response(None, errors.INVALID_REQUEST, text))]
        return self._listen.open_stream(session, exchange, route.headers)

    def _on_post(self, exchange: str, route: Route, at: float, peer: str = "") -> Commands:
        body = route.body
        first = body.first
        if body.batch and not body.messages:  # `[]`: JSON, but no request in it (JSON-RPC 2.0: -32600)
            error = error_response(None, errors.INVALID_REQUEST, "Invalid Request: empty batch")
            return [ReplyJson(exchange, 400, error)]
        if body.parse_error is not None or first is None:
            error = error_response(None, errors.PARSE_ERROR, f"Parse error: {body.parse_error}")
            return [ReplyJson(exchange, 400, error)]
        if body.non_finite:  # re-encoded, NaN would reach the other side as null
            refusal = f"Parse error: {NOT_REENCODABLE}"
            error = error_response(None if body.batch else first.id, errors.PARSE_ERROR, refusal)
            return [ReplyJson(exchange, 400, error)]
        if not body.batch and first.kind is Kind.REQUEST and first.method == "initialize":
            return self._on_initialize(exchange, route, first, at, peer)
        session, dropped = self._session_for(route, at)
        if session is None:
            return [*dropped, *self._session_refusal(exchange, route)]
        invalid = next((m for m in body.messages if m.kind is Kind.INVALID), None)
        if invalid is not None:
            error = error_response(invalid.id, errors.INVALID_REQUEST, f"Invalid Request: {invalid.problem}")
            return [ReplyJson(exchange, 400, error)]
        if all(m.kind is not Kind.REQUEST for m in body.messages):
            effects = [cmd for m in body.messages for cmd in self._on_client_notice(session, m)]
            return [ReplyJson(exchange, 202, None), *effects]
        if body.batch:
            text = "Invalid Request: batched requests are not supported by the bridge; send one per POST"
            return [ReplyJson(exchange, 400, error_response(None, errors.INVALID_REQUEST, text))]
        return self._on_request(exchange, route, session, first)

    # -- the sessions table: last use, idle expiry, room for new ones ------------------------------

    def _session_for(self, route: Route, at: float) -> tuple[Session | None, Commands]:
        """The request's live session, marked used now; None (-> 404) when unknown, ended or expired.

        The commands end what an expired session still held (its GET stream).
        """
        sessions = self._ctx.sessions
        session = sessions.get(route.session_id or "")
        if session is None:
            return None, []
        if session.retired:
            return None, self._end_session(session, "session_retired")
        if self._expired(session, at):
            return None, self._drop_session(session, "session_expired")
        if at:
            session.last_used = at
        sessions[session.id] = sessions.pop(session.id)  # to the end: the table stays in order of use
        return session, []

    def _expired(self, session: Session, at: float) -> bool:
        idle = at - session.last_used
        return bool(at and session.last_used and idle > self.session_idle and not session.busy)

    def _make_room(self, at: float) -> tuple[Commands, bool]:
        """Forget expired sessions, then the least recently used idle one past the cap; (commands, room).

        The table is in order of use, so the expiry scan stops at the first session in use lately
        (sessions with a request in flight are stepped over, never dropped).
        """
        sessions = self._ctx.sessions
        commands: Commands = []
        dropped = 0
        expired: list[Session] = []
        for session in sessions.values():  # no copy: the scan ends at the first live session
            if session.busy:
                continue
            if not self._expired(session, at):
                break
            expired.append(session)
        for session in expired:
            commands.extend(self._drop_session(session, "session_expired"))
            dropped += 1
        if len(sessions) >= self.max_sessions:
            idle = next((s for s in sessions.values() if not s.busy), None)
            if idle is None:
                return commands, False
            commands.extend(self._drop_session(idle, "session_evicted"))
            dropped += 1
        if dropped:
            fields = {"dropped": dropped, "held": len(sessions), "max_legacy_sessions": self.max_sessions}
            said = self._dropped_line(at, fields)
            if said is not None:
                commands.insert(0, said)
        return commands, True

    def _dropped_line(self, at: float, fields: dict[str, Any]) -> Log | None:
        """The `legacy_sessions_dropped` line for sessions dropped at `at`, unless one naming the same
        setting was written within a second (then it is counted for the next, as `also_unlogged`)."""
        setting = next(k for k in fields if k.startswith("max_"))
        also = self._dropped_lines.due(at, setting)
        if also is None:
            return None
        return Log("legacy_sessions_dropped", "info", {**fields, "also_unlogged": also} if also else fields)

    def _drop_session(self, session: Session, outcome: str) -> Commands:
        """Forget a session nothing is in flight on, ending its GET stream (its client gets 404 next)."""
        commands = self._listen.close(session, outcome)
        self._forget(session)
        return commands

    def _session_refusal(self, exchange: str, route: Route) -> Commands:
        """400 without a session header, 404 (-32001) for one this proxy never minted or ended."""
        if route.session_id is None:
            text = "Bad Request: Missing session (send the Mcp-Session-Id header from initialize)"
            return [ReplyJson(exchange, 400, error_response(route.request_id, errors.INVALID_REQUEST, text))]
        return [
            ReplyJson(exchange, 404, error_response(route.request_id, SESSION_NOT_FOUND, "Session not found"))
        ]

    def _on_client_notice(self, session: Session, msg: Message) -> Commands:
        """A notification or a response the client POSTed (the POST itself is answered 202)."""
        if msg.is_response:
            return self._calls.on_client_answer(session, msg)
        if msg.method == "notifications/cancelled":
            return self._calls.cancel(session, msg.params.get("requestId"))
        return []  # initialized, roots/list_changed: nothing to tell a 2026 server

    def _on_request(self, exchange: str, route: Route, session: Session, msg: Message) -> Commands:
        assert msg.id is not None
        if msg.method == "ping":
            return [ReplyJson(exchange, 200, result_response(msg.id, {}))]
        if msg.method == "logging/setLevel":
            return [ReplyJson(exchange, 200, self._set_level(session, msg.id, msg.params))]
        if msg.method in ("resources/subscribe", "resources/unsubscribe"):
            return self._subscribe(exchange, session, msg)
        if msg.id in session.calls:
            text = f"Invalid Request: id {msg.id!r} is already in use by a request in flight"
            return [ReplyJson(exchange, 200, error_response(msg.id, errors.INVALID_REQUEST, text))]
        return self._calls.start(exchange, session, msg, route.headers)

    def _set_level(self, session: Session, ident: RequestId, params: dict[str, Any]) -> dict[str, Any]:
        """Keep the level for the session; it rides upstream as `_meta.logLevel` on every request."""
        level = params.get("level")
        if level not in LOG_LEVELS:
            return error_response(
                ident, errors.INVALID_PARAMS, f"Invalid params: unknown log level {level!r}"
            )
        session.log_level = str(level)
        return result_response(ident, {})

    def _subscribe(self, exchange: str, session: Session, msg: Message) -> Commands:
        """Update the session's subscription set and restart its listen leg to match."""
        assert msg.id is not None
        uri = msg.params.get("uri")
        discovery = self._ctx.discovery
        if not can_subscribe(discovery.capabilities if discovery else {}):
            text = "Method not found: the upstream server does not support resource subscriptions"
            return [ReplyJson(exchange, 200, error_response(msg.id, errors.METHOD_NOT_FOUND, text))]
        if not isinstance(uri, str):
            text = "Invalid params: uri must be a string"
            return [ReplyJson(exchange, 200, error_response(msg.id, errors.INVALID_PARAMS, text))]
        subscribed = uri in session.subscriptions
        if (msg.method == "resources/subscribe") != subscribed:
            if subscribed:
                session.subscriptions.remove(uri)
            else:
                session.subscriptions.append(uri)
            restart = self._listen.restart(session)
        else:
            restart = []
        return [*restart, ReplyJson(exchange, 200, result_response(msg.id, {}))]

    def _end_session(self, session: Session, outcome: str = "session_deleted") -> Commands:
        """DELETE (or a retired session's next request): abort its calls and GET stream, forget it."""
        commands: Commands = []
        for exchange in list(session.calls.values()):
            commands.extend(self._calls.drop(exchange, outcome))
        commands.extend(self._listen.close(session, outcome))
        self._forget(session)
        return commands

    def _retire_sessions(self, era: str) -> Commands:
        """The upstream no longer speaks 2026-07-28: every session this bridge holds is retired, its
        GET stream ended now and its next request answered 404 (what a server answers a session it
        does not know), so its client initializes again and is routed by the new verdict. Said once."""
        retiring = [s for s in self._ctx.sessions.values() if not s.retired]
        if not retiring:
            return []
        fields = {
            "sessions": len(retiring),
            "why": f"the era probe found the upstream {era or 'changed'}: it no longer serves 2026-07-28",
            "then": RETIRED_THEN,
        }
        commands: Commands = [Log("legacy_sessions_retired", "warning", fields)]
        for session in retiring:
            session.retired = True
            commands.extend(self._listen.close(session, "session_retired"))
        return commands

    def _forget(self, session: Session) -> None:
        del self._ctx.sessions[session.id]
        left = self._per_peer.get(session.peer, 0) - 1
        if left > 0:
            self._per_peer[session.peer] = left
        else:
            self._per_peer.pop(session.peer, None)

    def _make_room_for(self, peer: str, at: float) -> tuple[Commands, bool]:
        """An address at `max_legacy_sessions_per_client` makes room from its own sessions, never others'."""
        if self._per_peer.get(peer, 0) < self.max_per_client:
            return [], True
        idle = next((s for s in self._ctx.sessions.values() if s.peer == peer and not s.busy), None)
        if idle is None:
            return [], False
        held = self._per_peer.get(peer, 0)
        fields = {"dropped": 1, "held_by_client": held, "max_legacy_sessions_per_client": self.max_per_client}
        said = self._dropped_line(at, fields)  # its client gets 404 on that session next
        dropping = self._drop_session(idle, "session_evicted")
        return ([said, *dropping] if said is not None else dropping), True

    def _client_full(self, pending: PendingInit) -> Commands:
        """Every session this address holds is busy at its cap: refuse the new one, naming the setting."""
        text = (
            "Cannot initialize: this client address holds "
            f"max_legacy_sessions_per_client={self.max_per_client} sessions and every one has a request "
            "in flight; retry shortly, or end sessions you no longer use"
        )
        data = {"limit": self.max_per_client, "setting": "max_legacy_sessions_per_client"}
        refusal = error_response(pending.ident, errors.UPSTREAM_UNAVAILABLE, text, data)
        return [ReplyJson(pending.exchange, 503, refusal, (("Retry-After", "1"),))]

    def _on_disconnect(self, exchange: str) -> Commands:
        """The client left: abandon whatever that exchange was waiting for (never an upstream retry)."""
        if exchange in self._ctx.calls:
            return self._calls.drop(exchange, "client_disconnected")
        owner = self._ctx.get_streams.get(exchange)
        if owner is not None:
            return self._listen.close(self._ctx.sessions[owner], "client_disconnected")
        if self._ctx.pending_init.pop(exchange, None) is not None:
            return [EndClientResponse(exchange, "client_disconnected")]
        return []

    # -- initialize and discovery --------------------------------------------------------------

    def _on_initialize(self, exchange: str, route: Route, msg: Message, at: float, peer: str) -> Commands:
        """Answer from the cached discovery when the upstream has accepted the client's `Origin` and
        credentials; else hold the request until a discovery sent with the client's own headers
        answers (and a refusal, a 401 included, reaches the client)."""
        assert msg.id is not None
        caller = caller_of(route.headers)
        discovery = self._ctx.discovery
        if discovery is not None and caller in self._ctx.callers and discovery.serves(caller, at):
            return self._open_session(PendingInit(exchange, msg.id, msg.params, at, peer, caller))
        legs = self._ctx.legs.items()
        leg = next((leg for leg, ref in legs if ref.purpose == "discover" and ref.caller == caller), None)
        commands: Commands = []
        if leg is None:
            version = negotiate_version(msg.params.get("protocolVersion"))
            caps = modern_client_capabilities(msg.params.get("capabilities"), version)
            params = with_envelope({}, Envelope(caps, msg.params.get("clientInfo")))
            send = self._ctx.open_leg("discover", "", exchange, "server/discover", params, route.headers)
            leg, commands = send.leg, [send]
        self._ctx.pending_init[exchange] = PendingInit(exchange, msg.id, msg.params, at, peer, caller, leg)
        return commands

    def _open_session(self, pending: PendingInit) -> Commands:
        """Mint a session and answer `initialize` with the upstream's identity in legacy shape."""
        discovery = self._ctx.discovery
        assert discovery is not None
        own, room = self._make_room_for(pending.peer, pending.at)
        if not room:
            return [*own, *self._client_full(pending)]
        made, room = self._make_room(pending.at)
        made = own + made
        if not room:
            return [*made, *self._sessions_full(pending)]
        params = pending.params
        version = negotiate_version(params.get("protocolVersion"))
        caps = self._ctx.shared(modern_client_capabilities(params.get("capabilities"), version))
        client_info = self._ctx.shared(params.get("clientInfo"))
        peer = self._ctx.shared(pending.peer)
        session = Session(self._ctx.new_id("session"), version, caps, client_info, pending.at, peer=peer)
        self._ctx.sessions[session.id] = session
        self._per_peer[peer] = self._per_peer.get(peer, 0) + 1
        result: dict[str, Any] = {
            "protocolVersion": version,
            "capabilities": discovery.legacy_capabilities,
            "serverInfo": discovery.server_info,
        }
        if discovery.instructions is not None:
            result["instructions"] = discovery.instructions
        reply = result_response(pending.ident, result)
        return [*made, ReplyJson(pending.exchange, 200, reply, ((SESSION_ID, session.id),))]

    def _sessions_full(self, pending: PendingInit) -> Commands:
        """Every held session is busy and the cap is reached: refuse the new one, naming the setting."""
        text = (
            f"Cannot initialize: the proxy holds max_legacy_sessions={self.max_sessions} sessions and every "
            "one has a request in flight; retry shortly, or raise max_legacy_sessions"
        )
        refusal = error_response(
            pending.ident, errors.UPSTREAM_UNAVAILABLE, text, {"setting": "max_legacy_sessions"}
        )
        fields = {"held": len(self._ctx.sessions), "max_legacy_sessions": self.max_sessions}
        return [
            Log("legacy_sessions_full", "warning", fields),
            ReplyJson(pending.exchange, 503, refusal, (("Retry-After", "1"),)),
        ]

    def _on_discovery(self, leg: str, ref: LegRef, msg: Message, at: float) -> Commands:
        self._ctx.drop_leg(leg)
        if msg.kind is Kind.ERROR or not isinstance(msg.result, dict):
            err = msg.error
            text = f"it answered with error {err.get('code')}: {err.get('message')}"
            return self._discovery_failed(leg, text if err else "its result is not an object")
        self._ctx.discovery = Discovery.from_result(msg.result, at, ref.caller)
        self._ctx.callers.learn(ref.caller, ref.status or 200)  # its result: the caller was served
        info = self._ctx.discovery.server_info
        fields = {"server": info.get("name") if isinstance(info, dict) else None}
        commands: Commands = [Log("upstream_discovered", "info", fields)]
        known = self._ctx.callers
        for pending in self._take_pending(lambda p: p.discovery == leg or p.caller in known):
            commands.extend(self._open_session(pending))
        return commands

    def _discovery_failed(self, leg: str, why: str) -> Commands:
        """Answer the held `initialize`s that waited for the discovery `leg` with -32603 (HTTP 200, so
        legacy SDKs show the message); those of other callers wait for their own discovery."""
        text = f"Cannot initialize: server/discover to the upstream MCP server failed: {why}"
        commands: Commands = [Log("upstream_discovery_failed", "warning", {"why": why})]
        for pending in self._take_pending(lambda p: p.discovery == leg):
            reply = error_response(pending.ident, errors.INTERNAL_ERROR, text)
            commands.append(ReplyJson(pending.exchange, 200, reply))
        return commands

    def _discovery_unreachable(self, leg: str, reason: str, detail: str) -> Commands | None:
        """A discovery the upstream never answered (unreachable, timed out): each `initialize` that
        waited for it gets the gateway error pass-through gives a request then (502 naming the
        upstream, 504), as a client connected to the server directly fails; None for another leg."""
        ref = self._ctx.legs.get(leg)
        if ref is None or ref.purpose != "discover" or fault_answer(reason, detail, None) is None:
            return None
        self._ctx.drop_leg(leg)
        why = fault_text(reason, detail)
        commands: Commands = [Log("upstream_discovery_failed", "warning", {"why": why})]
        for pending in self._take_pending(lambda p: p.discovery == leg):
            answer = fault_answer(reason, detail, pending.ident)
            assert answer is not None
            commands.append(ReplyJson(pending.exchange, answer.status, answer.body))
        return ended_by_fault(commands, reason)

    def _expire_discovery(self) -> None:
        """The next `initialize` fetches the discovery again (what the old one said stays in use)."""
        if self._ctx.discovery is not None:
            self._ctx.discovery = self._ctx.discovery.expired()

    def _discovery_refused(self, leg: str, ref: LegRef, body: bytes) -> Commands:
        """The upstream refused the discovery `leg` sent with these clients' headers (their `Origin`,
        their credentials): each held `initialize` that waited for it gets the server's status, words
        and challenge."""
        status = ref.status or 400
        commands: Commands = [refusal_log("server/discover", status, ref.origin, body)]
        for pending in self._take_pending(lambda p: p.discovery == leg):
            answer = refusal(pending.ident, status, body)
            commands.append(ReplyJson(pending.exchange, status, answer, ref.challenge))
        return commands

    def _take_pending(self, which: Callable[[PendingInit], bool]) -> list[PendingInit]:
        table = self._ctx.pending_init
        taken = [pending for pending in table.values() if which(pending)]
        for pending in taken:
            del table[pending.exchange]
        return taken

    # -- upstream side -------------------------------------------------------------------------

    def _on_leg_head(self, leg: str, status: int, headers: tuple[tuple[str, str], ...]) -> None:
        ref = self._ctx.legs.get(leg)
        if ref is not None:
            ref.status = status
            ref.content_type = media_type(header(headers, "content-type"))
            ref.challenge = challenges(status, headers)
            self._ctx.callers.learn(ref.caller, status)

    def _on_leg_message(self, leg: str, msg: Message, at: float = 0.0) -> Commands:
        ref = self._ctx.legs.get(leg)
        if ref is None:
            return []  # a leg already answered, closed or abandoned
        if ref.purpose == "listen":
            return self._listen.on_leg_message(leg, ref, msg)
        if ref.purpose == "discover":
            return self._on_discovery(leg, ref, msg, at) if msg.is_response else []
        return self._calls.on_leg_message(leg, ref, msg)

    def _on_leg_lost(self, leg: str, why: str, *, refused: bool = False, answered: bool = True) -> Commands:
        """A leg ended or failed without its answer (a leg that answered is already forgotten).

        `refused`: the leg's head could not be framed, which only the client's input can cause;
        `answered`: the failure came after a response of the leg (its status is quoted), not before any.
        """
        ref = self._ctx.legs.get(leg)
        if ref is None:
            return []
        if answered and ref.status is not None:
            why = f"{why} (HTTP {ref.status})"
        if ref.purpose == "listen":
            return self._listen.on_leg_lost(leg, ref, why)
        if ref.purpose == "discover":
            self._ctx.drop_leg(leg)
            return self._discovery_failed(leg, why)
        return self._calls.on_leg_lost(leg, ref, why, refused=refused)

    def _on_refused(self, leg: str, ref: LegRef, body: bytes) -> Commands:
        """The upstream answered a leg with a 4xx and no JSON-RPC message: it refused the request
        itself, and the client hears that refusal, not a failure of the server."""
        if ref.purpose == "discover":
            self._ctx.drop_leg(leg)
            return self._discovery_refused(leg, ref, body)
        if ref.purpose == "listen":
            why = f"the upstream refused it (HTTP {ref.status}): {server_words(body)}"
            return self._listen.on_leg_lost(leg, ref, why)
        return self._calls.on_refused(leg, ref, body)
