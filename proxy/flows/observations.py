"""Observations: what the transport saw, as typed, immutable values with the time it saw them.

The relay and the bridges report every HTTP exchange with a client, every JSON-RPC message on it,
every upstream leg a bridge makes and every change of a parked call or upstream session as one of
these. They are the one vocabulary between the traffic and everything that watches it: the sink
(`proxy.flows.sink`) queues them or builds chains from them, the round-trip tally and the metrics
count them, the capture stores them (`docs/capture-format.md`). Each carries its own time `t`, so
whatever consumes it later (a chain built minutes after, a capture read back) sees the same times.

Plain data: no I/O, no clock, no logging. Values are raw (secrets unredacted): the consumers redact.
"""

from __future__ import annotations

from typing import Any, Final, TypeAlias

from proxy.flows.events import Channel, Direction, Mode, Side
from proxy.wire.jsonrpc import Message
from proxy.wire.values import value
from proxy.wire.versions import Era


@value
class ExchangeOpened:
    """A client HTTP exchange began: its request head (before any message in its body)."""

    t: float
    exchange: str
    http_method: str
    path: str
    headers: dict[str, str]
    """One member per field name, a repeated field's values joined (`proxy.wire.joined_headers`)."""
    session: str | None
    client_era: str = "unknown"
    upstream_era: str = "unknown"
    mode: Mode = Mode.PASSTHROUGH
    body_size: int = 0
    client_transport: str = "http"
    """How the client reached the proxy: `http` (Streamable HTTP), `sse` (HTTP+SSE) or `stdio`."""
    upstream_transport: str = "http"
    """How the proxy reaches the upstream: `http`, `sse` or `stdio`."""
    connection: str | None = None
    """The client connection that carried it (`k12` on HTTP, its channel's id on stdio or HTTP+SSE), an
    id unique within the process: what tells apart two clients that send the same retry."""


@value
class MessageSeen:
    """A JSON-RPC message travelled on a client exchange (either way)."""

    t: float
    exchange: str
    msg: Message
    size: int
    direction: Direction
    channel: Channel
    side: Side = Side.BOTH
    sse_id: str | None = None
    note: str | None = None
    """What the proxy says of the message, for people: code reads the typed fields."""
    answered_by: str | None = None
    """Who made the message in the client's place (`intercept:i2`, `proxy.flows.proxy_notes.by_intercept`):
    the answer an intercept sent a server to its request, which no client saw. Replay and mock take
    it as the recorded answer to that question."""


@value
class ResponseHeadSeen:
    """The response head of a client exchange went out, or was taken to go out with its body's first
    bytes; a later one of the same exchange replaces it (the proxy's 502 when the upstream closed
    before any of that body)."""

    t: float
    exchange: str
    status: int
    content_type: str | None
    headers: dict[str, str]
    """One member per field name, a repeated field's values joined (`proxy.wire.joined_headers`)."""


@value
class InvalidBody:
    """A client body that is not JSON-RPC (or a request the proxy refused): `body` is its raw bytes."""

    t: float
    exchange: str
    problem: str
    size: int
    body: bytes


REFUSED: Final = "refused: "
"""How the problem of an `InvalidBody` begins when the proxy refused the body itself and answered it
(the reason `classify` gave follows): such a body never went upstream."""


@value
class BytesOut:
    """Response bytes that carried no message (SSE comments, priming events), or that the proxy
    relayed without reading (`BodyNotInspected`)."""

    t: float
    exchange: str
    size: int


@value
class BodyNotInspected:
    """The proxy relayed a response body, or the rest of it, whole without reading it for the chain.

    `reason` says why and names what to change (a body over `max_inspected_bytes`). The client got
    every byte (counted by `BytesOut`); what it carried is unknown, so a request it may have answered
    is not taken for one the server left unanswered.
    """

    t: float
    exchange: str
    reason: str


