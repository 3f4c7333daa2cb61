"""The redacted values of a recorded request body, each told apart and named for the field it fills.

An OAuth token request carries several secrets in one form body (`code`, `code_verifier`,
`client_secret`), and a JSON body may carry several too: a copied command needs a variable for each,
named for its field so that the same field takes the same variable in every command (a refresh's
`client_secret` is the login's), or the command cannot be filled in. Equal values share one stand-in
(the redactor's hmac is of the value), so they share a variable. Pure: a recorded body in, a variable
name and a description per distinct stand-in out.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote_plus

STAND_IN: Final = re.compile(r"<redacted[^<>]*>|<[A-Za-z]+ len=\d+ hmac:[0-9a-f]+>")
"""A redactor's stand-in in any recorded text: `<redacted len=N hmac:xxxxxxxx>`, or one named for
what it hides, as `requestState` is (`<requestState len=N hmac:xxxxxxxx>`)."""

HASHED: Final = re.compile(r"hmac:[0-9a-f]+>$")
"""A stand-in that names its value by hash: two equal ones hide the same value (a bare `<redacted>`
says nothing of which)."""

UNNAMED_VAR: Final = "MCP_BODY_SECRET"
"""The variable of a redacted body value no field names (a text body that is neither form nor JSON)."""

MAX_NAME: Final = 64
"""Characters of a field name a variable or comment takes; a longer name is cut (it only says which)."""

MAX_DEPTH: Final = 64
"""Levels of a JSON body searched for field names; a value deeper down is described without one."""

_FORM_NAME: Final = re.compile(r"(?:^|&)([^\s&=]+)=$")
"""The name of the form field whose value starts where the text before a stand-in ends."""

_MEMBER_NAME: Final = re.compile(r'"((?:[^"\\]|\\.)*)"\s*:\s*"?$')
"""The name of the JSON-ish member whose value starts where the text before a stand-in ends."""


@dataclass(frozen=True, slots=True)
class BodySecret:
    """The variable a redacted body value is read from, and what the command's comment says it is."""

    var: str
    what: str


def ordinal(n: int) -> str:
    """`first`, `second`, `third`, then `4th`, ...: which of several a value is, in a comment."""
    return {1: "first", 2: "second", 3: "third"}.get(n, f"{n}th")


def body_secrets(body: Any, text: str, known: Collection[str] = ()) -> dict[str, BodySecret]:
    """Each distinct redacted stand-in of a recorded body (JSON, or text such as a form) sent as
    `text` -> its variable and description: named for the field it is the value of when the body names
    one, told apart from other values of that field. A `requestState` stand-in is no secret: left out,
    and so is one in `known` (the command already has a variable for it: a header's token the body
    echoes), so the others of its field are counted without it."""
    named = _named_in_text(text) if isinstance(body, str) else _named_in_json(body, None, {}, 0)
    for match in STAND_IN.finditer(text):  # any the walk did not reach, unnamed
        named.setdefault(match.group(), None)
    groups: dict[str | None, list[str]] = {}
    for stand_in, name in named.items():
        if stand_in.startswith("<redacted") and stand_in not in known:
            groups.setdefault(name, []).append(stand_in)
    inside = set() if isinstance(body, str) else _inside_text(body)  # a form's values are whole
    out: dict[str, BodySecret] = {}
    for name, stand_ins in groups.items():
        for i, stand_in in enumerate(stand_ins, 1):
            what = _describe(name, i, len(stand_ins))
            if name is not None and stand_in in inside:
                what += " (a part of its text: the rest of the text stays as recorded)"
            out[stand_in] = BodySecret(_var(name), what)
    return out


def _inside_text(body: Any) -> set[str]:
    """The stand-ins of a JSON body that are a part of a longer string (an echoed token in a tool's
    `text` argument), not a member's whole value: their variable fills only that part."""
    out: set[str] = set()
    stack: list[tuple[Any, int]] = [(body, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            out.update(m.group() for m in STAND_IN.finditer(value) if m.group() != value)
        elif isinstance(value, dict) and depth < MAX_DEPTH:
            stack.extend((inner, depth + 1) for inner in value.values())
        elif isinstance(value, list) and depth < MAX_DEPTH:
            stack.extend((inner, depth + 1) for inner in value)
    return out


def _var(name: str | None) -> str:
    """`MCP_BODY_` and the field's name in letters, digits and underscores (`MCP_BODY_CLIENT_SECRET`)."""
    word = re.sub(r"[^A-Za-z0-9]+", "_", name or "").strip("_").upper()[:MAX_NAME]
    return f"MCP_BODY_{word}" if word else UNNAMED_VAR


def _describe(name: str | None, n: int, of: int) -> str:
    if name is None:
        if of == 1:
            return "a redacted value in the body"
        return f"the {ordinal(n)} of {of} redacted values in the body that no field names"
    shown = name if len(name) <= MAX_NAME else name[:MAX_NAME] + "..."
    if of == 1:
        return f"the redacted value of body field {shown!r}"
    return f"the {ordinal(n)} of {of} redacted values of body field {shown!r}"


def _named_in_text(text: str) -> dict[str, str | None]:
    """Stand-ins of a text body in order, each named by the form field or `"member":` right before it."""
    out: dict[str, str | None] = {}
    for found in STAND_IN.finditer(text):
        before = text[max(0, found.start() - 4 * MAX_NAME) : found.start()]
        form = _FORM_NAME.search(before)
        member = _MEMBER_NAME.search(before)
        name = unquote_plus(form.group(1)) if form else member.group(1) if member else None
        out.setdefault(found.group(), _usable(name))
    return out


def _named_in_json(
    value: Any, key: str | None, out: dict[str, str | None], depth: int
) -> dict[str, str | None]:
    """Stand-ins of a JSON value in document order, each named by the nearest member key above it
    (an array's items by the array's)."""
    if isinstance(value, str):
        for found in STAND_IN.finditer(value):
            out.setdefault(found.group(), _usable(key))
    elif isinstance(value, dict) and depth < MAX_DEPTH:
        for member, inner in value.items():
            _named_in_json(inner, str(member), out, depth + 1)
    elif isinstance(value, list) and depth < MAX_DEPTH:
        for inner in value:
            _named_in_json(inner, key, out, depth + 1)
    return out


def _usable(name: str | None) -> str | None:
    """A field name to show, or None for none or one holding a stand-in (it would say nothing)."""
    return name if name and STAND_IN.search(name) is None else None
