"""Intercept rules: `MATCH [timeout=30s]`, the messages the proxy holds until someone decides.

The match is a fault rule's (`proxy.engine.gate.match`), so the TUI filter's words pick what is held;
the action is always a hold (`actions.HOLD`), with the rule's own timeout or, without one, the
configured default. A held message whose timeout passes goes on unchanged, so a forgotten breakpoint
never wedges the traffic. Pure: the gate decides at the fault points, the transport holds.
"""

from __future__ import annotations

import re
from typing import Final

from proxy.engine.gate.actions import HOLD, UNIT_MS, Action
from proxy.engine.gate.match import parse_match
from proxy.engine.gate.rules import FaultRule

MAX_TIMEOUT_S: Final = 3600.0
"""Longest a message may be held (one hour): past it no client or server is still waiting."""

_TIMEOUT = re.compile(r"^timeout=(\d+(?:\.\d+)?)\s*(ms|s|m|h)?$", re.IGNORECASE)
_TAIL = re.compile(r"(?:^|\s)timeout=(\S*)\s*$", re.IGNORECASE)


def _timeout_ms(text: str) -> float:
    """Milliseconds of a timeout such as `30s`, `1.5m`, `500ms` (a bare number is seconds); ValueError
    why not. Scaled once from the number as written, as a fault's delay is: the rule's text shows
    milliseconds, and reading that text back gives exactly the same timeout."""
    found = _TIMEOUT.match(f"timeout={text.strip()}")
    if found is None:
        raise ValueError(f"timeout is a duration such as 30s, 500ms or 2m, got {text.strip()!r}")
    number, unit = found.groups()
    millis = float(number) * UNIT_MS[(unit or "s").lower()]
    if not 0 < millis <= MAX_TIMEOUT_S * 1000:
        raise ValueError(
            f"timeout is above 0 and at most {MAX_TIMEOUT_S / 3600:g}h (a held message then goes on "
            f"unchanged), got {text.strip()!r}"
        )
    return millis


def parse_intercept(text: str, timeout: str | float | None = None) -> FaultRule:
    """Parse `MATCH [timeout=DURATION]` (or MATCH with `timeout` given apart, as the admin API does).

    ValueError says what is wrong and what to write. The rule's action is a hold whose `delay_ms` is
    the timeout (0: the configured default).
    """
    millis: float | None = None
    tail = _TAIL.search(text)
    if tail is not None:
        millis = _timeout_ms(tail.group(1))
        text = text[: tail.start()]
    words = text.split()
    if timeout is not None:
        if millis is not None:
            raise ValueError("give the timeout once: in the rule (timeout=30s) or apart, not both")
        if isinstance(timeout, bool):  # JSON true is no number of seconds, though Python counts it as 1
            raise ValueError(f"timeout is a duration such as 30s, or seconds, got {timeout!r}")
        millis = float(timeout) * 1000 if isinstance(timeout, int | float) else _timeout_ms(timeout)
        if not 0 < millis <= MAX_TIMEOUT_S * 1000:
            raise ValueError(f"timeout is above 0 and at most {MAX_TIMEOUT_S:g} seconds, got {timeout!r}")
    if "=>" in words:
        raise ValueError(
            "an intercept rule is MATCH [timeout=30s], as in 'method:tools/call tool:delete_*'; it has "
            "no action ('=>' belongs to fault rules, --fault)"
        )
    if not words:
        raise ValueError("an intercept rule needs a match, as in 'tool:delete_*' (or * for every message)")
    match = parse_match(text)
    return FaultRule(match, Action(HOLD, delay_ms=millis or 0.0))
