"""Requests waiting for the client to resume their stream: which wait, and when a wait is over.

A request whose response stream closed after an SSE event id, unanswered, may still get its answer:
the client reconnects with GET + `Last-Event-ID` and the server replays the rest. That holds when the
server dropped the stream, and for a legacy client also when the stream was cut on the client's side
(it left, or a `cut_after` fault cut it); a 2026-07-28 client's close is its cancel and never waits.
A request the client cancelled never waits either: nothing will answer it.

A wait ends when the client resumes (the resumed stream carries the request again), cancels, deletes
its session (the DELETE is answered below 400) or the server says the session is gone (HTTP 404), or
when an observation comes, or the proxy's sweep runs, more than `RESUME_WINDOW` seconds after the cut,
so nothing waits for ever. The table remembers the sessions that ended, so a stream the server closes
because of the DELETE, after it was answered, waits for nothing either. The chain builder and the
metrics' operation counter keep one table each, with the same rules, and the round-trip tally keeps
the ended sessions (`EndedSessions`) by the same rule, so a chain, the counters and a log line
agree. No I/O, no clock (times are the observations'), no logging.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from proxy.flows.exchanges import BoundedMap
from proxy.wire.jsonrpc import RequestId

RESUME_WINDOW: Final = 60.0
"""Seconds a request whose stream was cut waits for the client to resume it (SDKs retry within a few
seconds; a client that has not come back by then will not)."""

CLIENT_CUTS: Final = frozenset({"client_disconnected", "cut_by_fault"})
"""Cuts a legacy client may resume from: it left the stream, or the proxy's `cut_after` fault cut it."""

NEVER_RESUMED: Final = (
    f"the client did not resume its stream (GET with Last-Event-ID) within {RESUME_WINDOW:.0f} s"
)
"""The note on a request whose wait for a resume ran out."""

SESSION_ENDED: Final = "the client did not resume its stream before its session ended"
"""The note on a request whose session ended while it waited for a resume."""

ID_REUSED: Final = "the client did not resume its stream: a later request of its session took the same id"
"""The note on a request whose wait a later request with its id replaced (no resume can reach it)."""

SESSION_GONE_STATUS: Final = 404
"""The status a server answers a request of a session it no longer has."""

ENDED_SESSIONS_KEPT: Final = 1000
"""Ended sessions a table remembers: a stream that ends with its session closes within moments of the
DELETE's answer, so only the latest ended sessions matter."""

T = TypeVar("T")


class EndedSessions:
    """The sessions known to be over (`ends_session`), the latest `ENDED_SESSIONS_KEPT`: a request of
    one cut after it ended waits for no resume. The chain builder, the metrics and the round-trip
    tally each keep one, with this one rule, so a chain, the counters and a log line agree."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        self._kept: BoundedMap = BoundedMap(ENDED_SESSIONS_KEPT)

    def end(self, session: str) -> None:
        """Remember that `session` is over."""
        self._kept[session] = None

    def answered(self, session: str | None, deletes: bool, status: int) -> bool:
        """A response head with `status` to a request of `session` (a DELETE of it: `deletes`): whether
        it ends the session (`ends_session`), which is then remembered."""
        if session is None or not ends_session(deletes, status):
            return False
        self.end(session)
        return True

    def __contains__(self, session: object) -> bool:
        return session is not None and session in self._kept


def ends_session(deletes: bool, status: int) -> bool:
    """Whether a response head with `status` says its request's session is over: the server no longer
    has it (HTTP 404), or it took the client's DELETE of it (`deletes`; one it refuses ends nothing)."""
    return status == SESSION_GONE_STATUS or (deletes and status < 400)


def awaiting_resume(outcome: str | None, last_sse_id: str | None) -> str:
    """The note on a request that waits for its client to resume its stream: why the stream ended, and
    for how long the chain stays open."""
    ended = f"was cut ({outcome})" if outcome is not None else "was closed by the server"
    return (
        f"its stream {ended} after event {last_sse_id!r} before the answer: waiting up to "
        f"{RESUME_WINDOW:.0f} s for the client to resume it (GET with Last-Event-ID)"
    )


def resume_unanswered(last_event_id: str, outcome: str | None) -> str:
    """The note on a request whose resumed stream ended without its answer, and will not be resumed
    again: what the resume brought, after the note that it was resumed."""
    ended = f"was cut ({outcome})" if outcome is not None else "was closed by the server"
    return f"the stream resumed with Last-Event-ID {last_event_id} {ended} without the answer"


def awaits_resume(outcome: str | None, client_era: str, passthrough: bool, last_sse_id: str | None) -> bool:
    """Whether an unanswered request whose exchange closed with `outcome` may yet be answered on a
    resumed stream (the caller rules out a failed response and a cancelled request)."""
    if last_sse_id is None:
        return False
    if outcome is None:
        return True
    # A bridge that plays the server drops the call when its client leaves: nothing is left to resume.
    return outcome in CLIENT_CUTS and client_era != "modern" and passthrough


@dataclass(slots=True)
class Wait(Generic[T]):
    """One request waiting for a resume: what it belongs to, since when, and how its stream ended."""

    session: str | None
    ident: RequestId
    target: T
    since: float
    outcome: str | None


class ResumeWaits(Generic[T]):
    """The requests waiting for a resume, oldest first, keyed by (session, JSON-RPC id).

    The same table, with `LATE_CANCEL_S` as its `window`, holds the requests waiting for their
    client's cancel (`awaits_cancel`): those end only by a cancel or when the window runs out.
    """

    def __init__(self, window: float = RESUME_WINDOW) -> None:
        self.window = window
        """Seconds a wait lasts at most."""
        self.waits: BoundedMap = BoundedMap()
        """(session, id) -> Wait, in the order the waits began (so the oldest is found first)."""
        self.ended_sessions = EndedSessions()
        """Sessions known to be over: a stream of theirs cut later waits for no resume."""

    def wait(
        self, session: str | None, ident: RequestId, target: T, since: float, outcome: str | None
    ) -> Wait[T] | None:
        """Start (or restart, after a resumed stream was cut again) a request's wait; the wait of
        another request it replaces (a later call of the session reused the id, so a resume can no
        longer reach the earlier one), which the caller ends."""
        key = (session, ident)
        earlier = self.waits.pop(key, None)
        self.waits[key] = Wait(session, ident, target, since, outcome)
        return earlier if earlier is not None and earlier.target is not target else None

    def take(self, session: str | None, ident: RequestId) -> Wait[T] | None:
        """End a request's wait because it was resumed or cancelled; None when it was not waiting."""
        return self.waits.pop((session, ident), None) if self.waits else None

    def end_session(self, session: str | None) -> list[tuple[Wait[T], str]]:
        """Remember that `session` is over (`ends_session`); its waits, each with the note that says
        why, no longer waited on."""
        if session is None:
            return []
        self.ended_sessions.end(session)
        waits = self.waits
        return [(waits.pop(key), SESSION_ENDED) for key in [k for k in waits if k[0] == session]]

    def session_over(self, session: str | None) -> bool:
        """Whether `session` is known to be over: a request of it cut now waits for no resume."""
        return session in self.ended_sessions

    def ran_out(self, now: float) -> list[tuple[Wait[T], str]]:
        """The waits that began more than `window` before `now`, each with its note, no longer
        waited on. Only the oldest wait is looked at when none has run out."""
        waits = self.waits
        ended: list[tuple[Wait[T], str]] = []
        window = self.window
        while waits:
            key, first = next(iter(waits.items()))
            if now - first.since <= window:
                break
            del waits[key]
            ended.append((first, NEVER_RESUMED))
        return ended
