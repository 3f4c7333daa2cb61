"""The tables of the MRTR->legacy bridge, shared by its parts (engine, calls, rounds, listen).

Every piece of per-request state lives in exactly one table here, so `MrtrContext.table_sizes()`
can prove that a finished, failed, expired, cancelled or abandoned call leaves nothing behind.

Vocabulary. A *call* is one client operation forwarded upstream; it may outlive the client request
that started it (it *parks* between rounds) and be continued by later requests (the retries). The
*asker* is the client request the call currently answers (or, while parked, last answered): its
exchange, JSON-RPC id, `_meta` (capabilities, progress token, log level), headers and arrival time.
A *nested* request is one the upstream sent in flight on the call's stream, known to the client
under a proxy-minted key. A call runs on one upstream *session* (`upstream_session.UpstreamLink`,
named `upstream-N`) for its whole life; the sessions live in the context's `SessionPool`. Secrets
(session ids, tokens, `Authorization`) are never printed here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from proxy.engine.commands import BridgeCommand, Log, ObserveContinuation, ObserveSession, SendLeg
from proxy.engine.flood_lines import FloodLine
from proxy.engine.legs import Leg
from proxy.engine.modern_client.continuations import ContinuationTable, EndedContinuations
from proxy.engine.modern_client.tokens import Binding, StateSealer
from proxy.engine.modern_client.upstream_session import SessionPool, UpstreamLink
from proxy.engine.origins import KnownCallers, caller_of
from proxy.engine.resume import Resumable
from proxy.wire.jsonrpc import RequestId
from proxy.wire.mcp import META_CLIENT_CAPABILITIES, META_LOG_LEVEL, target_name

LegPurpose = Literal["initialize", "initialized", "call", "notice", "stream", "close", "check"]
"""Why the bridge opened an upstream leg: the handshake, a call, a fire-and-forget POST, the GET,
the DELETE that ends a session, a `ping` asking whether the upstream accepts a client (its `Origin`
and credentials)."""

Phase = Literal["queued", "running", "collecting", "parked"]
"""queued: waits for the session; running: leg open, asker attached; collecting: a round window is
open; parked: the asker got `input_required` and the call waits for a retry."""

KEY_PREFIX: dict[str, str] = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}
"""Input keys are `<prefix>-<n>`, counted per call over its whole life (never reused)."""


LegRef = Leg[LegPurpose]
"""An open upstream leg of this bridge (`proxy.engine.legs`)."""


@dataclass(frozen=True, slots=True)
class Asker:
    """The facts of one client request that a call answers."""

    exchange: str
    ident: RequestId
    meta: dict[str, Any]
    headers: tuple[tuple[str, str], ...]
    at: float

    @property
    def capabilities(self) -> Any:
        """This request's declared client capabilities (the only ones that count for it)."""
        return self.meta.get(META_CLIENT_CAPABILITIES)

    @property
    def progress_token(self) -> Any:
        """The request's progress token (None: it wants no progress)."""
        return self.meta.get("progressToken")

    @property
    def log_level(self) -> Any:
        """The request's `logLevel` (None: it must get no log notifications)."""
        return self.meta.get(META_LOG_LEVEL)


@dataclass
class Nested:
    """An in-flight upstream request shown to the client as one `inputRequests` entry."""

    upstream_id: RequestId | None
    key: str
    method: str
    params: dict[str, Any]
    elicitation_id: str | None = None
    note: str | None = None
    """Why it was given to this call when that was a guess (it came on the session's GET stream)."""


@dataclass
class Call:
    """One forwarded client operation and everything it holds upstream."""

    key: str
    method: str
    params: dict[str, Any]
    binding: Binding
    asker: Asker
    session: str = ""
    """The upstream session (`UpstreamLink.name`) the call runs on; it keeps it for its whole life."""
    client: str = ""
    """The address of the client that started the call: its continuation slot counts against it."""
    phase: Phase = "queued"
    leg: str | None = None
    upstream_id: str | None = None
    generation: int = 0
    resent: bool = False
    streaming: bool = False
    round: int = 0
    timer: str | None = None
    continuation: str | None = None
    restart: bool = False
    final: dict[str, Any] | None = None
    parked_at: float = 0.0
    token: dict[str, Any] | None = None
    parker: str = ""
    """The exchange that first parked the call: observation files the continuation in its chain."""
    observed: str | None = None
    """The continuation state last told to the observer (`parked` or `resumed`), None before."""
    asked: dict[str, Nested] = field(default_factory=dict)
    collecting: list[Nested] = field(default_factory=list)
    buffered: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What the chain should say beside the asker's next answer (a question refused on its behalf)."""
    dropped: int = 0
    counters: Counter[str] = field(default_factory=Counter)

    def __repr__(self) -> str:
        return (
            f"<{self.method} {self.name!r} {self.phase} round={self.round} leg={self.leg} "
            f"asked={sorted(self.asked)} collecting={[n.key for n in self.collecting]}>"
        )

    @property
    def name(self) -> str | None:
        """The tool/prompt name or resource uri (the `Mcp-Name`)."""
        return target_name(self.method, self.params)

    def mint_key(self, method: str) -> str:
        """A fresh input key for an embedded request of `method`."""
        prefix = KEY_PREFIX.get(method, "input")
        self.counters[prefix] += 1
        return f"{prefix}-{self.counters[prefix]}"


