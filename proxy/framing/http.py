"""HTTP head handling for a reverse proxy: which headers cross, how paths map, what content types mean.

Heads are parsed and framed on the wire by the HTTP/1.1 core (`proxy.framing.h1`); `header` is
re-exported from there, since most of the proxy looks headers up through this module.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from proxy.framing.h1 import NOT_IN_TARGET
from proxy.framing.h1 import header as header
from proxy.wire.headers import HOP_BY_HOP, forwarded_fields
from proxy.wire.path_keys import credential_segment, masked_path

SSE_TYPE = "text/event-stream"
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
    transport: str = "http"
    """How the proxy speaks to it, as configured: `http` (Streamable HTTP, or HTTP+SSE found by the
    era probe), `sse` (HTTP+SSE, named by the user) or `stdio` (a command the proxy runs)."""
    command_secrets: tuple[str, ...] = field(default=(), repr=False, compare=False)
    """A stdio command's values `masked_command` hides, and the secret-named environment it inherits."""

    host_header: str = field(init=False, repr=False, compare=False)
    """The `Host` value the upstream expects (port omitted when it is the scheme default)."""
    origin: str = field(init=False, repr=False, compare=False)
    """scheme://host:port, the part of the URL that names the server."""
    target: str = field(init=False, repr=False, compare=False)
    """The MCP endpoint in origin form (path and query), the request target of every bridged request."""
    endpoint_paths: frozenset[str] = field(init=False, repr=False, compare=False)
    """The client paths that name the MCP endpoint (only their requests are ever bridged)."""

    def __post_init__(self) -> None:
        if self.scheme == "stdio":  # a command: no host, and the proxy serves it at its base path
            for name, value in (("host_header", ""), ("origin", self.url), ("target", self.base_path)):
                object.__setattr__(self, name, value)
            object.__setattr__(self, "endpoint_paths", frozenset({"", "/", self.base_path}))
            return
        # Worked out once: all three are read for every relayed request.
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        host_header = host if self.port == default else f"{host}:{self.port}"
        object.__setattr__(self, "host_header", host_header)
        object.__setattr__(self, "origin", f"{self.scheme}://{host}:{self.port}")
        object.__setattr__(self, "target", self.with_query(self.base_path))
        object.__setattr__(self, "endpoint_paths", frozenset({"", "/", self.base_path}))

    def with_query(self, path: str, client_query: str = "") -> str:
        """`path` with the upstream URL's query, then the client's (unless it repeats the upstream's).

        The order is nginx's for a `proxy_pass` URL with arguments: the configured ones first.
        """
        queries = [q for q in (self.query, client_query) if q]
        if len(queries) == 2 and queries[0] == queries[1]:
            del queries[1]
        return f"{path}?{'&'.join(queries)}" if queries else path

    def request_target(self, client_path: str, client_query: str = "") -> str:
        """The origin-form request target for a client's path and raw query (`path_for`, `with_query`).

        The one place a request target is made: the upstream pool derives every request line from it,
        so no caller builds one.
        """
        if client_path == self.base_path and not client_query:
            return self.target  # the MCP endpoint, worked out once
        return self.with_query(self.path_for(client_path), client_query)

    @property
    def shown(self) -> str:
        """The URL as logs, captures and screens show it: no userinfo, query values and
        credential-like path segments masked.

        The rest of the path and the query's parameter names stay, since they tell one upstream from
        another; a query value or a key in the path (`/s/<key>/mcp`) may be an API key.
        """
        if self.scheme == "stdio":
            return self.url
        if not self.query:
            return self.origin + self.shown_path
        names = [pair.split("=", 1)[0] for pair in self.query.split("&")]
        return f"{self.origin}{self.shown_path}?" + "&".join(f"{name}=<redacted>" for name in names)

    @property
    def shown_path(self) -> str:
        """The endpoint's path as shown to people: a key in it (`/s/<key>/mcp`) masked."""
        return masked_path(self.base_path)

    @property
    def secrets(self) -> tuple[str, ...]:
        """What in the URL may be a credential: the userinfo's password, the query's values and the
        path's credential-like segments (for a stdio command, what its shown command hides)."""
        if self.scheme == "stdio":
            return self.command_secrets
        password = urlsplit(self.url).password
        values = [pair.split("=", 1)[1] for pair in self.query.split("&") if "=" in pair]
        segments = [s for s in self.base_path.split("/") if credential_segment(s)]
        return tuple(v for v in (password, *values, *segments) if v)

    def path_for(self, client_path: str) -> str:
        """Map the client's request path onto the upstream's: the same path, `/` for the endpoint.

        The proxy mirrors the server's paths, so a client uses the server's own (`/mcp`, an OAuth
        `/.well-known/...` at the root) on the proxy's host and port; a bare `/` stands for the MCP
        endpoint, so the proxy's address alone works too.
        """
        return self.base_path if client_path in ("", "/") else client_path


