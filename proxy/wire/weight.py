"""What a decoded JSON value costs in memory, estimated from its text.

Bounds on what holds decoded bodies (the observation queue, the chain store) count this, not the
wire length: the same 64 KiB of JSON is 64 KiB of Python objects as one string and about 1.5 MiB as
`[{"a":1},{"a":1},...]`, each tiny object a dict of its own. The estimate charges each object,
member and element for the Python object it becomes (a dict for `{`, a slot and a value for `,`, an
entry for `:`), on top of the text's own length, so it stays near or above what `orjson.loads`
allocates for the shapes MCP carries (text, records, schemas, lists of objects) and errs high, not
low, for the rest (long lists of small numbers). Long texts are weighed on evenly spaced samples:
the estimate's cost stays flat however big the body.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

SMALL_TEXT: Final = 1024
"""Texts up to this length are charged the worst case (`WORST_RATIO`) without being looked at."""

WORST_RATIO: Final = 24
"""About the most memory per byte of JSON text a decoded value takes (a list of one-member objects)."""

VALUE_BASE: Final = 64
"""What every decoded value is charged beyond its text (a small one: beyond `WORST_RATIO` times it)."""

_OBJECT: Final = 176
"""A dict of a few members, beyond its text."""

_ELEMENT: Final = 48
"""A list slot or dict entry and the small value in it (a number, a short string)."""

_MEMBER: Final = 40
"""A member's key and its growth of the dict."""

_TEXTS: Final = (str, bytes)

_WINDOWS: Final = 16
_WINDOW: Final = 1024
"""Texts longer than twice `_WINDOWS * _WINDOW` are weighed on that many windows of that length."""


def text_weight(text: bytes) -> int:
    """Estimated bytes of Python objects the JSON `text` decodes to."""
    length = len(text)
    if length <= 2 * _WINDOWS * _WINDOW:
        return length + _structure(text)
    step = length // _WINDOWS
    sampled = sum(_structure(text[i * step : i * step + _WINDOW]) for i in range(_WINDOWS))
    return length + sampled * length // (_WINDOWS * _WINDOW)


def value_weight(value: Any, size: int, *, unlooked: int = SMALL_TEXT) -> int:
    """Estimated bytes of memory a decoded value holds; `size` is the length of the text it came from.

    Values whose text is at most `unlooked` bytes are charged the worst case without being looked at
    (on the traffic's path, encoding a small value to weigh it costs more than the bound saves);
    others are encoded once and weighed by `text_weight`. A string (a body that was not JSON)
    weighs its length.
    """
    if isinstance(value, _TEXTS):
        return VALUE_BASE + len(value)
    if size <= unlooked:
        return VALUE_BASE + WORST_RATIO * size
    try:
        text = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # orjson.JSONEncodeError: not a decoded JSON value; charge the worst case
        return 64 + WORST_RATIO * size
    return text_weight(text)


def _structure(text: bytes) -> int:
    count = text.count
    return _OBJECT * count(b"{") + _ELEMENT * count(b",") + _MEMBER * count(b":")
