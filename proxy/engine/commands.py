"""Engine output: the bridges' orders for the transport, in the imperative.

An upstream *leg* is one HTTP request the proxy makes upstream on behalf of a client exchange (a
bridge may make several per client request, and a leg may outlive the exchange that caused it).
Pass-through needs no orders: its decisions are plain functions (`proxy.engine.passthrough`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class EndClientResponse:
    """Finish the client's response (the stream ends)."""

    exchange: str
    outcome: str | None = None


@dataclass(frozen=True, slots=True)
class Log:
    """Emit one structured log line (logging is an order, so tests can see which event caused it)."""

    event: str
    level: str = "info"
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SendLeg:
    """POST `message` to the upstream endpoint as leg `leg`, on behalf of client exchange `exchange`.

    The transport reports the answer as LegResponded, then LegMessage per message, then LegEnded or
    LegFailed (a JSON body) or LegCut (an SSE body, whose end the engine judges). `headers` are the
    complete request headers (the transport adds only Host and length).
    `related` names an earlier leg this one belongs with (an answer to, or the cancellation of, a
    parked call's leg): observation files it in that leg's chain even when no client exchange is open.
    """

    leg: str
    exchange: str
    headers: tuple[tuple[str, str], ...]
    message: dict[str, Any]
    related: str | None = None


@dataclass(frozen=True, slots=True)
class OpenLegStream:
    """Open a GET SSE stream upstream as leg `leg` (legacy server-initiated traffic)."""

    leg: str
    exchange: str
    headers: tuple[tuple[str, str], ...]
    standing: bool = False
    """The session's own stream, kept while the session lives (not a leg any request waits on)."""


@dataclass(frozen=True, slots=True)
class DeleteSession:
    """DELETE the upstream endpoint as leg `leg`: a legacy client ending its session there.

    `headers` carry the session id and the credentials that opened it; the transport reports the
    answer as LegResponded, then LegEnded or LegFailed, like any leg.
    """

    leg: str
    headers: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class CloseLeg:
    """Abort leg `leg` (close its connection); to a 2026-07-28 server this is a cancellation."""

    leg: str
    outcome: str | None = None
    """Why the leg is closed before its answer, in an exchange's words (`cancelled`,
    `client_disconnected`, `proxy_stopping`), for the leg's record; None when no cause is worth naming."""


@dataclass(frozen=True, slots=True)
class ResumeLeg:
    """Reopen cut leg `leg` as a GET with `headers` (they carry `Last-Event-ID`) after `delay_s`.

    The answer's events follow as LegMessage on the same leg; its end or cut as LegCut again. The
    transport sends no new LegResponded: the leg's head was reported once.
    """

    leg: str
    delay_s: float
    last_event_id: str
    headers: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class ReplyJson:
    """Answer client exchange `exchange` with one complete response (JSON body, or empty when None)."""

    exchange: str
    status: int
    message: dict[str, Any] | None
    headers: tuple[tuple[str, str], ...] = ()
    note: str | None = None
    """What the chain says beside the message (a guess the engine made in building it)."""
    outcome: str | None = None
    """How the exchange ended when the reply is the proxy's word for a fault (`upstream_unreachable`),
    as pass-through records its own gateway errors; None for an answer."""


@dataclass(frozen=True, slots=True)
class StartSse:
    """Start an SSE response on client exchange `exchange` (head only; events follow as SendSse)."""

    exchange: str
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class SendSse:
    """Write one message as an SSE event on client exchange `exchange` (after StartSse)."""

    exchange: str
    message: dict[str, Any]
    event_id: str | None = None
    note: str | None = None
    """What the chain says beside the message (a guess the engine made in building it)."""


@dataclass(frozen=True, slots=True)
class ObserveContinuation:
    """Tell the observer a parked upstream call changed: `parked`, `resumed`, `expired`, `lost` or
    `ended`.

    `exchange` is the client exchange that first parked the call (its chain); `age_ms` is how long
    the call had been parked when it resumed or went (0 otherwise); `stopped`: an `expired` call went
    because the proxy stopped before its client came back, not because its wait ran out. Never a
    token or a secret.
    """

    exchange: str
    continuation: str
    state: str
    principal: str | None
    pending_keys: tuple[str, ...] = ()
    age_ms: float = 0.0
    stopped: bool = False


@dataclass(frozen=True, slots=True)
class ObserveSession:
    """Tell the observer an upstream session changed: `opened`, `reinitialized`, `ended` or `expired`."""

    session: str
    state: str
    principal: str
    capabilities: str
    version: str | None


@dataclass(frozen=True, slots=True)
class RecheckUpstreamEra:
    """Probe the upstream's eras again before routing the next request: it showed that it restarted
    or ended the bridge's session (`reason` says how), and a server started anew may speak another
    era than the one it was probed in."""

    reason: str


@dataclass(frozen=True, slots=True)
class StartTimer:
    """Feed TimerFired(timer) once `seconds` have passed (replaces a running timer of the same name).

    The transport feeds it behind every input it had received when the timer fell due, so an engine
    can say "what arrived within the window" without reading a clock.
    """

    timer: str
    seconds: float


@dataclass(frozen=True, slots=True)
class CancelTimer:
    """Stop timer `timer` if it is running."""

    timer: str


BridgeCommand = (
    SendLeg
    | OpenLegStream
    | DeleteSession
    | CloseLeg
    | ResumeLeg
    | ReplyJson
    | StartSse
    | SendSse
    | EndClientResponse
    | StartTimer
    | CancelTimer
    | ObserveContinuation
    | ObserveSession
    | RecheckUpstreamEra
    | Log
)
