"""JSON with the non-finite numbers Python peers read and write: `NaN`, `Infinity`, `-Infinity`, and
numbers too large for a double (`1e400`).

orjson follows RFC 8259 and refuses them. Python's `json` and pydantic-core (which the MCP Python SDK
parses with) accept them, and `json.dumps` writes `NaN` by default, so a Python client may send one
without meaning to, and a Python server runs the call. Read as "not JSON", such a request would reach
the server while intercept and fault rules, the log and body-key redaction missed it. The proxy reads
such a body as those peers do, to classify it, match rules and redact it; the bytes it forwards stay
the client's. A bridge re-encodes every message it forwards, and JSON has no way to write these
numbers (orjson writes `null`), so a bridge refuses such a message (`NOT_REENCODABLE`) instead of
changing the value.

Only those numbers are forgiven: whatever else orjson refuses (invalid UTF-8, a byte order mark, a lone
surrogate, a trailing comma or trailing bytes) stays refused, as pydantic-core refuses it too. Called
only once orjson has refused a body, so valid JSON pays nothing for it.
"""

from __future__ import annotations

import json
import math
from typing import Any, Final

import orjson

NOT_REENCODABLE: Final = (
    "the message holds NaN, Infinity or a number beyond a double's range (1e400); a bridge re-encodes"
    " each message it forwards and JSON has no way to write such a number, so it would arrive as null"
)
"""Why a bridge refuses a message with a non-finite number, in its -32700 answer or the leg's error."""


class _NonFinite:
    """Counts the non-finite numbers a decode met (it forgives only a text that has one)."""

    __slots__ = ("met",)

    def __init__(self) -> None:
        self.met = 0

    def constant(self, name: str) -> float:
        """`NaN`, `Infinity` or `-Infinity`, as Python's `json` reads it."""
        self.met += 1
        return float(name)

    def number(self, text: str) -> float:
        """A number with a fraction or exponent; one past a double's range reads as an infinity."""
        value = float(text)
        if math.isinf(value):
            self.met += 1
        return value


def loads_non_finite(data: bytes | bytearray | memoryview | str) -> Any:
    """The value of a JSON text whose one departure from RFC 8259 is non-finite numbers.

    Raises ValueError for any other text: one without such a number (orjson's refusal stands), one
    that is not UTF-8, or one holding what orjson cannot represent either (a lone surrogate).
    """
    text = data if isinstance(data, str) else bytes(data).decode("utf-8")
    seen = _NonFinite()
    try:
        value = json.loads(text, parse_constant=seen.constant, parse_float=seen.number)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if not seen.met:
        raise ValueError("no non-finite number")
    try:
        orjson.dumps(value)  # a lone surrogate, which pydantic-core refuses too
    except orjson.JSONEncodeError as exc:
        raise ValueError(str(exc)) from None
    return value