_USERINFO_PASSWORD = re.compile(r"([^/?#@:\s'\"]*:)[^/?#@\s]*@")
"""A userinfo's password, with or without the `//` before it (`user:pw@host`, `http:/user:pw@host`):
text that is not a well-formed URL must not show it either."""
_QUERY_VALUE = re.compile(r"([?&][^=&#]*=)[^&#]*")


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address, without brackets) is this machine's loopback."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def masked_url(url: str) -> str:
    """Any URL text with its userinfo password, query values and credential-like path segments
    masked, for messages and screens.

    Works on text that may not even parse (an error message must not echo a secret either).
    """
    text = _QUERY_VALUE.sub(r"\1<redacted>", _USERINFO_PASSWORD.sub(r"\1<redacted>@", url))
    return masked_path(text)


_SECRET_WORDS = (
    "key",
    "token",
    "secret",
    "pass",
    "pwd",
    "auth",
    "cred",
    "cookie",
    "jwt",
    "bearer",
    "signature",
    "session",
)
_ASSIGNMENT = re.compile(r"^(-{0,2}[A-Za-z_][A-Za-z0-9_.-]*)=(.*)$", re.DOTALL)
_HEADER_LINE = re.compile(r"^([A-Za-z0-9-]+):\s*(.*)$", re.DOTALL)


_SECRET_NAME_WORDS = frozenset({"pat", "pin", "otp", "dsn"})
"""Short names of secrets that count only as a whole word of the name (`GITLAB_PAT`, `SENTRY_DSN`):
inside another word they mean nothing (`PATH`, `SPINNER`)."""


def _names_secret(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in _SECRET_WORDS) or not _SECRET_NAME_WORDS.isdisjoint(
        re.split(r"[^a-z0-9]+", lowered)
    )


def masked_command(argv: Iterable[str]) -> str:
    """A command line as logs and screens show it, with what may be a credential masked.

    Masked: the value of an option named like a secret (`--api-key VALUE`, `--token=VALUE`), of an
    assignment named like one (`env GITHUB_TOKEN=VALUE cmd`), of a header line named like one (the
    `Authorization: Bearer ...` a `--header` passes on), and the password and query values of a URL.
    """
    return shlex.join(_masked_words(argv, []))


def command_secrets(argv: Iterable[str], env: Mapping[str, str]) -> tuple[str, ...]:
    """What `masked_command` hides of a command, the values of the variables named like secrets in
    the environment it inherits (`GITHUB_PERSONAL_ACCESS_TOKEN`), and the password of a URL one holds
    (`DATABASE_URL=postgres://app:<password>@db/app`, which the child's stderr lines show masked): a
    server that echoes one (its argv in a log line, its token in a result) must show it masked."""
    hidden: list[str] = []
    _masked_words(argv, hidden)
    for name, value in env.items():
        if _names_secret(name) and _credential_like(value):
            hidden.append(value)
        elif "://" in value and "@" in value and _distinctive(password := _url_password(value)):
            hidden.append(password)
    return tuple(dict.fromkeys(value for value in hidden if value))


def _url_password(url: str) -> str:
    """The password of a URL's userinfo, or "" (none, or text that does not parse as a URL)."""
    try:
        return urlsplit(url).password or ""
    except ValueError:
        return ""


def _distinctive(password: str) -> bool:
    """A URL password in the environment worth masking wherever it shows: one that could be a word
    (`HTTP_PROXY=http://u:pass@proxy`, `postgres://postgres:postgres@db`) would blot out that word in
    every log line and body instead (the child's stderr still shows the URL itself masked)."""
    return _credential_like(password) and not password.isalpha()


def _credential_like(value: str) -> bool:
    """An environment value that may be a credential: not a word (`AUTH_ENABLED=true`), a number or
    a path (`SSH_AUTH_SOCK`), which would blot out every text they appear in."""
    return len(value) >= 8 and not value.startswith(("/", "~")) and not any(c.isspace() for c in value)


def _masked_words(argv: Iterable[str], hidden: list[str]) -> list[str]:
    """Each word as shown, with each value it hides appended to `hidden`."""
    shown: list[str] = []
    mask_next = False
    for word in argv:
        if mask_next:
            shown.append("<redacted>")
            hidden.append(word)
            mask_next = False
            continue
        assignment = _ASSIGNMENT.match(word)
        header_line = _HEADER_LINE.match(word)
        if assignment is not None and _names_secret(assignment.group(1)):
            shown.append(f"{assignment.group(1)}=<redacted>")
            hidden.append(assignment.group(2))
        elif header_line is not None and header_line.group(2) and _names_secret(header_line.group(1)):
            shown.append(f"{header_line.group(1)}: <redacted>")
            value = header_line.group(2)
            scheme, _, credential = value.partition(" ")
            hidden.append(credential if credential and scheme.lower() in ("bearer", "basic") else value)
        elif "://" in word:
            shown.append(masked_url(word))
            parts = urlsplit(word)
            hidden.extend(
                v for v in (parts.password, *(q.partition("=")[2] for q in parts.query.split("&"))) if v
            )
        else:
            shown.append(word)
            mask_next = word.startswith("-") and "=" not in word and _names_secret(word)
    return shown


