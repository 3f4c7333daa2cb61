"""The era probe: ask the upstream which protocol eras it accepts (see engine/select.py).

It rides the upstream pool like every other upstream request, to the MCP endpoint's path, so its
request line and `Host` are the ones pass-through and the bridges send: a probe that succeeds proves
the path works for them too.

A server that answers `server/discover` is still sent a throwaway `initialize` (its session deleted
at once): a 2026-07-28 server lists only 2026 revisions in `supportedVersions` whether or not it also
serves the handshake era (the SDK's default dual-era server does), so nothing else tells a dual-era
server, whose legacy clients pass through, from a modern-only one, whose legacy clients are bridged.
Without it one guess would be wrong: legacy clients of a dual-era server bridged for good (nothing
they get refused re-judges it), or the first `initialize` of a modern-only server's legacy client
refused before the era is re-judged. The server sees that `initialize` as a client session
(clientInfo `mcp-debug-proxy-probe`), so each probe request is logged (`era_probe_request`), and it
carries what a 2026-07-28 client's requests carry (`Mcp-Method`, `MCP-Protocol-Version`, `_meta`) so
that a server checking those does not count it as a faulty client; `--upstream-era` skips the probe.

A stdio command is probed on one child at a time, and no child is started for the probe alone when
the server speaks only the handshake era: its `server/discover` goes to a child that the first client
then takes (a refused discover leaves it fresh for that client's `initialize`). Only a server that
answers discover is sent an `initialize` too, on a second child started once the first has ended, and
that one is ended before anything else starts: a server that allows one instance at a time serves.
What the probe's child writes on stderr while its `server/discover` is in flight is the proxy's doing
(a handshake-era server's refusal is often a hundred lines of validation errors): once the server has
refused or answered it, those lines are summed up in one line saying so and logged at debug only.
A stdio server that leaves its `server/discover` unanswered for `stdio_discover_timeout` seconds is
taken for a handshake-era server that went silent (the mcp 1.3.0 SDK's stdio server stops reading at
a method it does not know, and answers nothing more): its child is stopped, a warning names
`--upstream-era legacy`, and the probe goes on with its `initialize` on a fresh child, so a client
waits seconds, not the minute of `upstream_timeout`.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Final
from urllib.parse import urljoin, urlsplit

from proxy.engine.faults import SPEAKS_TLS
from proxy.engine.select import (
    UNKNOWN_ERAS,
    UpstreamEras,
    legacy_accepted,
    legacy_denied,
    legacy_probe,
    modern_accepted,
    modern_probe,
    refused_as_legacy,
)
from proxy.framing.http import Upstream, is_sse, masked_url
from proxy.framing.sse import SseDecoder, SseEvent
from proxy.logs import get_logger
from proxy.transport.channel_upstream import ChannelUpstream, RefusedStart
from proxy.transport.sse_upstream import NotAStream, open_session
from proxy.transport.tls_failures import speaks_tls
from proxy.transport.upstream_pool import UpstreamClient, UpstreamError, UpstreamResponse
from proxy.wire import errors
from proxy.wire.headers import SESSION_ID
from proxy.wire.jsonrpc import Kind, Message, dumps, parse_body, parse_text

PROBE_BODY_LIMIT = 1024 * 1024
"""Bytes of a probe answer read at most (an InitializeResult or DiscoverResult is a few kB)."""
CREDENTIALS_WANTED: Final = frozenset({401, 403})
"""Statuses of an upstream that answers nobody without credentials (an OAuth-protected server)."""
DROPPED: Final = frozenset({"cut", "bad_response"})
"""Kinds of a probe request the upstream took and then dropped or answered in no HTTP: what a TLS
port does with a plain request (it closes, or sends a TLS alert)."""
SSE_HINTS = (400, 401, 404, 405)
"""Statuses a 2024-11-05 HTTP+SSE endpoint gives a POST, which make the probe try a GET there (401:
one behind a credentials check answers every request so, whatever its transport)."""


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """What one probe found: the eras, and when none, whether the upstream answered at all and why not."""

    eras: UpstreamEras
    reachable: bool
    """The upstream answered HTTP (its answers may still fit no era, e.g. 401 without credentials)."""
    problem: str = ""
    """Why no era is known: the connection error, or the statuses the upstream answered with."""
    transport: str = "http"
    """`sse` when the URL is a 2024-11-05 HTTP+SSE endpoint (a GET there opened a session): the eras
    are then unknown until it is probed again over that transport."""
    hint: str = ""
    """What the user can do, when the probe's answers say it (a redirect names the URL to give)."""
    wants_credentials: bool = False
    """The probe was refused for want of credentials (`_wants_credentials`): the upstream serves
    nobody without them (or refused those the probe carried), so only a probe with a client's
    credentials can tell its era."""


