"""HTTP+SSE (2024-11-05) clients in front of the proxy: `GET /sse` and `POST /messages?sessionId=...`.

A client of the old transport opens one GET stream; its first event (`endpoint`) names where to POST
its messages, and every message for it (answers, the server's requests and notifications) comes as a
`message` event on that stream. The endpoint is always the proxy's own (`sse_messages_path` with a
session id the proxy mints), never the upstream's, so the client never learns the server's address.

Each stream is one client channel (`ChannelClientShell`): a POSTed message is answered 202 at once
and served as a Streamable HTTP request through the same engines as any other client's, so a legacy
upstream is passed through and a 2026-07-28 upstream reached through the legacy-client bridge. Bounds:
`max_sse_sessions` streams at once (503 past it), `max_sse_sessions_per_client` of them for one client
address (429 past it, so one client cannot hold them all: a stream has no deadline), and
`sse_queue_bytes` of messages waiting on one stream: a client that reads more slowly is cut off with a
log line naming the setting, so it never holds messages without bound or slows anyone else. Refusals
are logged at most once a second per setting (`also_unlogged` counting the rest) and counted.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import deque
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qs

from proxy import SERVER_SOFTWARE
from proxy.config import Settings
from proxy.flows.observations import PROXY_STOPPING
from proxy.framing.classify import peek_id
from proxy.framing.http import header
from proxy.framing.sse import encode_comment, encode_event
from proxy.logs import get_logger
from proxy.transport.channel_client import ChannelClientShell, Serving
from proxy.transport.client_side import ClientGone, ClientSide
from proxy.transport.client_slots import ClientSlots
from proxy.transport.tasks import spawn
from proxy.wire import errors
from proxy.wire.headers import SESSION_ID
from proxy.wire.jsonrpc import dumps, error_response

KEEPALIVE: Final = 15.0
"""Seconds of silence on a client's stream before a comment line keeps intermediaries from closing it."""

_HEADERS: Final = (
    ("Content-Type", "text/event-stream"),
    ("Cache-Control", "no-cache"),
    ("X-Accel-Buffering", "no"),
    ("Server", SERVER_SOFTWARE),
)
_PING: Final = encode_comment("keepalive") + b"\n"


def sse_paths(settings: Settings, base_path: str) -> tuple[str, str] | None:
    """The stream and message paths HTTP+SSE clients use, or None when `sse_path` is `off`.

    Unset, each is a sibling of the upstream's MCP endpoint path: `/mcp` -> `/sse` and `/messages`.
    """
    if settings.sse_path == "off":
        return None
    folder = base_path.rsplit("/", 1)[0] if "/" in base_path else ""
    stream = settings.sse_path or f"{folder}/sse"
    messages = settings.sse_messages_path
    if messages is None or messages == "off":
        messages = f"{folder}/messages"
    return stream, messages


