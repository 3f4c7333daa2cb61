"""A 2024-11-05 HTTP+SSE server session as a message channel: one GET stream in, POSTs out.

The client side of that transport: a GET on the server's SSE URL opens the session; the first event,
`endpoint`, names the URL to POST every client message to (relative to the SSE URL; the SDKs send
`/messages?sessionId=...`); every server message arrives as a `message` event on the GET stream.
Both ride the proxy's one upstream pool, so they leave with the same request lines and `Host` as
everything else. An endpoint on another origin is refused: the proxy would otherwise post its
clients' messages to a host nobody configured. POSTs go out one at a time, in order, since the
server reads them as one ordered stream; a POST the server refuses fails the call it carried.

Headers: the GET carries the end-to-end headers of the request that opened the session, and each
POST those of the request whose message it carries (the session's own for a message the proxy
writes itself), as a pass-through would send them: `Authorization`, cookies, custom headers. The
headers of the Streamable HTTP transport the proxy's clients speak (`SESSION_ONLY`) stay behind:
this transport names its session in the endpoint's query, and the proxy reads these bodies itself.
A GET refused with 401 or 403 is the server's answer to the client's credentials, handed back whole
(`RefusedStart`) so the client sees it, `WWW-Authenticate` included.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from proxy.engine.channel.vocab import Headers
from proxy.framing.http import Upstream, forward_request_headers, forward_response_headers, is_sse
from proxy.framing.sse import SseDecoder, SseEvent, SseTooLarge
from proxy.logs import get_logger
from proxy.transport.channel_upstream import ChannelEvents, RefusedStart
from proxy.transport.tasks import spawn
from proxy.transport.upstream_pool import UpstreamClient, UpstreamError, UpstreamResponse
from proxy.wire.headers import LAST_EVENT_ID, METHOD, NAME, PARAM_PREFIX, PROTOCOL_VERSION, SESSION_ID

ENDPOINT_BYTES = 64 * 1024
"""Bytes of the GET stream read at most while waiting for the `endpoint` event."""
POST_ANSWER_BYTES = 64 * 1024
"""Bytes of a POST's answer read (an SDK answers `Accepted`)."""
REFUSAL_BYTES = 64 * 1024
"""Bytes of a refused GET's answer read at most, to hand to the client."""
RELAYED_REFUSALS = frozenset({401, 403})
"""Statuses of a GET that answer the client's credentials: relayed to it, not made a gateway error."""
_ACCEPT_SSE = (("Accept", "text/event-stream"),)
_JSON = (("Content-Type", "application/json"),)

_TRANSPORT_OWN = (SESSION_ID, PROTOCOL_VERSION, METHOD, NAME, LAST_EVENT_ID)
SESSION_ONLY = frozenset(
    name.lower() for name in (*_TRANSPORT_OWN, "Accept", "Accept-Encoding", "Content-Type")
)
"""Headers of the Streamable HTTP request the proxy was sent that an HTTP+SSE request does not carry:
that transport's session and version, the 2026-07-28 mirrors, what the client accepts (the proxy
reads the stream and the POST's answer itself, so it says what it accepts) and the body's type."""
_PARAM = PARAM_PREFIX.lower()


def sent_along(headers: Iterable[tuple[str, str]]) -> Headers:
    """The end-to-end headers of a client request that go with the HTTP+SSE requests made for it."""
    return tuple(
        (name, value)
        for name, value in forward_request_headers(headers)
        if name.lower() not in SESSION_ONLY and not name.lower().startswith(_PARAM)
    )


class NotAStream(UpstreamError):
    """The GET was answered, but not with an SSE stream: no HTTP+SSE endpoint, to these credentials
    at least (a 401 or 403 is a `RefusedStart` instead)."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where an HTTP+SSE session's messages are posted: a path and a raw query on the upstream's origin."""

    path: str
    query: str


