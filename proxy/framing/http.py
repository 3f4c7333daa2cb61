"""HTTP head handling for a reverse proxy: which headers cross, how paths map, what content types mean."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import cast
from urllib.parse import urlsplit

from proxy.wire.headers import HOP_BY_HOP

SSE_TYPE = "text/event-stream"
JSON_TYPE = "application/json"

_NOT_FORWARDED_UP = frozenset({"host", "content-length"})
_NOT_FORWARDED_DOWN = frozenset({"content-length"})


@dataclass(frozen=True, slots=True)
class Upstream:
    """A parsed upstream URL: where the proxy connects and what `Host` it presents."""

    url: str
    scheme: str
    host: str
    port: int
    base_path: str

    host_header: str = field(init=False, repr=False, compare=False)
    """The `Host` value the upstream expects (port omitted when it is the scheme default)."""
    origin: str = field(init=False, repr=False, compare=False)
    """scheme://host:port, the part of the URL that names the server."""

    def __post_init__(self) -> None:
        # Worked out once: both are read for every relayed request.
        default = 443 if self.scheme == "https" else 80
        host_header = self.host if self.port == default else f"{self.host}:{self.port}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        object.__setattr__(self, "host_header", host_header)
        object.__setattr__(self, "origin", f"{self.scheme}://{host}:{self.port}")

    def path_for(self, client_path: str) -> str:
        """Map the client's request path onto the upstream URL's path.

        The client usually uses the upstream's path itself (`/mcp`); a bare `/` means the endpoint;
        anything else is placed under the upstream's base path.
        """
        base = self.base_path
        if base in ("", "/") or client_path == base or client_path.startswith(base.rstrip("/") + "/"):
            return client_path
        if client_path in ("", "/", base.rstrip("/")):
            return base
        return base.rstrip("/") + client_path


def parse_upstream(url: str) -> Upstream:
    """Parse and check an upstream URL (http or https with a host); ValueError says what is wrong."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"not an http(s) URL: {url!r}")
    if not parts.hostname:
        raise ValueError(f"URL has no host: {url!r}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return Upstream(url=url, scheme=parts.scheme, host=parts.hostname, port=port, base_path=parts.path or "/")


def _connection_listed(headers: Iterable[tuple[str, str]]) -> frozenset[str]:
    listed: set[str] = set()
    for name, value in headers:
        if len(name) == 10 and name.lower() == "connection":
            listed.update(token.strip().lower() for token in value.split(",") if token.strip())
    return frozenset(listed)


_DROP_UP = HOP_BY_HOP | _NOT_FORWARDED_UP
_DROP_DOWN = HOP_BY_HOP | _NOT_FORWARDED_DOWN


def forward_request_headers(headers: Iterable[tuple[str, str]], upstream: Upstream) -> list[tuple[str, str]]:
    """Client headers as sent upstream: hop-by-hop dropped, `Host` rewritten, everything else kept."""
    items = list(headers)
    listed = _connection_listed(items)
    drop = _DROP_UP | listed if listed else _DROP_UP
    out = [(k, v) for k, v in items if k.lower() not in drop]
    out.append(("Host", upstream.host_header))
    return out


def forward_response_headers(
    headers: Iterable[tuple[str, str]], *, keep_length: bool
) -> list[tuple[str, str]]:
    """Upstream response headers as sent to the client: hop-by-hop dropped, the rest kept."""
    items = list(headers)
    listed = _connection_listed(items)
    drop = HOP_BY_HOP if keep_length else _DROP_DOWN
    if listed:
        drop = drop | listed
    return [(k, v) for k, v in items if k.lower() not in drop]


def header(headers: Mapping[str, str] | Iterable[tuple[str, str]], name: str) -> str | None:
    """Case-insensitive lookup of the first header with this name.

    Called a dozen times per exchange on the hot path: lists and tuples skip the Mapping check, and
    a name of another length is passed over without lower-casing it.
    """
    kind = type(headers)
    items = cast("Iterable[tuple[str, str]]", headers) if kind is list or kind is tuple else _pairs(headers)
    wanted = name.lower()
    size = len(wanted)
    for key, value in items:
        if len(key) == size and key.lower() == wanted:
            return value
    return None


def _pairs(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> Iterable[tuple[str, str]]:
    return headers.items() if isinstance(headers, Mapping) else headers


def media_type(content_type: str | None) -> str:
    """The bare media type of a Content-Type value, lower-cased (`text/event-stream`)."""
    if not content_type:
        return ""
    return content_type.split(";", 1)[0].strip().lower()


def is_sse(content_type: str | None) -> bool:
    """True when a response is an SSE stream (must be relayed event by event, never buffered)."""
    return media_type(content_type) == SSE_TYPE