@value
class OriginRewritten:
    """The proxy moved URLs between the upstream's origin and the one the client addressed, or left a
    discovery document as it was and says why (`proxy.engine.oauth_origin`).

    The exchange's other records hold what the sender sent (the client's request, the upstream's
    answer); this one says what the other side got instead: in `direction`, the members or parameters
    named in `changed` went with their origin `was` replaced by `now`. With `problem` set nothing was
    changed (`changed` is empty): a document the proxy could not read, too large, or compressed.
    """

    t: float
    exchange: str
    direction: Direction
    changed: str
    """What was rewritten, comma-separated: `WWW-Authenticate resource_metadata`, `resource`,
    `authorization_servers[0]`, `token_endpoint`, `Location`, `resource (query)`, `resource (form)`."""
    was: str
    """The origin the sender wrote (`http://localhost:3000`)."""
    now: str
    """The origin the other side got in its place (`http://127.0.0.1:8080`)."""
    problem: str | None = None


@value
class AnsweredByProxy:
    """The proxy answered the exchange's request itself and the upstream never saw it: refused before
    going upstream (the upstream's era unknown and out of reach, a drain, a request `classify`
    refused) or sent nowhere (the connection to the upstream failed, or the request could not be framed).

    It took no time upstream, so nothing of it is upstream time: `reason` says why (`era_unknown`,
    `draining`, `unreachable`, a refusal's reason, ...).
    """

    t: float
    exchange: str
    reason: str


@value
class EventIdSeen:
    """An SSE event id on a response stream that carried no message (resumption may name it)."""

    t: float
    exchange: str
    sse_id: str


@value
class ExchangeClosed:
    """A client exchange ended; `outcome` names why when it did not end cleanly."""

    t: float
    exchange: str
    outcome: str | None = None
    trailers: dict[str, str] | None = None
    """The trailer fields the upstream sent after its chunked body (None: it sent none), one member per
    name as `headers` are: the client never got them, since they are never merged into a head."""


PROXY_STOPPING: Final = "proxy_stopping"
"""The outcome of an exchange the proxy cut because it is stopping (SIGINT, or past a drain's grace)."""

CLIENT_CANCELLED: Final = "cancelled"
"""The outcome of an exchange closed because its client cancelled the call it carried (a legacy
client's `notifications/cancelled`): the client's wish, so no trouble, answered or not."""

CLIENT_DISCONNECTED: Final = "client_disconnected"
"""The outcome of an exchange whose client closed its connection or stream."""


def cancels_by_hanging_up(outcome: str | None, client_era: str) -> bool:
    """Whether an exchange that `outcome` ended had its client's requests cancelled by the client.

    A 2026-07-28 client has no cancel message: closing its stream before the answer is how it cancels
    a call, and how it ends a `subscriptions/listen` subscription. A legacy client's hang-up is no
    cancel (it says `notifications/cancelled` when it means one).
    """
    return outcome == CLIENT_DISCONNECTED and client_era == Era.MODERN


def hung_up_after_unread(outcome: str | None, client_era: str, unread: bool) -> bool:
    """Whether a legacy client hung up on an exchange whose body, or the rest of it, went by `unread`
    (over `max_inspected_bytes`): its answer may have been in what it got, as an SDK client closes
    the stream once it has read its answer, so the hang-up is no failure and no cancel to wait for,
    and its calls end `incomplete`, as when the server ends such a stream."""
    return unread and outcome == CLIENT_DISCONNECTED and client_era != Era.MODERN


LATE_CANCEL_S: Final = 2.0
"""Seconds a legacy client's call whose stream the client closed before the answer waits for a
`notifications/cancelled` of its session naming it: the TypeScript SDKs abort the stream first and
cancel just after. Every output judges the call by it (chain, log line, metrics, span): cancelled when
the cancel comes within it, else as the exchange closed, as of the close."""


def awaits_cancel(outcome: str | None, client_era: str, session: str | None) -> bool:
    """Whether a request its exchange left unanswered waits `LATE_CANCEL_S` for its client's cancel
    before it is judged: a legacy client hung up on a call of its session (a cancel names the call by
    session and id), which is how the TypeScript SDK begins a cancel."""
    return outcome == CLIENT_DISCONNECTED and session is not None and client_era != Era.MODERN


def client_end(outcome: str | None, client_era: str, asked: int, answered: int) -> str | None:
    """How an exchange ended, in the words every output shares (chains, log line, console, HAR).

    A 2026-07-28 client's hang-up with `asked` requests not all `answered` is its cancel
    (`cancelled`); every other outcome is as the transport named it.
    """
    if answered < asked and cancels_by_hanging_up(outcome, client_era):
        return CLIENT_CANCELLED
    return outcome


