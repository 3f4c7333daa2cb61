"""`subscriptions/listen` for 2026-07-28 clients, emulated with a legacy session's GET stream.

Theory of operation. A 2026 client asks for change notifications by POSTing
`subscriptions/listen {notifications: {toolsListChanged?, promptsListChanged?,
resourcesListChanged?, resourceSubscriptions?}}` and keeping the SSE response open. A legacy
server sends those notifications unasked on its session's GET stream (list changes, if it declared
`listChanged`) and, for `resources/updated`, only for URIs someone `resources/subscribe`d.

So each listen request is answered with an SSE stream whose first message is
`notifications/subscriptions/acknowledged` naming only what the upstream can deliver. A listener is
fed by the upstream session of its caller and capability set (the one its calls use, so a server
that tailors notifications per session is heard as that caller would hear it): the session gets
one GET stream (a legacy server allows only one) while any of its listeners listens, and one
`resources/subscribe` per URI while any of them wants it (reference counted; `unsubscribe` when the
last one leaves). Each notification is copied to every listener of that session that asked for it,
tagged with `_meta` `subscriptionId` = that listen request's id. Progress and logs never go here: a
log message on the GET stream goes to the session's one call in flight when it asked for that level
(`stream_logs`), else nowhere. A server request on the GET stream belongs to no client request: an
input request is given to a call in flight when the session has one (`stream_asks`); `ping` is
answered by the bridge, anything else is refused with -32601. When a GET stream ends, every
listener of its session is closed gracefully (a complete result for its listen id), since there is
no replay.

With `keep_streams` (what the proxy runs), every session opens its GET stream as soon as its
handshake is complete, as a legacy client does, and keeps it while the session lives whoever
listens: a legacy SDK server sends `list_roots()`, `create_message()` and `elicit()` there when they
name no related request, and a session without the stream loses them. The stream is resumed after a
cut that named an event id (as a call's stream is), else given up until the session is opened
again; a 405 means the server offers none, which is said once and never asked again.
"""

from __future__ import annotations

from typing import Any, Final

from proxy.engine.capabilities import can_subscribe, listen_flags
from proxy.engine.commands import (
    BridgeCommand,
    CloseLeg,
    EndClientResponse,
    Log,
    OpenLegStream,
    RecheckUpstreamEra,
    ReplyJson,
    SendSse,
    StartSse,
)
from proxy.engine.modern_client.state import LegRef, Listener, MrtrContext
from proxy.engine.modern_client.upstream_session import UpstreamLink
from proxy.engine.origins import caller_of
from proxy.engine.resume import Resumable
from proxy.wire import errors
from proxy.wire.jsonrpc import (
    Kind,
    Message,
    RequestId,
    error_response,
    notification,
    request,
    result_response,
)
from proxy.wire.mcp import LISTEN_ACKNOWLEDGED, META_SUBSCRIPTION_ID, RESULT_COMPLETE

Commands = list[BridgeCommand]

ACKNOWLEDGED: Final = LISTEN_ACKNOWLEDGED

UPDATED: Final = "notifications/resources/updated"

FLAG_OF: Final[dict[str, str]] = {
    "notifications/tools/list_changed": "toolsListChanged",
    "notifications/prompts/list_changed": "promptsListChanged",
    "notifications/resources/list_changed": "resourcesListChanged",
}
"""Which listen flag asks for which legacy list-changed notification."""


