"""Which client exchanges are MCP traffic: those to the MCP endpoint, told apart by their path.

The proxy mirrors the server's paths, and only the endpoint (the upstream URL's path, a bare `/`
standing for it) carries JSON-RPC. A request to any other path (an OAuth server's `/.well-known/...`
documents, `/authorize`, `/register`, `/token`) is plain HTTP the proxy relays: the chain builder, the
round-trip tally, the metrics and the HAR export name it by its HTTP method and path and judge it by
its HTTP status, never as a JSON-RPC message. The running proxy knows its upstream's path; a reader
of a capture learns it from the capture's `proxy_info` (the upstream as shown), so a capture written
before this judgement reads the same way. Pure text: no I/O.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import urlsplit

_MASKED: Final = "<redacted"
"""How a credential-like path segment begins once masked (`<redacted>` in an upstream as shown,
`<redacted len=.. hmac:..>` in a recorded request target)."""

PLAIN_METHOD: Final = re.compile(r"[A-Z]+")
"""An HTTP method as a plain HTTP chain's `method` holds it (its `name` is the path)."""


class Endpoint:
    """The client paths that name the MCP endpoint; any other path's exchanges are plain HTTP.

    Made without a path, every path counts as the endpoint: what a reader does before it knows the
    upstream (a capture without `proxy_info`, a test that feeds observations alone). So does an
    upstream at its root (`http://gateway:8080/`): the proxy mirrors each client's own path there (a
    gateway taking a key per client in the path, `/gw/<key>/mcp`), so any path may be its endpoint.
    """

    __slots__ = ("_base", "_paths", "paths")

    def __init__(self, path: str | None = None) -> None:
        if path in ("", "/"):
            path = None  # an upstream at its root: every client path may be its endpoint
        self._base = path
        self._paths = None if path is None else frozenset({"", "/", path})
        self.paths: frozenset[str] = self._paths or frozenset()
        """The paths that are the endpoint itself, whatever the transports: a caller on the hot path
        checks a request's path against these before asking `is_plain` (empty when unknown)."""

    @classmethod
    def of_upstream(cls, shown: str) -> Endpoint:
        """The endpoint of an upstream as `proxy_info.upstream` shows it; one that is no URL (a stdio
        command, which has no other path to relay to) names none."""
        try:
            parts = urlsplit(shown)
        except ValueError:
            return cls()
        if parts.scheme not in ("http", "https"):
            return cls()
        return cls(parts.path)

    @property
    def known(self) -> bool:
        """Whether the endpoint's path is known (else every path counts as the endpoint)."""
        return self._paths is not None

    def is_plain(self, path: str, client_transport: str = "http", upstream_transport: str = "http") -> bool:
        """Whether a client's request to `path` (its target: a query is left aside) is plain HTTP.

        Only a Streamable HTTP client names a path of its own (a stdio or HTTP+SSE client's exchanges
        are the proxy's own making, always the endpoint's), and only to a Streamable HTTP upstream
        does the proxy relay other paths: a stdio or HTTP+SSE upstream has its one endpoint, and the
        proxy answers a request to another path itself (a misdirected MCP request, told so in JSON-RPC).
        """
        paths = self._paths
        if paths is None or path in paths or client_transport != "http" or upstream_transport != "http":
            return False  # the endpoint itself, its path alone (every MCP request), is decided first
        path = path.split("?", 1)[0]
        if path in paths:
            return False
        base = self._base
        return base is None or _MASKED not in base or not _masked_match(base, path)


def _masked_match(base: str, path: str) -> bool:
    """Whether a recorded path is the endpoint whose shown path has masked segments: each masked
    segment of the endpoint stands for any masked segment of the path."""
    want, got = base.split("/"), path.split("/")
    if len(want) != len(got):
        return False
    return all(
        w == g or (w.startswith(_MASKED) and g.startswith(_MASKED)) for w, g in zip(want, got, strict=True)
    )


def is_plain_chain(method: str | None, name: str | None) -> bool:
    """Whether a chain's headline is that of a plain HTTP exchange (method `POST`, name `/token`)."""
    return (
        method is not None
        and name is not None
        and name.startswith("/")
        and PLAIN_METHOD.fullmatch(method) is not None
    )
