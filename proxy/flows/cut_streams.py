"""Streams cut resumable, as the round-trip log knows them: where a resume may begin, and a follow-up
line when none can come any more.

An exchange whose stream was cut after an SSE event id before its answers is logged `end: resumable`:
its client may resume it with GET + `Last-Event-ID`. Its line is written at the cut, so it cannot
say how the wait ends. When the wait ends without a resume (the session ended: its DELETE answered
below 400, or a 404; or `RESUME_WINDOW` ran out) the call is over unanswered, as its chain and the
errors counter say, and a `stream_not_resumed` line says so too, naming the exchange and its
requests: no line is left promising a resume that cannot come. A resume the server takes (a 2xx
head to the GET) ends the wait, the GET's own line carrying the requests on, and so does the
client's cancel of them; a later request of the session with the same id ends it too, unresumed.
Pure, no clock (times are the observations').
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from proxy.flows.exchanges import BoundedMap
from proxy.flows.resumes import ID_REUSED, NEVER_RESUMED, RESUME_WINDOW, SESSION_ENDED
from proxy.wire.jsonrpc import RequestId
from proxy.wire.values import value

RESUMABLE_BOUND: Final = 10_000
"""Event ids of streams cut after an event id, unanswered, remembered until a GET resumes from one
(oldest forgotten first): that GET's line names the requests it carries on."""

CUTS_BOUND: Final = 1_000
"""Cut exchanges waiting for a resume whose follow-up line can still come (oldest forgotten first)."""

NOT_RESUMED: Final = "not resumed"
"""The `trouble` of a `stream_not_resumed` line."""


@value
class NotResumed:
    """The follow-up line of an exchange logged `end: resumable` whose stream can no longer be resumed."""

    exchange: str
    session: str | None
    """Redacted, as the round-trip line shows it."""
    carried: str
    ids: tuple[RequestId, ...]
    """The requests its stream left unanswered."""
    mode: str
    note: str
    """Why no resume can come (`the client did not resume its stream before its session ended`)."""

    def log_fields(self) -> dict[str, Any]:
        """The fields of its log line (already redacted)."""
        return {
            "mode": self.mode,
            "exchange": self.exchange,
            "session": self.session,
            "carried": self.carried,
            "ids": list(self.ids),
            "trouble": NOT_RESUMED,
            "note": self.note,
        }


@dataclass(slots=True)
class _Cut:
    exchange: str
    session: str | None
    ids: tuple[RequestId, ...]
    at: float
    resumed: bool = False
    over: str | None = None
    """Why no resume can come any more, known before its line was written (a later request took its id)."""
    shown: tuple[str, str] = ("", "")
    """What the exchange carried and its mode, once its line said `resumable`."""


class CutStreams:
    """The streams cut resumable, the event ids they may be resumed from, and those whose line said
    `resumable` and that wait for a resume still."""

    def __init__(self) -> None:
        self._from: BoundedMap = BoundedMap(RESUMABLE_BOUND)
        """(session, event id) -> the cut stream a GET with that `Last-Event-ID` resumes."""
        self._cut: BoundedMap = BoundedMap(CUTS_BOUND)
        """exchange -> its cut, from the cut until its line is written (held for a cancel, say)."""
        self._waiting: BoundedMap = BoundedMap(CUTS_BOUND)
        """exchange -> its cut, while the wait its line promised lasts, oldest first."""
        self.not_resumed: list[NotResumed] = []
        """Follow-up lines of waits that ended unresumed: whoever takes them logs them and empties it."""

    def cut(
        self, exchange: str, session: str | None, event_ids: list[str], ids: tuple[RequestId, ...], at: float
    ) -> None:
        """An exchange's stream was cut after `event_ids` with `ids` unanswered: a resume from any of
        those ids carries them on."""
        cut = _Cut(exchange, session, ids, at)
        for sse_id in event_ids:
            self._from[(session, sse_id)] = cut
        self._cut[exchange] = cut

    def logged_resumable(self, exchange: str, carried: str, mode: str) -> None:
        """The exchange's line said `resumable`: its wait is followed until a resume or its end."""
        cut = self._cut.pop(exchange, None)
        if cut is None or cut.resumed:
            return
        cut.shown = (carried, mode)
        if cut.over is not None:
            self._tell(cut, cut.over)
        else:
            self._waiting[exchange] = cut

    def resumed_ids(self, session: str | None, last_event_id: str) -> tuple[RequestId, ...] | None:
        """The requests a GET resuming from `last_event_id` carries on (None: no cut stream known)."""
        cut = self._from.get((session, last_event_id)) if self._from else None
        return None if cut is None else cut.ids

    def resumed(self, session: str | None, last_event_id: str) -> None:
        """The server took a resume from `last_event_id`: the cut's wait is over, the GET goes on."""
        cut = self._from.get((session, last_event_id)) if self._from else None
        if cut is not None:
            cut.resumed = True
            self._waiting.pop(cut.exchange, None)

    @property
    def waiting(self) -> bool:
        """Some stream was cut resumable and its wait may last."""
        return bool(self._waiting or self._cut)

    def cancelled(self, session: str | None, ident: RequestId) -> None:
        """The client cancelled request `ident`: nothing waits for its resume any more (a cut whose
        every request was cancelled is over, and no follow-up is owed: its chain ends cancelled)."""
        for cut in self._holding(session, ident):
            cut.ids = tuple(i for i in cut.ids if i != ident)
            if not cut.ids:
                cut.resumed = True
                self._waiting.pop(cut.exchange, None)

    def id_reused(self, session: str | None, ident: RequestId) -> None:
        """A later request of `session` took id `ident`: no resume can reach the earlier one."""
        for cut in self._holding(session, ident):
            cut.over = ID_REUSED
            if self._waiting.pop(cut.exchange, None) is not None:
                self._tell(cut, ID_REUSED)

    def _holding(self, session: str | None, ident: RequestId) -> list[_Cut]:
        """The cuts of `session` that left `ident` unanswered, their lines written or not."""
        cuts = [*self._cut.values(), *self._waiting.values()]
        return [cut for cut in cuts if cut.session == session and ident in cut.ids and not cut.resumed]

    def session_ended(self, session: str | None) -> None:
        """`session` is over: no stream of it can be resumed; each still waiting gets its follow-up."""
        if self._from:
            for key in [key for key in self._from if key[0] == session]:
                del self._from[key]
        if self._waiting:
            ended = [cut for cut in self._waiting.values() if cut.session == session]
            for cut in ended:
                del self._waiting[cut.exchange]
                self._tell(cut, SESSION_ENDED)

    def ran_out(self, now: float) -> None:
        """The waits that began more than `RESUME_WINDOW` before `now` are over, each told."""
        waiting = self._waiting
        while waiting:
            cut = next(iter(waiting.values()))
            if now - cut.at <= RESUME_WINDOW:
                return
            del waiting[cut.exchange]
            self._tell(cut, NEVER_RESUMED)

    def _tell(self, cut: _Cut, note: str) -> None:
        carried, mode = cut.shown
        self.not_resumed.append(NotResumed(cut.exchange, cut.session, carried, cut.ids, mode, note))
