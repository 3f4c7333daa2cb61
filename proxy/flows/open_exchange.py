"""What the round-trip tally keeps of one open exchange (`OpenExchange`), and the log line made of it
when the exchange closes (`exchange_line`): what it carried, its ids and answers, its status, bytes
and event ids, and how its end is judged.

Pure functions of what `proxy.flows.tally.RoundTripTally` counted: no I/O, no clock (times are the
observations'), no state beyond the exchange's own.
"""

from __future__ import annotations

from typing import Final

from orjson import dumps

from proxy.flows.answer_faults import is_stray, no_answer, unmatched
from proxy.flows.events import Mode
from proxy.flows.log_lines import ExchangeSummary
from proxy.flows.observations import (
    CLIENT_CANCELLED,
    ExchangeClosed,
    ExchangeOpened,
    client_end,
    declines_stream,
    hung_up_after_unread,
    unusual_end,
)
from proxy.flows.redact import Redactor
from proxy.flows.resumes import awaits_resume
from proxy.wire.jsonrpc import Kind, Message, RequestId
from proxy.wire.shown import SHOWN_TEXT_BOUND, shown_text

# Enum members read through their class cost about ten times a module constant's on Python 3.11
# (the enum metaclass's attribute hook): the traffic path reads these.
_ERROR = Kind.ERROR
_INVALID = Kind.INVALID
_RESULT = Kind.RESULT
_PASSTHROUGH = Mode.PASSTHROUGH

BATCH_TOLD = 100
"""Messages of one JSON-RPC batch its line names in JSON (`batch`); the count in `carried` is whole."""

BATCH_BYTES = 2048
"""Bytes the message names in one batch's `batch` take in JSON at most: names past them (or past
`BATCH_TOLD`) are one last entry, `+N more`, so a line stays far below the 16 KiB at which Docker's
json-file driver cuts lines, however the batch is built (each name is bounded, not their number)."""

BATCH_SHOWN = 3
"""Messages of one batch `carried` names (what a terminal shows), the rest said as a count."""

CARRIED_BYTES = 640
"""Bytes the message names in a batch's `carried` take in JSON at most, past its first (always
named, as the only message of an exchange would be)."""

IDS_BYTES = 1024
"""Bytes the request ids one line lists take in JSON at most (the first is always listed): the ids
of a batch past them are said as a count (`ids_more`)."""

EVENT_IDS_KEPT = 64
"""The latest event ids one exchange carrying requests keeps: where its client may resume from."""

RESUMABLE: Final = "resumable"
"""The `end` of an exchange whose stream was cut after an event id before its answers: the client may
resume it with GET + `Last-Event-ID`, so its line is no trouble (its chain gives the verdict)."""


class OpenExchange:
    """What the line needs of an exchange still open (a plain class: one is made per exchange, and a
    dataclass called with keywords costs a dict of them)."""

    __slots__ = (
        "answered",
        "answered_ids",
        "batch",
        "batch_bytes",
        "batched",
        "bytes_in",
        "bytes_out",
        "cancelled",
        "carried",
        "content_type",
        "event_ids",
        "failed",
        "faults",
        "http_method",
        "ids",
        "intercepts",
        "last_sse_id",
        "messages_out",
        "method",
        "mode",
        "name",
        "not_inspected",
        "opened",
        "path",
        "plain",
        "problem",
        "resumes_from",
        "session",
        "started",
        "status",
        "stray",
        "transports",
    )

    def __init__(
        self,
        http_method: str,
        started: float,
        session: str | None,
        bytes_in: int,
        method: str | None,
        path: str,
        transports: tuple[str, str],
        mode: Mode,
        opened: ExchangeOpened,
        plain: bool,
    ) -> None:
        self.http_method = http_method
        self.started = started
        self.session = session
        self.bytes_in = bytes_in
        self.method = method
        self.name: str | None = None
        self.ids: list[RequestId] = []
        self.carried: str | None = None
        self.batch: list[str] | None = None
        """Each client message it carried named, when it carried more than one (a JSON-RPC batch),
        the first `BATCH_TOLD`; None for the usual single message."""
        self.batched = 0
        """How many messages that batch held."""
        self.batch_bytes = 0
        """The bytes the names in `batch` take in JSON (`BATCH_BYTES`)."""
        self.answered = 0
        """Responses to its requests that went to the client."""
        self.answered_ids: list[RequestId] | None = None
        """The ids those responses named (None while there are none)."""
        self.failed: str | None = None
        """The first answer to one of its requests that reports a failure (`error -32601`, `tool error`)."""
        self.cancelled = False
        """A request it carried was answered with a failure after its client cancelled it (the mcp 1.x
        SDK answers a cancelled call with error 0): the answer to the cancel, no trouble."""
        self.path = path
        self.status: int | None = None
        self.content_type: str | None = None
        self.bytes_out = 0
        self.messages_out = 0
        self.faults: list[str] | None = None
        """Faults injected into its messages, in order (None while there are none)."""
        self.transports = transports
        """How the client reached the proxy, and how the proxy reached the upstream."""
        self.intercepts: list[str] | None = None
        """What intercepts did to its messages, in order (None while nothing was picked)."""
        self.not_inspected: str | None = None
        """Why its response body went by unread, if it did."""
        self.mode = mode
        self.opened = opened
        """Its request head as received (a reference, never copied): what a held message of it is
        shown beside (`RoundTripTally.opened`)."""
        self.plain = plain
        """A request to a path other than the MCP endpoint: plain HTTP, told by its method, path and
        status, whatever its body holds."""
        self.stray: Message | None = None
        """The first response the server sent that answers none of its requests (`answer_faults`)."""
        self.last_sse_id: str | None = None
        """The latest SSE event id sent on it (as sent: a key, never shown): where a resume begins."""
        self.event_ids: list[str] | None = None
        """Its latest event ids (`EVENT_IDS_KEPT`) once it carries requests: any may begin a resume."""
        self.problem: str | None = None
        """Why the first value its response carried that is no JSON-RPC message is not one."""
        self.resumes_from: str | None = None
        """The `Last-Event-ID` of a GET that resumes a stream (None: none)."""


