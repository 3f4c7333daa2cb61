"""Which client headers a bridge carries to the upstream: credentials and custom ones, nothing it sets.

Both bridges forward a request's `Authorization` and the headers the proxy does not know (a
tenant id, a trace header) and set every protocol header themselves: the session, the version, the
routing headers, the body's framing. One list serves both directions.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from proxy.wire.headers import (
    HOP_BY_HOP,
    LAST_EVENT_ID,
    METHOD,
    NAME,
    PARAM_PREFIX,
    PROTOCOL_VERSION,
    SESSION_ID,
)

_NOT_RELAYED: Final[frozenset[str]] = HOP_BY_HOP | frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "accept",
        "accept-encoding",
        SESSION_ID.lower(),
        LAST_EVENT_ID.lower(),
        PROTOCOL_VERSION.lower(),
        METHOD.lower(),
        NAME.lower(),
    }
)
"""Client headers a bridge sets itself, or that are meaningless (or harmful) to the other era's server."""


def relayed_client_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """The client headers that cross to the upstream: `Authorization` and custom ones, in order."""
    items = list(headers)
    listed = {
        token.strip().lower()
        for name, value in items
        if name.lower() == "connection"
        for token in value.split(",")
    }
    return [
        (name, value)
        for name, value in items
        if name.lower() not in _NOT_RELAYED
        and name.lower() not in listed
        and not name.lower().startswith(PARAM_PREFIX.lower())
    ]