async def open_session(
    pool: UpstreamClient, upstream: Upstream, limit_s: float, max_event: int, headers: Headers = ()
) -> tuple[UpstreamResponse, SseDecoder, Endpoint, list[SseEvent]]:
    """GET the SSE URL with `headers` (`sent_along`) and read up to its `endpoint` event (within
    `limit_s` seconds).

    Returns the open stream, its decoder, the endpoint and the events decoded after it. Raises
    RefusedStart for a 401 or 403, NotAStream for any other answer that is no SSE stream, and a
    plain UpstreamError when a stream opened but names no endpoint the proxy can post to.
    """
    resp = await pool.request("GET", upstream.base_path, (*_ACCEPT_SSE, *headers), b"")
    try:
        if resp.status != 200 or not is_sse(resp.header("content-type")):
            detail = (
                f"GET {upstream.shown} answered HTTP {resp.status} "
                f"({resp.header('content-type') or 'no content type'}), not an HTTP+SSE stream"
            )
            if resp.status in RELAYED_REFUSALS:
                body = await resp.read(REFUSAL_BYTES, "the refused GET's answer")
                kept = tuple(forward_response_headers(resp.headers, keep_length=False))
                raise RefusedStart(detail, resp.status, kept, body)
            raise NotAStream("unreachable", detail)
        decoder = SseDecoder(max_event)
        async with asyncio.timeout(limit_s):
            endpoint, after = await _endpoint_event(resp, decoder)
        resolved = resolve_endpoint(upstream, endpoint)
    except TimeoutError:
        resp.close()
        raise UpstreamError(
            "unreachable", f"no `endpoint` event from {upstream.shown} within {limit_s}s"
        ) from None
    except BaseException:
        resp.close()
        raise
    return resp, decoder, resolved, after


async def _endpoint_event(resp: UpstreamResponse, decoder: SseDecoder) -> tuple[str, list[SseEvent]]:
    size = 0
    async for chunk in resp.chunks():
        size += len(chunk)
        items = decoder.feed(chunk)
        events = [item for item in items if isinstance(item, SseEvent)]
        for at, event in enumerate(events):
            if event.event == "endpoint":
                return event.data.strip(), events[at + 1 :]
        if size > ENDPOINT_BYTES:
            break
    raise UpstreamError("unreachable", "the SSE stream sent no `endpoint` event")


def resolve_endpoint(upstream: Upstream, endpoint: str) -> Endpoint:
    """The POST endpoint, resolved against the SSE URL; refused when it names another origin."""
    url = urljoin(upstream.url, endpoint)
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if (parts.scheme, parts.hostname, port) != (upstream.scheme, upstream.host, upstream.port):
        raise UpstreamError(
            "unreachable",
            f"the HTTP+SSE server named a message endpoint on another origin ({parts.scheme}://"
            f"{parts.hostname}:{port}); the proxy posts only to {upstream.origin} (if that origin is "
            f"this same server, name it in --upstream: {parts.scheme}://{parts.netloc}{upstream.shown_path})",
        )
    return Endpoint(parts.path or "/", parts.query)


