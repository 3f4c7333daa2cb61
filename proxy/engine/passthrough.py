"""Pass-through decisions: same era on both sides, so the proxy forwards bytes and only observes.

Theory of operation: a routed client request becomes one upstream request with hop-by-hop headers
dropped and `Host` rewritten; the upstream's head goes back with its status unchanged and its body is
relayed byte for byte. Faults become proxy answers: unreachable or a broken head -> 502, too slow ->
504 (each with a JSON-RPC error carrying the request id when it could be read); a fault after the
head has gone out can only cut the client's response; a client that leaves aborts the upstream
request, since the client's own connection is what pass-through mirrors.

These are plain functions, not an event-driven state machine like the bridges' engines: pass-through
has no state of its own beyond one exchange, and the events and commands of a state machine would
cost a small exchange more CPU than the decisions themselves. Every decision of an exchange is made
here (what goes upstream, what head the client gets, whether the body goes whole or streams, how a
body's end ends the client's response, when an answer casts doubt on the upstream's era); the
transport's relay (`proxy.transport.relay`) carries them out, in one executor for every path.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

import orjson

from proxy.engine.faults import fault_text
from proxy.engine.url_origin import same_origin
from proxy.framing.classify import Route
from proxy.framing.http import Upstream, forward_request_headers, forward_response_headers, is_sse
from proxy.framing.status import gateway_error
from proxy.wire import errors
from proxy.wire.jsonrpc import RequestId
from proxy.wire.values import value
from proxy.wire.versions import MODERN_VERSIONS, Era, denies_handshake

_FAULT_STATUS = {
    "unreachable": 502,
    "bad_response": 502,
    "timeout": 504,
    "body_timeout": 504,
    "unsendable": 400,
    "head_too_large": 502,
    "era_unknown": 503,
    "tls_refused": 502,
    "wrong_scheme": 502,
}
"""HTTP status of each fault answered before the upstream's head (`proxy.engine.faults` words them)."""

ERA_REFUSALS = frozenset((400, 404, 405))
"""Statuses a server of the other era answers a handshake or a 2026 request with."""

_MODERN_ERRORS = {
    400: frozenset(
        (
            errors.INVALID_PARAMS,
            errors.HEADER_MISMATCH,
            errors.MISSING_REQUIRED_CLIENT_CAPABILITY,
            errors.UNSUPPORTED_PROTOCOL_VERSION,
        )
    ),
    404: frozenset((errors.METHOD_NOT_FOUND,)),
}
"""The JSON-RPC errors a 2026-07-28 server answers a client's own mistake with, by HTTP status."""

ERA_BODY_LIMIT = 4096
"""Bytes of a refusal's body read at most for its JSON-RPC error (a server's own error is a few
hundred); a longer body is not parsed, and the status alone decides."""

_DISCOVER = "server/discover"
"""The one method every 2026-07-28 server implements."""


@value
class UpstreamRequest:
    """The request to send upstream for one client request."""

    http_method: str
    path: str
    """The client's path; the upstream pool derives the request target from it (`Upstream.request_target`)."""
    query: str
    """The client's raw query (percent-encoding kept), sent after the upstream URL's own."""
    headers: tuple[tuple[str, str], ...]
    body: bytes


@value
class ClientHead:
    """The response head to send the client for one upstream head."""

    status: int
    headers: tuple[tuple[str, str], ...]
    content_length: int | None
    """Kept only for a body of declared length that is not a stream; None streams the body."""
    content_type: str | None = field(default=None, compare=False)
    """The body's `Content-Type` (read once here: the relay records it and observes the body by it)."""
    sse: bool = field(default=False, compare=False)
    """The body is an SSE stream (observed event by event)."""
    content_encoding: str | None = field(default=None, compare=False)
    """The body's `Content-Encoding`: relayed as it is, observed decoded."""


@value
class BodyEnd:
    """How a relayed body's end ends the exchange, on both sides."""

    finish_client: bool
    """End the client's response cleanly (a chunked body gets its last chunk)."""
    cut_client: bool
    """Break the client's connection off: a clean end would pass a truncated body off as complete."""
    outcome: str | None
    """How the exchange is recorded (None: completed)."""


