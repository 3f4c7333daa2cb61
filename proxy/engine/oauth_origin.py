"""OAuth discovery through the proxy: URLs on the upstream's origin moved onto the client's, and back.

An MCP client given the proxy's URL follows what the server advertises: the `resource_metadata` URL
of a 401's `WWW-Authenticate` challenge, then the protected resource metadata (RFC 9728), then the
authorization server's metadata (RFC 8414, or OpenID's). A server that names its own URL there sends
the client around the proxy (or nowhere, when only the proxy is reachable), and the SDKs refuse a
`resource` that is not the URL they were given. So, as a reverse proxy does for its upstream's own
origin (nginx's `proxy_redirect default`), these URLs are moved onto the origin the client addressed
when they name the upstream's scheme, host and port, and the RFC 8707 `resource` a client then sends
is moved back, so an authorization server on the upstream's origin issues its token for the resource
it knows. URLs on any other origin (an authorization server elsewhere, a public URL the server
already advertises) are left as they are. The documents are found by their well-known paths, and by
the path a moved challenge named (RFC 9728 lets a server put its metadata at any URL): the proxy
learns those (`DocumentPaths`), a bounded table.

Pure functions and a table: no I/O, no clock. The relay decides when to call them and reports what
they changed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import quote, unquote_plus, urlsplit

import orjson

from proxy.engine.passthrough import proxied_location
from proxy.engine.url_origin import DEFAULT_PORTS, same_origin
from proxy.framing.http import Upstream

DOCUMENT_PATHS = (
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-authorization-server",
    "/.well-known/openid-configuration",
)
"""Where the discovery documents live: each path itself, or with the resource's or issuer's path after it."""

LEARNED_PATHS_LIMIT = 64
"""How many `resource_metadata` paths outside `DOCUMENT_PATHS` the proxy remembers (a server names one
or two; a server naming new ones without end makes the oldest forgotten, never the table grow)."""

_OPENID_SUFFIX = "/.well-known/openid-configuration"
"""OpenID Connect discovery of an issuer with a path puts the well-known part after it."""

_URL_SUFFIXES = ("_endpoint", "_uri", "_documentation")
"""Metadata members named this way hold a URL (`token_endpoint`, `jwks_uri`, `service_documentation`)."""

_URL_MEMBERS = frozenset({"issuer", "resource"})
_URL_LISTS = frozenset({"authorization_servers"})

_RESOURCE_METADATA = re.compile(r'(resource_metadata\s*=\s*)("[^"]*"|[^\s,]+)', re.IGNORECASE)
"""The `resource_metadata` parameter of a challenge (RFC 9728 section 5.1), quoted or bare."""

_RESOURCE_PARAMETER = "resource"
"""The RFC 8707 parameter that names the resource a token is asked for."""

FORM_TYPE = "application/x-www-form-urlencoded"

BYTES_HEADERS = frozenset({"etag", "digest", "content-md5", "content-digest", "repr-digest"})
"""Response headers that name the server's exact bytes: a rewritten document is other bytes, and a
client or cache that kept them would take the two for one entity (or find the digest wrong)."""


@dataclass(frozen=True, slots=True)
class Origins:
    """The upstream, and the origin the client addressed the proxy by (`http://HOST:PORT`)."""

    upstream: Upstream
    client: str

    @property
    def upstream_origin(self) -> str:
        """The upstream's origin as a URL writes it (the default port left out)."""
        return f"{self.upstream.scheme}://{self.upstream.host_header}"

    def to_client(self, url: str) -> str | None:
        """`url` moved onto the client's origin when it names the upstream's; None otherwise."""
        moved = proxied_location(url, self.upstream, self.client)
        return moved if moved != url else None

    def to_upstream(self, url: str) -> str | None:
        """`url` moved onto the upstream's origin when it names the client's (`url_origin.same_origin`,
        userinfo left out); None otherwise."""
        try:
            parts, own = urlsplit(url), urlsplit(self.client)
            own_port = own.port or DEFAULT_PORTS.get(own.scheme, 0)
        except ValueError:
            return None
        if not same_origin(parts, own.scheme, own.hostname or "", own_port):
            return None
        query = f"?{parts.query}" if parts.query else ""
        fragment = f"#{parts.fragment}" if parts.fragment else ""
        moved = f"{self.upstream_origin}{parts.path}{query}{fragment}"
        return moved if moved != url else None


@dataclass(frozen=True, slots=True)
class Rewritten:
    """What a rewrite made: the bytes to send, the members it changed, or why it left them as they were."""

    data: bytes
    changed: tuple[str, ...] = ()
    problem: str | None = None
    """Why a document that may hold such URLs was sent unchanged (not JSON, say); None otherwise."""


def is_document_path(path: str) -> bool:
    """The request asks for an OAuth or OpenID discovery document at a well-known path (a path as the
    client sent it)."""
    for prefix in DOCUMENT_PATHS:
        if path == prefix or path.startswith(prefix + "/"):
            return True
    return path.endswith(_OPENID_SUFFIX)


