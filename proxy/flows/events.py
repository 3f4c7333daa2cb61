"""Flow events: the one vocabulary in which observers (capture, admin feed, TUI) learn about traffic.

Every event is a pydantic model with a `type` tag so it round-trips through JSONL captures and the
admin feed unchanged. Bodies in events are already redacted and bounded.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
)


class Side(StrEnum):
    """Which leg of the proxy a message was seen on; `both` when pass-through relayed it unchanged."""

    CLIENT = "client"
    UPSTREAM = "upstream"
    BOTH = "both"


class Direction(StrEnum):
    """Which way a message travelled."""

    TO_SERVER = "to_server"
    TO_CLIENT = "to_client"


class Channel(StrEnum):
    """How the message was carried over HTTP."""

    POST = "post"
    JSON = "json"
    SSE = "sse"
    GET_SSE = "get_sse"
    HTTP = "http"
    LOCAL = "local"


class ChainStatus(StrEnum):
    """Where a chain stands; `waiting_client` and `parked` are the MRTR/in-flight pauses."""

    PENDING = "pending"
    WAITING_CLIENT = "waiting_client"
    PARKED = "parked"
    OK = "ok"
    ERROR = "error"
    CANCELLED = "cancelled"
    """Ended by the client's cancel: a legacy client's `notifications/cancelled`, or a 2026-07-28
    client closing its stream before the answer (how that era cancels). A person asked for the end,
    so it is no failure of the server's; whatever the server answered is kept in the chain."""
    INCOMPLETE = "incomplete"
    """Ended, but how is not known: the chain began before the capture file read (a rotated part read
    alone), and what decided it, its response among them, is in an earlier part; or its response came
    in a body the proxy relayed unread (over `max_inspected_bytes`, as its note says); or a 2026-07-28
    client never came back with the answers an `input_required` round asked for (`continuation_ttl`)."""


BEGAN_EARLIER: Final = (
    "began in an earlier capture file: its first messages, and its response if none is here, are "
    "there (read parts oldest first)"
)
"""The note on a chain opened from a rotated part's repeated lines: its exchange began in an earlier
file, which holds what the chain sent and got before this file began."""

DECIDED: frozenset[ChainStatus] = frozenset({ChainStatus.OK, ChainStatus.ERROR, ChainStatus.CANCELLED})
"""The statuses of a chain whose end is known: nothing that arrives later changes it."""

UNFINISHED: frozenset[ChainStatus] = frozenset(
    {ChainStatus.PENDING, ChainStatus.WAITING_CLIENT, ChainStatus.PARKED}
)
"""Statuses of a chain whose end has not been seen yet."""


class Mode(StrEnum):
    """How the proxy handled the chain."""

    PASSTHROUGH = "passthrough"
    LEGACY_TO_MRTR = "legacy_to_mrtr"
    MRTR_TO_LEGACY = "mrtr_to_legacy"
    LOCAL = "local"


BRIDGE_ERAS: Final[dict[Mode, tuple[str, str]]] = {
    Mode.LEGACY_TO_MRTR: ("legacy", "modern"),
    Mode.MRTR_TO_LEGACY: ("modern", "legacy"),
}
"""The client's and the upstream's era on each side of a bridge."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class HttpInfo(_Model):
    """The HTTP side of a message: status (responses), content type and redacted headers."""

    method: str | None = None
    path: str | None = None
    status: int | None = None
    content_type: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)


class MessageRecord(_Model):
    """One message as an observer sees it: where, when, what, and its redacted, bounded body."""

    seq: int
    ts: float
    side: Side
    direction: Direction
    channel: Channel
    exchange: str
    kind: str
    jsonrpc_id: int | str | None = None
    method: str | None = None
    size: int = 0
    body: Any = None
    truncated: bool = False
    http: HttpInfo | None = None
    sse_id: str | None = None
    round: int = 0
    note: str | None = None
    """What the proxy says of the message, for people (code reads the typed fields)."""
    answered_by: str | None = None
    """Who made the message in the client's place, when the proxy did: `intercept:i2` on the answer an
    intercept rule sent a server to its request (`proxy.flows.proxy_notes.by_intercept`)."""


LIVE_ID: Final = re.compile(r"c[0-9a-f]{6}-\d+")
"""A chain id as a running proxy gives it (`cb00287-11`): never a capture's, which are `r1`, `r2`, ..."""


