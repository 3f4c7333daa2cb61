"""Credentials carried in a URL's path (`/s/<key>/mcp`, `/mcp/sk-ak-.../sse`): how to tell them from names.

Gateways and hosted servers put a key in the path as often as in the query. A path segment is read as a
key when it looks random (`credential_segment`); words, dates, numbers and UUIDs are kept, since the path
tells one upstream or endpoint from another. Pure text: the upstream URL (`proxy.framing.http`), log
lines and the redactor's request targets (`proxy.flows.redact`) all judge segments the same way.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import Final
from urllib.parse import unquote

_PATH_SEGMENT = re.compile(r"(?:(?<=^/)|(?<=[^/]/))[^/?#:\s'\"<>]+")
"""A path segment: after a `/` that begins the text or follows something other than a `/` (so not a
URL's host, which follows `//`)."""

_TOKEN_SEPARATORS = re.compile(r"[^A-Za-z0-9]")
"""What splits a segment into the runs a key is looked for in: anything but a letter or a digit
(`acct:<key>`, `user@<key>`, base64url's `-` and `_`)."""

_AUTHORITY = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/]*")
"""An absolute-form target's scheme and authority (the host is a name, never judged as a key)."""

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")

CREDENTIAL_PIECE: Final = 16
"""Letters and digits run together at least this long in a path segment read as a credential."""


def credential_segment(segment: str) -> bool:
    """Whether a URL path segment looks like a credential.

    Either a run of at least `CREDENTIAL_PIECE` letters and digits with both in it (a hex token,
    `sk-ak-…`), or a segment of that length whose letters and digits, separators left out, change
    between lower case, upper case and digit at least once in three characters, as random text does
    (a base64url key, whose `-` and `_` split it into short runs). Words (`server-everything`,
    `github-mcp-server-v2`), dates, numbers and UUIDs (identifiers) are not: the path tells one upstream
    from another, and masking it all would hide which one it is. Names that run words and digits
    together (`Project2024Archive`) are read as keys: for a secret, masking too much is the safer error.
    """
    text = unquote(segment)
    if len(text) < CREDENTIAL_PIECE or not text.isascii() or _UUID.fullmatch(text):
        return False
    pieces = _TOKEN_SEPARATORS.split(text)
    if any(
        len(p) >= CREDENTIAL_PIECE and p.isalnum() and not p.isdigit() and not p.isalpha() for p in pieces
    ):
        return True
    joined = "".join(pieces)
    if len(joined) < 12 or not joined.isalnum() or joined.isdigit():
        return False
    return 3 * _class_changes(joined) >= len(joined)


def _class_changes(text: str) -> int:
    """How often consecutive characters differ in class (lower case, upper case, digit)."""
    kinds = [0 if c.islower() else 1 if c.isupper() else 2 for c in text]
    return sum(1 for a, b in itertools.pairwise(kinds) if a != b)


def masked_path(path: str) -> str:
    """A URL path, or any text holding URLs, with its credential-like segments masked."""
    return _PATH_SEGMENT.sub(_masked_segment, path) if len(path) > CREDENTIAL_PIECE else path


def _masked_segment(match: re.Match[str]) -> str:
    return "<redacted>" if credential_segment(match.group(0)) else match.group(0)


def mask_target_segments(path: str, stand_in: Callable[[str], str]) -> str:
    """A request target's path (origin or absolute form, without its query) with each segment between
    two `/` that reads as a key replaced by what `stand_in` makes of it. Unlike `masked_path`, which
    finds segments in any text, every segment counts here: one after `//` (`/gw//<key>/mcp`, a base
    URL joined to a path) and one holding `:` or `@` (`/gw/acct:<key>/mcp`) alike."""
    head = ""
    if (authority := _AUTHORITY.match(path)) is not None:
        head, path = authority.group(0), path[authority.end() :]
    parts = path.split("/")
    changed = False
    for i, segment in enumerate(parts):
        if len(segment) >= CREDENTIAL_PIECE and credential_segment(segment):
            parts[i] = stand_in(segment)
            changed = True
    return head + "/".join(parts) if changed else head + path
