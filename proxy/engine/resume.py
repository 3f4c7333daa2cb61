"""When a cut upstream SSE stream is resumed: the rule, kept out of the transport.

A legacy (2025-11-25) server may close a request's SSE stream after an event id and expect the
client to come back with a GET carrying `Last-Event-ID` (the polling pattern); it may also say how
long to wait first (`retry`). The bridge that plays a legacy client resumes such a stream while the
request it waits on is unanswered, after the server's delay (capped), at most `MAX_RESUMES` times;
any other cut stream is a fault the client hears about. Pure functions over the leg's own record;
the transport only waits, reopens the GET and feeds what it reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.engine.commands import ResumeLeg

MAX_RESUMES = 5
"""Resumes of one leg before its cut is a fault: a server that cuts every stream is not polling."""

MAX_RESUME_WAIT_S = 5.0
"""Longest wait before a resume, whatever `retry` the server asked for (a stream is someone's call)."""

_BODY_HEADERS = frozenset({"content-type", "content-length", "last-event-id"})


@dataclass(slots=True)
class Resumable:
    """A leg that carries a request whose answer may come on a resumed stream."""

    request_id: Any
    headers: tuple[tuple[str, str], ...]
    answered: bool = False
    resumes: int = 0

    def saw(self, message_id: Any, is_response: bool) -> None:
        """A message arrived on the leg: the answer to its request ends any claim to resume."""
        if is_response and message_id == self.request_id:
            self.answered = True

    def resume(self, leg: str, last_event_id: str | None, retry_ms: int | None) -> ResumeLeg | None:
        """The order that resumes the cut stream, or None when the cut is final (and counts it)."""
        if self.answered or last_event_id is None or self.resumes >= MAX_RESUMES:
            return None
        self.resumes += 1
        delay = min((retry_ms or 0) / 1000, MAX_RESUME_WAIT_S)
        return ResumeLeg(leg, delay, last_event_id, resume_headers(self.headers, last_event_id))


def resume_headers(headers: tuple[tuple[str, str], ...], last_event_id: str) -> tuple[tuple[str, str], ...]:
    """The GET that resumes a stream: the same session and version headers, no body headers."""
    kept = tuple((k, v) for k, v in headers if k.lower() not in _BODY_HEADERS)
    return (*kept, ("Last-Event-ID", last_event_id))
