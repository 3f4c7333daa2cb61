"""Names a caller gives the admin API, query parameters and JSON body keys: one that is not taken is
refused with the names that are, never ignored.

A key ignored would answer as if it were not given: a misspelled `message` in a decision would send
the held message unedited, a misspelled `timeout` would give a rule the default one, and the 200 or
201 would read as success. Pure: each endpoint turns the reason into its own 400.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """` (did you mean after?)` when one of `known` is close to `name`, else empty."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def stray_keys(body: Mapping[str, Any], takes: Iterable[str], where: str) -> str | None:
    """Why `body` is refused when it holds a key that `where` (`decision forward`, `POST
    /api/intercepts`) does not take: each such key, the closest taken one, and every key taken."""
    names = sorted(set(takes))
    stray = sorted(set(body) - set(names))
    if not stray:
        return None
    named = ", ".join(f"{key!r}{did_you_mean(key, names)}" for key in stray)
    noun = "key" if len(stray) == 1 else "keys"
    return f"{where} takes no {noun} {named}; it takes {', '.join(names)}"
