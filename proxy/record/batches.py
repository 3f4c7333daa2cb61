"""Which of one chain's requests the client sent inside a JSON-RPC batch, told from a capture's lines.

A batch's messages each open a chain of their own, so the chain a `--curl` copies holds one element
and nothing of the rest; a command that sends that element alone is no copy of what the server got.
The capture holds every message a client's body carried, in order, on its exchange: this listener
counts them while the exchange is open and keeps, for the exchanges that carried a message of the
one chain asked for, the batch when there were more than one. A batch of one (`[{...}]`) is
recorded as a lone message and is not told apart. Plain data, fed by the replayer: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from proxy.flows.events import Direction, FlowEvent, Side
from proxy.flows.observations import ExchangeClosed, ExchangeOpened, MessageSeen, Observation

MAX_NAMED: Final = 8
"""Members of one batch named (id and method); the rest are only counted."""


@dataclass(slots=True)
class Batch:
    """The messages one message body carried: how many, and the first few named (`#3 tools/list`)."""

    size: int = 0
    named: list[str] = field(default_factory=list)

    def add(self, msg_id: int | str | None, method: str | None) -> None:
        """One more message of the body."""
        self.size += 1
        if len(self.named) < MAX_NAMED:
            ident = f"#{msg_id} " if msg_id is not None else ""
            self.named.append(f"{ident}{method or 'response'}")

    def members(self) -> str:
        """Its messages, as a comment names them."""
        more = self.size - len(self.named)
        return ", ".join(self.named) + (f" and {more} more" if more > 0 else "")


class BatchesOf:
    """Listens to a replay (`ObservationReplayer.on_applied`) for the batches one chain's requests
    came in; `found` maps an exchange of that chain to its batch. Bounded by the exchanges open at
    one time, each holding at most `MAX_NAMED` names."""

    def __init__(self, chain_id: str) -> None:
        self._chain_id = chain_id
        self._open: dict[str, Batch] = {}
        self._mine: set[str] = set()
        """Open exchanges that carried a message of the chain asked for."""
        self.found: dict[str, Batch] = {}

    def applied(self, obs: Observation, _events: list[FlowEvent], chain: str | None) -> None:
        """Take one observation, with the chain the replayer filed its message in."""
        match obs:
            case ExchangeOpened():
                self._open[obs.exchange] = Batch()
            case MessageSeen(direction=Direction.TO_SERVER) if obs.side is not Side.UPSTREAM:
                batch = self._open.get(obs.exchange)
                if batch is not None:
                    batch.add(obs.msg.id, obs.msg.method)
                if chain == self._chain_id:
                    self._mine.add(obs.exchange)
            case ExchangeClosed():
                batch = self._open.pop(obs.exchange, None)
                if obs.exchange in self._mine:  # ids start again at a restart: take it once, now
                    self._mine.discard(obs.exchange)
                    if batch is not None and batch.size > 1:
                        self.found[obs.exchange] = batch
            case _:
                pass

    def finish(self) -> None:
        """The capture ended: an exchange of the chain still open then counts as it stands."""
        for exchange in self._mine:
            batch = self._open.get(exchange)
            if batch is not None and batch.size > 1:
                self.found[exchange] = batch
        self._mine.clear()