class ListenEmulator:
    """Owns listeners, each session's GET stream and its subscription reference counts."""

    def __init__(self, ctx: MrtrContext) -> None:
        self._ctx = ctx

    def register(self, exchange: str, msg: Message, headers: tuple[tuple[str, str], ...]) -> Commands | None:
        """Accept a listen request (it starts once its session is ready); a refusal when malformed."""
        assert msg.id is not None
        wanted = msg.params.get("notifications")
        if not isinstance(wanted, dict):
            text = "Invalid params: subscriptions/listen needs a notifications object"
            body = error_response(msg.id, errors.INVALID_PARAMS, text)
            return [ReplyJson(exchange, 400, body)]
        self._ctx.listeners[exchange] = Listener(exchange, msg.id, headers, wanted)
        return None

    def bind(self, exchange: str, link: UpstreamLink) -> None:
        """The listener on `exchange` is fed by `link`'s GET stream."""
        listener = self._ctx.listeners.get(exchange)
        if listener is not None:
            listener.session = link.name

    def begin(self, exchange: str) -> Commands:
        """The session is ready: acknowledge what can be delivered and make sure it will be."""
        listener = self._ctx.listeners.get(exchange)
        link = self._ctx.pool.named(listener.session) if listener is not None else None
        if listener is None or link is None:
            return []
        listener.active = True
        caps = _capabilities(link)
        listener.honoured = _honoured(listener.requested, caps)
        ack = notification(ACKNOWLEDGED, {"notifications": listener.honoured})
        note = _not_offered(listener.requested, caps)
        commands: Commands = [StartSse(exchange), SendSse(exchange, _tagged(ack, listener.ident), note=note)]
        for uri in listener.honoured.get("resourceSubscriptions", []):
            if link.subscribed[uri] == 0:
                commands.append(self._post(link, listener, "resources/subscribe", uri))
            link.subscribed[uri] += 1
        if listener.honoured and link.stream_leg is None:
            commands.append(self._open_stream(link, listener))
        return commands

    def open_standing(self, link: UpstreamLink) -> Commands:
        """The session is open: keep its GET stream (`keep_streams`) unless it has one or none is offered."""
        if not self._ctx.keep_streams or link.stream_leg is not None or link.stream_refused:
            return []
        return [self._open(link, link.exchange, link.credentials)]

    def on_stream_head(self, leg: str, status: int) -> Commands:
        """The GET's answer: a 405 from a server that offers no stream is noted once per session."""
        if status < 400:
            return []
        link = self._link_of(leg)
        if status == 405 and self._ctx.keep_streams and link is not None:
            if link.stream_refused:
                return []
            link.stream_refused = True
            fields = {"session": link.name, "status": status}
            return [Log("upstream_stream_not_offered", "info", fields)]
        return [Log("bridge_listen_stream_refused", "warning", {"leg": leg, "status": status})]

    def broadcast(self, msg: Message, link: UpstreamLink) -> Commands:
        """Copy one change notification from `link` to every listener of it that asked for it."""
        commands: Commands = []
        for listener in self._ctx.listeners.values():
            if listener.active and listener.session == link.name and _wants(listener, msg):
                commands.append(SendSse(listener.exchange, _tagged(msg.raw, listener.ident)))
        return commands

    def undelivered(self, leg: str, msg: Message) -> str | None:
        """Why a change notification on a session's GET stream reaches no listening client, or None
        (it is delivered, or `leg` is no such stream): a listener asked for it but the server never
        declared the capability that would have granted it, or nobody listens for it."""
        if not is_change(msg):  # asked of every upstream message: the cheap test first
            return None
        link = self._link_of(leg)
        if link is None or self._ctx.legs[leg].purpose != "stream":
            return None
        listening = [ls for ls in self._ctx.listeners.values() if ls.active and ls.session == link.name]
        if any(_wants(listener, msg) for listener in listening):
            return None
        capability = _capability_of(msg)
        if any(_asked(listener.requested, msg) for listener in listening) and capability is not None:
            return f"not delivered to the listening client: the server did not declare {capability}"
        return "not delivered: no client listens for it"

    def on_stream_message(self, leg: str, msg: Message) -> Commands:
        """A message on a session's GET stream."""
        link = self._link_of(leg)
        if link is None:
            return []
        if msg.kind is Kind.NOTIFICATION:
            return self.broadcast(msg, link) if is_change(msg) else []
        if msg.kind is not Kind.REQUEST or msg.id is None:
            return []
        if msg.method == "ping":
            return [self._notice(link, leg, result_response(msg.id, {}), "pong")]
        text = f"Method not found: {msg.method} is not associated with a client request"
        fields = {"leg": leg, "method": msg.method, "id": msg.id}
        refusal = self.refuse(leg, msg, errors.METHOD_NOT_FOUND, text)
        return [Log("bridge_unassociated_request", "warning", fields), *refusal]

    def refuse(self, leg: str, msg: Message, code: int, text: str) -> Commands:
        """Answer a request on a session's GET stream with the error `code` saying `text` (nobody
        here can answer it)."""
        link = self._link_of(leg)
        if link is None or msg.id is None:
            return []
        return [self._notice(link, leg, error_response(msg.id, code, text), "refuse")]

    def on_stream_lost(self, leg: str, why: str) -> Commands:
        """A GET stream is over: end every listener of its session gracefully (there is no replay)."""
        link = self._link_of(leg)
        self._ctx.drop_leg(leg)
        if link is None or link.stream_leg != leg:
            return []
        link.stream_leg = None
        said = link.stream_refused and self._ctx.keep_streams  # the 405 was noted already
        commands: Commands = []
        if not said:  # a session's stream ends when its server restarts or forgets the session
            link.doubted = True
            commands.append(Log("bridge_listen_stream_ended", "warning", {"leg": leg, "why": why}))
            commands.append(RecheckUpstreamEra(f"the bridge's upstream GET stream ended: {why}"))
        for exchange, listener in list(self._ctx.listeners.items()):
            if listener.active and listener.session == link.name:
                done = result_response(listener.ident, _tagged_result(listener.ident))
                commands.extend([SendSse(exchange, done), *self.close(exchange, None)])
        return commands

    def close(self, exchange: str, outcome: str | None) -> Commands:
        """A listener is gone: release its subscriptions, and its session's GET stream when nobody listens."""
        listener = self._ctx.listeners.pop(exchange, None)
        if listener is None:
            return []
        link = self._ctx.pool.named(listener.session) if listener.session else None
        self._ctx.pool.release(listener.session, exchange)
        commands: Commands = []
        if link is not None:
            for uri in listener.honoured.get("resourceSubscriptions", []):
                link.subscribed[uri] -= 1
                if link.subscribed[uri] <= 0:
                    del link.subscribed[uri]
                    commands.append(self._post(link, listener, "resources/unsubscribe", uri))
            commands.extend(self._close_stream_if_unheard(link))
        return [*commands, EndClientResponse(exchange, outcome)]

    def fail(self, exchange: str) -> RequestId | None:
        """Forget a listener that never started (its session could not be opened); its id for the reply."""
        listener = self._ctx.listeners.pop(exchange, None)
        if listener is None:
            return None
        self._ctx.pool.release(listener.session, exchange)
        return listener.ident

    def _close_stream_if_unheard(self, link: UpstreamLink) -> Commands:
        leg = link.stream_leg
        listening = any(other.active and other.session == link.name for other in self._ctx.listeners.values())
        if leg is None or listening or self._ctx.keep_streams:
            return []
        link.stream_leg = None
        self._ctx.drop_leg(leg)
        return [CloseLeg(leg)]

    def _link_of(self, leg: str) -> UpstreamLink | None:
        ref = self._ctx.legs.get(leg)
        return self._ctx.pool.named(ref.owner) if ref is not None else None

    def _open_stream(self, link: UpstreamLink, listener: Listener) -> OpenLegStream:
        return self._open(link, listener.exchange, listener.headers)

    def _open(self, link: UpstreamLink, exchange: str, client: tuple[tuple[str, str], ...]) -> OpenLegStream:
        """The session's GET stream; kept for the session's life (and resumable) with `keep_streams`."""
        leg = self._ctx.new_id("leg")
        link.stream_leg = leg
        headers = link.headers(client, stream=True)
        standing = self._ctx.keep_streams
        resumable = Resumable(None, headers) if standing else None
        self._ctx.legs[leg] = LegRef("stream", link.name, resumable=resumable, caller=caller_of(headers))
        return OpenLegStream(leg, exchange, headers, standing)

    def _post(self, link: UpstreamLink, listener: Listener, method: str, uri: str) -> BridgeCommand:
        leg = self._ctx.new_id("leg")
        message = request(leg, method, {"uri": uri})
        what = f"{method} {uri}"
        return self._ctx.notice(link, "", listener.exchange, message, listener.headers, what, leg=leg)

    def _notice(self, link: UpstreamLink, stream: str, message: dict[str, Any], what: str) -> BridgeCommand:
        """An answer on a session for its GET stream, with its first listener's credentials; related to
        the `stream` leg that asked, so observation files it beside the question it answers (often no
        client exchange is open when the server asks there)."""
        first = next((ls for ls in self._ctx.listeners.values() if ls.session == link.name), None)
        exchange, headers = (first.exchange, first.headers) if first is not None else ("", link.credentials)
        return self._ctx.notice(link, "", exchange, message, headers, what, related=stream)