NOT_FOUND_HINT = (
    "nothing answers MCP at this path: is it the server's MCP endpoint? (--upstream takes the "
    "endpoint's full URL, often ending in /mcp)"
)
"""Said when an `initialize` got 404: the usual cause is an --upstream URL without the endpoint's path."""

FAILING_HINT = "the server fails every MCP request it was sent (HTTP 5xx): it is up, but not serving MCP"
"""Said when an `initialize` got a 5xx: an application that crashed behind a web server that answers."""

SSE_UNUSABLE = "a GET there opened an HTTP+SSE stream, but"
"""Said, with the reason, when the URL is an HTTP+SSE endpoint whose session the proxy cannot use (its
message endpoint on another origin, none named): the path is right, the server's setup is not."""

PROBE_REFUSED: Final = (
    "written while the proxy's era probe (server/discover) was in flight, start-up lines included: "
    "the server refused it, as a handshake-era (legacy) server does, which is expected; "
    "--log-level debug shows the lines"
)
"""How a stdio server's stderr during the probe is summed up when it refused `server/discover`."""
PROBE_ANSWERED: Final = (
    "written while the proxy's era probe (server/discover) was in flight, start-up lines included: "
    "the server answered it; --log-level debug shows the lines"
)
"""How they are summed up when it answered (a 2026-07-28 server)."""
PROBE_UNANSWERED: Final = (
    "written while the proxy's era probe (server/discover) was in flight, start-up lines included: "
    "the server did not answer it, as a handshake-era server that stops reading at a method it does "
    "not know does; --log-level debug shows the lines"
)
"""How they are summed up when it left the probe unanswered past `stdio_discover_timeout`."""
SILENT_HINT: Final = (
    "either the server is still starting (raise stdio_discover_timeout for one that is slow to start), "
    "or it is a handshake-era (legacy) server that stops reading at a method it does not know (the mcp "
    "1.3.0 SDK's stdio server) and never answers (--upstream-era legacy skips the probe and this wait). "
    "Its child is stopped and the probe goes on with initialize on a fresh one"
)
"""What a user can do about a stdio server that left `server/discover` unanswered."""
UNANSWERED: Final = 0
"""The status of a stdio server's `server/discover` that got no answer in time (no HTTP status is 0)."""

NO_ANSWER: Final = "none"
"""A stdio or HTTP+SSE server's probe line's `answer` when the server gave none (with why, when the
child exited or the session's stream ended)."""
CHILD_STOPPED: Final = "its child asked to stop"
"""A stdio server's `DELETE` line's `answer`: the proxy ends a stdio session by stopping its child."""
STREAM_CLOSED: Final = "its stream closed by the proxy"
"""An HTTP+SSE server's `DELETE` line's `answer`: that transport has no DELETE, and the proxy ends a
session by closing its GET stream."""

REDIRECTED = "the server redirects"
"""Said, with both URLs, when the endpoint answers with a redirect on its own origin: the proxy
follows none (the endpoint's path is the user's choice), so no era is learned there."""
REDIRECTS: Final = frozenset({307, 308})
"""Statuses of a redirect a POST follows unchanged (an SDK client follows them to the endpoint)."""

NOT_SERVING: Final = (NOT_FOUND_HINT, FAILING_HINT, SSE_UNUSABLE, REDIRECTED)
"""The hints of an upstream that answers HTTP but would get no request through: not ready, warned of."""


