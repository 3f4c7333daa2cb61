"""Which client origins the upstream accepts, and how its refusal reaches a bridged client.

A bridge answers some requests itself from what the upstream told it earlier (the legacy bridge's
`initialize` from a cached `server/discover`, the modern one's `server/discover` from a session's
InitializeResult). An upstream that defends itself against DNS rebinding judges each request's
`Origin`, so an answer made from what the server said to one origin must not reach another origin
the server would refuse. Each bridge keeps `KnownOrigins`, the origins (absence of one included) the
upstream answered with a success, and asks the upstream with the client's own headers before it
answers a client of any other origin from what it holds.

A 4xx whose body holds no JSON-RPC message is the server refusing the request itself (its Host or
Origin check, its authentication): the bridge answers with that status and a JSON-RPC error quoting
the server's words (`refusal`), never as a gateway fault. Both eras get a JSON-RPC body: a bridge is
that era's server, so its answers are JSON-RPC messages carrying the request's id, and the HTTP
status, which both eras' SDKs read first, stays the server's.
"""

from __future__ import annotations

from typing import Any, Final

from proxy.engine.commands import Log
from proxy.wire import errors
from proxy.wire.jsonrpc import RequestId, error_response

ORIGINS_KEPT: Final = 256
"""Origins remembered as accepted; past it the earliest learned is forgotten (and asked about again)."""

WORDS_KEPT: Final = 500
"""Characters of a refusal's body quoted to the client (and in logs)."""


class KnownOrigins:
    """The client `Origin` values (None: a request without one) the upstream has answered with success.

    Bounded by `ORIGINS_KEPT`; a known origin costs one set lookup, and forgetting one only costs
    the next request from it a trip upstream.
    """

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[str | None, None] = {}
        """An insertion-ordered set: the first key is the earliest learned."""

    def __contains__(self, origin: str | None) -> bool:
        return origin in self._seen

    def __len__(self) -> int:
        return len(self._seen)

    def __repr__(self) -> str:
        return f"KnownOrigins({len(self._seen)})"

    def learn(self, origin: str | None, status: int | None) -> None:
        """The upstream answered a request carrying `origin` with `status`: a success vouches for it."""
        if status is None or not 200 <= status < 300 or origin in self._seen:
            return
        if len(self._seen) >= ORIGINS_KEPT:
            del self._seen[next(iter(self._seen))]
        self._seen[origin] = None


def origin_of(headers: tuple[tuple[str, str], ...]) -> str | None:
    """The request's `Origin` header, else None (a request without one is its own case)."""
    for name, value in headers:
        if len(name) == 6 and name.lower() == "origin":
            return value
    return None


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
