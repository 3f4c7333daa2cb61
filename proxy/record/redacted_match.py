"""Matching a request against recorded params that hold redacted stand-ins, and naming where they differ.

A capture keeps a secret body value only as `<redacted len=N hmac:xxxxxxxx>`: the mock cannot know
what the client sent then, so a stand-in in recorded params stands for any value in its place (a
stand-in inside a longer string, a secret text the proxy masked where it appeared, for any text
there). The same walk names the first place a request and a recorded call differ, so a miss says
what really differs even where both read alike once masked. Pure functions: no I/O.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from proxy.record.replay_compare import join

STAND_IN: Final = re.compile(r"<redacted len=\d+ hmac:[0-9a-f]+>")
"""A redacted value as captures hold it."""


def holds_stand_in(value: Any) -> bool:
    """Whether any string in `value` holds a stand-in (cheaply: on its compact JSON)."""
    return STAND_IN.search(json.dumps(value, default=str)) is not None


def first_difference(recorded: Any, asked: Any, path: str = "") -> str | None:
    """Where `asked` first departs from `recorded` (`arguments.user`, `""` for the whole value), a
    stand-in in `recorded` fitting any value; None when it fits everywhere."""
    if isinstance(recorded, str) and STAND_IN.search(recorded):
        return None if _fits_text(recorded, asked) else path
    if isinstance(recorded, dict):
        if not isinstance(asked, dict):
            return path
        for key in sorted(recorded.keys() | asked.keys(), key=str):
            if key not in recorded or key not in asked:
                return join(path, key)
            found = first_difference(recorded[key], asked[key], join(path, key))
            if found is not None:
                return found
        return None
    if isinstance(recorded, list):
        if not isinstance(asked, list):
            return path
        for index, (old, new) in enumerate(zip(recorded, asked, strict=False)):
            found = first_difference(old, new, f"{path}[{index}]")
            if found is not None:
                return found
        return None if len(recorded) == len(asked) else f"{path}[{min(len(recorded), len(asked))}]"
    return None if _same_json(recorded, asked) else path


def _fits_text(recorded: str, asked: Any) -> bool:
    """A recorded string holding stand-ins against an asked value: the whole string a stand-in fits
    anything (the secret may have been any JSON value); stand-ins within text fit any text there."""
    if STAND_IN.fullmatch(recorded):
        return True
    if not isinstance(asked, str):
        return False
    pieces = STAND_IN.split(recorded)
    pattern = "(?s:.*)".join(re.escape(piece) for piece in pieces)
    return re.fullmatch(pattern, asked) is not None


def _same_json(recorded: Any, asked: Any) -> bool:
    """Equal as JSON says (`1` is not `1.0` nor `true`), as the table's match keys compare them."""
    return json.dumps(recorded, sort_keys=True, default=str) == json.dumps(asked, sort_keys=True, default=str)