async def probe_upstream(
    pool: UpstreamClient,
    upstream: Upstream,
    limit_s: float,
    credentials: tuple[tuple[str, str], ...] = (),
    discover_limit_s: float | None = None,
) -> ProbeResult:
    """Which eras the upstream accepts; an unknown verdict says whether it could be reached, and why not.

    `credentials` (the `Authorization` of the request that asked for the probe, if any) go along, so
    an upstream that answers nobody without them can still be told apart. `discover_limit_s` bounds
    a stdio server's answer to `server/discover` (None: `limit_s` does).
    """
    channel = pool if isinstance(pool, ChannelUpstream) else None
    stdio = channel if channel is not None and channel.transport == "stdio" else None
    try:
        async with asyncio.timeout(limit_s):
            headers, body = modern_probe()
            sent = time.monotonic()
            if stdio is not None:
                discover_s = limit_s if discover_limit_s is None else discover_limit_s
                discover = (*headers, *credentials)
                status_m, messages = await _discover_on_spare(stdio, upstream, discover, body, discover_s)
                moved_m = None
            else:
                status_m, messages, _, moved_m = await _post(pool, upstream, (*headers, *credentials), body)
            if channel is None:
                _logged("server/discover", status_m)
            elif stdio is not None and status_m == UNANSWERED:
                _logged("server/discover", None, answer=f"none within {discover_s}s")
            else:
                _logged(
                    "server/discover", None, answer=_said(messages, channel.exited_since(sent) is not None)[0]
                )
            modern = modern_accepted(status_m, messages)
            if stdio is not None and not modern and refused_as_legacy(messages):
                stdio.keep_spare_fresh()
                return ProbeResult(UpstreamEras(legacy=True, modern=False), True)
            if stdio is not None:
                await stdio.drop_spare()
            headers, body = legacy_probe()
            sent = time.monotonic()
            status_l, messages, session, moved_l = await _post(pool, upstream, (*headers, *credentials), body)
            legacy = legacy_accepted(status_l, messages)
            no_legacy = legacy_denied(messages)
            if channel is None:
                _logged("initialize", status_l, "opened" if session else None)
            else:  # a session is a child or a stream, and one that ended unasked holds none to delete
                said, answered = _said(messages, channel.exited_since(sent) is not None)
                session = session if answered else None
                _logged("initialize", None, "opened" if session else None, answer=said)
            if session:
                deleted = await _delete_session(pool, upstream, session, credentials)
                if channel is None:
                    _logged("DELETE", deleted, "deleted")
                else:
                    _logged("DELETE", None, "deleted", answer=CHILD_STOPPED if stdio else STREAM_CLOSED)
            if stdio is not None:
                await stdio.settle()  # the initialize's child has ended before any other starts
        eras = UpstreamEras(legacy=legacy, modern=modern)
        if eras.known:
            return ProbeResult(eras, True)
        discover_said = f"HTTP {status_m}" if status_m else "no answer"  # 0: a stdio server kept silent
        statuses = f"{discover_said} to server/discover, HTTP {status_l} to initialize"
        problem = _unknown(statuses, status_m, status_l)
        moved = _moved_on_origin(upstream, moved_l or moved_m)
        if moved:
            fix = f"give --upstream {moved}"
            said = f"{statuses}; {REDIRECTED} {upstream.origin}{upstream.shown_path} to {moved}: {fix}"
            return ProbeResult(
                eras, True, said, hint=f"{fix} (the proxy follows no redirect of the endpoint)"
            )
        if status_m in SSE_HINTS and status_l in SSE_HINTS:
            async with asyncio.timeout(limit_s):
                refused = await _sse_refusal(pool, upstream, limit_s, credentials)
            if refused == "":
                return ProbeResult(eras, True, "an HTTP+SSE endpoint", transport="sse")
            if refused is not None:  # the path is right (a stream opened), the session is not usable
                return ProbeResult(eras, True, f"{statuses}; {SSE_UNUSABLE} {refused}")
        if _wants_credentials(status_m, status_l, no_legacy):
            return ProbeResult(eras, True, problem, wants_credentials=True)
        if status_m == status_l == HTTPStatus.BAD_REQUEST:  # a TLS server's "plain HTTP to HTTPS port" page
            problem = await _scheme_checked(upstream, problem, limit_s)
    except TimeoutError:
        return ProbeResult(UNKNOWN_ERAS, False, f"no answer to the era probe within {limit_s}s")
    except UpstreamError as exc:
        problem = str(exc) or exc.kind
        if exc.kind in DROPPED and stdio is None:
            problem = await _scheme_checked(upstream, problem, limit_s)
        return ProbeResult(UNKNOWN_ERAS, False, problem)
    return ProbeResult(eras, True, problem)


