"""A bridge's session GET streams: which legs are streams, and the chain of their own some of them get.

The modern-client -> legacy-server bridge keeps a GET stream open per upstream session. What the
server sends there names no request: a question or a log message given to a call joins that call's
chain (`joins`). The rest (the server asking between calls or while no call can take it, a log message
no call takes, the stream's own end) is no call's, whichever exchange happened to be open when it
came: the exchange that opened the session is only the one the stream was opened for. So the stream
gets a chain of its own, `GET stream` in the bridge's mode, as a client's GET stream has in
pass-through; the bridge's answer to a question there is linked to the stream's leg and joins it too.
The chain ends when the stream's leg closes. Its transports are those its `leg_opened` names (the
client's of the exchange it was opened for, the bridge's upstream's); a capture before 1.14 names
none, and its stream chains read as `http -> http`.

A capture before format 1.7 does not say which legs are GET streams (no `leg_opened`, channel `sse`):
there a leg whose first message unbound to any chain came from the server is one, since every other
leg begins with the proxy's own message, and such a message that comes while the exchange its leg
names is open joins that exchange's chain, as any leg's first message does. Plain bookkeeping: no
I/O, no clock.
"""

from __future__ import annotations

from proxy.flows.events import Channel, Direction, Mode
from proxy.flows.exchanges import BoundedMap
from proxy.flows.observations import LegOpened

STREAM_METHOD = "GET stream"
"""The method of a stream's own chain (as a client's GET stream's chain is named)."""


class StreamLegs:
    """Knows a bridge's GET-stream legs, and the stream chains it opened for them."""

    def __init__(self) -> None:
        self._opened: BoundedMap = BoundedMap()
        """GET leg -> (its bridge's mode, when its request went out, its client's and its upstream's
        transports), from its `leg_opened`."""
        self._own: BoundedMap = BoundedMap()
        """Leg -> the id of the chain of its own, until it closes."""
        self._unbound: BoundedMap = BoundedMap()
        """Legs that began with the proxy's own message joining no chain: no stream, nothing to join."""

    def opened(self, obs: LegOpened) -> None:
        """A bridge sent a bodiless leg: a GET is a stream whatever it carries."""
        if obs.http_method == "GET":
            self._opened[obs.leg] = (obs.mode, obs.t, (obs.client_transport, obs.upstream_transport))

    def declared(self, leg: str, channel: Channel) -> bool:
        """Whether the capture says `leg` is a GET stream (its `leg_opened` GET, or a message on it
        written `get_sse`): then a message on it joins a call only when it says so (`joins`)."""
        return leg in self._opened or channel is Channel.GET_SSE

    def is_stream(self, leg: str, direction: Direction, channel: Channel) -> bool:
        """Whether a message that joined no chain is on a GET stream (its leg may get a chain)."""
        if self.declared(leg, channel):
            return True
        if direction is Direction.TO_SERVER:
            self._unbound[leg] = True
            return False
        return leg not in self._unbound

    def origin(self, leg: str) -> tuple[Mode, float | None, tuple[str, str]]:
        """The stream's bridge mode, when it was opened, and its (client, upstream) transports (only GET
        legs open with no message, and only the modern-client -> legacy-server bridge sends them, so
        that is the mode when none was said; the transports are then the usual `http`)."""
        mode, at, transports = self._opened.get(leg, (Mode.MRTR_TO_LEGACY, None, ("http", "http")))
        return mode, at, transports

    def own(self, leg: str, chain_id: str) -> None:
        """`leg` has a chain of its own now."""
        self._own[leg] = chain_id

    def closed(self, leg: str) -> str | None:
        """`leg` ended: forget it; the id of its own chain, which ends with it, if it had one."""
        self._opened.pop(leg, None)
        self._unbound.pop(leg, None)
        chain_id: str | None = self._own.pop(leg, None)
        return chain_id