class SseChannel:
    """One HTTP+SSE session of the upstream (see the module docstring)."""

    def __init__(
        self,
        pool: UpstreamClient,
        upstream: Upstream,
        events: ChannelEvents,
        *,
        limit_s: float,
        max_event: int,
    ) -> None:
        self.pool = pool
        self.upstream = upstream
        self.events = events
        self.limit_s = limit_s
        self.max_event = max_event
        self._stream: UpstreamResponse | None = None
        self._endpoint = Endpoint("/", "")
        self._outbox: deque[tuple[bytes, str | None, Headers | None]] = deque()
        self._headers: Headers = ()
        """The end-to-end headers of the request that opened the session (its GET carried them)."""
        self._wake = asyncio.Event()
        self._reading = asyncio.Event()
        self._reading.set()
        self._tasks: list[asyncio.Task[None]] = []
        self._asked = False
        self._ended = False
        self._stop_reason = ""

    async def start(self, headers: Iterable[tuple[str, str]] = ()) -> None:
        self._headers = sent_along(headers)
        stream, decoder, endpoint, after = await open_session(
            self.pool, self.upstream, self.limit_s, self.max_event, self._headers
        )
        self._stream, self._endpoint = stream, endpoint
        get_logger().info(
            "upstream_session_opened", upstream=self.upstream.shown, transport="sse", endpoint=endpoint.path
        )
        self._tasks = [
            spawn(self._read(stream, decoder, after), name="sse-upstream-read"),
            spawn(self._post_all(), name="sse-upstream-post"),
        ]

    async def _read(self, stream: UpstreamResponse, decoder: SseDecoder, first: list[SseEvent]) -> None:
        reason = "the upstream's HTTP+SSE stream ended"
        try:
            self._deliver(first)
            async for chunk in stream.chunks():
                await self._reading.wait()
                try:
                    items = decoder.feed(chunk)
                except SseTooLarge as exc:
                    self._deliver([item for item in exc.items if isinstance(item, SseEvent)])
                    self.events.oversized(decoder.pending_bytes, b"", b"")
                    reason = f"the upstream's HTTP+SSE stream sent an event over {self.max_event} bytes"
                    break
                self._deliver([item for item in items if isinstance(item, SseEvent)])
        except UpstreamError as exc:
            reason = f"the upstream's HTTP+SSE stream broke off: {exc}"
        finally:
            stream.close()
            self._end(reason)

    def _deliver(self, events: list[SseEvent]) -> None:
        for event in events:
            if event.event == "message" and event.carries_message:
                self.events.received(event.data.encode("utf-8"))

    def write(
        self, data: bytes, exchange: str | None, headers: Iterable[tuple[str, str]] | None = None
    ) -> None:
        self._outbox.append((data, exchange, None if headers is None else sent_along(headers)))
        self._wake.set()

    async def _post_all(self) -> None:
        while True:
            while not self._outbox:
                self._wake.clear()
                await self._wake.wait()
            data, exchange, headers = self._outbox.popleft()
            problem = await self._post(data, self._headers if headers is None else headers)
            if problem is not None:
                self.events.write_failed(exchange, problem)

    async def _post(self, data: bytes, headers: Headers) -> str | None:
        endpoint = self._endpoint
        try:
            resp = await self.pool.request("POST", endpoint.path, (*_JSON, *headers), data, endpoint.query)
        except (TimeoutError, UpstreamError) as exc:
            return f"POST {endpoint.path}: {exc or 'timed out'}"
        try:
            answer = await resp.read(POST_ANSWER_BYTES, "the message endpoint's answer")
            resp.release()
        except UpstreamError as exc:
            return f"POST {endpoint.path}: {exc}"
        finally:
            resp.close()
        if resp.status >= 300:
            text = answer[:200].decode("utf-8", "replace")
            return f"HTTP {resp.status} from the message endpoint {endpoint.path}: {text}"
        return None

    def stop(self, reason: str) -> None:
        self._asked = True
        self._stop_reason = self._stop_reason or reason
        stream = self._stream
        if stream is not None:
            stream.close()  # the server sees the session's stream end
        for task in self._tasks:
            task.cancel()
        if not self._tasks:
            self._end(reason)

    def _end(self, reason: str) -> None:
        if self._ended:
            return
        self._ended = True
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        self.events.closed(self._stop_reason or reason, asked=self._asked)

    async def stopped(self, grace: float) -> None:
        self.stop("the proxy is stopping")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await asyncio.gather(*self._tasks, return_exceptions=True)

    def probe_began(self) -> None:
        """Nothing to do: an HTTP+SSE server has no stderr, and it is probed over HTTP."""

    def probe_ended(self, note: str | None, *, at_exit: bool = False) -> None:
        """Nothing to do (see `probe_began`)."""

    def pause_reading(self) -> None:
        self._reading.clear()

    def resume_reading(self) -> None:
        self._reading.set()