def failure(msg: Message) -> str | None:
    """What an answer says went wrong: a JSON-RPC error (with its code), or a tool's `isError` result."""
    if msg.kind is _ERROR:
        code = msg.error.get("code")
        return f"error {code}" if code is not None else "error"
    result = msg.result
    if isinstance(result, dict) and result.get("isError") is True:
        return "tool error"
    return None


def keep_unmatched(tally: OpenExchange, msg: Message) -> None:
    """Keep what tells why a request of the exchange may go unanswered: the first response that
    answers none of them, or the first value that is no JSON-RPC message."""
    if tally.stray is None and tally.ids and is_stray(msg, tally.ids):
        tally.stray = msg
    elif msg.kind is _INVALID and tally.problem is None:
        tally.problem = msg.problem or "not JSON-RPC"


def _why_unanswered(tally: OpenExchange, redactor: Redactor) -> str:
    """What the server sent instead of a response to the requests left unanswered, in the chain's words."""
    ids = unanswered_ids(tally)
    if tally.stray is not None:
        return redactor.scrub(unmatched(ids, tally.stray))
    return redactor.scrub(no_answer(ids, tally.status, tally.content_type, tally.messages_out, tally.problem))


def _trouble(tally: OpenExchange, outcome: str | None, redactor: Redactor) -> str | None:
    """What went wrong, if anything: how the exchange ended (`outcome`, already judged by
    `unusual_end`), else what its answer or status says, or that a request it carried got none (in
    a body the proxy read: one relayed unread may have held the answer)."""
    unread = tally.not_inspected is not None
    if outcome is not None and not hung_up_after_unread(outcome, tally.opened.client_era, unread):
        return outcome
    if tally.failed is not None:
        return tally.failed
    status = tally.status
    if status is not None and status >= 400 and not declines_stream(tally.http_method, status):
        return f"HTTP {status}"
    if tally.answered < len(tally.ids) and tally.not_inspected is None:
        return _why_unanswered(tally, redactor)  # a stray answer, an empty body, a stream ended first
    return None


def _carried(tally: OpenExchange, redactor: Redactor) -> str:
    """What the exchange carried; a plain HTTP exchange, or a GET that got no event stream, is named
    by its method and path (not a stream); a batch by how many messages it held and the first few."""
    kind = (tally.content_type or "").split(";", 1)[0].strip().lower()
    if tally.plain or (tally.http_method == "GET" and kind != "text/event-stream"):
        return f"{tally.http_method} {redactor.target(tally.path)}"
    if tally.batch is not None:
        shown, size = tally.batch[:1], 0
        for name in tally.batch[1:BATCH_SHOWN]:
            size += len(dumps(name))
            if size > CARRIED_BYTES:
                break
            shown.append(name)
        rest = tally.batched - len(shown)
        return f"batch of {tally.batched}: {', '.join(shown)}" + (f", +{rest} more" if rest > 0 else "")
    return tally.carried or tally.method or tally.http_method


def count_batched(tally: OpenExchange) -> bool:
    """Count another message of the exchange's batch (the first is what it `carried`); whether its
    line still names messages (`BATCH_TOLD`, `BATCH_BYTES`): only then is its name worth making."""
    batch = tally.batch
    if batch is None:
        first = tally.carried or "?"
        batch, tally.batched, tally.batch_bytes = [first], 1, len(dumps(first))
        tally.batch = batch
    tally.batched += 1
    return len(batch) < BATCH_TOLD and tally.batch_bytes < BATCH_BYTES


def tell_batched(tally: OpenExchange, name: str) -> None:
    """Name the batch's latest message in its line, when the name fits in `BATCH_BYTES`."""
    size = tally.batch_bytes + len(dumps(name))
    if size <= BATCH_BYTES:
        assert tally.batch is not None
        tally.batch.append(name)
        tally.batch_bytes = size
    else:
        tally.batch_bytes = BATCH_BYTES  # full: no later name is made or told, so the order holds


