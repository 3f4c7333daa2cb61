"""Which callers the upstream accepts, and how its refusal reaches a bridged client.

A bridge answers some requests itself from what the upstream told it earlier (the legacy bridge's
`initialize` from a cached `server/discover`, the modern one's `server/discover` from a session's
InitializeResult). The upstream judges each request by who sends it: its `Origin` (a server that
defends itself against DNS rebinding) and its credentials (a server that asks for a bearer token).
So an answer made from what the server said to one caller must not reach a caller the server would
refuse. Each bridge keeps `KnownCallers`, the (`Origin`, principal) pairs (absence of either
included) the upstream answered with a success, and asks the upstream with the client's own headers
before it answers any other caller from what it holds; the server's 401 or 403 then reaches that
caller with the server's challenge.

A 4xx whose body holds no JSON-RPC message is the server refusing the request itself (its Host or
Origin check, its authentication): the bridge answers with that status and a JSON-RPC error quoting
the server's words (`refusal`), never as a gateway fault. Both eras get a JSON-RPC body: a bridge is
that era's server, so its answers are JSON-RPC messages carrying the request's id, and the HTTP
status, which both eras' SDKs read first, stays the server's.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

from proxy.engine.commands import Log
from proxy.engine.principal import ANONYMOUS, principal_of
from proxy.wire import errors
from proxy.wire.cors import origin_of
from proxy.wire.jsonrpc import RequestId, error_response

CALLERS_KEPT: Final = 256
"""Callers remembered as accepted; past it the earliest learned is forgotten (and asked about again)."""

_CALLER_FIELDS: Final = frozenset({"origin", "authorization"})
"""The fields a caller is judged by (lower case): both cross unless `Connection` lists them."""

_CALLER_NAME_SIZES: Final = frozenset({len("origin"), len("authorization"), len("connection")})

WORDS_KEPT: Final = 500
"""Characters of a refusal's body quoted to the client (and in logs)."""


class Caller(NamedTuple):
    """What the upstream judges a request by: its `Origin` (None: none) and its principal."""

    origin: str | None = None
    principal: str = ANONYMOUS


UNNAMED: Final = Caller()
"""A request with neither `Origin` nor `Authorization` (a default for records made without headers)."""


def caller_of(headers: tuple[tuple[str, str], ...]) -> Caller:
    """Who sends a request, as the upstream judges it: the `Origin` and `Authorization` that reach it.

    One reading for a client's request and for the leg a bridge sends with its headers, so what a
    leg's success teaches is what the request is checked against: a field the client lists in
    `Connection` is hop-by-hop and never crosses (`relayed_client_headers`), so it names no one.
    """
    picked: list[tuple[str, str]] = []
    listed = ""
    for name, value in headers:  # one pass, no copy: this runs for every request a bridge sends
        if len(name) in _CALLER_NAME_SIZES:
            key = name.lower()
            if key == "connection":
                listed = f"{listed},{value}"
            elif key in _CALLER_FIELDS:
                picked.append((name, value))
    if listed:  # a field the client lists in `Connection` does not cross (`relayed_client_headers`)
        hop = {token.strip().lower() for token in listed.split(",")}
        picked = [(name, value) for name, value in picked if name.lower() not in hop]
    return Caller(origin_of(picked), principal_of(picked))


class KnownCallers:
    """The callers (`Caller`) the upstream has answered with success.

    Bounded by `CALLERS_KEPT`; a known caller costs one set lookup, and forgetting one only costs
    the next request from it a trip upstream. Only the principal's hash is kept, never a credential.
    """

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[Caller, None] = {}
        """An insertion-ordered set: the first key is the earliest learned."""

    def __contains__(self, caller: Caller) -> bool:
        return caller in self._seen

    def __len__(self) -> int:
        return len(self._seen)

    def __repr__(self) -> str:
        return f"KnownCallers({len(self._seen)})"

    def learn(self, caller: Caller, status: int | None) -> None:
        """The upstream answered a request `caller` sent with `status`: a success vouches for it."""
        if status is None or not 200 <= status < 300 or caller in self._seen:
            return
        if len(self._seen) >= CALLERS_KEPT:
            del self._seen[next(iter(self._seen))]
        self._seen[caller] = None


def challenges(status: int, headers: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """The `WWW-Authenticate` headers of a 401 or 403 head (RFC 6750: where and how to authenticate,
    or the `insufficient_scope` a token lacks), which a bridged refusal carries to its client."""
    if status not in (401, 403):
        return ()
    return tuple((name, value) for name, value in headers if name.lower() == "www-authenticate")


def refused(status: int | None) -> bool:
    """Whether a leg's status is the server refusing the request itself: a 4xx, but not 404, which
    says the session (or the endpoint) is unknown there and which each bridge answers on its own."""
    return status is not None and 400 <= status < 500 and status != 404


def server_words(body: bytes) -> str:
    """The refusal body as text for the client, bounded, control characters replaced."""
    text = body[: WORDS_KEPT * 4].decode("utf-8", "replace").strip()
    text = "".join(ch if ch.isprintable() else " " for ch in text)[:WORDS_KEPT]
    return text


def refusal_log(method: str, status: int, origin: str | None, body: bytes) -> Log:
    """The `upstream_refused` line: which request, the status, the origin it carried, the words."""
    fields = {"method": method, "status": status, "origin": origin, "said": server_words(body)}
    return Log("upstream_refused", "info", fields)


def refusal(ident: RequestId | None, status: int, body: bytes) -> dict[str, Any]:
    """The JSON-RPC error a bridge answers a refused request with (sent with the server's `status`)."""
    words = server_words(body)
    text = f"the upstream MCP server refused the request (HTTP {status})"
    data: dict[str, Any] = {"status": status}
    if words:
        text = f"{text}: {words}"
        data["upstream"] = words
    return error_response(ident, errors.INVALID_REQUEST, text, data)