async def _scheme_checked(upstream: Upstream, problem: str, limit_s: float) -> str:
    """`problem`, saying so when an `http://` upstream's port speaks TLS (a scheme mix-up no retry fixes)."""
    if upstream.scheme == "http" and await speaks_tls(upstream.host, upstream.port, limit_s):
        return f"{problem}; {SPEAKS_TLS}"
    return problem


async def _discover_on_spare(
    stdio: ChannelUpstream,
    upstream: Upstream,
    headers: tuple[tuple[str, str], ...],
    body: dict[str, Any],
    limit_s: float,
) -> tuple[int, list[Message]]:
    """The `server/discover` of a stdio command, on its spare child; `UNANSWERED` and no messages when
    no answer came within `limit_s` (the probe then stops the silent child: it serves no client). The
    child's stderr meanwhile is summed up by how the server took it when it refused, answered or
    ignored it as a server of an era does; otherwise (it exited) those lines are shown as they are,
    since they may say why."""
    note: str | None = None
    at_exit = False
    try:
        try:
            async with asyncio.timeout(limit_s):
                status, messages, _, _ = await _post(_OnSpare(stdio), upstream, headers, body)
        except TimeoutError:
            note, at_exit = PROBE_UNANSWERED, True  # the probe stops it: its last words are ours
            get_logger().warning(
                "upstream_discover_unanswered",
                upstream=upstream.shown,
                problem=f"no answer to the era probe's server/discover within {limit_s}s",
                hint=SILENT_HINT,
            )
            return UNANSWERED, []
        if modern_accepted(status, messages):
            note = PROBE_ANSWERED
        elif refused_as_legacy(messages):
            note = PROBE_REFUSED
        return status, messages
    finally:
        stdio.probe_answered(note, at_exit=at_exit)


class _OnSpare:
    """A stdio upstream's requests as the probe's `server/discover` goes: onto the spare child."""

    def __init__(self, channels: ChannelUpstream) -> None:
        self.channels = channels

    async def request(
        self, method: str, path: str, headers: tuple[tuple[str, str], ...], body: bytes
    ) -> UpstreamResponse:
        return await self.channels.probe_request(headers, body)


def _moved_on_origin(upstream: Upstream, location: str | None) -> str | None:
    """The URL a redirect of the endpoint names, when it is on the upstream's own origin (a path the
    user can give instead, a slash added or removed by the server's router, say), shown masked."""
    if not location:
        return None
    target = urlsplit(urljoin(upstream.origin + upstream.base_path, location))
    default = 443 if target.scheme == "https" else 80
    try:
        port = target.port or default
    except ValueError:
        return None
    if (target.scheme, target.hostname, port) != (upstream.scheme, upstream.host, upstream.port):
        return None
    return masked_url(target.geturl())


def _wants_credentials(status_m: int, status_l: int, no_legacy: bool) -> bool:
    """Whether only a probe carrying a client's credentials can tell the era of an upstream that fit
    none. Its `initialize` was refused 401 or 403, whatever its `server/discover` got: a handshake-era
    server may check the version header before the token, and refuse a 2026-07-28 request 400 before
    it asks for credentials. Or its `server/discover` was, and its `initialize` was refused as a
    2026-07-28-only server refuses it (the SDK's checks the version before the token)."""
    if status_l in CREDENTIALS_WANTED:
        return True
    return status_m in CREDENTIALS_WANTED and no_legacy


def _unknown(statuses: str, status_m: int, status_l: int) -> str:
    """Why no era is known, from the statuses of the two probe requests."""
    if status_l == HTTPStatus.NOT_FOUND:  # an MCP endpoint answers an initialize
        return f"{statuses}; {NOT_FOUND_HINT}"
    if status_m >= 500 and status_l >= 500:
        return f"{statuses}; {FAILING_HINT}"
    return statuses


