"""What the sink dropped unbuilt, as the chain builder must know it so that what is left is filed true.

While nobody reads chains, the sink queues observations and, past its bounds, drops the oldest of
finished exchanges and legs (`proxy.flows.sink`). It drops them entry by entry, oldest first, so an
exchange or a leg may lose its beginning and keep its end, and one client operation spread over
several exchanges or legs (a call and the POST that answered the server's question on its stream, a
bridged call and the legs that answered it) may keep some of them. Built as if nothing were missing,
what is left would be filed as something it is not: the client's answer as a chain of its own,
noted as a response to a request the proxy never saw; a bridge's question as its session stream's.

So the sink tells the builder each batch it drops (at drop time, which is rare: nothing of this runs
on the traffic's path), and the builder leaves out whatever belongs to what was dropped: the rest of
a dropped exchange or leg, an answer to a question asked on one, a cancel of a request made on one, a
leg linked to or joining a dropped leg. The tables are bounded; plain bookkeeping, no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.flows.exchanges import BoundedMap
from proxy.flows.observations import KEY_FIELDS, ExchangeOpened, MessageSeen, Observation, key_of
from proxy.wire.jsonrpc import Kind, Message, RequestId


class LostHistory:
    """The exchanges, legs and requests whose observations the sink dropped before they were built."""

    __slots__ = ("exchanges", "keys", "requests")

    def __init__(self) -> None:
        self.keys: BoundedMap = BoundedMap()
        """Exchange or leg id -> the session of a dropped exchange (None for a leg, or none said):
        whatever of it is built later is left out."""
        self.requests: BoundedMap = BoundedMap()
        """(session, id) of requests made on a dropped exchange, either way: a client's answer to
        the server's question, or its cancel of its own request, joins nothing."""
        self.exchanges = 0
        """Client exchanges whose opening was dropped (how many operations a gap took, about)."""

    def __bool__(self) -> bool:
        return bool(self.keys)

    def lose(self, batch: Sequence[Observation]) -> None:
        """Remember what a dropped batch belonged to, and the requests it carried."""
        for obs in batch:
            kind = type(obs)
            if kind is ExchangeOpened:
                self.keys[obs.exchange] = obs.session  # type: ignore[union-attr]
                self.exchanges += 1
            elif kind is MessageSeen:
                self.message(obs.exchange, obs.msg)  # type: ignore[union-attr]
            elif kind in KEY_FIELDS and KEY_FIELDS[kind] == "leg":
                self.keys[key_of(obs)] = None

    def message(self, exchange: str, msg: Message) -> None:
        """A message of a dropped exchange (dropped, or left of it and built later): a request it
        carried can be answered or cancelled on another exchange, which joins nothing then."""
        session = self.keys.get(exchange)
        if exchange not in self.keys:
            self.keys[exchange] = None
        if msg.kind is Kind.REQUEST and msg.id is not None:
            self.requests[(session, msg.id)] = None

    def lost_request(self, session: str | None, ident: object) -> bool:
        """Whether a request of `session` with this id was made on a dropped exchange (forgotten once
        asked for: one answer or one cancel names it)."""
        if not self.requests or not isinstance(ident, str | int):
            return False
        key: tuple[str | None, RequestId] = (session, ident)
        if key in self.requests:
            del self.requests[key]
            return True
        return False

    def leg(self, leg: str, related: str | None = None, exchange: str | None = None) -> bool:
        """Whether a leg's message belongs to what was dropped: the leg itself, the leg it is linked
        to or joins (`related`), or the client exchange it serves (then the leg is lost too)."""
        keys = self.keys
        if leg in keys:
            return True
        if (related is not None and related in keys) or (exchange is not None and exchange in keys):
            keys[leg] = None
            return True
        return False


def dropped_span(batches: Sequence[Sequence[Observation]]) -> tuple[float, float]:
    """When the first and the last of the dropped observations were made."""
    began = min(batch[0].t for batch in batches)
    ended = max(batch[-1].t for batch in batches)
    return began, ended


class DroppedRun:
    """Calls the sink left out within a short time (the rate bound on unwatched history), told to the
    builder only by their counts and times: nothing of them is held, and nothing refers to them."""

    __slots__ = ("began", "ended", "exchanges", "observations", "taken")

    def __init__(self, t: float) -> None:
        self.began = self.ended = t
        self.exchanges = 0
        self.observations = 0
        """Observations of those exchanges."""
        self.taken = False
        """Whether the run was told to the builder or dropped (a call that ends later counts elsewhere)."""