class DocumentPaths:
    """The paths whose JSON answers are discovery documents: the well-known ones, and each path a
    challenge moved onto the client's origin named as its `resource_metadata`, remembered (the
    oldest forgotten past `limit`) because the client asks for that document next, by that path."""

    __slots__ = ("_learned", "limit")

    def __init__(self, limit: int = LEARNED_PATHS_LIMIT) -> None:
        self.limit = limit
        self._learned: dict[str, None] = {}
        """Learned paths, oldest first (a dict keeps insertion order)."""

    def __repr__(self) -> str:
        return f"DocumentPaths(learned={list(self._learned)}, limit={self.limit})"

    def __contains__(self, path: str) -> bool:
        return path in self._learned or is_document_path(path)

    def learn(self, paths: Iterable[str]) -> None:
        """Remember `paths` (each as a URL writes it, percent-encoded) as discovery documents' paths."""
        learned = self._learned
        for path in paths:
            if is_document_path(path):
                continue
            learned.pop(path, None)
            learned[path] = None
            while len(learned) > self.limit:
                del learned[next(iter(learned))]


def is_json_type(content_type: str | None) -> bool:
    """A JSON media type (`application/json`, `application/jrd+json`, with or without parameters)."""
    if content_type is None:
        return False
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


class MovedChallenge(NamedTuple):
    """A challenge with its `resource_metadata` moved to the client, and the paths it now names."""

    text: str
    documents: tuple[str, ...]
    """The path of each moved `resource_metadata` URL: the client asks for a document there next."""


def challenge(value: str, origins: Origins) -> MovedChallenge | None:
    """A `WWW-Authenticate` value with its `resource_metadata` URL moved to the client; None if unchanged."""
    documents: list[str] = []

    def move(match: re.Match[str]) -> str:
        raw = match.group(2)
        quoted = raw.startswith('"')
        url = raw[1:-1] if quoted else raw
        moved = origins.to_client(url)
        if moved is None:
            return match.group(0)
        documents.append(urlsplit(url).path or "/")  # parsed once already: the path stays as it was
        return f'{match.group(1)}"{moved}"' if quoted else f"{match.group(1)}{moved}"

    rewritten = _RESOURCE_METADATA.sub(move, value)
    return MovedChallenge(rewritten, tuple(documents)) if documents else None


def document(data: bytes, origins: Origins) -> Rewritten:
    """A discovery document with its URL members on the upstream's origin moved to the client's.

    Moved: `resource`, `issuer`, each `authorization_servers` entry and every member named like a URL
    (`*_endpoint`, `*_uri`, `*_documentation`), at the top level. The other bytes stay as the server
    wrote them (each changed string replaced where it stands) unless that cannot be done exactly, when
    the document is written anew.
    """
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return Rewritten(data, problem="not JSON")
    if not isinstance(doc, dict):
        return Rewritten(data, problem="not a JSON object")
    moved: dict[str, object] = {}
    changed: list[str] = []
    pairs: dict[str, str] = {}
    for key, member in doc.items():
        if isinstance(member, str) and _names_url(key):
            new = origins.to_client(member)
            if new is not None:
                moved[key], pairs[member] = new, new
                changed.append(key)
        elif key in _URL_LISTS and isinstance(member, list):
            entries = list(member)
            for i, entry in enumerate(entries):
                new = origins.to_client(entry) if isinstance(entry, str) else None
                if new is not None:
                    entries[i], pairs[entry] = new, new
                    changed.append(f"{key}[{i}]")
            moved[key] = entries
    if not changed:
        return Rewritten(data)
    expected = {**doc, **moved}
    return Rewritten(_replaced(data, pairs, expected), tuple(changed))


def rewritten_document_headers(headers: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """The server's headers for a document whose bytes the proxy changed: without `BYTES_HEADERS`."""
    return tuple((name, value) for name, value in headers if name.lower() not in BYTES_HEADERS)


def _names_url(key: str) -> bool:
    return key in _URL_MEMBERS or key.endswith(_URL_SUFFIXES)


def _replaced(data: bytes, pairs: dict[str, str], expected: dict[str, object]) -> bytes:
    """`data` with each old JSON string replaced by its new one, when that gives `expected` exactly."""
    out = data
    for old, new in pairs.items():
        out = out.replace(orjson.dumps(old), orjson.dumps(new))
    try:
        if orjson.loads(out) == expected:
            return out
    except orjson.JSONDecodeError:
        pass
    return orjson.dumps(expected)


def resource_parameters(encoded: str, origins: Origins) -> str | None:
    """A query or form body with each `resource` naming the client's origin moved to the upstream's;
    None if none did. Every other byte stays as the client sent it."""
    parts = encoded.split("&")
    changed = False
    for i, pair in enumerate(parts):
        name, eq, value = pair.partition("=")
        if not eq or unquote_plus(name) != _RESOURCE_PARAMETER:
            continue
        moved = origins.to_upstream(unquote_plus(value))
        if moved is not None:
            parts[i] = f"{name}={quote(moved, safe='')}"
            changed = True
    return "&".join(parts) if changed else None


def is_form(content_type: str | None) -> bool:
    """A form-encoded body (an OAuth token request's)."""
    return content_type is not None and content_type.split(";", 1)[0].strip().lower() == FORM_TYPE
