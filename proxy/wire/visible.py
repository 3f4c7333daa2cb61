"""`visible`: peer-controlled text made safe to put in front of a person at a terminal.

Clients, upstreams and capture files choose tool names, ids, error messages, header values and
bodies. A terminal obeys the control characters in them (ESC and C1 sequences set the window title,
clear the screen or repaint lines; CR and newlines forge log lines; bidi controls reorder what is
read), so every human rendering (console log lines, the TUI, replay and export messages, comments in
a copied command) shows those characters as escapes instead: `\\x1b`, `\\x9b`, `\\u202e`. JSON renderings
need none of this: JSON escapes them itself.

Plain text is the common case on the hot path (a console line per exchange): one C-level
`str.isprintable` answers it, and only text that fails it is searched and rewritten.
"""

from __future__ import annotations

import re
from typing import Final

_BEYOND_C0: Final = (
    "\x7f-\x9f"  # DEL and C1 controls
    "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"  # bidi marks, embeddings, overrides and isolates
    "\u2028\u2029"  # line and paragraph separators: a line break to some terminals and viewers
)

UNSAFE: Final = re.compile(f"[\x00-\x1f{_BEYOND_C0}]")
"""A character a terminal may act on or reorder text by, rather than show."""

UNSAFE_BESIDE_LINES: Final = re.compile(f"[\x00-\x08\x0b-\x1f{_BEYOND_C0}]")
"""The same, less the tab and newline a multi-line view lays its text out with."""


_NAMED: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape(char: str) -> str:
    """One unsafe character as the escape a person reads: `\\n`, `\\x1b` below U+0100, else `\\u202e`."""
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def _escaped(found: re.Match[str]) -> str:
    return escape(found.group())


def visible(text: str, *, lines: bool = False) -> str:
    """`text` with every unsafe character shown as its escape (`lines`: tabs and newlines kept, for a
    multi-line view such as a message body); plain text is returned as it is, unchanged."""
    if text.isprintable():
        return text
    pattern = UNSAFE_BESIDE_LINES if lines else UNSAFE
    return pattern.sub(_escaped, text)
