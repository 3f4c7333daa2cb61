"""The rule desk of a proxy in this process (`mcp-proxy --upstream URL --tui`).

The TUI must not import the proxy's transport, so the proxy hands it an object that fits `LocalOps`
(built in `proxy.cli_tui` from its fault and intercept controls): the admin API's operations, JSON in
and JSON out, refusing with ValueError (or LookupError for an unknown id) carrying the same reason the
API would give. `LocalDesk` turns that into the `RuleDesk` the screens use.
"""

from __future__ import annotations

from typing import Any, Protocol

from ui.desk import Decision, DeskError, FaultRule, InterceptRule, Intercepts


class LocalOps(Protocol):
    """A running proxy's rule operations, shaped as the admin API's JSON."""

    def fault_listing(self) -> list[dict[str, Any]]:
        """The fault rules in force (`GET /api/faults` `rules`)."""
        ...

    def fault_add(self, rule: str) -> dict[str, Any]:
        """Add a fault rule; ValueError with the reason when refused."""
        ...

    def fault_remove(self, rule_id: str) -> bool:
        """Remove a fault rule; False when none has that id."""
        ...

    def intercept_listing(self) -> dict[str, Any]:
        """`GET /api/intercepts`: `rules` and `held`."""
        ...

    def intercept_add(self, rule: str, hold_for: str | None) -> dict[str, Any]:
        """Add an intercept rule; ValueError with the reason when refused."""
        ...

    def intercept_remove(self, rule_id: str) -> bool:
        """Remove an intercept rule; False when none has that id."""
        ...

    def intercept_decide(self, held_id: str, decision: dict[str, Any]) -> None:
        """Release a held message as `POST /api/intercepts/held/{id}` would; ValueError/LookupError."""
        ...

    async def intercept_wait(self, after: str | None, seconds: float) -> None:
        """Return when a message newer than `after` is held, or after `seconds`."""
        ...


class LocalDesk:
    """`RuleDesk` over the operations of a proxy running in this process."""

    def __init__(self, ops: LocalOps, description: str = "in-process") -> None:
        self.ops = ops
        self.description = description

    async def close(self) -> None:
        """Nothing to let go of."""

    async def fault_rules(self) -> list[FaultRule]:
        """The fault rules in force."""
        return [FaultRule.from_json(rule) for rule in self.ops.fault_listing()]

    async def add_fault(self, rule: str) -> FaultRule:
        """Put a fault rule in force."""
        try:
            return FaultRule.from_json(self.ops.fault_add(rule))
        except ValueError as exc:
            raise DeskError(str(exc)) from exc

    async def delete_fault(self, rule_id: str) -> None:
        """Take a fault rule out of force."""
        if not self.ops.fault_remove(rule_id):
            raise DeskError(f"no fault rule {rule_id!r}")

    async def intercepts(self) -> Intercepts:
        """The intercept rules and the held messages."""
        return Intercepts.from_json(self.ops.intercept_listing())

    async def add_intercept(self, rule: str, hold_for: str | None = None) -> InterceptRule:
        """Put an intercept rule in force."""
        try:
            return InterceptRule.from_json(self.ops.intercept_add(rule, hold_for))
        except ValueError as exc:
            raise DeskError(str(exc)) from exc

    async def delete_intercept(self, rule_id: str) -> None:
        """Take an intercept rule out of force."""
        if not self.ops.intercept_remove(rule_id):
            raise DeskError(f"no intercept rule {rule_id!r}")

    async def decide(self, held_id: str, decision: Decision) -> None:
        """Release a held message as decided."""
        try:
            self.ops.intercept_decide(held_id, decision.body())
        except (ValueError, LookupError) as exc:
            raise DeskError(str(exc.args[0]) if exc.args else type(exc).__name__) from exc

    async def wait_held(self, after: str | None, seconds: float) -> None:
        """Wait for a newly held message (bounded)."""
        await self.ops.intercept_wait(after, seconds)
