"""The MRTR->legacy bridge's upstream sessions: which one serves a request, opening, losing, closing.

Theory of operation. Every request the bridge forwards runs on a legacy session of its own
*key*: the caller's principal (the hash of its `Authorization`, as tokens bind it) and the input
capabilities its `_meta` declared, normalized (`upstream_session.session_capabilities`). Requests
without `Authorization` share the anonymous principal's sessions (`shared`, the default: the one
developer's client keeps the server's per-session state whatever connections its SDK uses), and the
first time a second open client connection uses such a session a warning names the setting, since a
legacy server keeps state per session (the roots it asked for, subscriptions, a tool's state) that
another client would then be served. With `per_connection` they are keyed by their client
connection too: anonymous clients are told apart by nothing else. The first request of a key opens
the session (its `initialize` declares exactly those capabilities, with that request's
credentials); requests of the key that arrive meanwhile wait for it; later ones use it at once.
Calls, listen streams and discover requests *use* a session while they last (a parked call uses it
between rounds too, since its continuation lives on that session), so a session is busy while
anything uses it.

Bounds. At most `max_sessions` sessions exist. A request whose key has no session when the pool
is full evicts the least recently used session nobody uses (DELETE upstream, then a new one); when
every session is busy, the request is refused with -32000 (HTTP 503) naming
`max_upstream_sessions`. Each session has an idle timer of `session_ttl` seconds (a StartTimer; the
engine never reads a clock): when it fires and the session was neither busy nor used since the last
firing, the session is closed (DELETE upstream); otherwise the timer starts again. A session
therefore closes between one and two TTLs after its last use. A session whose client connection
closed (`per_connection`) is closed (DELETE upstream) as soon as nobody uses it: no request can
come for it again, while a call parked on it still resumes from whichever connection its retry
comes on, since the sealed `requestState` names the call, not the session.

Loss. A 404 on a request that carried the session id means the upstream forgot that session (so
does a 400 whose JSON-RPC error names no request: the TypeScript SDK's servers answer so): its
generation goes up, the calls parked on it die (their retries get -32602, "Invalid or expired
requestState"), the call that saw the 404 is sent again (once) after a new handshake, and the other
sessions are untouched. A session whose handshake fails hands every waiting request a gateway fault
and is forgotten once nobody uses it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from proxy.engine.commands import (
    BridgeCommand,
    CancelTimer,
    CloseLeg,
    DeleteSession,
    Log,
    RecheckUpstreamEra,
    ReplyJson,
    StartTimer,
)
from proxy.engine.modern_client.answers import gateway_fault
from proxy.engine.modern_client.calls import CallDriver
from proxy.engine.modern_client.discovers import DiscoverAnswers
from proxy.engine.modern_client.exits import finish, lose_parked
from proxy.engine.modern_client.listen import ListenEmulator
from proxy.engine.modern_client.state import Call, LegRef, MrtrContext
from proxy.engine.modern_client.upstream_session import (
    SessionKey,
    UpstreamLink,
    WaiterKind,
    lost_why,
    session_capabilities,
)
from proxy.engine.origins import caller_of, refusal, refusal_log
from proxy.engine.principal import ANONYMOUS
from proxy.wire import errors
from proxy.wire.jsonrpc import Message, RequestId, error_response

Commands = list[BridgeCommand]
Fault = Callable[[RequestId, str], dict[str, Any]]
"""Builds the error a waiting request gets: (its JSON-RPC id, its method) -> error response."""

IDLE_TIMER: Final = "session-idle:"
"""Prefix of every session's idle timer (the rest is the session's name)."""


ORPHAN_WHY: Final = "its client's connection closed and nothing uses it"
"""Why a session of a caller without credentials is closed after its connection closed."""

SHARED_HINT: Final = (
    "callers without Authorization share this upstream session and everything the server keeps in it "
    "(roots, log level, subscriptions, a tool's state); two client connections now use it: one client "
    "spreading its calls over two (the TypeScript SDK does), or two clients seeing each other's state. "
    "Set anonymous_upstream_sessions = per_connection, or have each client send its own Authorization, "
    "to keep clients apart"
)
"""What `anonymous_upstream_session_shared` says (once per session)."""

LOST_THEN: Final = "a new session is opened and the call sent again; calls parked in the old one fail"
"""What `upstream_session_lost` says the bridge does about it."""


class SessionKeeper:
    """Finds, opens, re-opens, expires and closes the bridge's upstream sessions."""

    def __init__(self, ctx: MrtrContext, calls: CallDriver, listen: ListenEmulator) -> None:
        self._ctx = ctx
        self._calls = calls
        self._listen = listen
        self.discovers = DiscoverAnswers(ctx, self)
        """`server/discover` answered from the sessions' InitializeResults."""

    # -- which session serves a request ---------------------------------------------------------

    def start_call(self, call: Call, key: SessionKey, caps: Any) -> Commands:
        """Run `call` on its key's session, now or once the session is open."""
        link, commands = self.enter("call", call.key, key, caps)
        if link is None:
            return [*commands, *self.fail("call", call.key, sessions_full(self._ctx), 503)]
        call.session = link.name
        waiting = self.when_ready(link, "call", call.key, call.asker.exchange, call.asker.headers)
        return [*commands, *(waiting if waiting is not None else self._calls.send(call))]

    def start_listen(
        self, exchange: str, key: SessionKey, caps: Any, headers: tuple[tuple[str, str], ...]
    ) -> Commands:
        """Feed the listener on `exchange` from its key's session, now or once the session is open."""
        link, commands = self.enter("listen", exchange, key, caps)
        if link is None:
            return [*commands, *self.fail("listen", exchange, sessions_full(self._ctx), 503)]
        self._listen.bind(exchange, link)
        waiting = self.when_ready(link, "listen", exchange, exchange, headers)
        return [*commands, *(waiting if waiting is not None else self._listen.begin(exchange))]

    def enter(
        self, kind: WaiterKind, user: str, key: SessionKey, caps: Any
    ) -> tuple[UpstreamLink | None, Commands]:
        """`user` uses the session of `key`, made (and room made for it) if needed; None when full."""
        pool = self._ctx.pool
        link = pool.get(key)
        commands: Commands = []
        if link is None:
            if pool.full:
                victim = pool.idlest()
                if victim is None:
                    fields = {"kind": kind, "max_upstream_sessions": pool.max_sessions}
                    return None, [Log("upstream_sessions_full", "warning", fields)]
                commands = self.close(victim, "evicted: max_upstream_sessions reached")
            name = self._ctx.new_id("upstream")
            link = UpstreamLink(name, key.principal, session_capabilities(caps), key.connection)
            pool.add(link)
            commands.extend(self._arm(link))
        pool.use(link, user)
        return link, commands

    def full_fault(self) -> Fault:
        """The refusal a request gets when every session is busy and none may be added."""
        return sessions_full(self._ctx)

    # -- the handshake ---------------------------------------------------------------------------

    def when_ready(
        self,
        link: UpstreamLink,
        kind: WaiterKind,
        user: str,
        exchange: str,
        headers: tuple[tuple[str, str], ...],
    ) -> Commands | None:
        """None when the session is open; else queue the work (and start the handshake if idle)."""
        if link.ready:
            return None
        link.waiting.append((kind, user))
        if link.state != "idle":
            return []
        link.begin(exchange, headers)
        leg = self._ctx.new_id("leg")
        message = link.initialize_message(leg)
        headers = link.initialize_headers(headers)
        return [self._ctx.send("initialize", link.name, exchange, message, headers, leg=leg)]

    def on_initialize_head(self, ref: LegRef, headers: tuple[tuple[str, str], ...]) -> None:
        """The `initialize` answer's head: it carries the session id."""
        link = self._ctx.pool.named(ref.owner)
        if link is not None:
            link.on_initialize_head(headers)

    def on_initialize_answer(self, leg: str, ref: LegRef, msg: Message) -> Commands:
        """The InitializeResult (or error): send `notifications/initialized`, or fail the waiters."""
        if not msg.is_response:
            return []
        self._ctx.drop_leg(leg)
        link = self._ctx.pool.named(ref.owner)
        if link is None:
            return []
        problem = link.on_initialize_answer(msg)
        if problem is not None:
            return self.initialize_failed(link, problem)
        self._ctx.callers.learn(ref.caller, ref.status or 200)  # its result: the caller was served
        info = link.init.get("serverInfo") if link.init else None
        fields = {
            "session": link.name,
            "server": info.get("name") if isinstance(info, dict) else None,
            "version": link.version,
            "capabilities": link.label,
            "upstream_session": link.session_id is not None,
            "generation": link.generation,
        }
        notify = self._ctx.new_id("leg")
        message = link.initialized_message()
        headers = link.headers(link.credentials)
        send = self._ctx.send("initialized", link.name, link.exchange, message, headers, leg=notify)
        return [Log("upstream_initialized", "info", fields), send]

    def on_initialized(self, leg: str, ref: LegRef, trouble: dict[str, Any] | None) -> Commands:
        """The upstream took `notifications/initialized` (or refused it: requests go anyway)."""
        self._ctx.drop_leg(leg)
        link = self._ctx.pool.named(ref.owner)
        log = [Log("upstream_initialized_refused", "warning", trouble)] if trouble is not None else []
        return [*log, *(self._ready(link) if link is not None else [])]

    def _ready(self, link: UpstreamLink) -> Commands:
        """The handshake is complete: release everything that waited for it, in arrival order."""
        commands: Commands = []
        waiting = link.mark_ready()
        self._ctx.observe_session(link, "reinitialized" if link.announced else "opened")
        commands.extend(self._listen.open_standing(link))
        for kind, user in waiting:
            if kind == "call":
                call = self._ctx.calls.get(user)
                commands.extend(self._calls.send(call) if call is not None else [])
            elif kind == "discover":
                commands.extend(self.discovers.answer(user))
            else:
                commands.extend(self._listen.begin(user))
        return commands

    def initialize_refused(self, link: UpstreamLink, ref: LegRef, body: bytes) -> Commands:
        """The upstream refused the handshake sent with one client's headers: the waiters of that
        client (its `Origin` and credentials) get the server's status and words, the others start it
        again with theirs."""
        status = ref.status or 400
        said = refusal_log("initialize", status, ref.origin, body)
        commands: Commands = [said]

        def told(ident: RequestId, _method: str) -> dict[str, Any]:
            return refusal(ident, status, body)

        for kind, user in link.failed():
            headers = self._waiter_headers(kind, user)
            if headers is None:
                continue
            if caller_of(headers) == ref.caller:
                commands.extend(self.fail(kind, user, told, status, ref.challenge))
                continue
            exchange = self._asker(user) if kind == "call" else user
            waiting = self.when_ready(link, kind, user, exchange, headers)
            commands.extend(waiting or [])
        if not link.users:
            commands.extend(self._discard(link))
        return commands

    def _waiter_headers(self, kind: WaiterKind, user: str) -> tuple[tuple[str, str], ...] | None:
        """The headers of the request a waiter stands for (None: it is gone)."""
        if kind == "call":
            call = self._ctx.calls.get(user)
            return call.asker.headers if call is not None else None
        if kind == "discover":
            entry = self._ctx.discovers.get(user)
            return entry[2] if entry is not None else None
        listener = self._ctx.listeners.get(user)
        return listener.headers if listener is not None else None

    def _asker(self, key: str) -> str:
        call = self._ctx.calls.get(key)
        return call.asker.exchange if call is not None else ""

    def initialize_failed(self, link: UpstreamLink, problem: str) -> Commands:
        """Everyone waiting gets a gateway fault; the session is forgotten once nobody uses it."""
        text = f"cannot open a session with the legacy upstream: {problem}"
        fields = {"session": link.name, "why": problem}
        commands: Commands = [Log("upstream_initialize_failed", "warning", fields)]
        for kind, user in link.failed():
            commands.extend(
                self.fail(kind, user, lambda ident, method: gateway_fault(ident, method, text), 502)
            )
        if not link.users:
            commands.extend(self._discard(link))
        return commands

    def fail(
        self,
        kind: WaiterKind,
        user: str,
        fault: Fault,
        status: int,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> Commands:
        """Answer one request that cannot get its session with an error (and `headers`), and forget it."""
        if kind == "call":
            call = self._ctx.calls.get(user)
            if call is None:
                return []
            return finish(self._ctx, call, fault(call.asker.ident, call.method), status, headers)
        if kind == "discover":
            entry = self._ctx.discovers.pop(user, None)
            if entry is None:
                return []
            self._ctx.pool.release(entry[1], user)
            return [ReplyJson(user, status, fault(entry[0], "server/discover"), headers)]
        ident = self._listen.fail(user)
        if ident is None:
            return []
        return [ReplyJson(user, status, fault(ident, "subscriptions/listen"), headers)]

    # -- a session the upstream forgot ----------------------------------------------------------

    def call_not_found(self, leg: str, ref: LegRef, answered: str, at: float = 0.0) -> Commands:
        """A call's session is gone (`answered`: what said so, `404`, or a 400 whose error names no
        request, at `at`); re-initialize it and send the call again (once). Nothing when it is not that."""
        call = self._ctx.calls.get(ref.owner)
        if call is None or call.resent:
            return []  # the body (or its absence) tells the client what happened
        link = self._ctx.link_of(call)
        if not (call.generation < link.generation or link.session_id is not None):
            return []  # a sessionless upstream's 404 is an answer, not a lost session
        commands: Commands = [CloseLeg(leg)]
        self._calls.requeue(call)
        if call.generation == link.generation:
            commands.extend(self.lose(link, lost_why(answered), at))
        waiting = self.when_ready(link, "call", call.key, call.asker.exchange, call.asker.headers)
        return [*commands, *(waiting if waiting is not None else self._calls.send(call))]

    def lose(self, link: UpstreamLink, why: str, at: float = 0.0) -> Commands:
        """Every call parked on the lost session is dead (its retry is told so), each saying how long
        it waited by `at` (when the loss was seen); others are untouched."""
        stream = link.stream_leg if self._ctx.keep_streams else None
        link.lost()
        fields = {
            "session": link.name,
            "generation": link.generation,
            "why": why,
            "then": LOST_THEN,
        }
        commands: Commands = [
            Log("upstream_session_lost", "warning", fields),
            RecheckUpstreamEra(f"the upstream lost the bridge's session: {why}"),
        ]
        if stream is not None:  # the new session opens its own
            commands.extend([CloseLeg(stream), *self._listen.on_stream_lost(stream, "upstream session lost")])
        parked = [c for c in self._ctx.calls.values() if c.phase == "parked" and c.session == link.name]
        for call in parked:
            leg = call.leg
            dead = {"call": call.key, "continuation": call.continuation, "why": "upstream session lost"}
            commands.append(Log("bridge_continuation_dead", "warning", dead))
            commands.extend(lose_parked(self._ctx, call, f"the upstream session was lost: {why}", at))
            if leg is not None:
                commands.append(CloseLeg(leg))
        return commands

    # -- idle expiry and closing -------------------------------------------------------------------

    def connection_closed(self, connection: str) -> Commands:
        """A client connection closed: its sessions close now, or once the calls using them end (and
        a shared anonymous session it used may go on to another connection without a warning)."""
        pool = self._ctx.pool
        for link in pool:
            if link.connection and link.connection == connection:
                pool.orphans.add(link.name)
            if link.sharer == connection:
                link.sharer = ""
        return self.close_orphans()

    def shared_by(self, key: SessionKey, connection: str) -> Commands:
        """A request from `connection` uses the session of `key`: warn, once per session, when that is
        the shared anonymous session and another open client connection uses it too."""
        link = self._ctx.pool.get(key)
        if link is None or link.principal != ANONYMOUS or link.connection or link.shared_warned:
            return []
        if not connection or link.sharer in ("", connection):
            link.sharer = link.sharer or connection
            return []
        link.shared_warned = True
        fields = {
            "session": link.name,
            "capabilities": link.label,
            "anonymous_upstream_sessions": "shared",
            "hint": SHARED_HINT,
        }
        return [Log("anonymous_upstream_session_shared", "warning", fields)]

    def close_orphans(self) -> Commands:
        """Close every session whose connection closed and that nobody uses (nor is opening) now."""
        pool = self._ctx.pool
        commands: Commands = []
        for name in list(pool.orphans):
            link = pool.named(name)
            if link is None:
                pool.orphans.discard(name)
            elif not link.users and link.state not in ("initializing", "notifying"):
                commands.extend(self.close(link, ORPHAN_WHY))
        return commands

    def on_timer(self, timer: str) -> Commands:
        """A session's idle timer: close it if nothing used it for a whole period, else wait again."""
        link = self._ctx.pool.named(timer.removeprefix(IDLE_TIMER))
        if link is None or link.timer != timer:
            return []
        link.timer = None
        if link.users or link.used or link.state in ("initializing", "notifying"):
            link.used = False
            return self._arm(link)
        why = f"unused for upstream_session_ttl={self._ctx.session_ttl:g}s"
        return self.close(link, why, "expired")

    def close(self, link: UpstreamLink, why: str, ending: str = "ended") -> Commands:
        """Drop a session nobody uses: DELETE it upstream (when it has an id) and forget it."""
        fields = {
            "session": link.name,
            "principal": link.principal[:16],
            "capabilities": link.label,
            "why": why,
        }
        if link.connection:
            fields["connection"] = link.connection
        commands: Commands = [Log("upstream_session_closed", "info", fields), *self._close_stream(link)]
        if link.session_id is not None:
            leg = self._ctx.new_id("leg")
            self._ctx.legs[leg] = LegRef("close", link.name)
            commands.append(DeleteSession(leg, link.delete_headers()))
        return [*commands, *self._discard(link, ending)]

    def end_all(self) -> Commands:
        """The proxy is stopping: DELETE every session upstream (its calls end with the proxy), its GET
        stream closed first, so the server ending that stream for the DELETE is no stream lost; each
        is observed `ended`, so a view or capture does not show it open after the proxy is gone."""
        commands: Commands = []
        for link in self._ctx.pool:
            if link.session_id is None:
                continue
            fields = {"session": link.name, "principal": link.principal[:16], "capabilities": link.label}
            leg = self._ctx.new_id("leg")
            self._ctx.legs[leg] = LegRef("close", link.name)
            commands.extend(
                [
                    Log("upstream_session_ended", "info", fields),
                    *self._close_stream(link),
                    DeleteSession(leg, link.delete_headers()),
                ]
            )
            link.session_id = None  # one DELETE per session, however often this is asked
            if link.announced:
                self._ctx.observe_session(link, "ended")
        return commands

    def _close_stream(self, link: UpstreamLink) -> Commands:
        """Close the session's GET stream, if it holds one, before the session goes."""
        if link.stream_leg is None:
            return []
        leg, link.stream_leg = link.stream_leg, None
        self._ctx.drop_leg(leg)
        return [CloseLeg(leg)]

    def _discard(self, link: UpstreamLink, ending: str = "ended") -> Commands:
        """Forget a session; the observer hears it `expired` (unused too long) or `ended` if it opened."""
        if self._ctx.pool.remove(link) and link.announced:
            self._ctx.observe_session(link, ending)
        timer, link.timer = link.timer, None
        return [CancelTimer(timer)] if timer is not None else []

    def _arm(self, link: UpstreamLink) -> Commands:
        link.timer = f"{IDLE_TIMER}{link.name}"
        return [StartTimer(link.timer, self._ctx.session_ttl)]

    def on_close_answer(self, leg: str, status: int | None, why: str = "") -> Commands:
        """The DELETE's answer: anything but success, 404 (already gone) or 405 (not offered) is logged."""
        self._ctx.drop_leg(leg)
        if status is None:
            return [Log("upstream_session_delete_failed", "warning", {"leg": leg, "why": why})]
        if status >= 400 and status not in (404, 405):
            return [Log("upstream_session_delete_refused", "warning", {"leg": leg, "status": status})]
        return []


def sessions_full(ctx: MrtrContext) -> Fault:
    """The refusal when every session is busy and none may be added: it names the setting."""
    text = (
        f"The proxy already holds max_upstream_sessions={ctx.pool.max_sessions} sessions with the "
        "legacy upstream and every one is in use; retry when a call has finished, or raise "
        "max_upstream_sessions (one session per caller, or per connection of a caller without "
        "credentials, and declared capability set)."
    )
    return lambda ident, _method: error_response(ident, errors.UPSTREAM_UNAVAILABLE, text)
