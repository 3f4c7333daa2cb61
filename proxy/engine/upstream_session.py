"""The MRTR->legacy bridge's own legacy session with the upstream: handshake, headers, loss.

Theory of operation. A 2026-07-28 client never says `initialize`, but a 2025-era server will not
serve anything before it. So the bridge opens one session itself, the first time a client request
needs the upstream: `initialize` (as a 2025-11-25 client declaring every input kind the bridge can
relay, because legacy capabilities are fixed per session while modern ones arrive per request),
then `notifications/initialized`; requests that arrive meanwhile wait in `waiting`. Only when the
upstream has accepted the notification (its 202) are they released, because SDK servers refuse
requests that overtake it.

Every later upstream request carries the session id and the negotiated version. A 404 on a request
that carried the session id means the upstream forgot the session: `lost()` bumps the generation,
which marks everything parked on the old session as dead, and the next request re-initializes.

Decisions: one shared session with the union of capabilities plus a per-request gate (a session
pool keyed by principal and capabilities would let a legacy server tailor its tool lists per
caller; not done). `sampling.tools` is declared so tool-using sampling can be relayed to clients
that declare it; `sampling.context` (deprecated) and `roots.listChanged` (no 2026 client can send
that notification) are not. `logging/setLevel` is never sent: it is session-wide, so the bridge
filters `notifications/message` per request by the level in that request's `_meta` instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from proxy import __version__
from proxy.engine.modern_request import relayed_client_headers
from proxy.framing.http import header
from proxy.wire.headers import PROTOCOL_VERSION, SESSION_ID
from proxy.wire.jsonrpc import Kind, Message, notification, request
from proxy.wire.versions import LATEST_LEGACY

CLIENT_INFO: Final[dict[str, str]] = {"name": "mcp-debug-proxy", "version": __version__}
"""How the bridge introduces itself to the legacy upstream."""

UNION_CAPABILITIES: Final[dict[str, Any]] = {
    "elicitation": {"form": {}, "url": {}},
    "sampling": {"tools": {}},
    "roots": {},
}
"""Every input kind a 2026 client might be able to answer; each request is gated on its own."""

_JSON: Final = ("Content-Type", "application/json")
_ACCEPT: Final = ("Accept", "application/json, text/event-stream")

LinkState = Literal["idle", "initializing", "notifying", "ready"]
WaiterKind = Literal["call", "discover", "listen"]


@dataclass
class UpstreamLink:
    """The one legacy session: its state, identity, the generation counter and who waits for it."""

    state: LinkState = "idle"
    session_id: str | None = None
    version: str = LATEST_LEGACY
    init: dict[str, Any] | None = None
    generation: int = 0
    waiting: list[tuple[WaiterKind, str]] = field(default_factory=list)
    exchange: str = ""
    credentials: tuple[tuple[str, str], ...] = ()

    def __repr__(self) -> str:
        held = "held" if self.session_id is not None else "none"
        return (
            f"UpstreamLink({self.state}, version={self.version}, session={held}, "
            f"generation={self.generation}, waiting={len(self.waiting)})"
        )

    @property
    def ready(self) -> bool:
        """True once requests may be sent."""
        return self.state == "ready"

    def initialize_message(self, leg: str) -> dict[str, Any]:
        """The `initialize` request (its JSON-RPC id is the leg id)."""
        params = {
            "protocolVersion": LATEST_LEGACY,
            "capabilities": UNION_CAPABILITIES,
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
        """The handshake failed; hand back everyone who waited (they get an error), retry next time."""
        self.state = "idle"
        self.session_id = None
        waiting, self.waiting = self.waiting, []
        return waiting

    def lost(self) -> None:
        """The upstream forgot the session (404): a new generation begins with the next handshake."""
        self.generation += 1
        self.state = "idle"
        self.session_id = None
