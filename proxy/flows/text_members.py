"""Finding `"name": value` members in JSON-ish text, for a body that is not JSON (kept as text).

A body the proxy could not decode (cut at the capture limit, malformed, or JSON inside plain text)
still carries members a decoded body would have masked. This scanner finds them as the JSON walk
sees them: each member's value whole (a string, a bare value, or an object or array to its closing
bracket, or to the end of a text cut inside it), and whether the object holding the member is the
value of a member named `properties` (a JSON Schema's), which the walk goes through instead of
masking. Pure text in, spans out: it masks nothing itself and never needs the text to be valid JSON.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

_NAME_OR_BRACKET: Final = re.compile(r'"((?:[^"\\]|\\.)*)"(\s*:\s*)?|[{}\[\]]')
"""A string (a member's name when a colon follows it), or a bracket that opens or closes a container."""

_STRING_OR_BRACKET: Final = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]]')
"""What decides where a container ends: its brackets, outside the strings in it."""

_STRING: Final = re.compile(r'"(?:[^"\\]|\\.)*"')

_BARE: Final = re.compile(r'[^\s,:{}\[\]"]+')
"""A value that is neither a string nor a container: a number, `true`, a word in plain text."""

SCHEMA_PROPERTIES: Final = "properties"
"""The JSON Schema keyword whose members name an object's members and hold their schemas: under
it, an object named like a secret key is a schema (`inputSchema.properties.password`), not a secret."""


@dataclass(frozen=True, slots=True)
class Member:
    """One member whose name was asked about: where its value's text starts and ends."""

    name: str
    start: int
    end: int
    """Where the value's text ends; for an object under a schema's `properties`, which the scan goes
    through rather than skips, just past its opening bracket: its end is not looked for, since finding
    it at every nesting level would rescan the rest of the text once per level."""
    schema_member: bool
    """The object holding it is the value of a member named `properties`."""


def secret_members(text: str, secret: Callable[[str], bool]) -> Iterator[Member]:
    """Each member of `text` whose name `secret` picks, in order, none inside another's value.

    An object under a schema's `properties` is yielded (its opening bracket only) and then gone through
    as well (its own secret members follow it), since the caller keeps it; every other container value
    is skipped whole. Each character is scanned at most twice, so the cost is linear in the text.
    """
    stack: list[str | None] = []  # the name of each open container's member (None: none, or an array)
    pending: tuple[int, str] | None = None  # where a member's value starts, and the member's name
    pos = 0
    while (match := _NAME_OR_BRACKET.search(text, pos)) is not None:
        pos = match.end()
        token = match.group(0)
        if token in "{[":
            named = pending is not None and pending[0] == match.start()
            stack.append(pending[1] if named and token == "{" and pending is not None else None)
            continue
        if token in "}]":
            if stack:
                stack.pop()
            continue
        if match.group(2) is None:
            continue  # a string that names no member
        name, start = match.group(1), match.end()
        pending = (start, name)
        if not secret(name):
            continue
        schema_member = bool(stack) and stack[-1] == SCHEMA_PROPERTIES
        if schema_member and text.startswith("{", start):
            yield Member(name, start, start + 1, schema_member)  # gone through: the scan enters it
            continue
        end = _value_end(text, start)
        if end == start:
            continue
        yield Member(name, start, end, schema_member)
        pos = end


def _value_end(text: str, start: int) -> int:
    """Where the value starting at `start` ends: after its string, its bare word, or its closing bracket
    (the end of the text when it is cut inside); `start` when no value starts there."""
    first = text[start : start + 1]
    if first == '"':
        string = _STRING.match(text, start)
        return string.end() if string is not None else len(text)
    if first in ("{", "["):
        depth = 0
        for match in _STRING_OR_BRACKET.finditer(text, start):
            token = match.group(0)
            if token in "{[":
                depth += 1
            elif token in "}]":
                depth -= 1
                if depth == 0:
                    return match.end()
        return len(text)
    bare = _BARE.match(text, start)
    return bare.end() if bare is not None else start
