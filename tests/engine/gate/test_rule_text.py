"""The text a rule is shown as (API answers, listings, captures, notes, logs) is a rule the proxy takes
back: parsing what it prints gives the same rule, for every duration and probability a rule can hold."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.engine.gate.actions import MAX_DELAY_MS, Action
from proxy.engine.gate.intercepts import MAX_TIMEOUT_S, parse_intercept
from proxy.engine.gate.match import parse_match
from proxy.engine.gate.rules import FaultRule, parse_rule

TIMEOUTS_S = st.floats(min_value=0.0, max_value=MAX_TIMEOUT_S, exclude_min=True, allow_nan=False)
DELAYS_MS = st.floats(min_value=0.0, max_value=MAX_DELAY_MS, allow_nan=False)
PROBABILITIES = st.floats(min_value=0.0, max_value=1.0, exclude_min=True, allow_nan=False)
UNITS = st.sampled_from(["ms", "s", "m", ""])


@given(seconds=TIMEOUTS_S)
def test_an_intercept_rules_text_parses_back_to_the_same_rule_whatever_its_timeout(seconds: float) -> None:
    rule = parse_intercept("tool:x", seconds)
    assert parse_intercept(rule.text) == rule, rule.text


@given(millis=st.decimals(min_value=1, max_value=int(MAX_TIMEOUT_S * 1000), places=3), unit=UNITS)
def test_an_intercept_timeout_as_typed_reads_back_to_the_same_rule(millis: Decimal, unit: str) -> None:
    scale = {"ms": 1, "s": 1000, "": 1000, "m": 60000}[unit]
    rule = parse_intercept(f"tool:x timeout={format(millis / scale, 'f')}{unit}")
    assert parse_intercept(rule.text) == rule, rule.text


@given(millis=DELAYS_MS, p=PROBABILITIES)
def test_a_fault_rules_text_parses_back_to_the_same_rule_whatever_its_delay_and_probability(
    millis: float, p: float
) -> None:
    rule = FaultRule(parse_match("tool:x"), Action("delay", delay_ms=millis), p)
    assert parse_rule(rule.text) == rule, rule.text


@given(
    millis=st.decimals(min_value=0, max_value=int(MAX_DELAY_MS), places=5),
    p=st.decimals(min_value=Decimal("0.000001"), max_value=1, places=6),
    unit=UNITS,
)
def test_a_fault_delay_as_typed_reads_back_to_the_same_rule(millis: Decimal, p: Decimal, unit: str) -> None:
    scale = {"ms": 1, "s": 1000, "": 1, "m": 60000}[unit]
    rule = parse_rule(f"tool:x => delay={format(millis / scale, 'f')}{unit} p={format(p, 'f')}")
    assert parse_rule(rule.text) == rule, rule.text


@pytest.mark.parametrize(
    ("written", "shown"),
    [
        ("tool:x timeout=1h", "tool:x timeout=3600000ms"),
        ("tool:x timeout=20m", "tool:x timeout=1200000ms"),
        ("tool:x timeout=0.0001s", "tool:x timeout=0.1ms"),
        ("tool:x => delay=10m p=0.00001", "tool:x => delay=600000ms p=0.00001"),
        ("tool:x => delay=0.00001ms", "tool:x => delay=0.00001ms"),
    ],
)
def test_long_and_tiny_durations_are_shown_as_plain_decimals_never_in_e_notation(
    written: str, shown: str
) -> None:
    parse = parse_rule if "=>" in written else parse_intercept
    rule = parse(written)
    assert rule.text == shown
    assert parse(shown) == rule
