"""The tables of the legacy->MRTR bridge, shared by its parts (engine, call driver, listen emulator).

Every piece of per-request state lives in exactly one table here, so `BridgeContext.table_sizes()`
can prove that a finished, failed, cancelled or abandoned call leaves nothing behind. Session ids
are secrets (they authorize a legacy client), so nothing here prints them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NamedTuple

from proxy.engine.capabilities import legacy_server_capabilities
from proxy.engine.commands import SendLeg
from proxy.engine.legacy_client.request import Envelope, leg_headers
from proxy.engine.legs import Leg
from proxy.engine.origins import UNNAMED, Caller, KnownCallers, caller_of
from proxy.engine.tool_headers import ToolHeaders
from proxy.wire.jsonrpc import RequestId, request
from proxy.wire.mcp import META_SERVER_INFO, request_meta

LegPurpose = Literal["discover", "call", "refresh", "listen"]
"""Why the bridge opened an upstream leg: learn the server, carry a call, refresh tools, listen."""

UNSET_LOG_LEVEL = "debug"
"""The `logLevel` asked of the 2026-07-28 server for a client that never sent `logging/setLevel`: a
legacy server sends such a client every log message its tools write, and a 2026 server sends none
unless asked, so the bridge asks for all of them."""

FALLBACK_SERVER_INFO: dict[str, str] = {"name": "unknown-upstream", "version": "unknown"}
"""What `initialize` reports when the upstream's discovery result names no server."""


LegRef = Leg[LegPurpose]
"""An open upstream leg of this bridge (`proxy.engine.legs`)."""


@dataclass(frozen=True, slots=True)
class PendingInit:
    """An `initialize` held until the upstream's discovery answers."""

    exchange: str
    ident: RequestId
    params: dict[str, Any]
    at: float = 0.0
    peer: str = ""
    """The client's address, what `max_legacy_sessions_per_client` counts against."""
    caller: Caller = UNNAMED
    """The client's `Origin` and principal: it is answered once the upstream has accepted that caller."""
    discovery: str = ""
    """The `server/discover` leg it waits for, sent with its caller's headers: that leg's outcome
    answers it, whatever else the leg's success teaches."""


@dataclass(frozen=True, slots=True)
class Discovery:
    """What `server/discover` taught the bridge: the upstream's capabilities and identity, and for how
    long (and for whom) an `initialize` may be answered from it."""

    capabilities: dict[str, Any]
    legacy_capabilities: dict[str, Any]
    server_info: Any
    instructions: str | None
    ttl_ms: int = 0
    """The result's `ttlMs`: 0 (or none given) means it is fetched again for each `initialize`."""
    fetched_at: float = 0.0
    """When it arrived (the event's wall-clock time; 0.0: not known)."""
    private_to: Caller | None = None
    """The caller it was fetched for when its `cacheScope` is `private` (None: any caller may use it)."""

    @classmethod
    def from_result(cls, result: dict[str, Any], at: float = 0.0, caller: Caller = UNNAMED) -> Discovery:
        """Read a discovery result leniently: every field a legacy `initialize` needs gets a value."""
        caps = result.get("capabilities")
        caps = caps if isinstance(caps, dict) else {}
        info = request_meta(result).get(META_SERVER_INFO) or result.get("serverInfo") or FALLBACK_SERVER_INFO
        instructions = result.get("instructions")
        ttl = result.get("ttlMs")
        return cls(
            capabilities=caps,
            legacy_capabilities=legacy_server_capabilities(caps),
            server_info=info,
            instructions=instructions if isinstance(instructions, str) else None,
            ttl_ms=ttl if type(ttl) is int and ttl > 0 else 0,  # a bool passes isinstance
            fetched_at=at,
            private_to=caller if result.get("cacheScope") == "private" else None,
        )

    def serves(self, caller: Caller, at: float) -> bool:
        """Whether an `initialize` of `caller` at `at` may be answered from this discovery: within its
        `ttlMs`, and by the caller it was fetched for when the server said it is private."""
        if self.ttl_ms <= 0 or (self.private_to is not None and caller != self.private_to):
            return False
        return not at or not self.fetched_at or at - self.fetched_at < self.ttl_ms / 1000

    def expired(self) -> Discovery:
        """This discovery, no longer answering `initialize` (the upstream may have changed): what it
        says of the server stays in use until the next discovery replaces it."""
        return replace(self, ttl_ms=0)


class Answerer(NamedTuple):
    """Who answered a request the bridge sent the client, when not the client: `by` names it (the
    proxy's intercept), `dropped` says the request was dropped before the client saw it."""

    by: str
    dropped: bool


class Pending(NamedTuple):
    """A nested request the bridge put on a call's stream and still waits for."""

    key: str
    method: str


