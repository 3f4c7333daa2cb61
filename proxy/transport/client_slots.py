"""What one client address holds at once on the MCP listener, bounded per address: its open streams,
its HTTP+SSE sessions.

A stream (a GET stream, an HTTP+SSE stream, a 2026-07-28 `subscriptions/listen`) has no deadline: it
lasts as long as its client keeps it open. Global bounds alone (`max_client_connections`,
`max_sse_sessions`) would let one client take every slot for as long as it likes, and everyone else
would get 503. So each address gets a share; past it that address alone is refused 429 naming the
setting, the refusal logged at most once a second per address and setting (`also_unlogged` counting
the rest) and every one counted for `/metrics`.

A client is its address, as for `max_legacy_sessions_per_client`: a client cannot claim more slots by
inventing `Authorization` values, and clients behind one NAT, load balancer or mesh share the share.
"""

from __future__ import annotations

from collections import Counter
from typing import Final

from proxy.engine.flood_lines import FloodLine, FloodLines
from proxy.engine.gate.drain import RETRY_AFTER_S
from proxy.framing.classify import Rejection
from proxy.logs import get_logger
from proxy.wire import errors
from proxy.wire.jsonrpc import RequestId, error_response

TOO_MANY: Final = 429
"""The status past a client's share: this client asks too much, the proxy itself is not full."""


class ClientSlots:
    """The slots of one kind each client address holds, and the refusals past an address's share."""

    def __init__(self, setting: str, what: str, limit: int, floods: FloodLines) -> None:
        """`what` names the slots in the refusal's text (`streams`); `floods` is the table the
        proxy's other refusal lines are summed up in."""
        self.setting = setting
        self.what = what
        self.limit = limit
        self.floods = floods
        self.held: Counter[str] = Counter()
        self.refused = 0
        """Requests refused past an address's share, since the start (`/metrics`)."""
        self._lines: dict[str, FloodLine] = {}
        """Each refused address's own refusal line, so addresses refused in turn are each one line a
        second; kept while the address holds a slot (only such an address is ever refused)."""

    def take(self, peer: str) -> bool:
        """One more slot for this address if its share has room (False: answer with `refusal`)."""
        if self.held[peer] >= self.limit:
            return False
        self.held[peer] += 1
        return True

    def give_back(self, peer: str) -> None:
        """A slot `take` gave this address is free again (its stream ended)."""
        left = self.held[peer] - 1
        if left > 0:
            self.held[peer] = left
        else:
            del self.held[peer]
            self._lines.pop(peer, None)

    def refusal(self, peer: str, ident: RequestId | None, at: float) -> Rejection:
        """429 with `Retry-After` for a request past this address's share, naming the setting; the
        refusal is counted, and logged when a line is due (`at` is the caller's clock)."""
        self.refused += 1
        limit, setting = self.limit, self.setting
        line = self._lines.get(peer)
        if line is None:
            line = self._lines[peer] = FloodLine()
        also = line.due(at)
        if also is not None:
            get_logger().warning(
                "client_streams_refused",
                peer=peer,
                status=TOO_MANY,
                limit=limit,
                setting=setting,
                also_unlogged=also or None,
                hint=f"this address holds {limit} {self.what} open and asked for more; raise {setting} "
                "if many clients reach the proxy from one address (a NAT, a load balancer, a mesh)",
            )
        text = (
            f"this client address holds its limit of {limit} open {self.what} ({setting}); "
            "close one, or retry later"
        )
        body = error_response(ident, errors.UPSTREAM_UNAVAILABLE, text, {"limit": limit, "setting": setting})
        return Rejection(TOO_MANY, body, f"{self.what} per client", RETRY_AFTER_S)
