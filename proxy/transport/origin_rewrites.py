"""OAuth discovery through the pass-through relay: the origin rewrites of one exchange, made and said.

`proxy.engine.oauth_origin` holds the rules (which URLs move, and how); this module applies them to
what one exchange carries (a request's `resource`, a challenge, a discovery document) and keeps what
it changed until the relay records it. The relay holds one `OriginRewrites` only for an exchange that
rewrites, or may: the MCP traffic that needs none only finds None where the relay looks for one.
Nothing here sends or observes the traffic itself; the relay does, in its order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from proxy.engine.oauth_origin import (
    DocumentPaths,
    Origins,
    challenge,
    document,
    is_form,
    is_json_type,
    resource_parameters,
    rewritten_document_headers,
)
from proxy.engine.passthrough import ClientHead
from proxy.flows.events import Direction
from proxy.flows.observations import OriginRewritten
from proxy.flows.sink import ObservationSink
from proxy.framing.classify import Route
from proxy.framing.content_coding import CodingError, ContentDecoder, content_codings, undecodable
from proxy.framing.http import Upstream, header
from proxy.logs import get_logger
from proxy.transport.observe import too_large
from proxy.transport.upstream_pool import UpstreamError, UpstreamResponse

Headers = tuple[tuple[str, str], ...]

_TO_CLIENT = Direction.TO_CLIENT
_TO_SERVER = Direction.TO_SERVER

_LOG = get_logger()


class OriginRewrites:
    """One exchange's origin rewrites: each logged when made, recorded after what it changed."""

    __slots__ = ("documents", "exchange", "held", "origins", "pending", "request_said", "sink")

    def __init__(
        self, origins: Origins, sink: ObservationSink, exchange: str, documents: DocumentPaths
    ) -> None:
        self.origins = origins
        self.sink = sink
        self.exchange = exchange
        self.documents = documents
        """Where the paths a moved challenge names are learned (the relay's, shared by its exchanges)."""
        self.pending: list[OriginRewritten] = []
        """Rewrites made and not yet recorded: the relay records them after the record of what they
        changed (the request, or the response's head), or with the exchange's end."""
        self.held: ClientHead | None = None
        """The head of a discovery document held back until its body is read and rewritten."""
        self.request_said = False
        """The request's `resource` rewrite was said: a request framed twice (tried on a warm
        connection first, then sent on a new one) is said once."""

    def __repr__(self) -> str:
        return f"OriginRewrites({self.exchange}, pending={len(self.pending)}, held={self.held is not None})"

    def take(self) -> list[OriginRewritten]:
        """The rewrites made since the last take, for the relay to record now."""
        pending, self.pending = self.pending, []
        return pending

    def rewrote(self, direction: Direction, changed: str) -> None:
        """Say what moved between the two origins, in `direction`: logged now, recorded later (`take`)."""
        origins = self.origins
        was, now = origins.upstream_origin, origins.client
        if direction is _TO_SERVER:
            was, now = now, was
        _LOG.info(
            "origin_rewritten",
            exchange=self.exchange,
            direction=direction.value,
            changed=changed,
            was=was,
            now=now,
        )
        self.pending.append(OriginRewritten(self.sink.now(), self.exchange, direction, changed, was, now))

    def left_as_is(self, problem: str) -> None:
        """Say why a discovery document goes to the client as the server sent it."""
        _LOG.info("origin_not_rewritten", exchange=self.exchange, reason=problem)
        was, now, t = self.origins.upstream_origin, self.origins.client, self.sink.now()
        self.pending.append(OriginRewritten(t, self.exchange, _TO_CLIENT, "", was, now, problem))

    def resource_moved(self, route: Route, query: str, body: bytes) -> tuple[str, bytes]:
        """The query and body with an RFC 8707 `resource` naming the client's origin moved to the
        upstream's (an authorization request's query, a token request's form)."""
        origins = self.origins
        changed = []
        if query and (moved := resource_parameters(query, origins)) is not None:
            query = moved
            changed.append("resource (query)")
        if body and is_form(header(route.headers, "content-type")):
            form = resource_parameters(body.decode("latin-1"), origins)
            if form is not None:
                body = form.encode("latin-1")
                changed.append("resource (form)")
        if changed and not self.request_said:
            self.request_said = True
            self.rewrote(_TO_SERVER, ", ".join(changed))
        return query, body

    def challenges_moved(self, head: ClientHead) -> ClientHead:
        """The head with the `resource_metadata` of its `WWW-Authenticate` challenges moved to the client."""
        headers = self.challenge_headers(head.headers)
        return head if headers is head.headers else replace(head, headers=headers)

    def challenge_headers(self, headers: Headers) -> Headers:
        """`headers` with the `resource_metadata` of their `WWW-Authenticate` challenges moved to the
        client, said when one moved (the same object back when none did)."""
        out, moved = [], False
        for name, text in headers:
            if _is_challenge(name) and (new := challenge(text, self.origins)) is not None:
                text, moved = new.text, True
                self.documents.learn(new.documents)
            out.append((name, text))
        if not moved:
            return headers
        self.rewrote(_TO_CLIENT, "WWW-Authenticate resource_metadata")
        return tuple(out)

    def readable(self, head: ClientHead, limit: int) -> bool:
        """A discovery document the proxy can read within `limit`; one over-large, or compressed in a
        coding the proxy cannot undo (`br`, `zstd`), is relayed as it came, and said so."""
        coding = undecodable(content_codings(head.content_encoding))
        if coding is not None:
            self.left_as_is(f"a {coding}-encoded document is relayed as the server sent it")
            return False
        if head.content_length is not None and head.content_length > limit:
            self.left_as_is(too_large(f"a document of {head.content_length} bytes", limit))
            return False
        return True

    def document(
        self, head: ClientHead, body: bytes, limit: int
    ) -> tuple[bytes, tuple[tuple[str, str], ...]]:
        """A whole discovery document with its URLs on the upstream's origin moved to the client's, and
        the headers to send it with: the server's own bytes and headers when nothing moved; otherwise
        without the headers that name the server's bytes (`rewritten_document_headers`), and, for a
        gzip or deflate document (compression middleware answering the client's `Accept-Encoding`),
        sent decoded, without its `Content-Encoding`: any client takes an unencoded body."""
        codings = content_codings(head.content_encoding)
        plain = body
        if codings:
            decoded = _decoded(codings, body, limit)
            if isinstance(decoded, str):
                self.left_as_is(decoded)
                return body, head.headers
            plain = decoded
        rewritten = document(plain, self.origins)
        if rewritten.problem is not None:
            self.left_as_is(f"the document is {rewritten.problem}")
        elif rewritten.changed:
            self.rewrote(_TO_CLIENT, ", ".join(rewritten.changed))
        if rewritten.data == plain:
            return body, head.headers
        headers = rewritten_document_headers(head.headers)
        if codings:
            headers = tuple((name, value) for name, value in headers if name.lower() != "content-encoding")
        return rewritten.data, headers


