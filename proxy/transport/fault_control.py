"""The fault rules in force, and their count in /metrics.

Rules come from the settings at start (`faults`, `--fault`) and from the admin API while the proxy
runs (`/api/faults`). `RelayContext.gate` stays None while no rule is in force, so the traffic pays
nothing for the feature then (`proxy.transport.faults` relays what a rule may concern).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric

from proxy.engine.gate.actions import ACTIONS
from proxy.engine.gate.rules import FaultGate, FaultRule, parse_rule
from proxy.logs import get_logger
from proxy.transport.relay import RelayContext

_LOG = get_logger()

MAX_RULES = 100
"""Most fault rules in force at once (a bound on what each judged message is checked against)."""


class FaultControl:
    """The fault rules in force: added from settings at start and through the admin API.

    Keeps `RelayContext.gate` None while no rule is in force, so the traffic pays nothing for the
    feature then.
    """

    def __init__(self, relays: RelayContext, rules: Sequence[str], seed: int | None) -> None:
        self.relays = relays
        self.gate = FaultGate(seed)
        for text in rules:
            self.add(parse_rule(text))

    def add(self, rule: FaultRule) -> str:
        """Put a rule in force; its id."""
        rule_id = self.gate.add(rule)
        self.relays.gate = self.gate
        _LOG.warning("fault_rule_added", rule=f"{rule_id}: {rule.text}")
        return rule_id

    def add_texts(self, texts: Sequence[str]) -> list[dict[str, Any]]:
        """Put rules in force from their text, all or none, as the admin API lists them.

        ValueError names the rule that does not parse, or how many more fit under `MAX_RULES`.
        """
        parsed = []
        for text in texts:
            try:
                parsed.append(parse_rule(text))
            except ValueError as exc:
                raise ValueError(f"fault rule {text!r}: {exc}") from exc
        room = MAX_RULES - self.gate.fault_count
        if len(parsed) > room:
            raise ValueError(f"at most {MAX_RULES} fault rules are held at once; {room} more fit")
        added = [self.add(rule) for rule in parsed]
        return [rule for rule in self.gate.listing() if rule["id"] in added]

    def remove(self, rule_id: str) -> bool:
        """Take one rule out of force; False when none has that id."""
        found = self.gate.remove(rule_id)
        if found:
            _LOG.info("fault_rule_removed", rule=rule_id)
        self.sync()
        return found

    def clear(self) -> int:
        """Take every rule out of force."""
        count = self.gate.clear()
        if count:
            _LOG.info("fault_rules_cleared", count=count)
        self.sync()
        return count

    def sync(self) -> None:
        """Point the traffic at the gate while any rule (fault or intercept) is in force, else at None."""
        self.relays.gate = self.gate if len(self.gate) else None


class FaultMetrics:
    """`mcp_proxy_faults_injected_total{action}` for /metrics, read from the gate on a scrape."""

    def __init__(self, control: FaultControl) -> None:
        self._control = control

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "mcp_proxy_faults_injected",
            "Faults the proxy injected into messages by fault rules (docs/faults.md), by action; "
            "not_injected counts messages a rule picked that its action could not act on.",
            labels=["action"],
        )
        counts = self._control.gate.injected
        for action in (*ACTIONS, "not_injected"):
            family.add_metric([action], counts.get(action, 0))
        yield family
