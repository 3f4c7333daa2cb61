"""Which channel an HTTP request toward a channel upstream goes to.

A legacy stdio server has one session per process, and a 2024-11-05 HTTP+SSE server one per GET
stream, so a legacy client's `initialize` opens a channel of its own and every request naming that
session goes to it. A request naming a session that is gone gets 404, as a legacy server answers,
which tells the client to initialize again (on a fresh channel). Requests without a session (a
2026-07-28 client is stateless, and so are the era probe's) share one channel. The number of
session channels is bounded: each may be a process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from proxy.engine.channel.core import SESSION_NOT_FOUND
from proxy.wire import errors
from proxy.wire.jsonrpc import Kind, RequestId, dumps, error_response, parse_body


@dataclass(frozen=True, slots=True)
class Shared:
    """The channel sessionless requests share."""


SHARED = Shared()


@dataclass(frozen=True, slots=True)
class ToSession:
    """The channel of a live session."""

    session: str


@dataclass(frozen=True, slots=True)
class NewSession:
    """A new channel, for a session of this id (the `initialize` that asks for it goes there)."""

    session: str


@dataclass(frozen=True, slots=True)
class Refused:
    """Answered here, on no channel: `status` and a JSON-RPC error body."""

    status: int
    body: bytes


Placement = Shared | ToSession | NewSession | Refused


class ChannelSessions:
    """The live sessions (one channel each) and where each request goes; `new_id` mints session ids."""

    def __init__(self, new_id: Callable[[], str], max_sessions: int, setting: str) -> None:
        self._new_id = new_id
        self.max_sessions = max_sessions
        self.setting = setting
        """The setting that bounds sessions, named when one is refused."""
        self.live: set[str] = set()

    def place(self, method: str, session: str | None, body: bytes) -> Placement:
        """Where one request goes (`session` is its `Mcp-Session-Id`, None when it has none)."""
        if session is not None:
            if session in self.live:
                return ToSession(session)
            return Refused(
                404, dumps(error_response(_first_id(body), SESSION_NOT_FOUND, "Session not found"))
            )
        if method != "POST" or b'"initialize"' not in body:
            return SHARED
        first = parse_body(body)
        msg = first.first
        if first.batch or msg is None or msg.kind is not Kind.REQUEST or msg.method != "initialize":
            return SHARED
        if len(self.live) >= self.max_sessions:
            text = (
                f"the proxy already runs {self.max_sessions} upstream sessions ({self.setting}); "
                "end one (DELETE) or raise the setting"
            )
            return Refused(503, dumps(error_response(msg.id, errors.UPSTREAM_UNAVAILABLE, text)))
        session = self._new_id()
        self.live.add(session)
        return NewSession(session)

    def ended(self, session: str) -> None:
        """The session's channel closed: its requests get 404 from now on."""
        self.live.discard(session)


def _first_id(body: bytes) -> RequestId | None:
    """The id of the request a refusal answers; None for a notification or a response (no request)."""
    msg = parse_body(body).first if body else None
    return msg.id if msg is not None and msg.kind is Kind.REQUEST else None