BODY_COMPLETE = BodyEnd(finish_client=True, cut_client=False, outcome=None)
"""The upstream's body ended as framed: its connection, read to the end, carries the next request."""
BODY_CUT = BodyEnd(finish_client=False, cut_client=True, outcome="upstream_cut")
"""The upstream broke its body off under way: its connection is dropped."""
CLIENT_LEFT = BodyEnd(finish_client=False, cut_client=False, outcome="client_disconnected")
"""The client left while its body was relayed: the upstream request is dropped with it."""


@dataclass(frozen=True, slots=True)
class FaultAnswer:
    """What the proxy answers when the upstream fails before its head (a gateway error)."""

    status: int
    body: dict[str, Any]


def upstream_request(route: Route, query: str = "") -> UpstreamRequest:
    """The client's request as the upstream gets it: same method, body and query, headers rewritten.

    The request target (the upstream's path for the client's, the upstream URL's query, then the
    client's), `Host` and the body's length are framed by the pool, not here.
    """
    headers = tuple(forward_request_headers(route.headers))
    return UpstreamRequest(route.http_method, route.path, query, headers, route.raw)


def client_head(
    status: int,
    headers: tuple[tuple[str, str], ...] | list[tuple[str, str]],
    redirect: tuple[Upstream, str] | None = None,
) -> ClientHead:
    """The upstream's head as the client gets it: status unchanged, hop-by-hop headers dropped.

    A declared length is kept for a plain body and dropped for an SSE stream, which is relayed event
    by event and framed for the client's connection. `redirect` (the upstream, and the proxy's own
    origin as the client addressed it) rewrites a 3xx `Location` that names the upstream, so a
    redirect never leads the client around the proxy (nginx's `proxy_redirect default`).
    """
    length: str | None = None
    content_type: str | None = None
    encoding: str | None = None
    for name, text in headers:  # the three fields read, in one pass (this runs for every answer)
        name_size = len(name)
        if name_size == 14 and length is None and name.lower() == "content-length":
            length = text
        elif name_size == 12 and content_type is None and name.lower() == "content-type":
            content_type = text
        elif name_size == 16 and name.lower() == "content-encoding":
            encoding = text if encoding is None else f"{encoding}, {text}"  # listed in the order applied
    sse = is_sse(content_type)
    keep = length is not None and not sse
    out = tuple(forward_response_headers(headers, keep_length=keep))
    if redirect is not None and 300 <= status < 400:
        upstream, origin = redirect
        out = tuple(
            (k, proxied_location(v, upstream, origin) if k.lower() == "location" else v) for k, v in out
        )
    size = int(length) if keep and length is not None and length.isdigit() else None
    return ClientHead(status, out, size, content_type, sse, encoding)


def sends_whole(length: int | None, buffered: int, complete: bool) -> bool:
    """Whether the body goes to the client with its head in one write, or streams as it comes.

    Whole when it has all arrived and is what the head declared (`length`, from `client_head`). A
    HEAD answer or a 204 declares a length it does not carry: those stream, and streaming knows to
    send no body; so does an SSE stream, whose declared length `client_head` drops.
    """
    return length is not None and complete and buffered == length


def body_end(*, upstream_cut: bool, client_gone: str | None) -> BodyEnd:
    """How a relayed body ended decides the end of both sides: the client's connection closing comes
    first (`client_gone` is the outcome it records: the client left, or the proxy stopping cut it)."""
    if client_gone is not None:
        if client_gone == CLIENT_LEFT.outcome:
            return CLIENT_LEFT
        return replace(CLIENT_LEFT, outcome=client_gone)
    return BODY_CUT if upstream_cut else BODY_COMPLETE


def era_suspicion(route: Route, status: int, body: bytes | bytearray | None = None) -> str | None:
    """Why this answer casts doubt on the upstream's era, or None when it does not.

    A refusal (400, 404, 405) of a handshake or of a 2026 request is what a server of the other era
    answers, so the upstream may have changed since it was probed. `body` is the whole answer when
    it is at hand (None for an SSE stream, or a body that never went by whole: the status alone
    decides). The rule:

    - a refused `initialize` always casts doubt: a pass-through handshake means the verdict has a
      legacy side, and a modern-only server's refusal (404 -32601, 400 -32022) says it is gone;
    - another legacy request casts doubt only when refused with -32022 whose `data.supported` names
      no handshake version: a modern-only server telling an old session that the legacy side is gone
      (anything else is a legacy server's answer to that session, a forgotten one say);
    - a 2026 request refused with the error a 2026-07-28 server gives a client's own mistake (400
      with -32602, -32020, -32021 or -32022; 404 with -32601) is that server answering in its era,
      so it casts none, unless the error itself denies the era: -32601 for `server/discover` (every
      2026-07-28 server has it), or -32022 whose `data.supported` names no 2026 version;
    - anything else (405, another code, an empty, non-JSON, HTML or oversized body) casts doubt.
    """
    if status not in ERA_REFUSALS:
        return None
    era = route.era
    return _doubt(route.method or route.http_method, era, status, body, f"from a {era.value} client")


