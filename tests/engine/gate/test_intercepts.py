"""Intercept rules: `MATCH [timeout=...]` parsed, refused with the reason, and judged before faults."""

from __future__ import annotations

import pytest

from proxy.engine.gate.actions import HOLD
from proxy.engine.gate.intercepts import parse_intercept
from proxy.engine.gate.messages import seen
from proxy.engine.gate.rules import FaultGate, parse_rule
from proxy.flows.redact import Redactor
from proxy.wire.jsonrpc import classify_value


def call(tool: str) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool}}


def test_a_rule_is_a_match_and_an_optional_timeout() -> None:
    rule = parse_intercept("method:tools/call tool:delete_* timeout=30s")
    assert rule.action.kind == HOLD
    assert rule.action.delay_ms == 30_000
    assert rule.match.text == "method:tools/call tool:delete_*"
    assert rule.text == "method:tools/call tool:delete_* timeout=30000ms"
    assert parse_intercept("dir:server").action.delay_ms == 0  # the configured default then
    assert parse_intercept("*", "1.5m").action.delay_ms == 90_000
    assert parse_intercept("*", 2).action.delay_ms == 2000


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "needs a match"),
        ("timeout=5s", "needs a match"),
        ("tool:x => drop", "has no action"),
        ("tool:x timeout=soon", "timeout is a duration such as 30s"),
        ("tool:x timeout=2h", "at most 1h"),
        ("tool:x timeout=0s", "above 0"),
        ("color:red", "unknown field 'color'"),
    ],
)
def test_a_rule_that_does_not_parse_is_refused_naming_why(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        parse_intercept(text)


def test_a_timeout_given_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="give the timeout once"):
        parse_intercept("tool:x timeout=5s", "10s")
    assert parse_intercept("*", "500ms").action.delay_ms == 500
    assert parse_intercept("*", "3").action.delay_ms == 3000


def test_the_gate_holds_before_any_fault_and_a_rule_that_matches_nothing_concerns_nothing() -> None:
    gate = FaultGate()
    gate.add(parse_rule("tool:echo => drop"))
    assert gate.add_intercept(parse_intercept("tool:echo")) == "i1"
    assert len(gate) == 2
    assert gate.fault_count == 1
    msg = classify_value(call("echo"))
    fault = gate.decide(seen(msg, "client", era="legacy", session=None, asked={}, masks=Redactor()))
    assert fault is not None
    assert (fault.rule_id, fault.action.kind) == ("i1", HOLD)
    assert gate.label("i1") == "i1: tool:echo"
    assert gate.listing()[0]["id"] == "f1"  # the fault listing holds fault rules only
    gate.clear()
    assert gate.remove_intercept("i1")
    gate.add_intercept(parse_intercept("tool:nothing_matches"))
    assert not gate.concerns([msg], {})
    assert gate.intercepts()[0][0] == "i2"
    assert gate.clear_intercepts() == ["i2"]
    assert len(gate) == 0


def test_a_fault_action_is_never_an_intercept_rule() -> None:
    with pytest.raises(ValueError, match="intercept rule holds"):
        FaultGate().add_intercept(parse_rule("* => drop"))