def _capabilities(link: UpstreamLink) -> dict[str, Any]:
    init = link.init or {}
    caps = init.get("capabilities")
    return caps if isinstance(caps, dict) else {}


def _honoured(requested: dict[str, Any], caps: dict[str, Any]) -> dict[str, Any]:
    """The subset of a listen request the upstream's capabilities can deliver."""
    deliverable = listen_flags(caps)
    honoured: dict[str, Any] = {flag: True for flag in deliverable if requested.get(flag) is True}
    uris = requested.get("resourceSubscriptions")
    if can_subscribe(caps) and isinstance(uris, list):
        kept = list(dict.fromkeys(uri for uri in uris if isinstance(uri, str)))
        if kept:
            honoured["resourceSubscriptions"] = kept
    return honoured


CAPABILITY_OF: Final[dict[str, str]] = {
    "toolsListChanged": "tools.listChanged",
    "promptsListChanged": "prompts.listChanged",
    "resourcesListChanged": "resources.listChanged",
    "resourceSubscriptions": "resources.subscribe",
}
"""The legacy capability a server declares for the bridge to grant each part of a listen request."""


def _not_offered(requested: dict[str, Any], caps: dict[str, Any]) -> str | None:
    """What a listen request asked for that the server did not declare (the acknowledgement's note)."""
    honoured = _honoured(requested, caps)
    asked = [flag for flag in FLAG_OF.values() if requested.get(flag) is True]
    uris = requested.get("resourceSubscriptions")
    if isinstance(uris, list) and any(isinstance(uri, str) for uri in uris):
        asked.append("resourceSubscriptions")
    missing = [f"{part} ({CAPABILITY_OF[part]})" for part in asked if part not in honoured]
    if not missing:
        return None
    return "not honoured, the server did not declare them: " + ", ".join(missing)


