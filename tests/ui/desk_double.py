"""A rule desk double for the TUI's screen tests: rules and held messages in memory, decisions recorded.

A double, named as one: the screens' layout and keys are tested against it; what a real proxy does
with the same keys is tested end to end (tests/ui/test_desk_e2e.py). It refuses what the proxy
refuses in the ways the screens must show (a rule that does not parse, an unknown held message).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from ui.desk import Decision, DeskError, FaultRule, Held, InterceptRule, Intercepts

DESCRIPTION = "desk double"


def held(
    held_id: str = "h1",
    *,
    kind: str = "request",
    direction: str = "client",
    method: str = "tools/call",
    message: dict[str, Any] | None = None,
    hold_for: float = 60.0,
) -> Held:
    """A held message (a client's tools/call request by default)."""
    now = time.time()
    if message is None:
        message = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": method,
            "params": {
                "name": "echo",
                "arguments": {"text": "hi", "token": "<redacted len=12 hmac:ab12cd00>"},
            },
        }
    return Held(
        id=held_id,
        rule="i1",
        direction=direction,
        kind=kind,
        method=method,
        held_at=now - 2.0,
        deadline=now + hold_for,
        message=message,
        exchange="x1",
        chain="c1",
        mode="passthrough",
        side="upstream" if direction == "client" else "client",
    )


class DeskDouble:
    """In-memory rules and held messages; `decisions` records every decision, in order."""

    description = DESCRIPTION

    def __init__(self, *held_now: Held) -> None:
        self.faults: list[FaultRule] = []
        self.rules: list[InterceptRule] = []
        self.held: list[Held] = list(held_now)
        self.decisions: list[tuple[str, Decision]] = []
        self.refuse_next: str | None = None
        self._changed = asyncio.Event()
        self._next = 1
        self.closed = False

    def hold(self, item: Held) -> None:
        """A message is held now (the watcher learns of it at once)."""
        self.held.append(item)
        self._changed.set()

    async def close(self) -> None:
        self.closed = True

    async def fault_rules(self) -> list[FaultRule]:
        return list(self.faults)

    async def add_fault(self, rule: str) -> FaultRule:
        if "=>" not in rule:
            raise DeskError(f"fault rule {rule!r}: no '=>' (write MATCH => ACTION)", 400)
        added = FaultRule(id=f"f{self._next}", rule=rule)
        self._next += 1
        self.faults.append(added)
        return added

    async def delete_fault(self, rule_id: str) -> None:
        self.faults = [rule for rule in self.faults if rule.id != rule_id]

    async def intercepts(self) -> Intercepts:
        now = time.time()  # as the proxy does, a message past its deadline has gone on unchanged
        self.held = [item for item in self.held if item.deadline > now]
        return Intercepts(rules=tuple(self.rules), held=tuple(self.held))

    async def add_intercept(self, rule: str, hold_for: str | None = None) -> InterceptRule:
        if rule.startswith("nonsense"):
            raise DeskError(f"intercept rule {rule!r}: match: unknown field 'nonsense'", 400)
        seconds = float(hold_for.rstrip("s")) if hold_for else 60.0
        added = InterceptRule(id=f"i{self._next}", match=rule, timeout_s=seconds)
        self._next += 1
        self.rules.append(added)
        return added

    async def delete_intercept(self, rule_id: str) -> None:
        self.rules = [rule for rule in self.rules if rule.id != rule_id]

    async def decide(self, held_id: str, decision: Decision) -> None:
        if self.refuse_next is not None:
            reason, self.refuse_next = self.refuse_next, None
            raise DeskError(reason, 400)
        if held_id not in {item.id for item in self.held}:
            raise DeskError(f"no held message {held_id!r} (released already?)", 404)
        self.decisions.append((held_id, decision))
        self.held = [item for item in self.held if item.id != held_id]

    async def wait_held(self, after: str | None, seconds: float) -> None:
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), seconds)
