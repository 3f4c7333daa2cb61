"""Intercept rules in force and their held messages: one control for the admin API and the TUI.

`InterceptControl` is what `/api/intercepts` serves over HTTP and what a TUI running the proxy in
its own process is handed: the same operations under the same names, taking and giving the same JSON
shapes, raising `InterceptError` (with the HTTP status the admin API answers) where the API answers
an error. Rules share the fault rules' gate (`FaultControl`), so with no rule of either kind the
traffic pays one attribute read for both features.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from proxy.engine.gate.intercepts import parse_intercept
from proxy.logs import get_logger
from proxy.transport.fault_control import FaultControl
from proxy.transport.intercept_desk import MAX_WAIT_S, InterceptDesk, InterceptError

_LOG = get_logger()

RELEASE_DECISIONS = ("forward", "forward_edited", "drop", "answer", "abandoned")


class InterceptControl:
    """Intercept rules (added from settings at start, the admin API or the TUI) and the held desk."""

    def __init__(self, faults: FaultControl, desk: InterceptDesk, rules: Sequence[str] = ()) -> None:
        self.faults = faults
        self.desk = desk
        for text in rules:
            self.add(text)

    def listing(self) -> dict[str, Any]:
        """`{"rules": [...], "held": [...], "released": [...]}`: each rule with its timeout, the
        messages held now, and how the latest ones were released."""
        held = self.desk.listing()
        rules = []
        for rule_id, rule, picked in self.faults.gate.intercepts():
            timeout = rule.action.delay_ms / 1000 or self.desk.default_timeout
            rules.append(
                {
                    "id": rule_id,
                    "match": rule.match.text or "*",
                    "rule": rule.text,
                    "timeout_s": timeout,
                    "held": sum(1 for h in held if h["rule"] == rule_id),
                    "picked": picked,
                }
            )
        return {"rules": rules, "held": held, "released": list(self.desk.recent)}

    def add(self, rule: str, timeout: str | float | None = None) -> dict[str, Any]:
        """Put a rule `MATCH [timeout=30s]` in force; the rule as `listing` shows it (400 why not)."""
        try:
            parsed = parse_intercept(rule, timeout)
            rule_id = self.faults.gate.add_intercept(parsed)
        except ValueError as exc:
            raise InterceptError(400, f"intercept rule {rule!r}: {exc}") from None
        self.faults.sync()
        _LOG.warning("intercept_rule_added", rule=f"{rule_id}: {parsed.text}")
        return next(r for r in self.listing()["rules"] if r["id"] == rule_id)

    def delete(self, rule_id: str) -> dict[str, Any]:
        """Take one rule out of force; its held messages go on unchanged (404 for an unknown id)."""
        if not self.faults.gate.remove_intercept(rule_id):
            known = ", ".join(r for r, _, _ in self.faults.gate.intercepts()) or "none"
            raise InterceptError(404, f"no intercept rule {rule_id!r} (in force: {known})")
        self.faults.sync()
        released = self.desk.release_rule(rule_id)
        _LOG.info("intercept_rule_removed", rule=rule_id, released=released)
        return {"removed": 1, "released": released}

    def delete_all(self) -> dict[str, Any]:
        """Take every rule out of force; every held message goes on unchanged."""
        ids = self.faults.gate.clear_intercepts()
        self.faults.sync()
        released = sum(self.desk.release_rule(rule_id) for rule_id in ids)
        if ids:
            _LOG.info("intercept_rules_cleared", count=len(ids), released=released)
        return {"removed": len(ids), "released": released}

    def decide(self, held_id: str, decision: Mapping[str, Any]) -> dict[str, Any]:
        """Release a held message as `decision` says (`{"decision": "forward"|"drop"|"answer", ...}`)."""
        return self.desk.decide(held_id, decision)

    async def wait(self, after: str | None = None, seconds: float = 10.0) -> dict[str, Any]:
        """`{"held": [...]}`: messages held after `after` (`h3`), waiting up to `seconds` (at most 60)."""
        return {"held": await self.desk.wait(after, min(seconds, MAX_WAIT_S))}


class InterceptMetrics:
    """`mcp_proxy_intercepts_held_total`, `mcp_proxy_intercepts_held` and releases by decision."""

    def __init__(self, desk: InterceptDesk) -> None:
        self._desk = desk

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        desk = self._desk
        total = CounterMetricFamily(
            "mcp_proxy_intercepts_held",
            "Messages intercept rules held for a decision (docs/intercept.md).",
        )
        total.add_metric([], desk.held_total)
        yield total
        yield GaugeMetricFamily(
            "mcp_proxy_intercepts_held_now",
            "Messages held by intercept rules right now.",
            value=len(desk.held),
        )
        released = CounterMetricFamily(
            "mcp_proxy_intercepts_released",
            "Held messages released, by decision (forward_edited: sent edited; abandoned: the exchange "
            "ended first).",
            labels=["decision"],
        )
        for decision in RELEASE_DECISIONS:
            released.add_metric([decision], desk.released.get(decision, 0))
        yield released
