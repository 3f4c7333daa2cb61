"""How much each fuzz target runs: a fixed corpus in the test run, a larger random one on demand.

Every target states its corpus as `examples(n)`: `n` generated inputs (plus its fixed `@example`s),
drawn from a fixed seed so the suite's run is the same on every machine and its time stays modest.
`MCP_PROXY_FUZZ_SCALE=K` multiplies every target's count by K and draws from a fresh random seed
each run: that is how to fuzz for longer (failures are printed with a reproduction blob).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

SCALE = max(1, int(os.environ.get("MCP_PROXY_FUZZ_SCALE", "1") or "1"))
"""Multiplier for every target's example count; above 1, the seed is random."""


def examples(count: int) -> settings:
    """Hypothesis settings for a target with `count` generated examples at scale 1."""
    return settings(
        max_examples=count * SCALE,
        deadline=None,
        derandomize=SCALE == 1,
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
