"""The rule operations an in-process TUI calls (`mcp-proxy --upstream URL --tui`): the admin API's,
without HTTP.

The TUI may not import the transport, so `proxy.cli_tui` hands it this object (it fits
`ui.desk_local.LocalOps`): fault rules through the proxy's `FaultControl`, intercept rules and held
messages through its `InterceptControl`, JSON in and JSON out in the admin API's shapes. A refusal is
a ValueError (LookupError for an unknown id) carrying the reason the admin API would give.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from proxy.transport.intercept_desk import InterceptError

if TYPE_CHECKING:
    from proxy.runtime import Proxy


class DeskOps:
    """Fault and intercept operations on one running proxy."""

    def __init__(self, proxy: Proxy) -> None:
        self.faults = proxy.faults
        self.intercepts = proxy.intercepts

    # -- fault rules --------------------------------------------------------------------------

    def fault_listing(self) -> list[dict[str, Any]]:
        """The fault rules in force, as `GET /api/faults` lists them."""
        return self.faults.gate.listing()

    def fault_add(self, rule: str) -> dict[str, Any]:
        """Put one fault rule in force; ValueError with the reason the admin API gives."""
        (added,) = self.faults.add_texts([rule])
        return added

    def fault_remove(self, rule_id: str) -> bool:
        """Take a fault rule out of force; False when none has that id."""
        return self.faults.remove(rule_id)

    # -- intercepts ---------------------------------------------------------------------------

    def intercept_listing(self) -> dict[str, Any]:
        """The intercept rules and held messages, as `GET /api/intercepts` lists them."""
        return self.intercepts.listing()

    def intercept_add(self, rule: str, hold_for: str | None) -> dict[str, Any]:
        """Put an intercept rule in force; ValueError with the reason."""
        with _as_refusal():
            return self.intercepts.add(rule, hold_for)

    def intercept_remove(self, rule_id: str) -> bool:
        """Take an intercept rule out of force (what it held goes on unchanged)."""
        try:
            self.intercepts.delete(rule_id)
        except InterceptError:
            return False
        return True

    def intercept_decide(self, held_id: str, decision: dict[str, Any]) -> None:
        """Release a held message as `POST /api/intercepts/held/{id}` would."""
        with _as_refusal():
            self.intercepts.decide(held_id, decision)

    async def intercept_wait(self, after: str | None, seconds: float) -> None:
        """Return when a message newer than `after` is held, or after `seconds`."""
        await self.intercepts.wait(after, seconds)


@contextmanager
def _as_refusal() -> Iterator[None]:
    """The admin API's errors as the exceptions `ui.desk_local` reads: 404 LookupError, else ValueError."""
    try:
        yield
    except InterceptError as exc:
        if exc.status == 404:
            raise LookupError(exc.message) from None
        raise ValueError(exc.message) from None
