"""Header values of a capture written before format 1.10, read as the text their sender wrote.

A capture of 1.10 or later stores each header value as its `readable` text (a UTF-8 value as its
UTF-8 reading). An older one stores the latin-1 reading of the value's bytes, one character per byte,
so a value sent as UTF-8 reads as mojibake (`cafÃ©` for `café`). That reading gives back the bytes
exactly, so a reader passes an older file's header values through `readable` too: exports, the TUI
and `export --curl` then show and send what the client sent, whichever version wrote the file.

A proxy of 1.10 or later that appends to an older file writes `readable` text under the older
header; `readable` leaves such text as it is (its characters are not latin-1 bytes forming UTF-8),
unless the text itself is latin-1 that forms UTF-8, which no sender writes in practice.
"""

from __future__ import annotations

from typing import Any, Final

from proxy.wire.header_text import readable

TEXT_SINCE_MINOR: Final = 10
"""The first minor of format 1 whose captures store header values as their `readable` text."""


def stores_latin1(minor: int | None) -> bool:
    """Whether a capture of this minor version stores header values as latin-1 readings."""
    return minor is not None and minor < TEXT_SINCE_MINOR


def headers_as_text(line: Any) -> Any:
    """`line` (a decoded observation line of an older capture) with its header values as text.

    Changes the line in place and returns it; a line with no `headers` object, and a value that is
    not a string (damage the decoder reports), are left as they are.
    """
    headers = line.get("headers") if isinstance(line, dict) else None
    if isinstance(headers, dict):
        line["headers"] = {name: readable(v) if isinstance(v, str) else v for name, v in headers.items()}
    return line
