"""Engine input: facts the transport observed, in the past tense.

The bridges' engines take these; an upstream *leg* is one HTTP request the proxy made upstream on
behalf of a client exchange.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.framing.classify import Route
from proxy.wire.jsonrpc import Message


@dataclass(frozen=True, slots=True)
class ClientRequestReceived:
    """The client sent an HTTP request that `classify` routed.

    `at` is the wall-clock time (epoch seconds) the transport received it; engines never read a clock,
    so this is how a bridge learns "now" (token expiry, parked-at times). 0.0 means "not supplied".
    `peer` is the client's address (IP, no port), what per-client bounds count against; "" when unknown.
    `connection` names the client connection that carried it, unique for the proxy's life and never
    reused (a client without credentials has no other name); "" when unknown.
    """

    exchange: str
    route: Route
    at: float = 0.0
    peer: str = ""
    connection: str = ""


@dataclass(frozen=True, slots=True)
class ClientConnectionClosed:
    """A client connection that carried requests to this bridge closed: no request comes on it again."""

    connection: str


@dataclass(frozen=True, slots=True)
class AnsweredForClient:
    """The proxy answered, in the client's place, a request the bridge sent the client (an intercept
    held it there and a person answered or dropped it): the client never saw the request.

    `by` names who answered (`the proxy's intercept (i2)`), and `dropped` says the answer is the
    drop's refusal rather than one a person typed, so the bridge never says the client answered.
    """

    session: str
    message: Message
    by: str
    dropped: bool = False


@dataclass(frozen=True, slots=True)
class ClientDisconnected:
    """The client went away before its exchange finished."""

    exchange: str


@dataclass(frozen=True, slots=True)
class TimerFired:
    """A timer the engine started has expired."""

    timer: str
    at: float = 0.0
    """When it fell due, by the transport's wall clock (0.0: not known): how long a parked call
    waited for a retry that never came is measured to it."""


@dataclass(frozen=True, slots=True)
class LegResponded:
    """The upstream answered leg `leg` with this HTTP head (the body follows as LegMessage events)."""

    leg: str
    status: int
    headers: tuple[tuple[str, str], ...]
    at: float = 0.0
    """When the transport saw it, by its wall clock (0.0: not known): a parked call it ends says how
    long it waited."""


@dataclass(frozen=True, slots=True)
class LegMessage:
    """One JSON-RPC message arrived on leg `leg` (a JSON body, or one SSE event of its stream)."""

    leg: str
    message: Message
    sse_id: str | None = None
    at: float = 0.0
    """When the transport saw it, by its wall clock (0.0: not known): a parked call it ends says how
    long it waited."""


@dataclass(frozen=True, slots=True)
class LegEnded:
    """Leg `leg`'s response body ended normally (after its messages)."""

    leg: str
    at: float = 0.0
    """When the transport saw it, by its wall clock (0.0: not known): a parked call it ends says how
    long it waited."""
    body: bytes = b""
    """The body of a JSON response that held no JSON-RPC message (a server refusing the request says
    why in it), as read, within `max_bridged_message_bytes`; empty otherwise."""


@dataclass(frozen=True, slots=True)
class LegFailed:
    """Leg `leg` could not be sent, timed out, or its stream was cut (`reason`: unreachable, unsendable,
    timeout or cut, as `proxy.engine.faults` words them)."""

    leg: str
    reason: str
    detail: str = ""
    at: float = 0.0
    """When the transport saw it, by its wall clock (0.0: not known): a parked call it ends says how
    long it waited."""


@dataclass(frozen=True, slots=True)
class LegCut:
    """Leg `leg`'s SSE body stopped: it broke off (`detail` says how) or the upstream closed it
    (`detail` None). The last event id and `retry` it carried are what a resume needs; whether the
    stream said all it had to, and whether to resume it, is the engine's call.
    """

    leg: str
    last_event_id: str | None
    retry_ms: int | None
    detail: str | None = None
    at: float = 0.0
    """When the transport saw it, by its wall clock (0.0: not known): a parked call it ends says how
    long it waited."""


@dataclass(frozen=True, slots=True)
class UpstreamEraProbed:
    """The era probe found which eras the upstream speaks now (`legacy`, `modern`): after a restart it
    may be another server, so what the bridge learned of the old one, and the sessions it opened for
    it, may no longer hold."""

    legacy: bool
    modern: bool
    label: str = ""
    """How the verdict is shown (`legacy`, `modern`, `dual`), for the log lines it causes."""


@dataclass(frozen=True, slots=True)
class Stopping:
    """The proxy is stopping: whatever the engine holds upstream should be let go now.

    `at` is the wall-clock time (epoch seconds) it began to, so a parked call let go says how long it
    waited; 0.0 means "not supplied".
    """

    at: float = 0.0


BridgeEvent = (
    ClientRequestReceived
    | AnsweredForClient
    | ClientDisconnected
    | ClientConnectionClosed
    | LegResponded
    | LegMessage
    | LegEnded
    | LegFailed
    | LegCut
    | TimerFired
    | UpstreamEraProbed
    | Stopping
)
