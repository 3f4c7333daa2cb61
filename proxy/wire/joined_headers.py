"""Headers as records keep them: one value per name, a repeated field's values joined, and split again.

A capture, a chain and the admin API hold a head as a JSON object, one member per field name, so
every reader of any version reads it the same way. A peer may send a field more than once
(`Accept: application/json` then `Accept: text/event-stream`, two `Set-Cookie`s): a record keeps
every value by joining them, in arrival order, under the first spelling of the name (names compare
case-insensitively, as HTTP's do). RFC 9110 section 5.3 makes `, ` the join that means the same for
every list-based field; `Cookie` is joined with `; ` (RFC 9113 section 8.2.3), which reads as one
cookie list; `Set-Cookie`, whose values may hold commas, is joined with a line feed, which no field
value can hold, so whatever writes one line per field (a HAR's `headers`, curl's `-H`, the TUI's
rows) splits it back into one field per cookie.

Pure data: no I/O. `recorded` runs for every head the proxy relays, so a head without repeats costs
one C-level `dict` build and a length comparison.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

SET_COOKIE: Final = "set-cookie"
"""The field whose values are joined with a line feed (lower case)."""

COOKIE_LINES: Final = "\n"
"""What joins `Set-Cookie` values: a field value never holds a line feed (RFC 9110 section 5.5)."""

_JOINS: Final = {SET_COOKIE: COOKIE_LINES, "cookie": "; "}
"""The fields not joined with `, ` (by lower-case name), and what joins their values instead."""


def recorded(pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    """A head's fields as a record keeps them: one member per name, repeated values joined in order.

    Only a name repeated exactly is joined here (a `dict` would keep its last value alone); one
    repeated in another case keeps its own member, and every redacted view of the head (the capture,
    the chains) joins it under the first spelling (`Redactor.headers`), so either way nothing is lost.
    """
    out = dict(pairs)
    return out if len(out) == len(pairs) else joined(pairs)


def joined(pairs: Sequence[tuple[str, str]] | Mapping[str, str]) -> dict[str, str]:
    """`recorded` worked out field by field: a repeated name's values joined under its first spelling."""
    out: dict[str, str] = {}
    spelling: dict[str, str] = {}
    for name, value in pairs.items() if isinstance(pairs, Mapping) else pairs:
        key = name.lower()
        first = spelling.get(key)
        if first is None:
            spelling[key] = name
            out[name] = value
        else:
            out[first] = f"{out[first]}{_JOINS.get(key, ', ')}{value}"
    return out


def field_lines(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    """A recorded head as one (name, value) per field line to write: each cookie of a joined
    `Set-Cookie` its own line, every other member one line as it is (its joined value means the same).

    Every exported entry's heads pass here, so a head with no joined cookie is copied as it is."""
    lines = list(headers.items())
    if not any(COOKIE_LINES in value for value in headers.values()):
        return lines
    out: list[tuple[str, str]] = []
    for name, value in lines:
        if COOKIE_LINES in value and name.lower() == SET_COOKIE:
            out.extend((name, one) for one in value.split(COOKIE_LINES))
        else:
            out.append((name, value))
    return out