def leg_suspicion(
    method: str, era: Era, status: int, body: bytes | bytearray | None, bridge: str
) -> str | None:
    """Why the answer to a bridge's own upstream request casts doubt on the upstream's era, or None.

    A bridge speaks one era upstream (`era`), so when a server of the other era replaces the
    upstream only the bridge's requests meet its refusals: they are judged by `era_suspicion`'s rule.
    """
    if status not in ERA_REFUSALS:
        return None
    return _doubt(method, era, status, body, f"from the {bridge} bridge")


def _doubt(method: str, era: Era, status: int, body: bytes | bytearray | None, sender: str) -> str | None:
    """`era_suspicion`'s rule for a refusal (400, 404, 405) of `method` sent in `era` by `sender`."""
    error = _jsonrpc_error(body)
    if method != "initialize" and era is not Era.MODERN:
        if error is None or not denies_handshake(error):
            return None
    elif error is not None and method != "initialize" and _modern_mistake(method, status, error):
        return None
    refusal = f"HTTP {status}" if error is None else f"HTTP {status} (JSON-RPC {error['code']})"
    return f"{refusal} for {method} {sender}"


def _jsonrpc_error(body: bytes | bytearray | None) -> dict[str, Any] | None:
    """The error object of the JSON-RPC error response `body` is, with an integer code; None for any
    other body, and for one over `ERA_BODY_LIMIT` (never parsed)."""
    if not body or len(body) > ERA_BODY_LIMIT:
        return None
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(answer, dict) or answer.get("jsonrpc") != "2.0":
        return None
    error = answer.get("error")
    if not isinstance(error, dict) or type(error.get("code")) is not int:  # a bool passes isinstance
        return None
    return error


def _modern_mistake(method: str | None, status: int, error: dict[str, Any]) -> bool:
    """The error is a 2026-07-28 server's answer to a client's own mistake, and does not deny the era."""
    code = error["code"]
    if code not in _MODERN_ERRORS.get(status, ()):
        return False
    if code == errors.METHOD_NOT_FOUND:
        return method != _DISCOVER
    if code == errors.UNSUPPORTED_PROTOCOL_VERSION:
        data = error.get("data")
        supported = data.get("supported") if isinstance(data, dict) else None
        return not isinstance(supported, list) or any(v in MODERN_VERSIONS for v in supported)
    return True


def proxied_location(location: str, upstream: Upstream, origin: str) -> str:
    """A `Location` that names the upstream's origin, moved onto the proxy's; any other stays as it is.

    Relative references already resolve against the proxy's address, and a redirect to some other
    host is the upstream's business, so only an absolute (or scheme-relative) URL on the upstream's
    scheme, host and port is rewritten (`url_origin.same_origin`); its path, query and fragment are
    kept, except the upstream URL's own query (the proxy adds it to every request, and it may hold the
    operator's API key) and any userinfo.
    """
    try:
        parts = urlsplit(location)
    except ValueError:
        return location
    if not same_origin(parts, upstream.scheme, upstream.host, upstream.port):
        return location
    query = _without_prefix(parts.query, upstream.query)
    fragment = f"#{parts.fragment}" if parts.fragment else ""
    return origin + parts.path + (f"?{query}" if query else "") + fragment


def _without_prefix(query: str, own: str) -> str:
    """`query` without the upstream URL's own query at its start (`Upstream.with_query` put it there)."""
    if not own or not query.startswith(own):
        return query
    rest = query[len(own) :]
    return rest[1:] if rest.startswith("&") else query if rest else ""


def fault_answer(reason: str, detail: str, request_id: RequestId | None) -> FaultAnswer | None:
    """The gateway error for a fault before the upstream's head; None when the reason has none."""
    status = _FAULT_STATUS.get(reason)
    if status is None:
        return None
    status, body = gateway_error(status, request_id, fault_text(reason, detail))
    return FaultAnswer(status, body)