def is_discovery(route: Route, head: ClientHead, upstream: Upstream, documents: DocumentPaths) -> bool:
    """A JSON answer to a GET of a discovery document beside the MCP endpoint (its URLs are read, and
    moved when they name the upstream's origin)."""
    if not (200 <= head.status < 300 and route.path in documents):
        return False
    return route.path not in upstream.endpoint_paths and not head.sse and is_json_type(head.content_type)


def challenged(headers: tuple[tuple[str, str], ...]) -> bool:
    """The head carries a `WWW-Authenticate` challenge (whose `resource_metadata` may move)."""
    return any(_is_challenge(name) for name, _ in headers)


def _is_challenge(name: str) -> bool:
    return len(name) == 16 and name.lower() == "www-authenticate"


async def read_document(
    upstream: UpstreamResponse, limit: int, room: Callable[[int], bool] = lambda _size: True
) -> tuple[bytes, UpstreamError | None]:
    """The body of a document whose head came first, read until it ends, breaks (the error returned),
    goes past `limit` (what was read, one chunk past it) or finds no `room` for what it has read."""
    parts: list[bytes] = []
    size = 0
    try:
        async for chunk in upstream.chunks():
            parts.append(chunk)
            size += len(chunk)
            if size > limit or not room(size):
                break
    except UpstreamError as exc:
        return b"".join(parts), exc
    return b"".join(parts), None


def _decoded(codings: tuple[str, ...], body: bytes, limit: int) -> bytes | str:
    """A compressed document's bytes, or why they are left as they came (not what the coding makes,
    or more than `limit` once decoded)."""
    pieces: list[bytes] = []
    size = 0
    try:
        for piece in ContentDecoder(codings).feed(body):
            pieces.append(piece)
            size += len(piece)
            if size > limit:
                return too_large("a decoded document", limit)
    except CodingError as exc:
        return f"a {', '.join(codings)}-encoded document that does not decode ({exc}) is relayed as it came"
    return b"".join(pieces)
