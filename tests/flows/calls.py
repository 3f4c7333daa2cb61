"""Scripted plays speak in calls; this turns each call into the observation it stands for.

The plays (`bridge_play`, the sink tests' scenarios) read like the transport's call sites; `Calls`
stamps each with the sink's clock and emits the typed observation, so one play can run into a sink
that builds at once (a watcher) or one that queues.
"""

from __future__ import annotations

from typing import Any

from proxy.flows.events import Channel, Direction, Mode, Side
from proxy.flows.log_lines import ExchangeSummary
from proxy.flows.observations import (
    BodyNotInspected,
    BytesOut,
    ContinuationMoved,
    EventIdSeen,
    ExchangeClosed,
    ExchangeOpened,
    InvalidBody,
    LegClosed,
    LegHeadSeen,
    LegLinked,
    LegMessageSeen,
    MessageSeen,
    ResponseHeadSeen,
    UpstreamSessionMoved,
)
from proxy.flows.sink import ObservationSink
from proxy.wire.jsonrpc import Message, classify_value


class Calls:
    """The transport's observation calls, as a play writes them, emitted into one sink."""

    def __init__(self, sink: ObservationSink) -> None:
        self.sink = sink

    def open_exchange(
        self,
        exchange: str,
        *,
        http_method: str,
        path: str,
        headers: dict[str, str],
        session: str | None,
        client_era: str = "unknown",
        upstream_era: str = "unknown",
        mode: Mode = Mode.PASSTHROUGH,
        body_size: int = 0,
        client_transport: str = "http",
        connection: str | None = None,
    ) -> None:
        self.sink.emit(
            ExchangeOpened(
                self.sink.now(),
                exchange,
                http_method,
                path,
                headers,
                session,
                client_era,
                upstream_era,
                mode,
                body_size,
                client_transport=client_transport,
                connection=connection,
            )
        )

    def message(
        self,
        exchange: str,
        msg: Message,
        *,
        size: int,
        direction: Direction,
        channel: Channel,
        side: Side = Side.BOTH,
        sse_id: str | None = None,
        note: str | None = None,
    ) -> None:
        self.sink.emit(
            MessageSeen(self.sink.now(), exchange, msg, size, direction, channel, side, sse_id, note)
        )

    def response_head(
        self, exchange: str, *, status: int, content_type: str | None, headers: dict[str, str]
    ) -> None:
        self.sink.emit(ResponseHeadSeen(self.sink.now(), exchange, status, content_type, headers))

    def mark_invalid(self, exchange: str, problem: str, *, size: int, body: bytes) -> None:
        self.sink.emit(InvalidBody(self.sink.now(), exchange, problem, size, body))

    def add_bytes_out(self, exchange: str, size: int) -> None:
        self.sink.emit(BytesOut(self.sink.now(), exchange, size))

    def not_inspected(self, exchange: str, reason: str) -> None:
        self.sink.emit(BodyNotInspected(self.sink.now(), exchange, reason))

    def note_event_id(self, exchange: str, sse_id: str) -> None:
        self.sink.emit(EventIdSeen(self.sink.now(), exchange, sse_id))

    def close_exchange(self, exchange: str, outcome: str | None = None) -> ExchangeSummary | None:
        return self.sink.close(ExchangeClosed(self.sink.now(), exchange, outcome))

    def leg_message(
        self,
        leg: str,
        exchange: str,
        message: Any,
        *,
        size: int,
        direction: Direction,
        channel: Channel,
        joins: str | None = None,
    ) -> None:
        msg = message if isinstance(message, Message) else classify_value(message)
        self.sink.emit(LegMessageSeen(self.sink.now(), leg, exchange, msg, size, direction, channel, joins))

    def leg_head(self, leg: str, *, status: int, content_type: str | None, headers: dict[str, str]) -> None:
        self.sink.emit(LegHeadSeen(self.sink.now(), leg, status, content_type, headers))

    def link_leg(self, leg: str, related: str) -> None:
        self.sink.emit(LegLinked(self.sink.now(), leg, related))

    def leg_closed(self, leg: str) -> None:
        self.sink.emit(LegClosed(self.sink.now(), leg))

    def continuation_changed(
        self,
        exchange: str,
        *,
        continuation: str,
        state: str,
        principal: str | None,
        pending_keys: list[str],
        age_ms: float,
        outcome: str | None = None,
    ) -> None:
        self.sink.emit(
            ContinuationMoved(
                self.sink.now(),
                exchange,
                continuation,
                state,
                principal,
                tuple(pending_keys),
                age_ms,
                outcome,
            )
        )

    def upstream_session(
        self, name: str, *, state: str, principal: str, capabilities: str, version: str | None = None
    ) -> None:
        self.sink.emit(UpstreamSessionMoved(self.sink.now(), name, state, principal, capabilities, version))
