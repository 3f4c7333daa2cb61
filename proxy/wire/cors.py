"""The upstream's CORS answer, carried onto the answers a bridge makes in its place.

A bridge answers the client itself (an `input_required` round, a minted session, a translated
result), so the upstream's `Access-Control-*` response headers would never reach a browser client,
which then may send the request (the preflight passes through) but not read the answer. The bridge
keeps the CORS headers the upstream answered its last request for each `Origin` with, and adds them
to its own answers to requests from that origin; a header the bridge sets itself that the page must
read (a minted `Mcp-Session-Id`) joins `Access-Control-Expose-Headers` when the upstream allows the
origin at all. The policy stays the upstream's: with no CORS answer from it, nothing is added.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Final

from proxy.wire.headers import PROTOCOL_VERSION, SESSION_ID

PREFIX: Final = "access-control-"
ALLOW_ORIGIN: Final = "access-control-allow-origin"
EXPOSE: Final = "Access-Control-Expose-Headers"
READABLE: Final = (SESSION_ID.lower(), PROTOCOL_VERSION.lower())
"""Headers a bridge sets that a browser client reads: exposed when the upstream allows the origin."""

ORIGINS_KEPT: Final = 64
"""Origins whose CORS answer is remembered (the least recently answered goes first past it)."""

Headers = tuple[tuple[str, str], ...]


def origin_of(headers: Iterable[tuple[str, str]]) -> str | None:
    """The request's `Origin` (a browser's request), else None."""
    return next((v for k, v in headers if k.lower() == "origin"), None)


class CorsAnswers:
    """The upstream's CORS response headers by request origin, bounded by `ORIGINS_KEPT`."""

    def __init__(self) -> None:
        self._by_origin: OrderedDict[str, Headers] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_origin)

    def learn(self, origin: str | None, response_headers: Iterable[tuple[str, str]]) -> None:
        """Remember what the upstream answered a request from `origin` with (nothing for no origin)."""
        if origin is None:
            return
        cors = tuple((k, v) for k, v in response_headers if k.lower().startswith(PREFIX))
        if not cors:
            return
        self._by_origin[origin] = cors
        self._by_origin.move_to_end(origin)
        while len(self._by_origin) > ORIGINS_KEPT:
            self._by_origin.popitem(last=False)

    def add_to(self, origin: str | None, headers: Headers) -> Headers:
        """`headers` of an answer the bridge makes for a request from `origin`, with the upstream's
        CORS headers it does not set itself, and its own readable headers exposed."""
        cors = self._by_origin.get(origin) if origin is not None else None
        if not cors:
            return headers
        named = {k.lower() for k, _ in headers}
        added = [(k, v) for k, v in cors if k.lower() not in named]
        if not any(k.lower() == ALLOW_ORIGIN for k, _ in (*headers, *added)):
            return (*headers, *added)
        readable = [k for k, _ in headers if k.lower() in READABLE]
        exposed = next((v for k, v in added if k.lower() == EXPOSE.lower()), None)
        listed = {t.strip().lower() for t in (exposed or "").split(",") if t.strip()}
        missing = [k for k in readable if k.lower() not in listed and "*" not in listed]
        if missing and EXPOSE.lower() not in named:
            value = ", ".join([*([exposed] if exposed else []), *missing])
            added = [(k, v) for k, v in added if k.lower() != EXPOSE.lower()]
            added.append((EXPOSE, value))
        return (*headers, *added)