STREAM_NORMAL_ENDS: Final = frozenset({None, CLIENT_DISCONNECTED, "session_deleted", PROXY_STOPPING})
"""Outcomes that end a GET stream as it is meant to end: the server or client closed it, the
session it belonged to was deleted (the stream has nothing left to carry), or the proxy stopped, so
neither its chain nor the error counters call it a failure."""

NO_STREAM_STATUS: Final = 405
"""What a server answers a GET on its MCP endpoint when it offers no stream there (the transport
names it as the one alternative to an event stream), so a GET stream refused with it is no failure:
its chain ends `ok` with a note, it counts no error, and its log line has no trouble."""


def declines_stream(http_method: str, status: int | None) -> bool:
    """Whether a response is a server saying it offers no GET stream (`NO_STREAM_STATUS` to a GET)."""
    return status == NO_STREAM_STATUS and http_method == "GET"


_CUT_AFTER_ANSWERS: Final = frozenset({CLIENT_DISCONNECTED, PROXY_STOPPING})
"""Cuts that are no trouble once every request the exchange carried was answered."""


def unusual_end(outcome: str | None, http_method: str, asked: int, answered: int) -> str | None:
    """How an exchange ended when it did not end as meant, else None.

    A GET stream ends when its client leaves, its session is deleted or the proxy stops; a client
    may close a response stream once every one of the `asked` requests it carried is answered (a
    client that read its result and hung up before the server's stream ended did nothing wrong); and
    a call the client cancelled ends when it says so.
    """
    if outcome == CLIENT_CANCELLED:
        return None
    if http_method == "GET" and outcome in STREAM_NORMAL_ENDS:
        return None
    if outcome in _CUT_AFTER_ANSWERS and asked and answered >= asked:
        return None
    return outcome


@value
class LegMessageSeen:
    """A message on an upstream leg a bridge made for the client exchange `exchange`."""

    t: float
    leg: str
    exchange: str
    msg: Message
    size: int
    direction: Direction
    channel: Channel
    joins: str | None = None
    """Another leg whose chain the message joins instead of its own leg's: a question or log message
    the bridge took from a session's GET stream, which serves many calls, and gave to the call running
    on `joins`."""
    note: str | None = None
    """What the proxy says of the message that the message does not show, for people (no code reads
    it): on the call the bridge made from a client's request an intercept's edit changed, that it was
    sent in place of the client's; on a change notification of a session's GET stream that reached no
    listening client, why."""


@value
class LegOpened:
    """A bridge sent the upstream a leg that carries no message (a session's GET stream, a DELETE of
    its session): no message on it says its method, its mode, or when its request went out."""

    t: float
    leg: str
    exchange: str
    """The client exchange it serves (empty for a DELETE, which serves none)."""
    http_method: str
    mode: Mode
    client_transport: str = "http"
    """How the client of the exchange it serves reached the proxy (`ExchangeOpened.client_transport`);
    a DELETE serves no client and keeps the default, as a capture before 1.14 reads for every leg."""
    upstream_transport: str = "http"
    """How the bridge reaches its upstream (`ExchangeOpened.upstream_transport`)."""


@value
class LegHeadSeen:
    """The upstream's response head to a leg arrived (an error status included): what it answered
    at the HTTP level, which no message on the leg says (its status, its session id)."""

    t: float
    leg: str
    status: int
    content_type: str | None
    headers: dict[str, str]
    """One member per field name, a repeated field's values joined (`proxy.wire.joined_headers`)."""


@value
class LegLinked:
    """A leg serves the same call as an earlier leg `related` (an answer to, or cancel of, a parked call)."""

    t: float
    leg: str
    related: str


@value
class LegClosed:
    """An upstream leg ended; `outcome` names why when the bridge knows it ended without its answer.

    The words are an exchange's (`upstream_unreachable`, `upstream_timeout`, `upstream_cut`,
    `cancelled`, `client_disconnected`, `proxy_stopping`, ...): a leg whose connection was refused
    is not read as one whose upstream merely went quiet. None for a leg that ended as meant, or one
    the bridge closed for a reason it does not name.
    """

    t: float
    leg: str
    outcome: str | None = None


