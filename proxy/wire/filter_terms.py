"""The words of the filter language the TUI's filter bar and the fault rules share, and how a value
matches one: pure functions, so both read `-method:tools/call tool:ask_*` alike.

A word is `FIELD:VALUE`, negated by a leading `-` or `!`. A value matches exactly or as a glob (`*`,
`?`), case-insensitively; a body matches a substring, or a glob within one line.
"""

from __future__ import annotations

from fnmatch import fnmatchcase


def split_word(word: str) -> tuple[bool, str, str | None]:
    """(negated, field name lower-cased, value) of a `FIELD:VALUE` word; a word that is not one gives
    (negated, the word without its negation, None)."""
    negate = word[:1] in ("-", "!") and len(word) > 1
    body = word[1:] if negate else word
    name, colon, value = body.partition(":")
    if not colon or not name.isidentifier():
        return negate, body, None
    return negate, name.lower(), value


def like(value: str | None, pattern: str) -> bool:
    """`value` matches the lower-cased `pattern` exactly or as a glob, case-insensitively."""
    return value is not None and fnmatchcase(value.lower(), pattern)


def holds_or_like(value: str | None, pattern: str) -> bool:
    """`value` holds the lower-cased `pattern`, or matches it as a glob (sessions, client names)."""
    if not value:
        return False
    value = value.lower()
    return pattern in value or fnmatchcase(value, pattern)


def body_like(pattern: str, text: str) -> bool:
    """Lower-cased bodies (one a line) hold `pattern`, or a line matches it as a glob within."""
    if "*" in pattern or "?" in pattern:
        return any(fnmatchcase(line, f"*{pattern}*") for line in text.splitlines())
    return pattern in text