_WORD = re.compile(r"\S+")
_SECRET_IN_TEXT = re.compile(
    r"(?<![\w.-])(?:(?P<opt>-{1,2}[A-Za-z][\w.-]*)(?P<osep>\s+|=)"
    r"|(?P<name>[A-Za-z_][\w.-]*)(?P<sep>\"?\s*[:=]\s*\"?))"
    r"(?P<scheme>(?:Bearer|Basic)\s+)?(?P<value>[^\s,;\"]+)"
)
"""A value after a name: `--name VALUE`, `name=VALUE`, `name: VALUE`, `"name":"VALUE"` (a JSON log line)."""

_TOKEN_SHAPES = re.compile(
    r"(?i:\b(?:bearer|basic)\s+)(?P<after>[A-Za-z0-9._~+/=-]{8,})"
    r"|\b(?P<shaped>(?:sk|pk|rk)[-_][A-Za-z0-9_-]{8,}|gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,}"
    r"|xox[abpros]-[A-Za-z0-9-]{8,}|AKIA[0-9A-Z]{16}|eyJ[\w-]{6,}\.[\w-]{6,}\.[\w-]+)"
)
"""Credentials told by their shape wherever they stand: a bearer or basic credential after its
scheme, and the well-known token formats (`sk-...` API keys, GitHub, Slack and AWS access key ids,
JWTs)."""


def masked_text(text: str) -> str:
    """Free text (a line a server wrote to stderr) with what may be a credential masked.

    Masked: the value after a name like a secret's, given as `NAME=VALUE`, `NAME: VALUE` or
    `--name VALUE` (`token=...`, `Authorization: Bearer ...`, `--api-key ...`), and the password
    and query values of a URL. It errs on the side of masking.
    """

    def mask(found: re.Match[str]) -> str:
        name = found.group("opt") or found.group("name")
        sep = found.group("osep") or found.group("sep")
        if _names_secret(name):
            return f"{name}{sep}{found.group('scheme') or ''}<redacted>"
        # not a secret's name: its value may still hold one (`Error: token=...`)
        return f"{name}{sep}{found.group('scheme') or ''}{_SECRET_IN_TEXT.sub(mask, found.group('value'))}"

    def shaped(found: re.Match[str]) -> str:
        if found.group("after") is not None:
            return found.group(0)[: found.start("after") - found.start()] + "<redacted>"
        return "<redacted>"

    text = _WORD.sub(lambda word: masked_url(word.group(0)), _SECRET_IN_TEXT.sub(mask, text))
    return _TOKEN_SHAPES.sub(shaped, text)


STDIO_PATH = "/mcp"
"""The path the proxy serves a stdio upstream at (as well as `/`)."""


def stdio_upstream(shown: str, secrets: tuple[str, ...] = ()) -> Upstream:
    """The upstream a stdio command stands for; `shown` is the command as logs show it (no secrets),
    `secrets` what it hides (`command_secrets`)."""
    return Upstream(
        url=f"stdio:{shown}",
        scheme="stdio",
        host="",
        port=0,
        base_path=STDIO_PATH,
        transport="stdio",
        command_secrets=secrets,
    )


def parse_upstream(url: str, transport: str = "http") -> Upstream:
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
    if NOT_IN_TARGET.search(path + parts.query):
        raise ValueError(f"URL has spaces, controls or non-ASCII characters in its path or query: {shown!r}")
    return Upstream(
        url=url,
        scheme=parts.scheme,
        host=parts.hostname,
        port=port,
        base_path=path,
        query=parts.query,
        transport=transport,
    )


_DROP_UP = HOP_BY_HOP | _NOT_FORWARDED_UP
_DROP_DOWN = HOP_BY_HOP | _NOT_FORWARDED_DOWN


def forward_request_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Client headers as sent upstream: hop-by-hop, `Host` and `Content-Length` dropped, the rest kept.

    The upstream's own `Host` and the body's length are added where the head is framed
    (`proxy.framing.h1.encode_request_head`).
    """
    return forwarded_fields(headers, _DROP_UP)


def forward_response_headers(
    headers: Iterable[tuple[str, str]], *, keep_length: bool
) -> list[tuple[str, str]]:
    """Upstream response headers as sent to the client: hop-by-hop dropped, the rest kept."""
    return forwarded_fields(headers, HOP_BY_HOP if keep_length else _DROP_DOWN)


def media_type(content_type: str | None) -> str:
    """The bare media type of a Content-Type value, lower-cased (`text/event-stream`)."""
    if not content_type:
        return ""
    return content_type.split(";", 1)[0].strip().lower()


def is_sse(content_type: str | None) -> bool:
    """True when a response is an SSE stream (must be relayed event by event, never buffered)."""
    return media_type(content_type) == SSE_TYPE
