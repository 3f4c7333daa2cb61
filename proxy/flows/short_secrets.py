"""Short credentials from a URL's userinfo, masked where they show again without blotting out words.

A password in `scheme://user:pw@host` is a secret whatever its length, but a redactor masks the
texts it remembers wherever they appear, so it remembers none shorter than `MIN_ECHOED_SECRET`
(`pw` would mask every `pw` in every header and body). These are kept here instead, and masked
only where they cannot be a piece of something else:

- a userinfo (`user:pw`, as sent and decoded) where it is again a URL's userinfo, between `//` and
  `@`, so the same URL in a body or header shows it masked as the request's did;
- the password alone where a whole value is exactly it: a JSON string, a header value, a log field.
  One made of letters only is left out, as a longer one is (`pass` would mask that word wherever
  it is a value, such as a schema's `required` list).

Pure: it keeps the texts and finds them; the redactor says what each becomes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

import orjson

MAX_SHORT_SECRETS: Final = 32
"""Most short credentials kept at once, of each kind (the most recent kept): a few clients' URLs."""


class ShortSecrets:
    """The short userinfos and passwords seen, and the patterns that find them where they show."""

    def __init__(self) -> None:
        self._userinfos: dict[str, None] = {}
        self._values: dict[str, None] = {}
        self._text: re.Pattern[str] | None = None
        self._json: re.Pattern[bytes] | None = None
        self.any = False
        """Some short secret is kept (a plain field: every masked header and body asks; entries only
        leave past the bound, so it never turns False again)."""

    def add_userinfo(self, userinfo: str) -> None:
        """Mask this userinfo where a URL carries it again."""
        self._add(self._userinfos, userinfo)

    def add_value(self, password: str) -> None:
        """Mask this password where a whole value is exactly it (not one made of letters only)."""
        if not password.isalpha():
            self._add(self._values, password)

    def _add(self, kept: dict[str, None], text: str) -> None:
        if not text or text in kept:
            return
        kept[text] = None
        self.any = True
        while len(kept) > MAX_SHORT_SECRETS:
            del kept[next(iter(kept))]
        self._compile()

    def _compile(self) -> None:
        userinfos = sorted(self._userinfos, key=len, reverse=True)
        values = sorted(self._values, key=len, reverse=True)
        self._text = re.compile(f"(?<=//)(?:{_any(userinfos)})(?=@)") if userinfos else None
        in_url = [rb"(?<=//)(?P<url>" + _any_json(userinfos) + rb")(?=@)"] if userinfos else []
        whole = [rb'(?<=[:,\[])"(?P<whole>' + _any_json(values) + rb')"(?=[,\]}])'] if values else []
        self._json = re.compile(b"|".join(in_url + whole)) if in_url or whole else None

    def scrub(self, value: str, mask: Callable[[str], str]) -> str:
        """`value` with each short userinfo in a URL masked, or masked whole when it is a password."""
        if value in self._values:
            return mask(value)
        if self._text is None or "@" not in value:
            return value
        return self._text.sub(lambda m: mask(m.group(0)), value)

    def scrub_json(self, encoded: bytes, mask: Callable[[str], str]) -> bytes | None:
        """Compact JSON with each short userinfo in a URL masked inside its strings, and each string
        that is exactly a password masked; None when none is in it."""
        if self._json is None:
            return None

        def masked(match: re.Match[bytes]) -> bytes:
            found = match.groupdict()
            if found.get("url") is not None:
                return _json_text(mask(orjson.loads(b'"' + found["url"] + b'"')))
            return b'"' + _json_text(mask(orjson.loads(b'"' + found["whole"] + b'"'))) + b'"'

        scrubbed, count = self._json.subn(masked, encoded)
        return scrubbed if count else None


def _any(texts: list[str]) -> str:
    return "|".join(re.escape(text) for text in texts)


def _any_json(texts: list[str]) -> bytes:
    """Each text as it appears inside a JSON string, as alternatives of a pattern."""
    return b"|".join(re.escape(_json_text(text)) for text in texts)


def _json_text(text: str) -> bytes:
    """A text as compact JSON writes it inside a string (without the quotes)."""
    return orjson.dumps(text)[1:-1]
