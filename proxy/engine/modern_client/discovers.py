"""The MRTR->legacy bridge's `server/discover`: answered from the caller's session, once the upstream
has accepted the caller.

A 2026-07-28 client opens with `server/discover`; a legacy server has no such method, so the bridge
answers it from the InitializeResult of the caller's session (`sessions` opens it with the caller's
credentials). What the session's handshake showed the server accepting is one caller: its `Origin`
and principal. For a caller the upstream has not yet answered with success (`MrtrContext.callers`),
the bridge first sends a `ping` in the session with that caller's headers (an *origin check*, leg
purpose `check`): a success answers the discover, a 404 says the session is gone (a new handshake,
with the asker's headers, comes first), a refusal (403, 401 with its challenge) reaches the client
with the server's status and words, and no answer at all is a gateway fault. A discover is checked
at most once: the upstream accepted exactly what was sent for it, so a success answers it even when
the caller is still not among the known ones, and one discover never sends a second `ping`. A
session the upstream may have forgotten (`UpstreamLink.doubted`: it showed signs of a restart) is
checked the same way, so a restarted server's discover is answered from its own new handshake.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proxy.engine.commands import BridgeCommand, ReplyJson
from proxy.engine.modern_client.answers import as_result, discover_result, gateway_fault
from proxy.engine.modern_client.state import LegRef, MrtrContext
from proxy.engine.modern_client.upstream_session import SessionKey, lost_why
from proxy.engine.origins import caller_of, refusal, refusal_log
from proxy.wire.jsonrpc import RequestId, request

if TYPE_CHECKING:  # the session keeper owns this and is passed in: a type only, never an import cycle
    from proxy.engine.modern_client.sessions import SessionKeeper

Commands = list[BridgeCommand]


class DiscoverAnswers:
    """Answers `server/discover` from the caller's session, asking the upstream first for a new caller."""

    def __init__(self, ctx: MrtrContext, sessions: SessionKeeper) -> None:
        self._ctx = ctx
        self._sessions = sessions

    def start(
        self,
        exchange: str,
        ident: RequestId,
        key: SessionKey,
        caps: Any,
        headers: tuple[tuple[str, str], ...],
    ) -> Commands:
        """Answer `server/discover` from the InitializeResult of the caller's session."""
        link, commands = self._sessions.enter("discover", exchange, key, caps)
        if link is None:
            body = self._sessions.full_fault()(ident, "server/discover")
            return [*commands, ReplyJson(exchange, 503, body)]
        self._ctx.discovers[exchange] = (ident, link.name, headers)
        waiting = self._sessions.when_ready(link, "discover", exchange, exchange, headers)
        return [*commands, *(waiting if waiting is not None else self.answer(exchange))]

    def left(self, exchange: str) -> bool:
        """The client of a waiting discover left: forget it (False when it was not one)."""
        entry = self._ctx.discovers.pop(exchange, None)
        if entry is None:
            return False
        self._ctx.pool.release(entry[1], exchange)
        return True

    def answer(self, exchange: str, *, checked: bool = False) -> Commands:
        """Answer from the session's InitializeResult, once the upstream has accepted the asker (its
        `Origin` and credentials); for another asker, first a `ping` in the session with its headers
        (`checked`: that ping succeeded, so the discover is answered whatever the known callers say)."""
        entry = self._ctx.discovers.get(exchange)
        if entry is None:
            return []
        ident, name, headers = entry
        link = self._ctx.pool.named(name)
        unknown = not checked and caller_of(headers) not in self._ctx.callers
        doubted = not checked and link is not None and link.doubted
        if link is not None and link.init is not None and (unknown or doubted):
            leg = self._ctx.new_id("leg")
            ping = request(leg, "ping", {})
            return [self._ctx.send("check", exchange, exchange, ping, link.headers(headers), leg=leg)]
        del self._ctx.discovers[exchange]
        self._ctx.pool.release(name, exchange)
        if link is None or link.init is None:
            return []
        return [ReplyJson(exchange, 200, as_result(ident, discover_result(link.init)))]

    def on_check_head(self, leg: str, ref: LegRef, status: int, at: float = 0.0) -> Commands:
        """The upstream's answer to an origin check: a success answers the discover; a 404 says the
        session is gone (a new handshake, with the asker's headers, comes first); a refusal waits for
        its body's words (`on_check_refused`)."""
        if 200 <= status < 300 or status == 404:
            self._ctx.drop_leg(leg)
        entry = self._ctx.discovers.get(ref.owner)
        if entry is None:
            return []
        link = self._ctx.pool.named(entry[1])
        if 200 <= status < 300:
            if link is not None:
                link.doubted = False  # the session is still the server's: its InitializeResult holds
            return self.answer(ref.owner, checked=True)
        if status != 404 or link is None:
            return []
        commands = self._sessions.lose(link, lost_why("404"), at) if link.ready else []
        waiting = self._sessions.when_ready(link, "discover", ref.owner, ref.owner, entry[2])
        return [*commands, *(waiting if waiting is not None else self.answer(ref.owner))]

    def on_check_refused(self, leg: str, ref: LegRef, body: bytes, status: int) -> Commands:
        """The upstream refused the origin check (or answered it with an error): the discover gets the
        server's status and words."""
        self._ctx.drop_leg(leg)
        entry = self._ctx.discovers.pop(ref.owner, None)
        if entry is None:
            return []
        self._ctx.pool.release(entry[1], ref.owner)
        said = refusal_log("server/discover", status, ref.origin, body)
        return [said, ReplyJson(ref.owner, status, refusal(entry[0], status, body), ref.challenge)]

    def check_failed(self, ref: LegRef, why: str) -> Commands:
        """The origin check got no answer: the discover gets a gateway fault naming why (HTTP 502)."""
        entry = self._ctx.discovers.get(ref.owner)
        if entry is None:
            return []

        def fault(ident: RequestId, method: str) -> dict[str, Any]:
            return gateway_fault(ident, method, why)

        return self._sessions.fail("discover", ref.owner, fault, 502)
