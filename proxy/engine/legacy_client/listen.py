"""The legacy GET stream and `resources/subscribe`, emulated with 2026's `subscriptions/listen`.

Theory of operation. A legacy client opens one GET SSE stream per session and expects unrelated
server notifications there (list changes, resource updates). A 2026 server has no GET: the client
POSTs `subscriptions/listen {notifications}` and that response stream stays open. So while a
session's GET stream is open, the bridge keeps one listen leg upstream asking for the list-changed
toggles the upstream can deliver plus the session's subscribed URIs, and copies each notification to
the GET stream without its `subscriptionId` (a 2026 tag). The acknowledgement and the listen's final
response are the bridge's business, not the client's. Changing the subscription set restarts the
leg (there is no "update" in 2026). A listen leg that ends is not reopened: a server that ends it
deliberately would otherwise be hammered; the GET stream stays open and quiet.
"""

from __future__ import annotations

from typing import Any

from proxy.engine.capabilities import listen_flags
from proxy.engine.commands import BridgeCommand, CloseLeg, EndClientResponse, Log, SendSse, StartSse
from proxy.engine.legacy_client.request import with_envelope
from proxy.engine.legacy_client.state import BridgeContext, LegRef, Session
from proxy.wire.jsonrpc import Kind, Message
from proxy.wire.mcp import LISTEN_ACKNOWLEDGED, META_SUBSCRIPTION_ID

Commands = list[BridgeCommand]

ACKNOWLEDGED = LISTEN_ACKNOWLEDGED


class ListenEmulator:
    """Opens, restarts and closes the per-session listen leg behind a legacy GET stream."""

    def __init__(self, ctx: BridgeContext) -> None:
        self._ctx = ctx

    def open_stream(self, session: Session, exchange: str, headers: tuple[tuple[str, str], ...]) -> Commands:
        """A GET with a valid session: start the SSE stream and listen upstream on its behalf."""
        session.get_exchange = exchange
        session.get_headers = headers
        self._ctx.get_streams[exchange] = session.id
        return [StartSse(exchange), *self._listen(session)]

    def restart(self, session: Session) -> Commands:
        """The subscription set changed: replace the listen leg (only while a GET stream is open)."""
        if session.get_exchange is None:
            return []
        return [*self._stop(session), *self._listen(session)]

    def close(self, session: Session, outcome: str) -> Commands:
        """End the session's GET stream (client left, or the session ended) and its listen leg."""
        exchange = session.get_exchange
        if exchange is None:
            return []
        session.get_exchange = None
        session.get_headers = ()
        self._ctx.get_streams.pop(exchange, None)
        return [*self._stop(session), EndClientResponse(exchange, outcome)]

    def on_leg_message(self, leg: str, ref: LegRef, msg: Message) -> Commands:
        """Copy a listen notification to the GET stream; the ack and the final answer stay here."""
        session = self._ctx.sessions.get(ref.owner)
        if session is None or session.get_exchange is None:
            self._ctx.drop_leg(leg)
            return []
        if msg.kind is Kind.NOTIFICATION:
            if msg.method == ACKNOWLEDGED:
                return []
            return [SendSse(session.get_exchange, _untagged(msg.raw))]
        if msg.kind is Kind.ERROR:
            error = msg.error
            return self.on_leg_lost(leg, ref, f"error {error.get('code')}: {error.get('message')}")
        if msg.kind is Kind.RESULT:
            return self.on_leg_lost(leg, ref, "the upstream ended the subscription", level="info")
        return [Log("bridge_upstream_dropped", "warning", {"leg": leg, "why": msg.problem or "request"})]

    def on_leg_lost(self, leg: str, ref: LegRef, why: str, level: str = "warning") -> Commands:
        """The listen leg is over; the GET stream stays open but quiet."""
        self._ctx.drop_leg(leg)
        session = self._ctx.sessions.get(ref.owner)
        if session is not None and session.listen_leg == leg:
            session.listen_leg = None
        return [Log("bridge_listen_ended", level, {"leg": leg, "why": why})]

    def _listen(self, session: Session) -> Commands:
        discovery = self._ctx.discovery
        wanted: dict[str, Any] = dict(listen_flags(discovery.capabilities if discovery else {}))
        if session.subscriptions:
            wanted["resourceSubscriptions"] = list(session.subscriptions)
        if not wanted or session.get_exchange is None:
            return []
        params = with_envelope({"notifications": wanted}, session.envelope())
        send = self._ctx.open_leg(
            "listen", session.id, session.get_exchange, "subscriptions/listen", params, session.get_headers
        )
        session.listen_leg = send.leg
        return [send]

    def _stop(self, session: Session) -> Commands:
        leg = session.listen_leg
        if leg is None:
            return []
        session.listen_leg = None
        self._ctx.drop_leg(leg)
        return [CloseLeg(leg)]


def _untagged(raw: Any) -> Any:
    """The notification without `_meta.subscriptionId` (and without `_meta` if that emptied it)."""
    params = raw.get("params") if isinstance(raw, dict) else None
    if not isinstance(params, dict):
        return raw
    meta = params.get("_meta")
    if not isinstance(meta, dict) or META_SUBSCRIPTION_ID not in meta:
        return raw
    rest = {k: v for k, v in meta.items() if k != META_SUBSCRIPTION_ID}
    new_params = {k: v for k, v in params.items() if k != "_meta"}
    if rest:
        new_params["_meta"] = rest
    return {**raw, "params": new_params}
