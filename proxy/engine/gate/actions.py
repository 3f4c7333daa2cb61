"""What a fault rule does to a message it picks, parsed once from `ACTION` in `MATCH => ACTION`.

    delay=200ms   error=-32000[:message]   drop   cut_after=3   duplicate   corrupt_state

Each action says which messages it can act on (`acts_on`): a rule whose match can only pick messages
its action cannot change is refused when it is made, naming why, rather than left to do nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Final

ACTIONS: Final = ("delay", "error", "drop", "cut_after", "duplicate", "corrupt_state")
"""Every action a fault rule may name."""

HOLD: Final = "hold"
"""The action of an intercept rule (`proxy.engine.gate.intercepts`): hold the message until someone
decides what becomes of it, or its timeout (`delay_ms`; 0: the configured default) passes. Never
written in a fault rule."""

MAX_DELAY_MS: Final = 600_000.0
"""Longest delay a rule may add (ten minutes): past it a client has given up long before."""

DEFAULT_ERROR_MESSAGE: Final = "fault injected by the proxy"

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m)?$", re.IGNORECASE)
UNIT_MS: Final = {"ms": 1.0, "s": 1000.0, "m": 60000.0, "h": 3_600_000.0}
"""Milliseconds in each unit a duration may be written in (a fault's delay takes all but `h`)."""


@dataclass(frozen=True, slots=True)
class Action:
    """One fault (or an intercept's hold): its kind and argument (`delay_ms`, `code`/`message`, `events`)."""

    kind: str
    delay_ms: float = 0.0
    code: int = 0
    message: str = ""
    events: int = 0

    def describe(self) -> str:
        """The fault in a few words, for notes, log lines and metrics: `delay 200 ms`, `error -32000`."""
        if self.kind == "delay":
            return f"delay {_ms(self.delay_ms)}"
        if self.kind == "error":
            return f"error {self.code}"
        if self.kind == "cut_after":
            return f"cut after {self.events} event{'' if self.events == 1 else 's'}"
        if self.kind == HOLD:
            return "hold"
        return self.kind.replace("_", " ")

    def text(self) -> str:
        """The action as a rule writes it (round-trips through `parse_action`)."""
        if self.kind == "delay":
            return f"delay={_ms(self.delay_ms).replace(' ', '')}"
        if self.kind == "error":
            return f"error={self.code}" + (
                f":{self.message}" if self.message != DEFAULT_ERROR_MESSAGE else ""
            )
        if self.kind == "cut_after":
            return f"cut_after={self.events}"
        if self.kind == HOLD:
            return f"timeout={_ms(self.delay_ms).replace(' ', '')}" if self.delay_ms else ""
        return self.kind

    def acts_on(self, direction: str, kind: str) -> bool:
        """Whether this action can change a message sent by `direction` (`client`/`server`) of `kind`."""
        if self.kind in ("cut_after", "corrupt_state"):
            return direction == "client" and kind == "request"
        if self.kind == "error":
            return kind == "request" if direction == "client" else kind in ("result", "error")
        return True


def _ms(millis: float) -> str:
    return f"{plain_number(millis)} ms"


def plain_number(number: float) -> str:
    """`number` as the shortest plain decimal that reads back as exactly it (`3600000`, `0.00001`):
    rules read digits with an optional fraction, so e-notation (`3.6e+06`) would not parse back."""
    text = format(Decimal(repr(number)), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def parse_action(text: str) -> Action:
    """Parse `ACTION`; raises ValueError naming what is wrong and what is accepted."""
    name, eq, arg = text.strip().partition("=")
    name = name.strip().lower()
    if name not in ACTIONS:
        raise ValueError(f"action: unknown action {name!r} (known: {', '.join(ACTIONS)})")
    if name in ("drop", "duplicate", "corrupt_state"):
        if eq:
            raise ValueError(f"action: {name} takes no value, got {text.strip()!r}")
        return Action(name)
    if not eq or not arg.strip():
        example = {"delay": "delay=200ms", "error": "error=-32000:message", "cut_after": "cut_after=3"}[name]
        raise ValueError(f"action: {name} needs a value, as in {example}")
    arg = arg.strip()
    if name == "delay":
        return Action("delay", delay_ms=_delay(arg))
    if name == "error":
        return _error(arg)
    if not arg.isdigit():
        raise ValueError(f"action: cut_after= is a number of SSE events (0 or more), got {arg!r}")
    return Action("cut_after", events=int(arg))


def _delay(arg: str) -> float:
    found = _DURATION.match(arg)
    if found is None:
        raise ValueError(f"action: delay= is a duration such as 200ms, 1.5s or 1m, got {arg!r}")
    number, unit = found.groups()
    millis = float(number) * UNIT_MS[(unit or "ms").lower()]
    if millis > MAX_DELAY_MS:
        raise ValueError(f"action: delay= is at most {MAX_DELAY_MS / 60000:g}m, got {arg!r}")
    return millis


_CODE_MIN, _CODE_MAX = -(2**31), 2**31 - 1


def _error(arg: str) -> Action:
    code_text, _, message = arg.partition(":")
    try:
        code = int(code_text.strip())
    except ValueError:
        raise ValueError(f"action: error= is a JSON-RPC code, then :message if wanted, got {arg!r}") from None
    if not _CODE_MIN <= code <= _CODE_MAX:
        raise ValueError(
            f"action: error= takes a code from {_CODE_MIN} to {_CODE_MAX} (a 32-bit integer, what every "
            f"JSON-RPC peer reads), got {code}"
        )
    return Action("error", code=code, message=message.strip() or DEFAULT_ERROR_MESSAGE)
