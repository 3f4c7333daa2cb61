"""Spans of client operations, followed straight from observations: what the OTLP exporter sends.

One trace per operation (what a chain is elsewhere: a client request with its legs, rounds and nested
requests). Its spans, named and attributed as the OpenTelemetry semantic conventions for MCP say:

- each client request, kind SERVER (the proxy serves it); the first is the operation's root, and an
  MRTR retry (a bridged round of a modern client) is a span of its own under that root;
- each request a bridge sends upstream on a leg, kind CLIENT, under the client request it serves
  (each upstream request of a legacy client's call is a bridged round of its own);
- each nested request: one the upstream sends on a leg (kind SERVER: the proxy answers it upstream)
  or one that reaches the client on its stream (kind CLIENT: asked by the proxy or relayed), from the
  request until its answer;
- each client notification, kind SERVER, in the trace of the request it refers to when there is one.

A request whose stream closed after an SSE event id, unanswered, waits for the client's resume (GET +
`Last-Event-ID`) by the chain builder's rules (`proxy.flows.resumes`): the resumed stream carries its
answer and its questions, so its span and the chain end alike.

A client request that carries W3C trace context in `params._meta` (`traceparent`, `tracestate`)
continues the client's trace: its span is the child of the client's. A client whose context says
"not sampled" gets no spans. Nothing here changes traffic: a bridge already carries the client's
`_meta` entries upstream and back, so the upstream continues the same trace.

Following, not building: like the metrics' operation counter, this keeps only what spans need, so
it costs the traffic little whether or not anyone watches chains. Session ids are shown as the
redactor's keyed stand-in; no header, body or argument goes into a span. Pure: no I/O, no clock (each
observation carries its time), ids from an injected source; tables bounded like the chain builder's.

This module holds the follower the observation sink feeds: it dispatches each observation to the
handler of its kind and makes the tables. The rest is in small rooms beside it:

- `span_exchanges`: a client exchange's opening, head, event ids, unread or invalid body and close;
- `span_messages`: the messages on a client exchange (requests, retries, notifications, questions);
- `span_legs`: a bridge's upstream legs, their requests and the questions the upstream sends on them;
- `span_waits`: spans held for a stream's resume or a client's cancel, and how each wait ends;
- `span_status`: how a span ended: failed or not, its `error.type` and description;
- `span_state`: the tables those handlers share, their records, and how spans and attributes are made;
- `span_records`: spans as plain data, and the semantic conventions' vocabulary.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from proxy.flows.endpoint import Endpoint
from proxy.flows.exchanges import BoundedMap
from proxy.flows.observations import (
    LATE_CANCEL_S,
    BodyNotInspected,
    EventIdSeen,
    ExchangeClosed,
    ExchangeOpened,
    InvalidBody,
    LegClosed,
    LegHeadSeen,
    LegLinked,
    LegMessageSeen,
    MessageSeen,
    Observation,
    ResponseHeadSeen,
)
from proxy.flows.redact import Redactor
from proxy.flows.resumes import ResumeWaits
from proxy.flows.retries import RetryBook
from proxy.flows.span_exchanges import ExchangeSpans
from proxy.flows.span_legs import LegSpans
from proxy.flows.span_messages import MessageSpans
from proxy.flows.span_records import SpanRecord


class SpanFollower(ExchangeSpans, MessageSpans, LegSpans):
    """Follows client operations through observations and emits each span as it ends."""

    def __init__(
        self,
        emit: Callable[[SpanRecord], None],
        redactor: Redactor,
        *,
        upstream_host: str | None = None,
        upstream_port: int | None = None,
        ids: Callable[[int], int] | None = None,
        endpoint: Endpoint | None = None,
    ) -> None:
        self._emit = emit
        self.endpoint = endpoint if endpoint is not None else Endpoint()
        """Which paths are the MCP endpoint: an exchange to any other path (OAuth's `/token`) is plain
        HTTP, no MCP operation, and gets no span (a capture's reader sets it from `proxy_info`)."""
        self._redactor = redactor
        self._ids = ids or random.Random().getrandbits  # seeded from the system's entropy
        self._upstream = {}
        self.set_upstream(upstream_host, upstream_port)
        self._count = 0
        self._exchanges = {}
        self._ops = BoundedMap()
        self._shared = {}
        self._retries = RetryBook()
        self._nested = BoundedMap()
        self._session_init = BoundedMap()
        self._legs = BoundedMap()
        self._cancel_waits = ResumeWaits(LATE_CANCEL_S)
        self._resumes = ResumeWaits()
        self._event_requests = BoundedMap()
        self._handlers: dict[type[Any], Callable[[Any], None]] = {
            ExchangeOpened: self._opened,
            MessageSeen: self._message,
            ResponseHeadSeen: self._head,
            ExchangeClosed: self._closed,
            BodyNotInspected: self._unread,
            EventIdSeen: self._event_id,
            InvalidBody: self._invalid,
            LegMessageSeen: self._leg_message,
            LegHeadSeen: self._leg_head,
            LegLinked: self._leg_linked,
            LegClosed: self._leg_closed,
        }

    def set_upstream(self, host: str | None, port: int | None) -> None:
        """Where the upstream legs go (`server.address`, `server.port`), when learnt later (a capture)."""
        self._upstream = {}
        if host:
            self._upstream["server.address"] = host
            if port:
                self._upstream["server.port"] = port

    def observe_all(self, batch: Sequence[Observation]) -> None:
        """Follow observations in order (a listener of the observation sink)."""
        handlers = self._handlers
        uncancelled = self._cancel_waits.waits
        unresumed = self._resumes.waits
        for obs in batch:
            if uncancelled or unresumed:
                self.sweep(obs.t)
            handler = handlers.get(type(obs))
            if handler is not None:
                handler(obs)

    def sweep(self, now: float) -> None:
        """Emit the held spans whose cancel did not come within `LATE_CANCEL_S` by `now`, as their
        exchange closed, and those whose stream was not resumed within `RESUME_WINDOW`, as of the cut
        (a sweeper of the observation sink, as the metrics are)."""
        if self._cancel_waits.waits:
            for wait, _ in self._cancel_waits.ran_out(now):
                self._judged(wait)
        if self._resumes.waits:
            for wait, note in self._resumes.ran_out(now):
                self._never_resumed(wait, note)

    def release_all(self) -> None:
        """Emit every held span as its exchange closed (no cancel comes any more: the proxy stops, or
        a capture's observations ran out)."""
        self.sweep(float("inf"))

    @property
    def open_spans(self) -> int:
        """Client exchanges and legs still followed, and spans held for a cancel (tests assert they
        drain)."""
        return (
            len(self._exchanges) + len(self._legs) + len(self._cancel_waits.waits) + len(self._resumes.waits)
        )
