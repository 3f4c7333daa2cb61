"""One message channel served as Streamable HTTP exchanges (the contract is in the package docstring).

Theory of operation. Every request a POST carries is a *call*, keyed by the id it has on the channel
(the client's own id, or an alias when that id is already in flight there, e.g. two sessionless
clients sharing a stdio child both sending id 1). Its `_meta.progressToken` is likewise renamed when
another call in flight already uses it (SDK clients use their request id as their token, so clients
sharing a channel collide on tokens as often as on ids), and the progress the peer sends under the
new name goes back under the client's own. A call belongs to the exchange that carried it
until its answer comes back or the exchange is abandoned. The exchange's head is held until the
first message for it arrives: the answer alone makes a JSON response, anything else first makes an
SSE stream, on which the answer then comes last. Messages the peer starts (requests, notifications)
carry no address on a channel, so their stream is inferred from cues, most specific first (see
`_target`). On a shared channel (no session: a 2026-07-28 client) closing a call's stream cancels
it, and the peer is told with `notifications/cancelled`, the stdio cancellation; on a session
channel (legacy) it does not, as on legacy Streamable HTTP, and a late answer is dropped.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any

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
from proxy.engine.select import PROBE_IDS
from proxy.wire import errors
from proxy.wire.headers import SESSION_ID
from proxy.wire.jsonrpc import (
    Body,
    Kind,
    Message,
    RequestId,
    dumps,
    error_response,
    notification,
    parse_body,
)

DEFAULT_BACKLOG = 256
"""Server messages held for a GET stream that is not open yet, by default; past it the oldest go."""

PREVIEW_CHARS = 200
"""Characters of a message the peer got wrong that a log line quotes."""

LISTEN = "subscriptions/listen"
"""2026-07-28: the request whose stream carries list-change and resource-update notifications."""

LISTEN_NOTIFICATIONS = frozenset(
    {
        "notifications/subscriptions/acknowledged",
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/resources/updated",
    }
)
"""Notifications a listen stream carries (they relate to no call)."""

_JSON = ("Content-Type", "application/json")
_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,18}|"[^"\\]{0,200}")')
_REQUEST = Kind.REQUEST
_INVALID = Kind.INVALID


@dataclass(slots=True)
class _Call:
    """A request sent to the peer and not answered yet."""

    exchange: str | None
    """The exchange its answer goes to; None once that exchange was abandoned."""
    client_id: RequestId
    token: str | int | None
    """Its progress token as the peer knows it: progress notifications carrying it ride its stream."""
    listen: bool


@dataclass(slots=True)
class _Exchange:
    """An HTTP exchange whose response is not finished."""

    calls: list[RequestId] = field(default_factory=list)
    """Channel ids of the calls it carried (answered ones included)."""
    pending: int = 0
    """Calls not answered yet."""
    batch: bool = False
    streaming: bool = False
    """Its SSE head went out."""
    get: bool = False
    """It is the GET stream."""


class ChannelCore:
    """Serves the HTTP exchanges of one message channel: `handle(event) -> list[command]`.

    `session` is the `Mcp-Session-Id` the channel stands for (a legacy session), or None for the
    channel sessionless clients share. `backlog` bounds the server messages held for a GET stream.
    """

    def __init__(self, *, session: str | None = None, backlog: int = DEFAULT_BACKLOG) -> None:
        self.session = session
        self.backlog = backlog
        self.closed: str | None = None
        """Why the channel closed (None while open)."""
        self.cut_short = 0
        """The clients' calls the channel's end answered with a JSON-RPC error (set when it closes;
        the era probe's own are not counted): what an exit's log line counts as requests in flight."""
        self.probe_cut = 0
        """The era probe's own calls the channel's end cut short (set when it closes): a channel that
        ends under the probe's request alone ended as that server's answer to the probe."""
        session_head: Headers = ((SESSION_ID, session),) if session is not None else ()
        self._json_head: Headers = (_JSON, *session_head)
        self._sse_head: Headers = session_head
        self._calls: dict[RequestId, _Call] = {}
        self._exchanges: dict[str, _Exchange] = {}
        self._tokens: dict[str | int, str] = {}
        """The calls' progress tokens as the peer knows them, and the exchange each call rides."""
        self._renamed_tokens: dict[str, str | int] = {}
        """Progress tokens sent under a name of the proxy's (another call had the client's), and the
        client's own."""
        self._asked: dict[RequestId, str] = {}
        """The server's requests in flight, by id, and the exchange each rode."""
        self._stream: str | None = None
        """The GET stream's exchange."""
        self._held: deque[bytes] = deque()
        self._aliases = 0
        self._token_aliases = 0

    @property
    def idle(self) -> bool:
        """Nothing is in flight on the channel: no call, no open exchange, no server message held."""
        return not (self._calls or self._exchanges or self._asked or self._held)

    def adopt_session(self, session: str) -> None:
        """Stand for a legacy session from now on: a fresh channel the era probe left, whose server
        saw no `initialize` yet, serves the session a client's `initialize` opens (no new process)."""
        self.session = session
        self._json_head = (_JSON, (SESSION_ID, session))
        self._sse_head = ((SESSION_ID, session),)

    def __repr__(self) -> str:
        return (
            f"ChannelCore(session={'yes' if self.session else 'shared'}, calls={len(self._calls)}, "
            f"exchanges={len(self._exchanges)}, stream={self._stream}, held={len(self._held)}, "
            f"closed={self.closed!r})"
        )

    @property
    def busy(self) -> bool:
        """Calls or exchanges are open (an idle channel may be stopped)."""
        return bool(self._calls or self._exchanges)

    def handle(self, event: ChannelEvent) -> list[ChannelCommand]:
        """The commands one event calls for, in order."""
        match event:
            case ChannelReceived(data):
                return self._received(data)
            case PostReceived(exchange, body, parsed):
                return self._post(exchange, body, parsed)
            case StreamRequested(exchange):
                return self._get(exchange)
            case DeleteRequested(exchange):
                return self._delete(exchange)
            case HeadDue(exchange):
                ex = self._exchanges.get(exchange)
                if ex is None or ex.streaming:
                    return []
                ex.streaming = True
                return [OpenStream(exchange, self._sse_head)]
            case ExchangeAbandoned(exchange):
                return self._abandoned(exchange)
            case ChannelOversized():
                return self._oversized(event)
            case ChannelWriteFailed(exchange, detail):
                return self._write_failed(exchange, detail)
            case ChannelClosed(reason):
                return self._closed(reason)
        raise TypeError(f"not a channel event: {event!r}")  # pragma: no cover

    # -- the client's side --------------------------------------------------------------------------

    def _post(self, exchange: str, raw: bytes, parsed: Body | None = None) -> list[ChannelCommand]:
        body = parse_body(raw) if parsed is None else parsed
        if self.closed is not None:
            return [self._refusal(exchange, 404 if self.session else 502, body.first)]
        if body.parse_error is not None:
            code = errors.PARSE_ERROR if body.parse_error.startswith("not JSON") else errors.INVALID_REQUEST
            return [self._error(exchange, 400, None, code, f"Parse error: {body.parse_error}")]
        for msg in body.messages:
            if msg.kind is _INVALID:
                return [
                    self._error(
                        exchange, 400, msg.id, errors.INVALID_REQUEST, f"Invalid request: {msg.problem}"
                    )
                ]
        if not any(msg.kind is _REQUEST for msg in body.messages):
            return [
                *self._write_all(exchange, raw, body.messages, body.batch),
                Answer(exchange, 202, self._sse_head, b""),
            ]
        ex = _Exchange(batch=body.batch)
        self._exchanges[exchange] = ex
        return self._write_all(exchange, raw, body.messages, body.batch, ex)

    def _write_all(
        self,
        exchange: str,
        raw: bytes,
        messages: tuple[Message, ...],
        batch: bool,
        ex: _Exchange | None = None,
    ) -> list[ChannelCommand]:
        """Write the POST's messages as one line: as sent when nothing in them had to change."""
        values: list[Any] = []
        changed = False
        commands: list[ChannelCommand] = []
        for msg in messages:
            value = msg.raw
            if msg.kind is _REQUEST and ex is not None:
                value = self._call(exchange, ex, msg)
            elif msg.is_response:
                if msg.id is not None:
                    self._asked.pop(msg.id, None)
            elif msg.method == "notifications/cancelled":
                value = self._cancellation(msg)
                if value is None:
                    commands.append(Log("client_cancellation_dropped", "warning", _AMBIGUOUS_CANCEL))
                    changed = True
                    continue
            changed = changed or value is not msg.raw
            values.append(value)
        data = raw.strip()
        if not values:
            return commands
        if changed or b"\n" in data or b"\r" in data:
            data = dumps(values if batch else values[0])
        return [*commands, WriteChannel(data, exchange)]

    def _call(self, exchange: str, ex: _Exchange, msg: Message) -> Any:
        """Register a request as a call of `ex`; its JSON as sent to the peer (aliased if need be)."""
        client_id = msg.id
        assert client_id is not None
        channel_id: RequestId = client_id
        value = msg.raw
        if client_id in self._calls:
            self._aliases += 1
            channel_id = f"mcp-proxy-{self._aliases}"
            value = {**value, "id": channel_id}
        meta = msg.params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        token = token if isinstance(token, (str, int)) and not isinstance(token, bool) else None
        if token is not None:
            if token in self._tokens:
                token, value = self._rename_token(token, value)
            self._tokens[token] = exchange
        self._calls[channel_id] = _Call(exchange, client_id, token, msg.method == LISTEN)
        ex.calls.append(channel_id)
        ex.pending += 1
        return value

    def _rename_token(self, token: str | int, value: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """A progress token already in use on the channel, under a name of the proxy's: the request's
        JSON with that name, and the name (the client's own is restored on its progress)."""
        alias = token
        while alias in self._tokens:
            self._token_aliases += 1
            alias = f"mcp-proxy-progress-{self._token_aliases}"
        assert isinstance(alias, str)
        self._renamed_tokens[alias] = token
        params = value["params"]
        return alias, {**value, "params": {**params, "_meta": {**params["_meta"], "progressToken": alias}}}

    def _cancellation(self, msg: Message) -> Any:
        """A client's `notifications/cancelled`, naming the call by the id the peer knows it by; None
        when calls of several clients have that id on the shared channel (it could cancel another
        client's call; a 2026-07-28 client cancels by closing its request's stream)."""
        wanted = msg.params.get("requestId")
        named = [channel_id for channel_id, call in self._calls.items() if call.client_id == wanted]
        if len(named) > 1 and self.session is None:
            return None
        if named and named[0] != wanted:
            return {**msg.raw, "params": {**msg.params, "requestId": named[0]}}
        return msg.raw

    def _get(self, exchange: str) -> list[ChannelCommand]:
        if self.session is None:
            text = "Method Not Allowed: the sessionless (2026-07-28) channel has no GET stream"
            return [self._error(exchange, 405, None, errors.INVALID_REQUEST, text)]
        if self.closed is not None:
            return [self._refusal(exchange, 404, None)]
        if self._stream is not None:
            text = "Conflict: only one GET stream is allowed per session"
            return [self._error(exchange, 409, None, errors.INVALID_REQUEST, text)]
        self._stream = exchange
        self._exchanges[exchange] = _Exchange(streaming=True, get=True)
        commands: list[ChannelCommand] = [OpenStream(exchange, self._sse_head)]
        held, self._held = self._held, deque()
        for data in held:
            msg = parse_body(data).first
            if msg is not None and msg.kind is _REQUEST and msg.id is not None:
                self._asked[msg.id] = exchange
            commands.append(StreamMessage(exchange, data))
        return commands

    def _delete(self, exchange: str) -> list[ChannelCommand]:
        if self.session is None:
            text = "Method Not Allowed: the sessionless (2026-07-28) channel has no session to end"
            return [self._error(exchange, 405, None, errors.INVALID_REQUEST, text)]
        # The session is gone from now on, not once its process has stopped: a request that comes
        # meanwhile gets the 404 that tells its client to initialize again.
        self.closed = "its session ended (DELETE)"
        return [Answer(exchange, 200, self._sse_head, b""), CloseChannel(self.closed)]

    def _abandoned(self, exchange: str) -> list[ChannelCommand]:
        ex = self._exchanges.pop(exchange, None)
        if ex is None:
            return []
        if ex.get:
            self._stream = None
            return []
        self._forget_asked(exchange)
        commands: list[ChannelCommand] = []
        for channel_id in ex.calls:
            call = self._calls.get(channel_id)
            if call is None or call.exchange != exchange:
                continue
            if self.session is not None:
                call.exchange = None  # legacy: closing a stream is no cancellation; its answer is dropped
                continue
            self._drop_call(channel_id, call)
            cancel = notification(
                "notifications/cancelled",
                {"requestId": channel_id, "reason": "the client closed the request's stream"},
            )
            commands.append(WriteChannel(dumps(cancel), None))
        return commands

    # -- the peer's side -------------------------------------------------------------------------

    def _received(self, data: bytes) -> list[ChannelCommand]:
        body = parse_body(data)
        if body.parse_error is not None:
            return [_protocol_error(body.parse_error, data)]
        single = not body.batch
        commands: list[ChannelCommand] = []
        for msg in body.messages:
            item = data if single else dumps(msg.raw)
            if msg.is_response:
                commands += self._answered(msg, item)
            elif msg.kind is _INVALID:
                commands.append(_protocol_error(msg.problem or "invalid", item))
            else:
                commands += self._started(msg, item)
        return commands

    def _answered(self, msg: Message, data: bytes) -> list[ChannelCommand]:
        call = self._calls.pop(msg.id, None) if msg.id is not None else None
        if call is None:
            fields = {"id": msg.id, "session": bool(self.session)}
            return [Log("upstream_answer_unmatched", "info", fields)]
        self._forget_token(call)
        seen: Message | None = msg
        if call.client_id != msg.id:
            data = dumps({**msg.raw, "id": call.client_id})
            seen = None
        if call.exchange is None:
            return [Log("upstream_answer_dropped", "debug", {"id": call.client_id})]
        return self._deliver_answer(call.exchange, data, seen)

    def _deliver_answer(self, exchange: str, data: bytes, msg: Message | None = None) -> list[ChannelCommand]:
        ex = self._exchanges[exchange]
        ex.pending -= 1
        if ex.pending == 0 and not ex.streaming and not ex.batch:
            self._end(exchange)
            return [Answer(exchange, 200, self._json_head, data, msg)]
        commands = self._stream_to(exchange, ex, data, msg)
        if ex.pending == 0:
            self._end(exchange)
            commands.append(EndStream(exchange))
        return commands

    def _stream_to(
        self, exchange: str, ex: _Exchange, data: bytes, msg: Message | None = None
    ) -> list[ChannelCommand]:
        if ex.streaming:
            return [StreamMessage(exchange, data, msg)]
        ex.streaming = True
        return [OpenStream(exchange, self._sse_head), StreamMessage(exchange, data, msg)]

    def _started(self, msg: Message, data: bytes) -> list[ChannelCommand]:
        """A request or notification the peer started: onto the stream its cues name, or held."""
        target, guessed = self._target(msg)
        if target is not None and target not in self._exchanges:
            # Progress of a legacy call whose stream the client closed (or cancelled): its answer
            # is dropped when it comes, and so is what leads up to it.
            reason = "it belongs to a call whose stream the client closed"
            return [Log("upstream_message_dropped", "debug", {"method": msg.method, "reason": reason})]
        commands: list[ChannelCommand] = []
        if target is None and self.session is None and msg.kind is _REQUEST and msg.id is not None:
            return self._unplaced(msg)
        if target is None:
            if len(self._held) >= self.backlog:
                self._held.popleft()
                commands.append(Log("upstream_message_dropped", "warning", _dropped_fields(self.backlog)))
            self._held.append(data)
            return commands
        if guessed:
            commands.append(
                Log("upstream_request_placed", "info", {"method": msg.method, "exchange": target})
            )
        if msg.kind is _REQUEST and msg.id is not None:
            self._asked[msg.id] = target
        seen: Message | None = msg
        if msg.method == "notifications/progress" and self._renamed_tokens:
            token = msg.params.get("progressToken")
            if isinstance(token, str) and (own := self._renamed_tokens.get(token)) is not None:
                data = dumps({**msg.raw, "params": {**msg.params, "progressToken": own}})
                seen = None
        return commands + self._stream_to(target, self._exchanges[target], data, seen)

    def _unplaced(self, msg: Message) -> list[ChannelCommand]:
        """A request the peer sent on the shared channel with no cue to its call: refused at once.

        The shared channel has no GET stream, so it would wait for one forever; and with several
        calls in flight they are different clients' (every 2026-07-28 client shares the channel), so
        giving it to any one could ask one client another's question."""
        in_flight = len({c.exchange for c in self._calls.values() if c.exchange is not None and not c.listen})
        text = (
            f"{msg.method} names no client request, while {in_flight} calls of different clients are in "
            "flight on the server's one shared stream: the proxy cannot tell whose it is"
            if in_flight
            else f"{msg.method} names no client request, and no call is in flight to ask"
        )
        fields = {"method": msg.method, "id": msg.id, "in_flight": in_flight, "hint": UNPLACED_HINT}
        refusal = dumps(error_response(msg.id, errors.INTERNAL_ERROR, text))
        return [Log("upstream_request_refused", "warning", fields), WriteChannel(refusal, None)]

    def _target(self, msg: Message) -> tuple[str | None, bool]:
        """Which open exchange a peer-started message rides, and whether that was a guess.

        Cues, most specific first: a progress notification's token names its call; a cancellation
        names the server request it cancels, which rode some stream; listen notifications go to the
        listen call. Then the only call in flight, else the GET stream; with several calls and no GET
        stream a request (which the peer waits on) goes to the newest call on a session channel (one
        client's session), a notification waits. The shared channel's calls are different clients',
        so there a request is never guessed (`_unplaced` refuses it).
        """
        method, params = msg.method, msg.params
        if method == "notifications/progress":
            token = params.get("progressToken")
            if isinstance(token, (str, int)) and (found := self._tokens.get(token)) is not None:
                return found, False
        elif method == "notifications/cancelled":
            asked = params.get("requestId")
            if isinstance(asked, (str, int)) and (found := self._asked.get(asked)) is not None:
                return found, False
        listen = method in LISTEN_NOTIFICATIONS
        open_calls: dict[str, None] = {}
        for call in self._calls.values():
            if call.exchange is not None and call.listen == listen:
                open_calls[call.exchange] = None
        if len(open_calls) == 1:
            return next(iter(open_calls)), False
        if self._stream is not None:
            return self._stream, False
        if open_calls and msg.kind is _REQUEST and self.session is not None:
            return next(reversed(open_calls)), True
        return None, False

    def _oversized(self, event: ChannelOversized) -> list[ChannelCommand]:
        """A message over the bound: the call it answers (its id read from its edges) fails."""
        log = Log(
            "upstream_message_too_large",
            "warning",
            {
                "size": event.size,
                "limit": event.limit,
                "hint": "raise max_body_bytes to let such messages through",
            },
        )
        channel_id = _edge_id(event.head) or _edge_id(event.tail)
        call = self._calls.get(channel_id) if channel_id is not None else None
        if call is None:
            open_calls = [cid for cid, c in self._calls.items() if c.exchange is not None and not c.listen]
            call = self._calls.get(open_calls[0]) if len(open_calls) == 1 else None
            channel_id = open_calls[0] if call is not None else None
        if call is None or channel_id is None:
            return [log]
        text = (
            f"the upstream MCP server's answer was {event.size} bytes, over the proxy's limit of "
            f"{event.limit} (max_body_bytes); it was dropped"
        )
        return [log, *self._fail_call(channel_id, call, text)]

    def _write_failed(self, exchange: str, detail: str) -> list[ChannelCommand]:
        ex = self._exchanges.get(exchange)
        if ex is None:
            return [Log("upstream_write_failed", "warning", {"detail": detail})]
        commands: list[ChannelCommand] = []
        for channel_id in list(ex.calls):
            call = self._calls.get(channel_id)
            if call is not None and call.exchange == exchange:
                commands += self._fail_call(
                    channel_id, call, f"the request did not reach the upstream: {detail}"
                )
        return commands

    def _closed(self, reason: str) -> list[ChannelCommand]:
        self.closed = reason
        commands: list[ChannelCommand] = []
        calls = self._calls.values()
        answering = [c for c in calls if c.exchange is not None]
        self.probe_cut = sum(1 for c in answering if c.client_id in PROBE_IDS)
        self.cut_short = len(answering) - self.probe_cut
        for channel_id, call in list(self._calls.items()):
            commands += self._fail_call(channel_id, call, f"{reason} before answering")
        for exchange, ex in list(self._exchanges.items()):  # GET streams and calls' streams left open
            if ex.streaming:
                commands.append(EndStream(exchange))
            self._end(exchange)
        if self._held:
            commands.append(
                Log("upstream_message_dropped", "info", {"count": len(self._held), "reason": reason})
            )
            self._held.clear()
        return commands

    # -- bookkeeping -----------------------------------------------------------------------------

    def _fail_call(self, channel_id: RequestId, call: _Call, text: str) -> list[ChannelCommand]:
        """Answer a call with a JSON-RPC error made by the proxy, as if the peer had sent it."""
        self._drop_call(channel_id, call)
        if call.exchange is None:
            return []
        data = dumps(error_response(call.client_id, errors.UPSTREAM_UNAVAILABLE, text))
        return self._deliver_answer(call.exchange, data)

    def _drop_call(self, channel_id: RequestId, call: _Call) -> None:
        self._calls.pop(channel_id, None)
        self._forget_token(call)

    def _forget_token(self, call: _Call) -> None:
        if call.token is not None:
            self._tokens.pop(call.token, None)
            if isinstance(call.token, str):
                self._renamed_tokens.pop(call.token, None)

    def _end(self, exchange: str) -> None:
        ex = self._exchanges.pop(exchange, None)
        if ex is not None and ex.get:
            self._stream = None
        self._forget_asked(exchange)

    def _forget_asked(self, exchange: str) -> None:
        if self._asked:
            for asked in [k for k, v in self._asked.items() if v == exchange]:
                del self._asked[asked]

    def _error(self, exchange: str, status: int, ident: RequestId | None, code: int, text: str) -> Answer:
        return Answer(exchange, status, self._json_head, dumps(error_response(ident, code, text)))

    def _refusal(self, exchange: str, status: int, first: Message | None) -> Answer:
        """A request toward a channel that closed (its session ended: 404, as a legacy server says).

        The error names the request it refuses; a notification or a response the client sent is no
        request, so the error names none (an answer under a response's id would answer the client's
        own request of that id, if one is pending)."""
        ident = first.id if first is not None and first.kind is _REQUEST else None
        if status == 404:
            return self._error(exchange, 404, ident, SESSION_NOT_FOUND, "Session not found")
        return self._error(exchange, status, ident, errors.UPSTREAM_UNAVAILABLE, f"{self.closed}")


_AMBIGUOUS_CANCEL = {
    "reason": "calls of several clients have the id it names on the shared channel",
    "hint": "a 2026-07-28 client cancels a call by closing its request's stream",
}
"""What the log line says of a client's cancellation that could name another client's call."""

UNPLACED_HINT = (
    "a stdio or HTTP+SSE server serves every 2026-07-28 client on one stream (one process, one "
    "session), and its questions carry no request they belong to: a 2026-07-28 server asks with "
    "input_required results instead; one call at a time avoids this"
)
"""Why a request on the shared channel was refused, for the log line that says so."""

SESSION_NOT_FOUND = -32001
"""Legacy Streamable HTTP convention (TS SDK) for an unknown or terminated session, sent with 404."""


def _protocol_error(problem: str, data: bytes) -> Log:
    preview = data[: PREVIEW_CHARS * 4].decode("utf-8", "replace")[:PREVIEW_CHARS]
    return Log(
        "upstream_protocol_error",
        "warning",
        {"problem": problem, "preview": preview, "size": len(data), "action": "skipped"},
    )


def _dropped_fields(backlog: int) -> dict[str, Any]:
    return {
        "reason": f"no stream to carry it and {backlog} messages already held",
        "hint": "a legacy client opens a GET stream for messages that belong to no call",
    }


def _edge_id(edge: bytes) -> RequestId | None:
    """A JSON-RPC id read from a fragment of a message (`"id":7` or `"id":"x"`), if one is there."""
    found = _ID.search(edge)
    if found is None:
        return None
    text = found.group(1)
    return text[1:-1].decode("utf-8", "replace") if text.startswith(b'"') else int(text)
