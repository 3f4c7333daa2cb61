"""HTTP head handling for a reverse proxy: which headers cross, how paths map, what content types mean."""

from __future__ import annotations

import re
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
    """A parsed upstream URL: where the proxy connects, what `Host` it presents, what target it asks for."""

    url: str
    scheme: str
    host: str
    port: int
    base_path: str
    query: str = ""
    """The upstream URL's query, as written (percent-encoding kept); every upstream request carries it."""

    host_header: str = field(init=False, repr=False, compare=False)
    """The `Host` value the upstream expects (port omitted when it is the scheme default)."""
    origin: str = field(init=False, repr=False, compare=False)
    """scheme://host:port, the part of the URL that names the server."""
    target: str = field(init=False, repr=False, compare=False)
    """The MCP endpoint in origin form (path and query), the request target of every bridged request."""

    def __post_init__(self) -> None:
        # Worked out once: all three are read for every relayed request.
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        host_header = host if self.port == default else f"{host}:{self.port}"
        object.__setattr__(self, "host_header", host_header)
        object.__setattr__(self, "origin", f"{self.scheme}://{host}:{self.port}")
        object.__setattr__(self, "target", self.with_query(self.base_path))

    def with_query(self, path: str, client_query: str = "") -> str:
        """`path` with the upstream URL's query, then the client's (unless it repeats the upstream's).

        The order is nginx's for a `proxy_pass` URL with arguments: the configured ones first.
        """
        queries = [q for q in (self.query, client_query) if q]
        if len(queries) == 2 and queries[0] == queries[1]:
            del queries[1]
        return f"{path}?{'&'.join(queries)}" if queries else path

    @property
    def shown(self) -> str:
        """The URL as logs, captures and screens show it: no userinfo, query values masked.

        The path and the query's parameter names stay, since they tell one upstream from another;
        a query value may be an API key.
        """
        if not self.query:
            return self.origin + self.base_path
        names = [pair.split("=", 1)[0] for pair in self.query.split("&")]
        return f"{self.origin}{self.base_path}?" + "&".join(f"{name}=<redacted>" for name in names)

    @property
    def secrets(self) -> tuple[str, ...]:
        """What in the URL may be a credential: the userinfo's password and the query's values."""
        password = urlsplit(self.url).password
        values = [pair.split("=", 1)[1] for pair in self.query.split("&") if "=" in pair]
        return tuple(v for v in (password, *values) if v)

    def path_for(self, client_path: str) -> str:
        """Map the client's request path onto the upstream's: the same path, `/` for the endpoint.

        The proxy mirrors the server's paths, so a client uses the server's own (`/mcp`, an OAuth
        `/.well-known/...` at the root) on the proxy's host and port; a bare `/` stands for the MCP
        endpoint, so the proxy's address alone works too.
        """
        return self.base_path if client_path in ("", "/") else client_path

    def is_endpoint(self, client_path: str) -> bool:
        """The client's path names the MCP endpoint (only its requests are ever bridged)."""
        return client_path in ("", "/") or client_path == self.base_path


_USERINFO_PASSWORD = re.compile(r"(//[^/?#@:]*:)[^/?#@]*@")
_QUERY_VALUE = re.compile(r"([?&][^=&#]*=)[^&#]*")


def masked_url(url: str) -> str:
    """Any URL text with its userinfo password and query values masked, for messages and screens.

    Works on text that may not even parse (an error message must not echo a secret either).
    """
    return _QUERY_VALUE.sub(r"\1<redacted>", _USERINFO_PASSWORD.sub(r"\1<redacted>@", url))