@value
class ContinuationMoved:
    """A parked upstream call (modern client, legacy server) was parked, resumed, ended, expired (its
    client never came back) or lost (its upstream went first).

    Named by the exchange that parked it first; `state` is `parked`, `resumed`, `ended`, `expired` or
    `lost`. `outcome` says why an `expired` call went when its wait did not run out: `proxy_stopping`
    (the proxy stopped before its client came back); None otherwise.
    """

    t: float
    exchange: str
    continuation: str
    state: str
    principal: str | None
    pending_keys: tuple[str, ...]
    age_ms: float
    outcome: str | None = None


@value
class UpstreamSessionMoved:
    """A session a bridge holds with the upstream opened, was re-initialized, ended or expired."""

    t: float
    name: str
    state: str
    principal: str
    capabilities: str
    version: str | None = None


@value
class FaultInjected:
    """The proxy injected a fault (a staging rule, `docs/faults.md`) into a message of an exchange.

    `applied` is False when the rule picked the message but its action could not act on it as it
    turned out (a cut for a response that came as JSON): `detail` then says why, so a fault that did
    not happen is never mistaken for one that did, nor left unsaid.
    """

    t: float
    exchange: str
    fault: str
    """The fault in a few words: `delay 200 ms`, `error -32000`, `drop`, `cut after 2 events`."""
    rule: str
    """The rule's id and text: `f1: method:tools/call => delay=200ms`."""
    sender: str
    """Who sent the message it acted on: `client` or `server`."""
    message_id: str | int | None = None
    method: str | None = None
    applied: bool = True
    detail: str | None = None
    delay_ms: float = 0.0
    """How long a delay fault held the message (0 for any other fault)."""


@value
class InterceptHeld:
    """An intercept rule (`docs/intercept.md`) picked a message: it is held until someone decides.

    `applied` is False when the rule picked it but it went on at once (`detail` says why: the table of
    held messages was full, the proxy was draining, a message in a batch), so a breakpoint that did
    not stop is never mistaken for one that did, nor left unsaid.
    """

    t: float
    exchange: str
    held: str
    """The held message's id (`h3`): what the admin API and the TUI decide on."""
    rule: str
    """The rule's id and text: `i1: tool:delete_* timeout=30s`."""
    sender: str
    """Who sent the message: `client` or `server` (a bridge's own messages: the side it came from)."""
    message_id: str | int | None = None
    method: str | None = None
    applied: bool = True
    detail: str | None = None


@value
class InterceptReleased:
    """A held message was released: what became of it, who decided, and how long it was held.

    `decision` is `forward`, `forward_edited`, `drop` or `answer`; `by` is `api`, `tui`, `timeout`,
    `drain` or `rule_deleted`. `message` is what was sent in its place (an edit or an answer), raw:
    the consumers redact it like every message.
    """

    t: float
    exchange: str
    held: str
    rule: str
    sender: str
    message_id: str | int | None
    method: str | None
    decision: str
    by: str
    held_ms: float
    message: Any = None


Observation: TypeAlias = (
    ExchangeOpened
    | MessageSeen
    | ResponseHeadSeen
    | InvalidBody
    | BytesOut
    | BodyNotInspected
    | OriginRewritten
    | AnsweredByProxy
    | EventIdSeen
    | ExchangeClosed
    | LegMessageSeen
    | LegOpened
    | LegHeadSeen
    | LegLinked
    | LegClosed
    | ContinuationMoved
    | UpstreamSessionMoved
    | FaultInjected
    | InterceptHeld
    | InterceptReleased
)
"""Every kind of observation."""

KEY_FIELDS: dict[type[Any], str] = {
    LegMessageSeen: "leg",
    LegOpened: "leg",
    LegHeadSeen: "leg",
    LegLinked: "leg",
    LegClosed: "leg",
    UpstreamSessionMoved: "name",
}
"""The field naming what an observation of these kinds belongs to; every other kind has `exchange`."""


def key_of(obs: Observation) -> str:
    """What the observation belongs to: its exchange, its leg, or the session it names."""
    key: str = getattr(obs, KEY_FIELDS.get(type(obs), "exchange"))
    return key
