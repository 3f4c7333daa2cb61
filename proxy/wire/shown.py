"""Client-chosen text as a log line shows it: bounded, so one request cannot write a huge line.

A tool name, a method or a string id is whatever the client sent; written in full, a 1 MB name makes
a 2 MB log line, which log shippers split or drop (Docker's json-file driver cuts lines at 16 KiB).
Pure: no I/O, no logging.
"""

from __future__ import annotations

from typing import Final

SHOWN_TEXT_BOUND: Final = 288
"""Characters of a client-chosen text (method, tool/prompt/resource name, string id) a log line shows
whole; a longer one is shown by its first `SHOWN_TEXT_KEPT` and a marker saying how long it was (which
fits within the bound, so a text already shown that way is shown as it is)."""

SHOWN_TEXT_KEPT: Final = 256
"""Characters of a text past `SHOWN_TEXT_BOUND` a log line shows before its marker."""


def shown_text(text: str) -> str:
    """`text` as a log line shows it: whole when within `SHOWN_TEXT_BOUND`, else its start and
    `… (N chars)`, N its full length."""
    if len(text) <= SHOWN_TEXT_BOUND:
        return text
    return f"{text[:SHOWN_TEXT_KEPT]}… ({len(text)} chars)"


def shown_id(ident: object) -> object:
    """A JSON-RPC id as a log line shows it: a string one bounded like any client text."""
    return shown_text(ident) if type(ident) is str else ident
