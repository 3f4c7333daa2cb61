"""`readable`: a header value as the text its sender wrote, for whatever is shown or exported.

The HTTP core keeps each header value as the latin-1 reading of its bytes, one character per byte,
so relaying the text relays the bytes unchanged. A client that puts non-ASCII text in a header sends
it as UTF-8 in practice, and the latin-1 reading of that is mojibake (`cafÃ©` for `café`), which a
capture, a HAR or a copied curl command would carry on as other bytes. So an observer is given the
UTF-8 reading of a value whose bytes are valid UTF-8, and the latin-1 reading of any other (a legacy
client's obs-text), which still shows one character per byte. The relay never uses this text.
"""

from __future__ import annotations


def readable(value: str) -> str:
    """`value` (the latin-1 reading of a header's bytes) as UTF-8 text when its bytes are UTF-8.

    ASCII, the common case, is returned as it is by one C-level check; a value holding a character
    beyond latin-1 was not read off the wire, and is returned as it is too.
    """
    if value.isascii():
        return value
    try:
        return value.encode("latin-1").decode("utf-8")
    except UnicodeError:
        return value
