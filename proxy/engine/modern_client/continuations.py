"""The continuation table: which upstream calls are parked, for whom, within which bounds.

Theory of operation. A continuation is a live upstream call the MRTR->legacy bridge holds open
between rounds while the client gathers answers. It costs an open upstream connection and process
memory, and any client may ask for one, so the table is bounded three times: in total, per
principal (a hash of the caller's `Authorization`), so one caller cannot crowd out the others, and
per client address, since a principal is only what a request claims: a client that invents a fresh
`Authorization` for every call is still one address. A call takes
a slot when it first parks and keeps it across rounds (resuming does not free it, so a busy call
cannot lose its place); it gives the slot back when it ends in any way.

The table holds only the slot bookkeeping; the call itself lives in the bridge's call table. The
admin-facing description of a parked call is built by `state.describe`.

A parked call that ends before its client comes back (its upstream stream or session went, or the
client cancelled it) leaves an *ended* record (`EndedContinuations`): what its retry is told instead
of a generic "invalid requestState", which would send the client looking for a bug in its token.
A record lives no longer than the call's token is valid, is told once, and the records are bounded
in number (the oldest goes first).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, NamedTuple


class Slot(NamedTuple):
    """One taken slot: the call that holds it, and the principal and client address it counts against."""

    call: str
    principal: str
    client: str


class Refusal(NamedTuple):
    """Why a call cannot be parked (naming the bound and its setting), and the calls holding that bound."""

    why: str
    holders: tuple[str, ...]


@dataclass
class ContinuationTable:
    """continuation id -> slot, with a total, a per-principal and a per-client-address bound."""

    max_total: int
    max_per_principal: int
    max_per_client: int = 100
    _slots: dict[str, Slot] = field(default_factory=dict)
    _per_principal: Counter[str] = field(default_factory=Counter)
    _per_client: Counter[str] = field(default_factory=Counter)

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, continuation: object) -> bool:
        return continuation in self._slots

    def __repr__(self) -> str:
        return f"ContinuationTable({len(self)}/{self.max_total}, principals={len(self._per_principal)})"

    def refusal(self, principal: str, client: str = "") -> Refusal | None:
        """Why a new continuation for `principal` from `client` cannot be parked now, and the calls
        holding the bound that refuses it (None: there is room). The bounds are checked in one order
        (total, client address, principal): the first one full is the one named.

        `client` is the client's address; "" (unknown) is counted against no address.
        """
        slots = self._slots.values()
        if len(self._slots) >= self.max_total:
            why = f"the proxy already holds max_continuations={self.max_total} parked calls"
            return Refusal(why, tuple(slot.call for slot in slots))
        if client and self._per_client[client] >= self.max_per_client:
            why = (
                f"this client address already holds max_continuations_per_client={self.max_per_client} "
                "parked calls"
            )
            return Refusal(why, tuple(slot.call for slot in slots if slot.client == client))
        if self._per_principal[principal] >= self.max_per_principal:
            why = (
                f"this caller already holds max_continuations_per_principal={self.max_per_principal} "
                "parked calls"
            )
            return Refusal(why, tuple(slot.call for slot in slots if slot.principal == principal))
        return None

    def take(self, continuation: str, call: str, principal: str, client: str = "") -> None:
        """Give `call` a slot under `continuation` (the caller checked `refusal` first)."""
        self._slots[continuation] = Slot(call, principal, client)
        self._per_principal[principal] += 1
        if client:
            self._per_client[client] += 1

    def call_of(self, continuation: str) -> str | None:
        """The call parked under `continuation`, if it still exists."""
        slot = self._slots.get(continuation)
        return slot.call if slot is not None else None

    def release(self, continuation: str | None) -> None:
        """Free a slot (a no-op for an unknown or already freed one)."""
        slot = self._slots.pop(continuation, None) if continuation is not None else None
        if slot is None:
            return
        self._per_principal[slot.principal] -= 1
        if self._per_principal[slot.principal] <= 0:
            del self._per_principal[slot.principal]
        if slot.client:
            self._per_client[slot.client] -= 1
            if self._per_client[slot.client] <= 0:
                del self._per_client[slot.client]

    def ids(self) -> list[str]:
        """Every continuation id, oldest first."""
        return list(self._slots)

    def principals(self) -> int:
        """How many distinct principals hold slots (a table size for tests and metrics)."""
        return len(self._per_principal)

    def clients(self) -> int:
        """How many distinct client addresses hold slots."""
        return len(self._per_client)


class Ending(NamedTuple):
    """How a parked call ended, for its retry: the round its token is of, when that token expires
    (epoch seconds), and the error (code, words, `data`) and HTTP status the retry gets."""

    round: int
    expires: float
    code: int
    message: str
    status: int
    data: Any = None


@dataclass
class EndedContinuations:
    """continuation id -> how its parked call ended, at most `limit` records, each until its expiry."""

    limit: int
    _ended: dict[str, Ending] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self._ended)

    def __repr__(self) -> str:
        return f"EndedContinuations({len(self)}/{self.limit})"

    def record(self, continuation: str, ending: Ending, now: float) -> None:
        """Remember how `continuation` ended; expired records and, past `limit`, the oldest go."""
        self.prune(now)
        self._ended.pop(continuation, None)
        self._ended[continuation] = ending
        while len(self._ended) > self.limit:
            del self._ended[next(iter(self._ended))]

    def take(self, continuation: str, now: float) -> Ending | None:
        """How `continuation` ended, told once (None: it never parked here, or its record expired)."""
        self.prune(now)
        return self._ended.pop(continuation, None)

    def prune(self, now: float) -> None:
        """Drop the records whose token expired by `now` (0.0: the time is unknown, nothing is dropped)."""
        if now <= 0.0:
            return
        for continuation in [c for c, e in self._ended.items() if e.expires < now]:
            del self._ended[continuation]