class ChainSummary(_Model):
    """The headline of a chain: what was asked, by whom, through which mode, how it went, how long."""

    id: str
    started: float
    ended: float | None = None
    session: str | None = None
    client_name: str | None = None
    client_era: str = "unknown"
    upstream_era: str = "unknown"
    client_transport: str = "http"
    """How the client reached the proxy: `http` (Streamable HTTP), `sse` (HTTP+SSE) or `stdio`."""
    upstream_transport: str = "http"
    """How the proxy reached the upstream: `http`, `sse` or `stdio`."""
    mode: Mode = Mode.PASSTHROUGH
    method: str | None = None
    name: str | None = None
    jsonrpc_id: int | str | None = None
    status: ChainStatus = ChainStatus.PENDING
    error: str | None = None
    rounds: int = 1
    nested: int = 0
    """Questions the server asked the client during the chain, each counted once whichever way it was
    asked and on whichever side of the proxy: a request in flight (`elicitation/create`, sampling,
    roots) or an input of an `input_required` result. A bridge that turns one form into the other asks
    the same question again, not a new one, so a tool that asks once counts 1 in every mode: a legacy
    server's in-flight request counts where it arrives (the client's stream, or the MRTR->legacy
    bridge's upstream leg, whose `input_required` to the client restates it), a 2026-07-28 server's
    `input_required` where the client gets it, or, through the legacy->MRTR bridge, as the in-flight
    requests the proxy asks the client in its place."""
    messages: int = 0
    bytes_to_server: int = 0
    bytes_to_client: int = 0
    http_status: int | None = None
    duration_ms: float | None = None
    upstream_ms: float | None = 0.0
    """Time upstream (with the proxy's own relaying); None when the upstream never saw the chain's
    request: the proxy answered it itself (a refusal, a 502 for a connection refused, a fault's answer)."""
    client_wait_ms: float = 0.0
    held_ms: float = 0.0
    """The time the proxy itself held the chain's messages (a delay fault, an intercept until its
    decision): neither the upstream's time nor the client's."""
    stream_ms: float = 0.0
    """The time a GET stream (or a DELETE) stayed open after the server answered it (its response
    head), or a `subscriptions/listen` after its acknowledgement: the client listening, not the
    upstream's wait. `duration_ms` is `upstream_ms` (or, when that
    is None, the proxy's own time) + `client_wait_ms` + `held_ms` + `stream_ms`."""
    invalid: bool = False
    notes: list[str] = Field(default_factory=list)

    @model_serializer(mode="wrap")
    def _upstream_ms_shown(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Headlines are written without their None fields, but `upstream_ms` stays, as null: a reader
        of a finished chain's times learns the upstream never saw it, rather than missing a field."""
        data: dict[str, Any] = handler(self)
        if self.upstream_ms is None:
            data["upstream_ms"] = None
        return data

    @property
    def bridged(self) -> bool:
        """True when the proxy converted between eras for this chain."""
        return self.mode in (Mode.LEGACY_TO_MRTR, Mode.MRTR_TO_LEGACY)


class ChainOpened(_Model):
    """A new chain began (its first message follows as a MessageRecorded)."""

    type: Literal["chain_opened"] = "chain_opened"
    chain: ChainSummary


class MessageRecorded(_Model):
    """A message joined a chain."""

    type: Literal["message"] = "message"
    chain_id: str
    message: MessageRecord


class ChainChanged(_Model):
    """A chain's headline changed (status, timings, rounds, sizes)."""

    type: Literal["chain_changed"] = "chain_changed"
    chain: ChainSummary


class SessionChanged(_Model):
    """A legacy session was opened, re-initialized or ended (the sessions view).

    `side` says whose session it is: a client's with the server, relayed (`both`, the default), a
    client's the legacy->MRTR bridge minted itself (`client`: the proxy, not the server, made it), or
    one the MRTR->legacy bridge holds with the upstream (`upstream`), named by the proxy
    (`upstream-N`, never the upstream's session id) and shown with the hash prefix of the principal
    it serves and the capability set its `initialize` declared.
    """

    type: Literal["session"] = "session"
    ts: float
    session: str
    state: Literal["opened", "ended", "expired", "reinitialized"]
    client_name: str | None = None
    protocol_version: str | None = None
    side: Side = Side.BOTH
    principal: str | None = None
    capabilities: str | None = None


class ContinuationChanged(_Model):
    """A parked upstream call (MRTR client -> legacy server bridge) was parked, resumed or ended."""

    type: Literal["continuation"] = "continuation"
    ts: float
    chain_id: str
    state: Literal["parked", "resumed", "completed", "expired", "lost", "cancelled"]
    principal: str | None = None
    pending_keys: list[str] = Field(default_factory=list)
    age_ms: float = 0.0
    outcome: str | None = None
    """Why an `expired` call went though its wait had not run out: `proxy_stopping` (the proxy
    stopped first); None otherwise."""


class Lagged(_Model):
    """Marker for one subscriber: it was too slow and this many events were dropped for it."""

    type: Literal["lagged"] = "lagged"
    dropped: int


class ProxyInfo(_Model):
    """What the proxy is and where it points; the first event of every feed and capture."""

    type: Literal["proxy_info"] = "proxy_info"
    ts: float
    version: str
    listen: str
    upstream: str
    upstream_era: str = "unknown"
    upstream_era_forced: bool = False
    """`upstream_era` is what `--upstream-era` told the proxy, not what a probe found: a replay of the
    capture speaks that era again (a probe of a dual-era server would find both)."""
    bridge: str = "auto"
    upstream_unreachable: str | None = None
    """Why the proxy's last probe got no answer from the upstream (`Connection refused`); None when it
    answered or was not probed yet. The proxy probes again on the next request."""
    run: str | None = None
    """The run tag every chain id of this proxy process starts with (`cb00287` for `cb00287-11`): a
    reader that meets a different one on the same address is seeing another run (None: an older proxy)."""
    started: float | None = None
    """When this proxy process started (epoch seconds); None from an older proxy."""


FlowEvent = Annotated[
    ChainOpened | MessageRecorded | ChainChanged | SessionChanged | ContinuationChanged | Lagged | ProxyInfo,
    Field(discriminator="type"),
]
"""Every event an observer can receive."""

flow_event_adapter: TypeAdapter[FlowEvent] = TypeAdapter(FlowEvent)
"""Decode/encode any FlowEvent (captures, admin feed)."""


def end_unfinished(summary: ChainSummary, note: str) -> None:
    """End an unfinished chain's headline `incomplete`, `note` saying why no end can come: every
    reader that knows the chain's run is gone (a capture's end, a proxy stopped) ends it so. Its
    `ended` stays unset: when it would have ended is not known."""
    summary.status = ChainStatus.INCOMPLETE
    summary.notes.append(note)


def left_unfinished(summary: ChainSummary, note: str) -> ChainSummary:
    """`end_unfinished` on a copy of the headline (an event's may be shared)."""
    copy = summary.model_copy(update={"notes": list(summary.notes)})
    end_unfinished(copy, note)
    return copy


def same_run(before: ProxyInfo, now: ProxyInfo) -> bool:
    """Whether two `proxy_info`s come from one proxy process (an era change repeats it; a restart not).

    The run tag decides, else the start time; a proxy too old to send either is judged by what it
    points at, which a restart in place cannot tell apart.
    """
    if before.run and now.run:
        return before.run == now.run
    if before.started is not None and now.started is not None:
        return before.started == now.started
    return (before.listen, before.upstream, before.version) == (now.listen, now.upstream, now.version)


def event_to_json(event: FlowEvent) -> bytes:
    """Encode one event as compact JSON bytes."""
    return event.model_dump_json(exclude_none=True).encode()


def event_from_json(data: bytes | str) -> FlowEvent:
    """Decode one event from JSON (raises pydantic.ValidationError on garbage)."""
    return flow_event_adapter.validate_json(data)
