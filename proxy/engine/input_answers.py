"""Whether a client's answer to an input request (elicitation, sampling, roots) is one, shared by both
bridges so a malformed answer is named the same way whichever era the client speaks.

A server fails the whole call on an answer that is no result of its request's kind, with words that
name neither the answer nor the field (the SDK's "Invalid request parameters"); the bridge that
carries the answer checks it first and says which one is wrong and why. Pure functions, no state.
"""

from __future__ import annotations

from typing import Any

from proxy.wire.mcp import answer_problem


def answer_fault(key: str, method: str, value: Any) -> str | None:
    """What makes `value` no answer to the `method` request known as `key`, or None."""
    if not isinstance(value, dict):
        return f"{key} ({method}): an answer is its result object, got {json_type(value)}"
    problem = answer_problem(method, value)
    return None if problem is None else f"{key} ({method}): {problem}"


def json_type(value: Any) -> str:
    """A JSON value's kind as a person names it: `a string`, `null`, `a number`."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"
