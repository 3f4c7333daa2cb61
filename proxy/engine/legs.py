"""One record per open upstream leg, the same for both bridges.

A leg is one HTTP request a bridge made upstream; its engine keeps a record of each until the leg
answers, ends or is closed: why it was opened (`purpose`, each bridge has its own list), for whom
(`owner`: a call, an exchange or a session), what its head said, and, when it carries a request,
what resuming its cut stream needs (`proxy.engine.resume`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from proxy.engine.origins import UNNAMED, Caller
from proxy.engine.resume import Resumable

P = TypeVar("P", bound=str)


@dataclass(slots=True)
class Leg(Generic[P]):
    """One open upstream leg: why, for whom, and what its head said."""

    purpose: P
    owner: str
    what: str = ""
    """A word for logs (which answer, which cancel)."""
    status: int | None = None
    content_type: str = ""
    resumable: Resumable | None = None
    """Set when the leg carries a request: what resuming its cut stream needs."""
    caller: Caller = UNNAMED
    """Who the leg spoke for upstream (the client's `Origin` and principal), which its success vouches for."""
    challenge: tuple[tuple[str, str], ...] = ()
    """The `WWW-Authenticate` headers of a refusing head (401, 403): the client gets them with the
    refusal, so an OAuth client learns where to log in (or which scope it lacks)."""
    body: bytes = b""
    """What the upstream's body said when it held no JSON-RPC message (`LegEnded.body`)."""
    said: str | None = None
    """The upstream's own words when it answered with an error naming no request (a 400 whose body
    is `{"error": ..., "id": null}`): what a fault on the leg quotes, since no answer carries them."""

    @property
    def origin(self) -> str | None:
        """The client `Origin` the leg carried upstream (None: none)."""
        return self.caller.origin