def _told_batch(tally: OpenExchange, batch: list[str]) -> tuple[str, ...]:
    """A batch's `batch` field: the messages named, then how many more it held."""
    rest = tally.batched - len(batch)
    return (*batch, f"+{rest} more") if rest > 0 else tuple(batch)


def unanswered_ids(tally: OpenExchange) -> list[RequestId]:
    """The requests the exchange carried that got no answer on it."""
    if tally.answered >= len(tally.ids):
        return []
    if tally.answered == 0:
        return list(tally.ids)
    done = tally.answered_ids or ()
    return [ident for ident in tally.ids if ident not in done]


def keep_event_id(tally: OpenExchange, sse_id: str) -> None:
    """An SSE event id went out on the exchange: kept while it carries requests (a resume names one)."""
    tally.last_sse_id = sse_id
    if not tally.ids:
        return
    kept = tally.event_ids
    if kept is None:
        tally.event_ids = [sse_id]
        return
    kept.append(sse_id)
    if len(kept) > EVENT_IDS_KEPT:
        del kept[0]


def may_resume(tally: OpenExchange, closed: ExchangeClosed) -> bool:
    """Whether requests the exchange left unanswered may be answered on a stream the client resumes
    (as the chain judges: `awaits_resume`)."""
    if (tally.status or 0) >= 400 or tally.not_inspected is not None:
        return False
    passthrough = tally.mode is _PASSTHROUGH
    return awaits_resume(closed.outcome, tally.opened.client_era, passthrough, tally.last_sse_id)


def exchange_line(
    exchange: str,
    tally: OpenExchange,
    closed: ExchangeClosed,
    redactor: Redactor,
    cancelled: str | None = None,
    session_over: bool = False,
) -> ExchangeSummary:
    """The line of a closed exchange: as it ended, or as its client cancelled it (`cancelled`)."""
    # How an exchange ends normally is no trouble: a GET stream ends when its client leaves or its
    # session is deleted, a client may close a response stream once each of its requests is answered,
    # a 2026-07-28 client closing it before then cancels them (`client_end`), and so does a legacy
    # client whose `notifications/cancelled` named each request left unanswered (`cancelled`). A stream
    # cut resumable is no trouble while its session lives (`session_over`: nothing can resume it then).
    asked = len(tally.ids)
    if tally.cancelled and cancelled is None:
        cancelled = CLIENT_CANCELLED
    ended = cancelled or (
        client_end(closed.outcome, tally.opened.client_era, asked, tally.answered)
        if tally.answered < asked
        else closed.outcome
    )
    outcome = unusual_end(ended, tally.http_method, len(tally.ids), tally.answered)
    resumable = not session_over and ended != CLIENT_CANCELLED and tally.answered < asked
    resumable = resumable and may_resume(tally, closed)
    ids, ids_more = shown_ids(tally.ids)
    # Positional, in the fields' order: a class called with keywords costs a dict of them on 3.11.
    return ExchangeSummary(
        exchange,
        tally.http_method,
        tally.session,
        tally.method,
        tally.name,
        ids,
        tally.status,
        tally.content_type,
        tally.bytes_in,
        tally.bytes_out,
        tally.messages_out,
        round((closed.t - tally.started) * 1000, 3),  # duration_ms
        outcome,
        _carried(tally, redactor),
        None if ended == CLIENT_CANCELLED or resumable else _trouble(tally, outcome, redactor),
        "; ".join(tally.faults) if tally.faults else None,  # fault
        tally.transports[0],
        tally.transports[1],
        "; ".join(tally.intercepts) if tally.intercepts else None,  # intercept
        RESUMABLE if resumable else ended if outcome is None else None,  # end
        tally.not_inspected,
        redactor.target(tally.path) if tally.plain else None,
        None if tally.batch is None else _told_batch(tally, tally.batch),
        ids_more,
    )


def shown_ids(ids: list[RequestId]) -> tuple[tuple[RequestId, ...], int]:
    """The request ids as the line shows them, and how many more there are: a client's string id
    past `SHOWN_TEXT_BOUND` bounded (the tally keeps the ids whole, to match their answers), and a
    batch's ids within `IDS_BYTES`."""
    if len(ids) > 1:
        return _shown_batch_ids(ids)
    if ids and type(ids[0]) is str and len(ids[0]) > SHOWN_TEXT_BOUND:
        return (shown_text(ids[0]),), 0
    return tuple(ids), 0


def _shown_batch_ids(ids: list[RequestId]) -> tuple[tuple[RequestId, ...], int]:
    """A batch's ids within `IDS_BYTES` (the first always), each bounded; how many more there are."""
    shown: list[RequestId] = []
    size = 0
    for ident in ids:
        one = shown_text(ident) if type(ident) is str else ident
        size += len(dumps(one))
        if shown and size > IDS_BYTES:
            break
        shown.append(one)
    return tuple(shown), len(ids) - len(shown)