@dataclass
class Listener:
    """One open `subscriptions/listen` stream: what it asked for and what was honoured."""

    exchange: str
    ident: RequestId
    headers: tuple[tuple[str, str], ...]
    requested: dict[str, Any]
    session: str = ""
    """The upstream session whose GET stream feeds this listener."""
    honoured: dict[str, Any] = field(default_factory=dict)
    active: bool = False


@dataclass
class MrtrContext:
    """The bridge's tables and settings; every part of the bridge mutates only these."""

    new_id: Callable[[str], str]
    sealer: StateSealer
    table: ContinuationTable
    max_rounds: int
    ttl: float
    round_window: float
    pool: SessionPool
    session_ttl: float
    max_buffered: int = 100
    keep_streams: bool = False
    """Each session holds its GET stream open while it lives, for server requests sent outside any
    call's stream; False: a GET stream is open only while a listener listens."""
    anonymous_per_connection: bool = False
    """Callers without credentials get sessions per client connection (`per_connection`); False:
    they share one per capability set (`shared`)."""
    ended: EndedContinuations = field(default_factory=lambda: EndedContinuations(1000))
    """Parked calls that ended before their client came back: what each one's retry is told."""
    calls: dict[str, Call] = field(default_factory=dict)
    serving: dict[str, str] = field(default_factory=dict)
    legs: dict[str, LegRef] = field(default_factory=dict)
    timers: dict[str, str] = field(default_factory=dict)
    discovers: dict[str, tuple[RequestId, str, tuple[tuple[str, str], ...]]] = field(default_factory=dict)
    """Discover requests waiting for their session to open, or for the upstream to accept their
    `Origin`: exchange -> (JSON-RPC id, session, the request's headers)."""
    callers: KnownCallers = field(default_factory=KnownCallers)
    """Callers (`Origin`, principal) the upstream answered with success: only they are answered from a
    session's InitializeResult without asking the upstream."""
    listeners: dict[str, Listener] = field(default_factory=dict)
    observed: list[BridgeCommand] = field(default_factory=list)
    """Observations of the event being handled; the engine emits them after its other orders."""
    full_lines: FloodLine = field(default_factory=FloodLine)
    """When the last `bridge_continuations_full` line was written (by request arrival times, wall
    clock; lines for requests without one leave it as it is), and the refusals held back since."""

    def full_line(self, at: float, fields: dict[str, Any]) -> Log | None:
        """The warning for a call refused a parking slot at `at`: None when one was written within
        a second (this one is counted for the next line, as `also_unlogged`). Clients that are
        refused retry, so a full table refuses many calls a second, which must not flood the log;
        `/metrics` counts every one as an error of its chain."""
        also = self.full_lines.due(at)
        if also is None:
            return None
        return Log(
            "bridge_continuations_full", "warning", {**fields, "also_unlogged": also} if also else fields
        )

    def observe_continuation(
        self, call: Call, state: str, age_ms: float = 0.0, *, stopped: bool = False
    ) -> None:
        """A parked call changed state (`parked`, `resumed`, `expired`, `lost`, `ended`): say so
        (`stopped`: it expired because the proxy stopped)."""
        assert call.continuation is not None
        ending = state in ("expired", "lost", "ended")
        principal = None if ending else call.binding.principal[:16]
        pending = () if ending else tuple(sorted(call.asked))
        self.observed.append(
            ObserveContinuation(call.parker, call.continuation, state, principal, pending, age_ms, stopped)
        )
        call.observed = None if ending else state

    def observe_session(self, link: UpstreamLink, state: str) -> None:
        """An upstream session opened, re-opened, ended or expired: tell the observer."""
        version = link.version if link.init is not None else None
        self.observed.append(ObserveSession(link.name, state, link.principal[:16], link.label, version))
        link.announced = state in ("opened", "reinitialized")

    def link_of(self, call: Call) -> UpstreamLink:
        """The session a call runs on (a call uses its session until it is forgotten, so it exists)."""
        link = self.pool.named(call.session)
        if link is None:
            raise LookupError(f"call {call.key} runs on session {call.session!r}, which the pool lost")
        return link

    def send(
        self,
        purpose: LegPurpose,
        owner: str,
        exchange: str,
        message: dict[str, Any],
        headers: tuple[tuple[str, str], ...],
        *,
        leg: str | None = None,
        what: str = "",
        related: str | None = None,
    ) -> SendLeg:
        """Register a leg and build the order that sends it."""
        leg = leg if leg is not None else self.new_id("leg")
        ident = message.get("id")
        resumable = Resumable(ident, headers) if "method" in message and ident is not None else None
        self.legs[leg] = LegRef(purpose, owner, what, resumable=resumable, caller=caller_of(headers))
        return SendLeg(leg, exchange, headers, message, related)

    def notice(
        self,
        link: UpstreamLink,
        owner: str,
        exchange: str,
        message: dict[str, Any],
        client: tuple[tuple[str, str], ...],
        what: str,
        *,
        leg: str | None = None,
        related: str | None = None,
    ) -> SendLeg:
        """A fire-and-forget POST on `link` (an answer, a cancel, a subscribe): 202 expected."""
        headers = link.headers(client)
        return self.send("notice", owner, exchange, message, headers, leg=leg, what=what, related=related)

    def call_notice(self, call: Call, message: dict[str, Any], what: str) -> SendLeg:
        """A notice on behalf of `call`, filed (for observation) with the call's upstream leg."""
        asker = call.asker
        link = self.link_of(call)
        return self.notice(
            link, call.key, asker.exchange, message, asker.headers, what, related=call.upstream_id
        )

    def drop_leg(self, leg: str | None) -> None:
        """Forget a leg that answered, ended or was closed."""
        if leg is not None:
            self.legs.pop(leg, None)

    def table_sizes(self) -> dict[str, int]:
        """The size of every table (tests assert a finished flow leaves only what it should)."""
        calls = self.calls.values()
        links = list(self.pool)
        streams = sum(link.stream_leg is not None for link in links)
        standing = streams if self.keep_streams else 0
        return {
            "upstream_sessions": len(links),
            "orphaned_sessions": len(self.pool.orphans),
            "session_users": sum(len(link.users) for link in links),
            "session_timers": sum(link.timer is not None for link in links),
            "waiting": sum(len(link.waiting) for link in links),
            "calls": len(self.calls),
            "serving": len(self.serving),
            "legs": len(self.legs) - standing,
            "timers": len(self.timers),
            "continuations": len(self.table),
            "ended_continuations": len(self.ended),
            "principals": self.table.principals(),
            "clients": self.table.clients(),
            "asked": sum(len(c.asked) for c in calls),
            "collecting": sum(len(c.collecting) for c in calls),
            "buffered": sum(len(c.buffered) for c in calls),
            "discovers": len(self.discovers),
            "listeners": len(self.listeners),
            "subscriptions": sum(len(link.subscribed) for link in links),
            "stream_legs": streams - standing,
            "session_streams": standing,
            "session_param_headers": sum(len(link.tools) for link in links),
        }


def describe(call: Call, now: float | None) -> dict[str, Any]:
    """The admin-facing facts of one parked (or resumed) call; never the token, never a secret."""
    view: dict[str, Any] = {
        "continuation": call.continuation,
        "state": call.phase,
        "token": call.token,
        "parked_at": call.parked_at,
        "principal": call.binding.principal[:16],
        "session": call.session,
        "method": call.method,
        "name": call.name,
        "pending_keys": sorted(call.asked),
        "round": call.round,
        "exchange": call.asker.exchange,
        "client_id": call.asker.ident,
        "upstream_id": call.upstream_id,
        "buffered": len(call.buffered),
        "dropped": call.dropped,
    }
    if now is not None and call.parked_at > 0:  # 0.0: the transport supplied no arrival times
        view["age_ms"] = max(0.0, now - call.parked_at) * 1000.0
    return view