def parse_upstream(url: str) -> Upstream:
    """Parse and check an upstream URL (http or https with a host); ValueError says what is wrong."""
    parts = urlsplit(url)
    shown = masked_url(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"not an http(s) URL: {shown!r}")
    if not parts.hostname:
        raise ValueError(f"URL has no host: {shown!r}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:  # a port out of range or not a number
        raise ValueError(f"bad port in URL {shown!r}: {exc}") from None
    path = parts.path or "/"
    if _NOT_IN_TARGET.search(path + parts.query):
        raise ValueError(f"URL has spaces, controls or non-ASCII characters in its path or query: {shown!r}")
    return Upstream(
        url=url, scheme=parts.scheme, host=parts.hostname, port=port, base_path=path, query=parts.query
    )


# -- request heads on the wire ------------------------------------------------------------------------

_TOKEN_CHARS = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_TOKEN = re.compile(_TOKEN_CHARS)
"""RFC 9110 token: what a method and a header field name may consist of."""
_TOKENS = re.compile(rf"{_TOKEN_CHARS}(?:\t{_TOKEN_CHARS})*")
"""Tokens joined by tabs (a tab is no token character): every field name of a head in one match."""
_NOT_IN_TARGET = re.compile(r"[^\x21-\x7e]")
"""Anything but visible ASCII: a request target holds no space, control or other character raw
(a client percent-encodes them), since each would end or bend the request line."""
_NOT_IN_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
"""Control bytes a field value never holds (CR and LF would end the field; HTAB is allowed)."""


class HeadError(ValueError):
    """A request head that cannot go on the wire as given: it would change where the message ends."""


def origin_form(target: str) -> str:
    """Check that `target` is an origin-form request target (`/path?query`); HeadError if not.

    An absolute URL (`http://host/path`) is refused here, not sent: servers on h11 (uvicorn without
    httptools, which `pip install mcp` gives) route on the raw target and answer 404 to it.
    """
    if not target.startswith("/") or _NOT_IN_TARGET.search(target):
        raise HeadError(f"not an origin-form request target: {target[:200]!r}")
    return target


def encode_request_head(
    method: str, target: str, host: str, headers: Iterable[tuple[str, str]], body_length: int | None
) -> bytes:
    """The request line and headers as bytes, framed in this one place for every upstream request.

    `host` is the upstream's `Host`, added here so no caller sends its own; callers' `Host`,
    `Content-Length` and `Transfer-Encoding` are dropped, and `body_length` (None: no body, no
    length) alone frames the body, so no head ever carries two framings.
    Refuses (HeadError) a method or field name that is not a token, a target that is not origin form,
    and a value with CR, LF or another control byte, since each would let one message end early or
    smuggle a second one onto a pooled connection.
    """
    if not _TOKEN.fullmatch(method):
        raise HeadError(f"not an HTTP method token: {method[:100]!r}")
    lines = [f"{method} {origin_form(target)} HTTP/1.1\r\nHost: {host}\r\n"]
    names: list[str] = []
    values: list[str] = []
    for name, value in headers:
        if len(name) in (4, 14, 17) and name.lower() in ("host", "content-length", "transfer-encoding"):
            continue
        names.append(name)
        values.append(value)
        lines.append(f"{name}: {value}\r\n")
    # One scan of all names and one of all values: the head is framed for every relayed request.
    if names and not _TOKENS.fullmatch("\t".join(names)):
        bad = next(n for n in names if not _TOKEN.fullmatch(n))
        raise HeadError(f"not a header field name: {bad[:100]!r}")
    joined = "".join(values)
    if not joined.isprintable() and _NOT_IN_VALUE.search(joined):  # printable: no control byte at all
        bad = next(n for n, v in zip(names, values, strict=True) if _NOT_IN_VALUE.search(v))
        raise HeadError(f"control character in the value of header {bad}")
    if body_length is not None:
        lines.append(f"Content-Length: {body_length}\r\n")
    lines.append("\r\n")
    try:
        return "".join(lines).encode("latin-1")
    except UnicodeEncodeError:
        culprit = next((n for n, v in zip(names, values, strict=True) if not _is_latin1(n + v)), None)
        where = f"the value of header {culprit}" if culprit is not None else "the request line or Host"
        raise HeadError(f"{where} holds characters outside Latin-1") from None


def _is_latin1(text: str) -> bool:
    try:
        text.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True


def _connection_listed(headers: Iterable[tuple[str, str]]) -> frozenset[str]:
    listed: set[str] = set()
    for name, value in headers:
        if len(name) == 10 and name.lower() == "connection":
            listed.update(token.strip().lower() for token in value.split(",") if token.strip())
    return frozenset(listed)


_DROP_UP = HOP_BY_HOP | _NOT_FORWARDED_UP
_DROP_DOWN = HOP_BY_HOP | _NOT_FORWARDED_DOWN


def forward_request_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Client headers as sent upstream: hop-by-hop, `Host` and `Content-Length` dropped, the rest kept.

    The upstream's own `Host` and the body's length are added where the head is framed
    (`encode_request_head`).
    """
    items = list(headers)
    listed = _connection_listed(items)
    drop = _DROP_UP | listed if listed else _DROP_UP
    return [(k, v) for k, v in items if k.lower() not in drop]


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
