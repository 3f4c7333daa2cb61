"""The rule operations an in-process TUI calls (`mcp-proxy --upstream URL --tui`): the admin API's,
without HTTP.

The TUI may not import the transport, so `proxy.cli_tui` hands it this object (it fits
`ui.desk_local.LocalOps`): fault and intercept rules and held messages, JSON in and JSON out in the
admin API's shapes, refusals as ValueError or LookupError carrying the API's reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from proxy.runtime import Proxy


MAX_FAULT_RULES = 100
"""As the admin API: most fault rules in force at once."""


class DeskOps:
    """Fault and intercept operations on one running proxy."""

    def __init__(self, proxy: Proxy) -> None:
        self.faults = proxy.faults

    # -- fault rules --------------------------------------------------------------------------

    def fault_listing(self) -> list[dict[str, Any]]:
        """The fault rules in force, as `GET /api/faults` lists them."""
        return self.faults.gate.listing()

    def fault_add(self, rule: str) -> dict[str, Any]:
        """Put one fault rule in force; ValueError with the reason the admin API gives."""
        from proxy.engine.gate.rules import parse_rule

        try:
            parsed = parse_rule(rule)
        except ValueError as exc:
            raise ValueError(f"fault rule {rule!r}: {exc}") from exc
        if len(self.faults.gate) >= MAX_FAULT_RULES:
            raise ValueError(f"at most {MAX_FAULT_RULES} fault rules are held at once")
        rule_id = self.faults.add(parsed)
        return next(r for r in self.faults.gate.listing() if r["id"] == rule_id)

    def fault_remove(self, rule_id: str) -> bool:
        """Take a fault rule out of force; False when none has that id."""
        return self.faults.remove(rule_id)

    # -- intercepts ---------------------------------------------------------------------------

    def intercept_listing(self) -> dict[str, Any]:
        """The intercept rules and held messages, as `GET /api/intercepts` lists them."""
        return {"rules": [], "held": []}

    def intercept_add(self, rule: str, hold_for: str | None) -> dict[str, Any]:
        """Put an intercept rule in force; ValueError with the reason."""
        raise ValueError("intercept rules are not available in this build")

    def intercept_remove(self, rule_id: str) -> bool:
        """Take an intercept rule out of force."""
        return False

    def intercept_decide(self, held_id: str, decision: dict[str, Any]) -> None:
        """Release a held message as decided."""
        raise LookupError(f"no held message {held_id!r}")

    async def intercept_wait(self, after: str | None, seconds: float) -> None:
        """Wait for a newly held message (bounded)."""
        import asyncio

        await asyncio.sleep(seconds)