@dataclass(slots=True)
class Session:
    """One proxy-minted legacy session: what the client declared and what it has in flight.

    Slotted, with its declared capabilities and client info shared between sessions that declared
    the same (`BridgeContext.shared`): a client may open many sessions and never end one.
    """

    id: str
    version: str
    capabilities: dict[str, Any]
    client_info: Any
    last_used: float = 0.0
    """When the session's client last sent a request on it (the event's time; 0.0: unknown)."""
    peer: str = ""
    """The address that opened the session (shared between sessions of one address)."""
    log_level: str | None = None
    """What the client's `logging/setLevel` asked for (None: it never sent one)."""
    subscriptions: list[str] = field(default_factory=list)
    get_exchange: str | None = None
    get_headers: tuple[tuple[str, str], ...] = ()
    listen_leg: str | None = None
    calls: dict[RequestId, str] = field(default_factory=dict)
    nested: dict[RequestId, str] = field(default_factory=dict)
    retired: bool = False
    """The upstream no longer speaks 2026-07-28 (it restarted in another era): the session's next
    request ends it with 404, so its client initializes again and is routed by the new verdict."""

    def envelope(self) -> Envelope:
        """The `_meta` facts this session adds to each upstream request (fresh every leg)."""
        return Envelope(self.capabilities, self.client_info, self.log_level or UNSET_LOG_LEVEL)

    @property
    def busy(self) -> bool:
        """A request of the session is in flight (a call or a nested request): it may not be dropped.

        An open GET stream does not count: it can stay open for ever, and the session behind it is
        dropped like any other (the stream is ended first).
        """
        return bool(self.calls or self.nested)


@dataclass
class Call:
    """One forwarded client request and the MRTR rounds it takes upstream."""

    exchange: str
    session: str
    ident: RequestId
    method: str
    params: dict[str, Any]
    headers: tuple[tuple[str, str], ...]
    legs_sent: int = 0
    leg: str | None = None
    timer: str | None = None
    streaming: bool = False
    refreshed: bool = False
    sent_state: bool = False
    answers: dict[str, Any] | None = None
    round_state: str | None = None
    outstanding: dict[RequestId, Pending] = field(default_factory=dict)
    progress_last: float | None = None
    progress_base: float | None = 0
    """What the current round's progress is offset by; None until its first progress decides."""

    def __repr__(self) -> str:
        waiting = sorted(str(p.key) for p in self.outstanding.values())
        return f"<{self.method} #{self.ident} round={self.legs_sent} leg={self.leg} waiting={waiting}>"


@dataclass
class BridgeContext:
    """The bridge's tables plus the id source; every part of the bridge mutates only these."""

    new_id: Callable[[str], str]
    sessions: dict[str, Session] = field(default_factory=dict)
    calls: dict[str, Call] = field(default_factory=dict)
    legs: dict[str, LegRef] = field(default_factory=dict)
    timers: dict[str, str] = field(default_factory=dict)
    get_streams: dict[str, str] = field(default_factory=dict)
    pending_init: dict[str, PendingInit] = field(default_factory=dict)
    tools: ToolHeaders = field(default_factory=ToolHeaders)
    discovery: Discovery | None = None
    callers: KnownCallers = field(default_factory=KnownCallers)
    """Callers (`Origin`, principal) the upstream answered with success: only they are answered from
    `discovery`."""
    _shared: dict[str, Any] = field(default_factory=dict)

    def shared(self, value: Any) -> Any:
        """One object for every session that declared an equal value (capabilities, client info).

        Sessions never change these, so sharing them is safe, and it keeps a session's cost to its
        own few fields. The cache is bounded: past 1024 distinct values, new ones are not kept.
        """
        key = repr(value)
        found = self._shared.get(key)
        if found is None:
            found = value
            if len(self._shared) < 1024:
                self._shared[key] = value
        return found

    def open_leg(
        self,
        purpose: LegPurpose,
        owner: str,
        exchange: str,
        method: str,
        params: dict[str, Any],
        client_headers: tuple[tuple[str, str], ...],
    ) -> SendLeg:
        """Register a new leg and build the order that sends it; its id doubles as the JSON-RPC id."""
        # Built first: a refusal (HeaderRefused) leaves nothing registered behind.
        headers = leg_headers(method, params, client_headers, self.tools)
        leg = self.new_id("leg")
        self.legs[leg] = LegRef(purpose, owner, caller=caller_of(headers))
        return SendLeg(leg, exchange, headers, request(leg, method, params))

    def drop_leg(self, leg: str | None) -> None:
        """Forget a leg whose answer arrived or that was closed."""
        if leg is not None:
            self.legs.pop(leg, None)

    def table_sizes(self) -> dict[str, int]:
        """The size of every table (tests assert a finished flow leaves only what it should)."""
        sessions = self.sessions.values()
        return {
            "sessions": len(self.sessions),
            "pending_initialize": len(self.pending_init),
            "calls": len(self.calls),
            "session_calls": sum(len(s.calls) for s in sessions),
            "nested": sum(len(s.nested) for s in sessions),
            "outstanding": sum(len(c.outstanding) for c in self.calls.values()),
            "legs": len(self.legs),
            "timers": len(self.timers),
            "get_streams": len(self.get_streams),
            "listen_legs": sum(1 for s in sessions if s.listen_leg is not None),
            "subscriptions": sum(len(s.subscriptions) for s in sessions),
            "tool_headers": len(self.tools),
        }
