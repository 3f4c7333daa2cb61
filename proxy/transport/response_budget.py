"""The upstream response bytes the proxy holds at once, across every exchange: one global budget.

Pass-through streams a response and keeps only what it reads for the chains (a JSON body, or the SSE
event still arriving, up to `max_inspected_bytes`); a bridge holds each upstream message whole to
re-encode it (up to `max_bridged_message_bytes`). Those bounds are per exchange, so many big answers
at once would take memory without bound; this budget (`max_response_bytes_in_flight`) bounds them
together. Each holder takes a `Hold`, grows it as it holds more, and gives it back whole at its end,
a `with` block or a `release` that every ending path reaches, so no outcome leaks a share of it.
Past the budget, pass-through relays the rest unread (`not_inspected`, naming the setting), and a
bridge refuses the message with a JSON-RPC error naming it.

Small holdings (under `COUNTED_RESPONSE`) are not counted: the bound is there for the big ones, and
the connection cap bounds the rest, so an ordinary answer costs the traffic path nothing for it.
"""

from __future__ import annotations

import time
from collections import Counter
from types import TracebackType

from proxy.engine.flood_lines import FloodLines
from proxy.logs import get_logger
from proxy.transport.upstream_pool import UpstreamError, UpstreamResponse

RESPONSE_SETTING = "max_response_bytes_in_flight"
"""The setting that bounds the response bytes held across all exchanges, named wherever it refuses."""

DEFAULT_RESPONSE_BUDGET = 64 * 1024 * 1024
"""The default of `max_response_bytes_in_flight`: a quarter of the shipped sidecar's 256 MiB."""

OVER_BUDGET = "over_budget"
"""The fault kind of a bridged message the budget had no room for (`proxy.engine.faults` words it)."""

COUNTED_RESPONSE = 64 * 1024
"""Holdings at least this big count toward the budget; smaller ones are left to the connection cap."""


class ResponseBudget:
    """How many response bytes are held now, the most ever held, and the refusals past the limit."""

    __slots__ = ("floods", "held", "limit", "peak", "refused")

    def __init__(self, limit: int = DEFAULT_RESPONSE_BUDGET) -> None:
        self.limit = limit
        self.held = 0
        """Bytes counted now (the `mcp_proxy_response_bytes_in_flight` gauge)."""
        self.peak = 0
        """The most bytes ever counted at once: never above `limit`."""
        self.refused: Counter[str] = Counter()
        """Holdings refused for want of room, by what was done instead: `not_inspected`, `refused`."""
        self.floods = FloodLines()

    def hold(self) -> Hold:
        """A new, empty share of the budget for one holder."""
        return Hold(self)

    def take(self, size: int) -> bool:
        """Count `size` more bytes if the limit allows them (through a `Hold`, which gives them back)."""
        held = self.held + size
        if held > self.limit:
            return False
        self.held = held
        if held > self.peak:
            self.peak = held
        return True

    def give(self, size: int) -> None:
        """Count `size` bytes fewer (through a `Hold`)."""
        self.held -= size

    def no_room(self) -> str:
        """Why a holding found no room: the limit and its setting, named."""
        return (
            f"no room in {RESPONSE_SETTING} ({self.limit} bytes of responses held at once across all clients)"
        )

    def note_refusal(self, how: str, why: str) -> None:
        """Count a refusal, and warn of it at most once a second (`how`: what was done instead, the
        exchange's own line saying which it was)."""
        self.refused[how] += 1
        also = self.floods.due(how, time.monotonic())
        if also is None:
            return
        get_logger().warning(
            "response_budget_full",
            outcome=how,
            detail=why,
            held=self.held,
            limit=self.limit,
            also_unlogged=also or None,
            hint=f"raise {RESPONSE_SETTING} if the proxy has the memory for these responses",
        )


class Hold:
    """One holder's share of the budget: grown as it holds more, given back whole at its end."""

    __slots__ = ("budget", "size")

    def __init__(self, budget: ResponseBudget) -> None:
        self.budget = budget
        self.size = 0
        """Bytes of the budget this holder counts now."""

    def settle(self, held: int) -> bool:
        """Count `held` bytes for this holder now (below `COUNTED_RESPONSE`: none); False, counting
        nothing more, when the budget has no room for the growth."""
        want = held if held >= COUNTED_RESPONSE else 0
        size = self.size
        if want <= size:
            if want < size:
                self.budget.give(size - want)
                self.size = want
            return True
        if not self.budget.take(want - size):
            return False
        self.size = want
        return True

    def release(self) -> None:
        """Give back everything this holder counts (again: a no-op)."""
        size, self.size = self.size, 0
        if size:
            self.budget.give(size)

    def __enter__(self) -> Hold:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def refused_message(hold: Hold, what: str) -> UpstreamError:
    """The failure of a bridge's leg whose message found no room: the client's JSON-RPC error says
    `what` was refused and names the setting; counted, and warned of at most once a second."""
    budget = hold.budget
    why = f"{what} was refused: {budget.no_room()}"
    budget.note_refusal("refused", why)
    return UpstreamError(OVER_BUDGET, why)


async def read_held(resp: UpstreamResponse, limit: int, what: str, hold: Hold) -> bytearray:
    """A whole body of at most `limit` bytes (past it UpstreamError naming `what` and the limit),
    counted in `hold` as it arrives, by its declared length from the start when it has one; one the
    budget has no room for fails at once (`refused_message`), before it is read further."""
    declared = resp.content_length
    if declared is not None and hold.size < declared <= limit and not hold.settle(declared):
        raise refused_message(hold, f"an upstream message of {declared} bytes")
    body = bytearray()  # grown in place: a big body is never held twice, as joined parts would be
    async for chunk in resp.chunks():
        size = len(body) + len(chunk)
        if size > limit:
            raise UpstreamError("cut", f"{what} larger than {limit} bytes")
        if size > hold.size and not hold.settle(size):
            raise refused_message(hold, f"an upstream message of at least {size} bytes")
        body += chunk
    return body
