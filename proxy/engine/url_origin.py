"""Whether a URL names a given origin, the one rule every rewrite between origins uses.

A reverse proxy moves URLs that name its upstream's origin onto its own (a redirect's `Location`,
OAuth discovery) and the client's back onto the upstream's (an RFC 8707 `resource`). Both
directions ask the same question, so they answer it here, the RFC 6454 way: an origin is a scheme,
a host and a port; scheme and host compare without case, and a URL that writes no port has its
scheme's default (80 for `http`, 443 for `https`). A scheme-relative URL (`//host/path`) takes the
scheme of the origin it is compared with, as a client resolves it against the URL it came from.

Userinfo (`user:password@`) is no part of an origin: a URL that carries some is on the origin its
host names, and a URL moved onto another origin leaves it out, since those credentials were written
for the host the URL named and must not follow the URL to another.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import SplitResult

DEFAULT_PORTS: Final = {"http": 80, "https": 443}
"""The port a URL of each scheme means when it writes none."""


def same_origin(parts: SplitResult, scheme: str, host: str, port: int) -> bool:
    """True when the split URL `parts` names `scheme://host:port`; False for a relative reference,
    another origin, or a port that is no number."""
    if not parts.netloc:
        return False
    own_scheme = (parts.scheme or scheme).lower()
    try:
        written = parts.port
    except ValueError:
        return False
    if own_scheme != scheme.lower() or (parts.hostname or "") != host.lower():
        return False
    return (written or DEFAULT_PORTS.get(own_scheme, 0)) == port