async def _sse_refusal(
    pool: UpstreamClient, upstream: Upstream, limit_s: float, credentials: tuple[tuple[str, str], ...]
) -> str | None:
    """Whether a GET on the URL opens an HTTP+SSE session (its first event names a message endpoint
    the proxy can post to): "" when it does, None when the answer is no SSE stream, else why the
    stream opened cannot be used (an endpoint on another origin, none sent)."""
    try:
        stream, *_ = await open_session(pool, upstream, limit_s, PROBE_BODY_LIMIT, credentials)
    except (NotAStream, RefusedStart):
        return None
    except UpstreamError as exc:
        return str(exc) or exc.kind
    stream.close()
    return ""


async def _post(
    pool: UpstreamClient | _OnSpare,
    upstream: Upstream,
    headers: tuple[tuple[str, str], ...],
    body: dict[str, Any],
) -> tuple[int, list[Message], str | None, str | None]:
    """The status, messages, session and (a 307 or 308 answer) `Location` of one probe request."""
    resp = await pool.request("POST", upstream.base_path, headers, dumps(body))
    try:
        session = resp.header(SESSION_ID)
        moved = resp.header("location") if resp.status in REDIRECTS else None
        if is_sse(resp.header("content-type")):
            return resp.status, await _first_sse_messages(resp), session, moved
        return resp.status, list(parse_body(await _read(resp)).messages), session, moved
    finally:
        resp.close()  # a no-op once released; an answer not read to its end must not be reused


async def _read(resp: UpstreamResponse) -> bytes:
    body = await resp.read(PROBE_BODY_LIMIT, "probe answer")
    resp.release()
    return body


async def _first_sse_messages(resp: UpstreamResponse) -> list[Message]:
    """Read SSE events until the first JSON-RPC response (the probe needs nothing more)."""
    decoder = SseDecoder()
    found: list[Message] = []
    size = 0
    async for chunk in resp.chunks():
        size += len(chunk)
        if size > PROBE_BODY_LIMIT:
            break
        for item in decoder.feed(chunk):
            if isinstance(item, SseEvent) and item.carries_message:
                msg = parse_text(item.data)
                found.append(msg)
                if msg.is_response:
                    return found
    return found


async def _delete_session(
    pool: UpstreamClient, upstream: Upstream, session: str, credentials: tuple[tuple[str, str], ...]
) -> int:
    """End the session the probe's `initialize` opened; the status of the DELETE."""
    resp = await pool.request("DELETE", upstream.base_path, ((SESSION_ID, session), *credentials), b"")
    try:
        await _read(resp)
    finally:
        resp.close()
    return resp.status


def _said(messages: list[Message], exited: bool) -> tuple[str, bool]:
    """What a stdio or HTTP+SSE server did with a probe request, for its line, and whether it answered
    at all: a channel has no HTTP status of the answer (the 200 the proxy's adapter gives it is no
    answer of the server's; an HTTP+SSE answer comes on the stream), and the error the proxy writes
    itself when the child `exited` or the session's stream ended unasked is shown as no answer, with
    the proxy's words, never a server's own error text (it may quote what it was sent)."""
    for msg in messages:
        if msg.kind is Kind.RESULT:
            return "result", True
        if msg.kind is Kind.ERROR:
            code = msg.error.get("code")
            text = msg.error.get("message")
            if exited and code == errors.UPSTREAM_UNAVAILABLE and isinstance(text, str):
                return f"{NO_ANSWER}: {text}", False
            return f"error {code}", True
    return NO_ANSWER, False


def _logged(
    method: str, status: int | None, session_state: str | None = None, *, answer: str | None = None
) -> None:
    """One info line per request the probe sent: the server logs them as a client's (its clientInfo
    is `mcp-debug-proxy-probe`), so the proxy's log shows them too. `session_state` says what the
    request did to the session the probe opened (`opened`, `deleted`; None: nothing), never its id;
    status None: no HTTP answer came (a stdio server's lines say instead what it `answer`ed)."""
    extra = {"answer": answer} if answer is not None else {}
    get_logger().info("era_probe_request", method=method, status=status, session_state=session_state, **extra)
