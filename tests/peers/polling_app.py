"""Legacy (2025-11-25) SDK servers with an event store, so a client can resume a call's stream.

`build_polling_app` is SEP-1699 "SSE polling" as the official SDK implements it: with an event store
configured the server opens every POST stream with a priming event (an `id:` and no data) and a
`retry:` hint; the tools here then call `ctx.close_sse_stream()`, so everything after - the in-flight
elicitation and the final result - reaches a client only if it resumes with GET + `Last-Event-ID`.
`build_resumable_app` keeps each stream open (as the TypeScript SDK's server with its event store
does), so a stream is resumed only when the client's side cut it. The event store is the small
in-memory one these real servers need; nothing about the protocol is faked.
"""

from __future__ import annotations

import itertools
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from starlette.types import ASGIApp

from tests.peers.apps import build_server, legacy_only

RETRY_MS = 50
"""The reconnect delay the server suggests (`retry:`), kept short for tests."""


class MemoryEventStore(EventStore):
    """Every event of every stream, in order, so a resuming client gets what it missed."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._events: list[tuple[StreamId, EventId, types.JSONRPCMessage | None]] = []

    async def store_event(self, stream_id: StreamId, message: types.JSONRPCMessage | None) -> EventId:
        event_id = str(next(self._ids))
        self._events.append((stream_id, event_id, message))
        return event_id

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        stream = next((s for s, e, _ in self._events if e == last_event_id), None)
        if stream is None:
            return None
        after = False
        for stream_id, event_id, message in self._events:
            if event_id == last_event_id:
                after = True
            elif after and stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream


def _dropping_tools(server: Server[Any]) -> None:
    """Wrap tools/call so each call's SSE connection is closed right after it opens."""
    entry = server.get_request_handler("tools/call")
    assert entry is not None
    inner = entry.handler

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> Any:
        if ctx.close_sse_stream is not None:
            await ctx.close_sse_stream()
        return await inner(ctx, params)

    server.add_request_handler("tools/call", types.CallToolRequestParams, call_tool)


def build_polling_app() -> ASGIApp:
    """The legacy-only in-flight test server, with SSE polling (connection dropped after priming)."""
    server = build_server("inflight")
    _dropping_tools(server)
    app: ASGIApp = server.streamable_http_app(
        streamable_http_path="/mcp", host="127.0.0.1", event_store=MemoryEventStore(), retry_interval=RETRY_MS
    )
    return legacy_only(app)


def build_resumable_app() -> ASGIApp:
    """The legacy-only in-flight test server with an event store: streams stay open, and resume."""
    app: ASGIApp = build_server("inflight").streamable_http_app(
        streamable_http_path="/mcp", host="127.0.0.1", event_store=MemoryEventStore(), retry_interval=RETRY_MS
    )
    return legacy_only(app)
