"""What the chain builder remembers about each HTTP exchange, and the bounded tables it correlates in.

Holds the record of one open exchange with the client (`Exchange`), what the exports need of an
exchange or a bridge leg beyond its message records (`ExchangeFacts`), and `BoundedMap`, the size-capped
table every correlation lives in, so a peer that never answers cannot grow the proxy's memory. Plain
data: no I/O, no clock, no logging.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from proxy.flows.events import HttpInfo, Mode
from proxy.flows.observations import declines_stream
from proxy.wire.jsonrpc import Message, RequestId

if TYPE_CHECKING:
    from proxy.flows.retries import RetryClaim

CORRELATION_BOUND = 10000
"""How many open correlations (pending nested requests, expected retries) are remembered."""


class BoundedMap(dict[Any, Any]):
    """A dict that forgets its oldest entries past a bound, so tables stay bounded.

    A plain dict keeps insertion order too, and its storage runs at C speed (an `OrderedDict` keeps a
    linked list besides); setting a key already present keeps its place, as in an `OrderedDict`.
    """

    __slots__ = ("bound",)

    def __init__(self, bound: int = CORRELATION_BOUND) -> None:
        super().__init__()
        self.bound = bound

    def __setitem__(self, key: Any, value: Any) -> None:
        dict.__setitem__(self, key, value)
        if len(self) > self.bound:
            del self[next(iter(self))]


MAX_BARE_EVENTS = 100
"""SSE events without a message one exchange's facts keep (a priming event or two, as a rule)."""


@dataclass(slots=True)
class ExchangeFacts:
    """What an export tells of one HTTP exchange (or a bridge's upstream leg) that no message record
    holds: when it began, when its response head came and when it ended, the bytes that carried no
    message, the leg it serves. A HAR entry's timings and sizes come from these, as a capture's come
    from its observations, so the running proxy's export and the capture's agree."""

    started: float | None = None
    """When the request head arrived (a leg: its opening or first message, or its link to an earlier leg)."""
    head_at: float | None = None
    """When the response head went out (a leg: when the upstream's came)."""
    ended: float | None = None
    outcome: str | None = None
    """Why it ended badly, when it did (a client exchange), or why a leg ended before its answer."""
    body_size: int | None = None
    """The request body's bytes as read (a client exchange)."""
    session: str | None = None
    """The `Mcp-Session-Id` its request carried, redacted (a client exchange)."""
    bytes_out: int = 0
    """Response bytes that carried no message: SSE comments, priming events, a body relayed unread."""
    unread: str | None = None
    """Why its response body, or the rest of it, went to the client unread (`BodyNotInspected`)."""
    trailers: dict[str, str] | None = None
    """The trailer fields the upstream sent after its chunked body, redacted (a client exchange)."""
    related: str | None = None
    """For a leg: the earlier leg it serves (an answer to, or cancel of, a parked call)."""
    carried: int = 0
    """Messages recorded on it so far (where each bare event came among them)."""
    events: list[tuple[float, int, str]] = field(default_factory=list)
    """SSE events that carried no message: time, messages carried before it, event id (at most
    `MAX_BARE_EVENTS`)."""

    def bare_event(self, at: float, sse_id: str) -> None:
        """An SSE event that carried no message went out."""
        if len(self.events) < MAX_BARE_EVENTS:
            self.events.append((at, self.carried, sse_id))


@dataclass(slots=True)
class Exchange:
    """What the builder remembers about one open HTTP exchange with the client."""

    id: str
    http_method: str
    path: str
    started: float
    session: str | None
    client_era: str
    upstream_era: str
    mode: Mode
    request_headers: dict[str, str]
    client_transport: str = "http"
    upstream_transport: str = "http"
    connection: str | None = None
    """The client connection that carried it (`ExchangeOpened.connection`)."""
    chains: list[str] = field(default_factory=list)
    requests: dict[RequestId, str] = field(default_factory=dict)
    answered: set[RequestId] = field(default_factory=set)
    head: HttpInfo | None = None
    head_at: float | None = None
    """When the (latest) response head came: the `http` record of a head no message carried, filed
    only when the exchange closes, is timed by it, as is a stream's answer in its chain's headline."""
    head_recorded: bool = False
    request_recorded: bool = False
    """A message of this exchange to the server carries its request head already."""
    minted_session: str | None = None
    last_sse_id: str | None = None
    resumed_with: str | None = None
    """The `Last-Event-ID` of a GET that resumes a chain's stream: the chain is told how the resume
    went once the response head says (a resume the server refuses is no resumed stream)."""
    pending_note: str | None = None
    not_inspected: str | None = None
    """Why its response body, or the rest of it, went to the client unread (`BodyNotInspected`)."""
    unmessaged: int = 0
    """Response bytes relayed without a message so far, while its body is not known to be unread:
    its chain counts them once it is (`ChainBuilder.not_inspected`)."""
    began_earlier: bool = False
    """Opened by a capture file's repeated lines: its earlier messages are in an earlier file."""
    answered_by_proxy: bool = False
    """The proxy answers its requests itself (`AnsweredByProxy`): the chains they begin took no time
    upstream."""
    claims: dict[RequestId, RetryClaim] = field(default_factory=dict)
    """Its MRTR retries still unanswered, with what each changed in the chain it joined."""
    facts: ExchangeFacts | None = None
    """What its chains' records do not hold of it, for the exports (only when records are kept)."""
    back: int = 0
    """Messages its response carried to the client (what an answer without a response held)."""
    json_back: int = 0
    """Of those, the ones in a JSON body: more than one is a batch."""
    stray: Message | None = None
    """The first response the server sent on it that answers none of its requests (`answer_faults`)."""
    strays: int = 0
    """Responses the server sent on it that answer none of its requests."""
    invalid_back: str | None = None
    """Why the first value its response carried that is no JSON-RPC message is not one."""
    plain: bool = False
    """A request to a path other than the MCP endpoint (`proxy.flows.endpoint`): plain HTTP, one chain
    named by its method and path, its bodies filed as they are, its outcome its HTTP status."""

    def main_chain(self) -> str | None:
        """The chain this exchange serves: its first request's, else the first chain it joined."""
        return next(iter(self.requests.values()), None) or (self.chains[0] if self.chains else None)

    def http_failed(self) -> bool:
        """Whether the response head says the exchange failed (HTTP 4xx or 5xx; a GET answered that the
        server offers no stream there is not)."""
        if self.head is None:
            return False
        status = self.head.status or 0
        return status >= 400 and not declines_stream(self.http_method, status)