class SseOutbox:
    """The `ChannelOut` of one client stream: `message` events queued, bounded in bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.events: deque[bytes] = deque()
        self.queued = 0
        self.ready = asyncio.Event()
        self.closed = False
        self.overflow = 0
        """Bytes that would have been queued when the bound was crossed (0: never crossed)."""

    def send(self, data: bytes) -> None:
        if self.closed:
            raise ClientGone("the client's stream closed")
        event = b"event: message\ndata: " + data + b"\n\n"
        if self.queued + len(event) > self.limit:
            self.overflow = self.queued + len(event)
            self.close()
            raise ClientGone("the client's stream fell behind")
        self.events.append(event)
        self.queued += len(event)
        self.ready.set()

    async def room(self) -> None:
        if self.closed:
            raise ClientGone("the client's stream closed")

    async def take(self, seconds: float) -> bytes | None:
        """The queued events as one write, or None after `seconds` of silence (or once closed)."""
        if not self.events and not self.closed:
            self.ready.clear()
            try:
                async with asyncio.timeout(seconds):
                    await self.ready.wait()
            except TimeoutError:
                return None
        if not self.events:
            return None
        data = b"".join(self.events)
        self.events.clear()
        self.queued = 0
        return data

    def close(self) -> None:
        self.closed = True
        self.ready.set()


@dataclass(slots=True)
class _Session:
    shell: ChannelClientShell
    outbox: SseOutbox


class SseClients:
    """The HTTP+SSE client sessions the front serves, by the session id each endpoint names."""

    def __init__(self, serving: Serving, paths: tuple[str, str]) -> None:
        self.serving = serving
        self.stream_path, self.messages_path = paths
        self.sessions: dict[str, _Session] = {}
        self.closing: set[asyncio.Task[None]] = set()
        self.log = get_logger()
        settings, floods = serving.settings, serving.relays.floods
        self.per_client = ClientSlots(
            "max_sse_sessions_per_client", "HTTP+SSE streams", settings.sse_sessions_per_client, floods
        )
        self.over_cap = 0
        """Streams refused past `max_sse_sessions`, since the start (`/metrics`)."""

    @property
    def refused(self) -> dict[str, int]:
        """Streams refused since the start, by the setting that refused them."""
        return {"max_sse_sessions": self.over_cap, self.per_client.setting: self.per_client.refused}

    def wants(self, method: str, path: str, query: str, headers: tuple[tuple[str, str], ...]) -> bool:
        """Whether a front request is an HTTP+SSE client's: a GET of the stream path naming no
        session, or a POST to the message path naming one in its query."""
        if method == "GET":
            return path == self.stream_path and header(headers, SESSION_ID) is None
        return method == "POST" and path == self.messages_path and _session_of(query) is not None

    def message(self, side: ClientSide, raw: bytes) -> None:
        """A POSTed message: 202 at once, then served on its session's channel (404: no such session)."""
        session = self.sessions.get(_session_of(side.raw_query) or "")
        if session is None:
            text = (
                f"no HTTP+SSE session of this id (it ended, or the proxy restarted): open a new stream "
                f"with GET {self.stream_path} and POST to the endpoint its first event names"
            )
            body = dumps(error_response(peek_id(raw), errors.INVALID_REQUEST, text))
            side.respond(404, body, "application/json", ())
            return
        side.respond(202, b"Accepted", "text/plain; charset=utf-8", ())
        session.shell.receive(raw)

    async def stream(self, side: ClientSide) -> None:
        """A client's GET: the `endpoint` event, then its messages, until it leaves or falls behind."""
        settings = self.serving.settings
        if len(self.sessions) >= settings.max_sse_sessions:
            self._refuse(side, settings.max_sse_sessions)
            return
        peer = side.peer
        if not self.per_client.take(peer):
            refusal = self.per_client.refusal(peer, None, time.monotonic())
            retry = (("Retry-After", str(refusal.retry_after)),)
            side.close_after_answer()
            side.respond(refusal.status, dumps(refusal.body), "application/json", retry)
            return
        session_id = secrets.token_hex(16)
        outbox = SseOutbox(settings.sse_queue_bytes)
        shell = ChannelClientShell(
            self.serving, outbox, transport="sse", peer=peer, client_headers=side.headers
        )
        self.sessions[session_id] = _Session(shell, outbox)
        endpoint = encode_event(f"{self.messages_path}?sessionId={session_id}", event="endpoint")
        self.log.info("sse_client_opened", peer=side.peer, streams=len(self.sessions))
        reason = "client left"
        try:
            side.start_now(200, None, _HEADERS, None, endpoint)
            while not outbox.closed:
                data = await outbox.take(KEEPALIVE)
                if data is not None or not outbox.closed:
                    await side.write(data or _PING)
            reason = "fell behind" if outbox.overflow else "proxy stopping"
            await side.finish()  # the stream ends cleanly, even for a client cut off
        except ClientGone:
            pass
        finally:
            self.per_client.give_back(peer)
            self._ended(session_id, shell, outbox, side, reason)

    def _ended(
        self, session_id: str, shell: ChannelClientShell, outbox: SseOutbox, side: ClientSide, reason: str
    ) -> None:
        """A stream ended (however): its session ends upstream, in a task of its own."""
        self.sessions.pop(session_id, None)
        outbox.close()
        task = spawn(shell.close(), name="sse-client-close")
        self.closing.add(task)
        task.add_done_callback(self.closing.discard)
        if outbox.overflow:
            self.log.warning(
                "sse_client_too_slow",
                peer=side.peer,
                queued_bytes=outbox.overflow,
                limit=outbox.limit,
                setting="sse_queue_bytes",
                hint="the client read its stream more slowly than messages came; its stream was closed "
                "(raise sse_queue_bytes if such bursts are expected)",
            )
            side.cut()
            return
        self.log.info("sse_client_closed", peer=side.peer, reason=reason, streams=len(self.sessions))

    def _refuse(self, side: ClientSide, limit: int) -> None:
        text = f"the proxy serves its limit of {limit} HTTP+SSE streams (max_sse_sessions); retry shortly"
        body = dumps(error_response(None, errors.UPSTREAM_UNAVAILABLE, text, {"setting": "max_sse_sessions"}))
        self.over_cap += 1
        also = self.per_client.floods.due("max_sse_sessions", time.monotonic())
        if also is not None:
            self.log.warning(
                "sse_client_refused",
                peer=side.peer,
                limit=limit,
                setting="max_sse_sessions",
                also_unlogged=also or None,
            )
        side.respond(503, body, "application/json", (("Retry-After", "1"),))

    async def close(self, seconds: float) -> int:
        """The proxy stops: every stream ends, its session upstream too (bounded by `seconds`).

        Returns how many client streams were still open, and so were cut by the stop.
        """
        cut = len(self.sessions)
        for session in list(self.sessions.values()):
            session.outbox.close()
        shells = [session.shell.close(PROXY_STOPPING) for session in self.sessions.values()]
        self.sessions.clear()
        for close in shells:
            await close
        if self.closing:
            await asyncio.wait(list(self.closing), timeout=seconds)
        return cut


def _session_of(query: str) -> str | None:
    """The session an endpoint URL's query names (`sessionId`, or the Python SDK's `session_id`)."""
    if not query:
        return None
    values = parse_qs(query)
    found = values.get("sessionId") or values.get("session_id")
    return found[0] if found else None
