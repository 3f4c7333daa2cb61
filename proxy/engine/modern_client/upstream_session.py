"""One legacy session the MRTR->legacy bridge holds with the upstream: handshake, headers, loss.

Theory of operation. A 2026-07-28 client never says `initialize`, but a 2025-era server will not
serve anything before it. So the bridge opens sessions itself (`sessions` keeps them), one
per caller and declared capability set: the first request that needs a session starts
`initialize` (as a 2025-11-25 client declaring exactly the input kinds that request's `_meta`
declared, in legacy shapes) with that request's credentials, then `notifications/initialized`;
requests of the same key that arrive meanwhile wait in `waiting`. Only when the upstream has
accepted the notification (its 202) are they released, because SDK servers refuse requests that
overtake it.

Why a session per capability set: legacy capabilities are fixed per session while modern ones
arrive per request, and a legacy server decides what to ask from its session's capabilities (an
SDK server asks for elicitation only when the client declared it, and otherwise takes a fallback
path). Declaring more than the caller did would make the server ask questions the caller cannot
answer; declaring less would hide its fallback-free features. Why a session per principal: the
session is opened with the caller's `Authorization`, and a server may tie state and permissions to
it, so one caller's calls never ride a session another caller's credentials opened. Callers
without credentials share one session per capability set by default (`shared`: one developer's
client keeps a server's per-session state across its connections); `per_connection` keys them by
their client connection instead, so whatever a legacy server keeps per session (the roots it asked
for, its log level, subscriptions, a tool's state) is never one anonymous client's seen by another.

Every later upstream request carries the session id and the negotiated version. A 404 on a request
that carried the session id means the upstream forgot the session: `lost()` bumps the generation,
which marks everything parked on the old session as dead, and the next request re-initializes it.

Decisions: only the input kinds the bridge can relay are declared (`elicitation` form/url,
`sampling` with `tools`/`context`, `roots`); other families (`experimental`, `extensions`) stay
out, because the bridge could not serve what a server would do with them. `roots.listChanged` is
never declared (no 2026 client can send that notification). `logging/setLevel` is never sent: it
is session-wide, so the bridge filters `notifications/message` per request by the level in that
request's `_meta` instead.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, Literal, NamedTuple

from proxy import __version__
from proxy.engine.principal import ANONYMOUS, principal_of
from proxy.engine.tool_headers import ToolHeaders
from proxy.framing.http import header
from proxy.wire.headers import PROTOCOL_VERSION, SESSION_ID
from proxy.wire.jsonrpc import Kind, Message, notification, request
from proxy.wire.relayed import relayed_client_headers
from proxy.wire.versions import LATEST_LEGACY

CLIENT_INFO: Final[dict[str, str]] = {"name": "mcp-debug-proxy", "version": __version__}
"""How the bridge introduces itself to the legacy upstream."""

_JSON: Final = ("Content-Type", "application/json")
_ACCEPT: Final = ("Accept", "application/json, text/event-stream")

LinkState = Literal["idle", "initializing", "notifying", "ready"]
WaiterKind = Literal["call", "discover", "listen"]


class SessionKey(NamedTuple):
    """Which session serves a request: the caller's principal and its declared capability set (and,
    for a caller without credentials, its connection)."""

    principal: str
    capabilities: str
    """The canonical label of the declared input capabilities (`capability_label`)."""
    connection: str = ""
    """The client connection of a caller without credentials when each connection has sessions of its
    own (`per_connection`); "" for a session serving its principal on every connection."""


def lost_why(answered: str) -> str:
    """Why `upstream_session_lost` was said: what the upstream answered a request in the session."""
    return f"the upstream answered {answered} in the session: it restarted or ended the session"


def session_capabilities(modern: Any) -> dict[str, Any]:
    """The legacy `initialize` capabilities that say exactly what a 2026 request declared.

    `elicitation` as explicit modes (a bare `{}` means form in both eras), `sampling` with its
    `tools` and `context` sub-capabilities, `roots` without `listChanged`; nothing else.
    """
    caps = modern if isinstance(modern, dict) else {}
    out: dict[str, Any] = {}
    elicitation = caps.get("elicitation")
    if isinstance(elicitation, dict):
        modes: dict[str, Any] = {mode: {} for mode in ("form", "url") if mode in elicitation}
        out["elicitation"] = modes or {"form": {}}
    sampling = caps.get("sampling")
    if isinstance(sampling, dict):
        out["sampling"] = {sub: {} for sub in ("tools", "context") if sub in sampling}
    if isinstance(caps.get("roots"), dict):
        out["roots"] = {}
    return out


def capability_label(legacy: dict[str, Any]) -> str:
    """A short canonical name of a `session_capabilities` result: `elicitation.form sampling`, `none`."""
    parts = [f"elicitation.{mode}" for mode in sorted(legacy.get("elicitation", {}))]
    if "sampling" in legacy:
        parts.append("sampling")
        parts.extend(f"sampling.{sub}" for sub in sorted(legacy["sampling"]))
    if "roots" in legacy:
        parts.append("roots")
    return " ".join(parts) or "none"


def session_key(
    headers: Iterable[tuple[str, str]], modern_capabilities: Any, connection: str = ""
) -> SessionKey:
    """The session a request belongs to: its principal's, or without `Authorization` that of
    `connection` (given when anonymous clients get sessions per connection; "" shares them)."""
    principal = principal_of(headers)
    label = capability_label(session_capabilities(modern_capabilities))
    return SessionKey(principal, label, connection if principal == ANONYMOUS else "")


@dataclass
class UpstreamLink:
    """One legacy session: its key, state, identity, generation, users and what hangs off it."""

    name: str
    """The proxy's own name for it (`upstream-N`): shown in views, used in timers; not a secret."""
    principal: str
    capabilities: dict[str, Any]
    connection: str = ""
    """The client connection it serves (a caller without credentials), or "" (a principal's)."""
    label: str = field(init=False)
    """The declared capability set, as shown in views and logs (`capability_label`)."""
    state: LinkState = "idle"
    session_id: str | None = None
    version: str = LATEST_LEGACY
    init: dict[str, Any] | None = None
    generation: int = 0
    waiting: list[tuple[WaiterKind, str]] = field(default_factory=list)
    exchange: str = ""
    credentials: tuple[tuple[str, str], ...] = ()
    users: set[str] = field(default_factory=set)
    """Call keys, listen and discover exchanges using the session: it is busy while any remain."""
    used: bool = False
    """Used since the last idle check (a session is closed when a whole check period passes unused)."""
    timer: str | None = None
    tools: ToolHeaders = field(default_factory=ToolHeaders)
    """`x-mcp-header` arguments learned from this session's tool lists (they may differ per session)."""
    stream_leg: str | None = None
    """The session's GET stream: open while the session lives (`keep_streams`), else while a listener
    of this session wants notifications."""
    stream_refused: bool = False
    """The upstream answered the GET with 405: it offers no stream, the session does not ask again."""
    subscribed: Counter[str] = field(default_factory=Counter)
    """Resource URIs subscribed upstream on this session, with how many listeners want each."""
    announced: bool = False
    """Told to the observer as open: its next handshake is a re-initialization, its removal an end."""
    sharer: str = ""
    """The open client connection known to use this shared anonymous session ("" for none yet)."""
    shared_warned: bool = False
    """A second open client connection used this shared anonymous session, and a warning said so."""
    doubted: bool = False
    """The upstream may have restarted since the handshake (the session's GET stream ended, the era
    was probed again, the upstream was out of reach): the next `server/discover` pings the session
    before it is answered from this InitializeResult, so a restarted server's 404 renews both."""

    def __repr__(self) -> str:
        held = "held" if self.session_id is not None else "none"
        return (
            f"UpstreamLink({self.name}, {self.state}, caps={self.label!r}, version={self.version}, "
            f"session={held}, generation={self.generation}, users={len(self.users)}, "
            f"waiting={len(self.waiting)})"
        )

    def __post_init__(self) -> None:
        self.label = capability_label(self.capabilities)

    @property
    def key(self) -> SessionKey:
        """The pool key this session serves."""
        return SessionKey(self.principal, self.label, self.connection)

    @property
    def one_principal(self) -> bool:
        """True when every call on the session is one principal's: it was opened with an
        `Authorization` (only callers sending it use it), or it serves one client connection. The
        shared anonymous session serves whoever sends none, so its calls may be different people's."""
        return self.principal != ANONYMOUS or bool(self.connection)

    @property
    def ready(self) -> bool:
        """True once requests may be sent."""
        return self.state == "ready"

    def initialize_message(self, leg: str) -> dict[str, Any]:
        """The `initialize` request (its JSON-RPC id is the leg id)."""
        params = {
            "protocolVersion": LATEST_LEGACY,
            "capabilities": self.capabilities,
            "clientInfo": CLIENT_INFO,
        }
        return request(leg, "initialize", params)

    def initialize_headers(self, client: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
        """Headers of the `initialize` POST: no session, no negotiated version yet."""
        return (_JSON, _ACCEPT, *relayed_client_headers(client))

    def on_initialize_head(self, headers: Iterable[tuple[str, str]]) -> None:
        """Remember the session id the upstream minted (a stateless server mints none)."""
        self.session_id = header(headers, SESSION_ID)

    def on_initialize_answer(self, msg: Message) -> str | None:
        """Take the InitializeResult; the problem as text when the answer is not one."""
        if msg.kind is Kind.ERROR:
            err = msg.error
            return f"initialize failed with error {err.get('code')}: {err.get('message')}"
        result = msg.result
        if not isinstance(result, dict):
            return "initialize answered with a result that is not an object"
        version = result.get("protocolVersion")
        self.version = version if isinstance(version, str) else LATEST_LEGACY
        self.init = result
        self.doubted = False
        self.state = "notifying"
        return None

    def initialized_message(self) -> dict[str, Any]:
        """The `notifications/initialized` that completes the handshake."""
        return notification("notifications/initialized")

    def headers(
        self, client: Iterable[tuple[str, str]], *, stream: bool = False
    ) -> tuple[tuple[str, str], ...]:
        """Headers of every later upstream request: session, negotiated version, relayed client ones.

        The client's 2026 headers (`Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`, its
        `MCP-Protocol-Version`) never cross; its `Authorization` and custom headers do.
        """
        head: list[tuple[str, str]] = [("Accept", "text/event-stream")] if stream else [_JSON, _ACCEPT]
        head.append((PROTOCOL_VERSION, self.version))
        if self.session_id is not None:
            head.append((SESSION_ID, self.session_id))
        return (*head, *relayed_client_headers(client))

    def delete_headers(self) -> tuple[tuple[str, str], ...]:
        """Headers of the DELETE that ends the session upstream (the opener's credentials)."""
        head = [(PROTOCOL_VERSION, self.version)]
        if self.session_id is not None:
            head.append((SESSION_ID, self.session_id))
        return (*head, *relayed_client_headers(self.credentials))

    def begin(self, exchange: str, client: tuple[tuple[str, str], ...]) -> None:
        """The handshake starts for the request on `exchange`, with that client's credentials."""
        self.state = "initializing"
        self.session_id = None
        self.exchange = exchange
        self.credentials = client

    def mark_ready(self) -> list[tuple[WaiterKind, str]]:
        """The handshake is complete; hand back everyone who waited for it."""
        self.state = "ready"
        waiting, self.waiting = self.waiting, []
        return waiting

    def failed(self) -> list[tuple[WaiterKind, str]]:
        """The handshake failed; hand back everyone who waited (they get an error)."""
        self.state = "idle"
        self.session_id = None
        waiting, self.waiting = self.waiting, []
        return waiting

    def lost(self) -> None:
        """The upstream forgot the session (404): a new generation begins with the next handshake."""
        self.generation += 1
        self.state = "idle"
        self.session_id = None
        self.tools = ToolHeaders()  # a re-opened session may list other tools

    def describe(self) -> dict[str, Any]:
        """The admin-facing facts of the session; never its id, never a credential."""
        info = self.init.get("serverInfo") if self.init else None
        return {
            "session": self.name,
            "state": self.state,
            "principal": self.principal[:16],
            "connection": self.connection or None,
            "capabilities": self.label,
            "version": self.version if self.init is not None else None,
            "server": info.get("name") if isinstance(info, dict) else None,
            "generation": self.generation,
            "users": len(self.users),
            "upstream_session": self.session_id is not None,
        }


@dataclass
class SessionPool:
    """The bridge's upstream sessions by key, least recently used first, with the bound they keep."""

    max_sessions: int
    links: OrderedDict[SessionKey, UpstreamLink] = field(default_factory=OrderedDict)
    by_name: dict[str, UpstreamLink] = field(default_factory=dict)
    orphans: set[str] = field(default_factory=set)
    """Names of the sessions whose client connection closed, kept until they are closed."""

    def __len__(self) -> int:
        return len(self.links)

    def __iter__(self) -> Iterator[UpstreamLink]:
        return iter(list(self.links.values()))

    def __repr__(self) -> str:
        return f"SessionPool({len(self)}/{self.max_sessions}: {', '.join(map(repr, self.links.values()))})"

    def get(self, key: SessionKey) -> UpstreamLink | None:
        """The session serving `key`, if there is one."""
        return self.links.get(key)

    def named(self, name: str) -> UpstreamLink | None:
        """The session called `name`, if it still exists."""
        return self.by_name.get(name)

    @property
    def full(self) -> bool:
        """True when a new session would pass `max_sessions`."""
        return len(self.links) >= self.max_sessions

    def idlest(self) -> UpstreamLink | None:
        """The least recently used session nobody uses (the one to evict), if any."""
        return next((link for link in self.links.values() if not link.users), None)

    def add(self, link: UpstreamLink) -> None:
        """Keep a new session (most recently used)."""
        self.links[link.key] = link
        self.by_name[link.name] = link

    def remove(self, link: UpstreamLink) -> bool:
        """Forget a session; False when it was already gone."""
        if self.links.get(link.key) is not link:
            return False
        del self.links[link.key]
        del self.by_name[link.name]
        self.orphans.discard(link.name)
        return True

    def use(self, link: UpstreamLink, user: str) -> None:
        """`user` starts using `link`; it becomes the most recently used."""
        self.links.move_to_end(link.key)
        link.users.add(user)
        link.used = True

    def release(self, name: str, user: str) -> None:
        """`user` is done with the session `name` (its going counts as a use, for idle expiry)."""
        link = self.named(name) if name else None
        if link is None or user not in link.users:
            return
        link.users.discard(user)
        link.used = True