def _capability_of(msg: Message) -> str | None:
    """The capability whose absence keeps a change notification from a listener that asked for it."""
    flag = FLAG_OF.get(msg.method or "") or ("resourceSubscriptions" if msg.method == UPDATED else None)
    return CAPABILITY_OF.get(flag) if flag is not None else None


def _asked(requested: dict[str, Any], msg: Message) -> bool:
    """Whether a listen request asked for this change notification (granted or not)."""
    flag = FLAG_OF.get(msg.method or "")
    if flag is not None:
        return requested.get(flag) is True
    uris = requested.get("resourceSubscriptions")
    return msg.method == UPDATED and isinstance(uris, list) and msg.params.get("uri") in uris


def is_change(msg: Message) -> bool:
    """True for the notifications that belong on listen streams (never on a request's stream)."""
    return msg.method in FLAG_OF or msg.method == UPDATED


def _wants(listener: Listener, msg: Message) -> bool:
    flag = FLAG_OF.get(msg.method or "")
    if flag is not None:
        return bool(listener.honoured.get(flag))
    if msg.method == UPDATED:
        return msg.params.get("uri") in listener.honoured.get("resourceSubscriptions", [])
    return False


def _tagged(raw: Any, ident: RequestId) -> dict[str, Any]:
    """The notification with `_meta` `subscriptionId` = the listen request's id."""
    params = raw.get("params") if isinstance(raw, dict) else None
    params = dict(params) if isinstance(params, dict) else {}
    meta = params.get("_meta")
    params["_meta"] = {**(meta if isinstance(meta, dict) else {}), META_SUBSCRIPTION_ID: ident}
    return {**raw, "params": params}


def _tagged_result(ident: RequestId) -> dict[str, Any]:
    """The graceful end of a listen stream: a complete result carrying the subscription id."""
    return {"resultType": RESULT_COMPLETE, "_meta": {META_SUBSCRIPTION_ID: ident}}
