"""`/metrics` families of the response budget (`max_response_bytes_in_flight`), read on a scrape."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from proxy.transport.response_budget import RESPONSE_SETTING, ResponseBudget

REFUSAL_KINDS = ("not_inspected", "refused")
"""What was done with a holding the budget had no room for: relayed unread (pass-through), or the
message refused with a JSON-RPC error (a bridge)."""


class ResponseBudgetMetrics:
    """The bytes held now, the most held at once, and the refusals past the limit, by kind."""

    def __init__(self, budget: ResponseBudget) -> None:
        self._budget = budget

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        budget = self._budget
        yield GaugeMetricFamily(
            "mcp_proxy_response_bytes_in_flight",
            "Upstream response bytes held now across all clients, to read for the chains or to re-encode "
            f"in a bridge ({RESPONSE_SETTING}; holdings under 64 KiB are not counted).",
            value=budget.held,
        )
        yield GaugeMetricFamily(
            "mcp_proxy_response_bytes_in_flight_peak",
            f"The most response bytes held at once since the proxy started (never above {RESPONSE_SETTING}).",
            value=budget.peak,
        )
        refused = CounterMetricFamily(
            "mcp_proxy_response_budget_refusals",
            f"Responses the proxy had no room for within {RESPONSE_SETTING}, by what it did instead: "
            "not_inspected (pass-through relayed the rest unread) or refused (a bridge answered a "
            "JSON-RPC error naming the setting).",
            labels=["outcome"],
        )
        for kind in REFUSAL_KINDS:
            refused.add_metric([kind], budget.refused.get(kind, 0))
        yield refused
