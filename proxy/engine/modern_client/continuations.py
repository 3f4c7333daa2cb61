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
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple


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
