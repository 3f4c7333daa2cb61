"""Shared pieces for transport tests: bounded waiting, loopback fake upstreams, a dead port, JSON-RPC bodies.

Fake upstreams are small aiohttp apps started on 127.0.0.1 port 0 inside the test that needs them;
they exist only where a real MCP peer cannot produce the fault or where the test must see exact bytes
and headers. Every wait here has a deadline; nothing sleeps to wait for something to happen.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import structlog
from aiohttp import web
from structlog.testing import capture_logs

from proxy.logs import redact_fields
from proxy.runtime import Proxy

WAIT = 5.0
"""Seconds any single wait in these tests may take before the test fails."""

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
"""Response headers a Streamable HTTP server sends with an SSE body."""

RELAY_ONLY: dict[str, Any] = {"bridge": "off"}
"""Proxy settings for tests against a fake upstream: the fake is no MCP server to probe for its era, and
these tests are about the pass-through relay itself."""

CLIENT_ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
"""Request headers every Streamable HTTP client sends with a POST."""


async def wait_until(predicate: Callable[[], bool], *, what: str, seconds: float = WAIT) -> None:
    """Poll `predicate` until it holds; fail naming `what` once `seconds` have passed."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds}s waiting for {what}")
        await asyncio.sleep(0.01)


async def bounded(awaitable: Any, *, what: str, seconds: float = WAIT) -> Any:
    """Await with a deadline, failing with a message that says what never happened."""
    try:
        return await asyncio.wait_for(awaitable, seconds)
    except TimeoutError:
        raise AssertionError(f"timed out after {seconds}s waiting for {what}") from None


async def hold(signal: asyncio.Event, seconds: float = WAIT) -> None:
    """Inside a fake: wait for the test's signal, giving up after `seconds` so a failed test cannot hang."""
    with suppress(TimeoutError):
        await asyncio.wait_for(signal.wait(), seconds)


def drained(proxy: Proxy) -> bool:
    """Nothing left open: no exchange or correlation in the chain builder, nothing in flight in the engine."""
    sizes = proxy.builder.correlation_sizes()
    return proxy.relays.relaying == 0 and not any(sizes.values())


def rpc(method: str, ident: int | str | None = 1, **params: Any) -> bytes:
    """A JSON-RPC request (or a notification when `ident` is None) as the bytes a client posts."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if ident is not None:
        message["id"] = ident
    if params:
        message["params"] = params
    return json.dumps(message).encode()


def dead_port() -> int:
    """A loopback port with nothing listening: bind one to learn a free number, then close it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Seen:
    """One request a fake upstream received, exactly as it arrived."""

    method: str
    path_qs: str
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        """The first value of a header (case-insensitive), or None."""
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def names(self) -> set[str]:
        """Every header name received, lower-cased."""
        return {k.lower() for k, _ in self.headers}


@dataclass
class FakeUpstream:
    """A running fake: its MCP endpoint URL and every request it saw."""

    url: str
    seen: list[Seen] = field(default_factory=list)


Handler = Callable[[web.Request], Any]


def _raw_headers(request: web.Request) -> list[tuple[str, str]]:
    """Headers in arrival order and spelling (not aiohttp's merged view)."""
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.raw_headers]


@asynccontextmanager
async def fake_upstream(
    handler: Handler, *, path: str = "/mcp", handler_cancellation: bool = False
) -> AsyncIterator[FakeUpstream]:
    """Serve `handler` for every method on 127.0.0.1:0, recording each request; stopped on exit.

    The body is read before the handler runs (a handler's own `await request.read()` returns the same
    cached bytes), so a fake that never answers still shows what it received.
    """
    fake = FakeUpstream(url="")

    async def recording(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        fake.seen.append(Seen(request.method, request.path_qs, _raw_headers(request), raw))
        response: web.StreamResponse = await handler(request)
        return response

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", recording)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=handler_cancellation)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    fake.url = f"http://127.0.0.1:{port}{path}"
    try:
        yield fake
    finally:
        await runner.cleanup()


async def read_event(response: aiohttp.ClientResponse) -> bytes:
    """Read one SSE event (through its blank line) from a streaming response, with a deadline."""
    data: bytes = await bounded(response.content.readuntil(b"\n\n"), what="one SSE event through the proxy")
    return data


def client_session() -> aiohttp.ClientSession:
    """A client like an MCP client's HTTP layer: no cookie jar, no automatic decompression."""
    return aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False)


@contextmanager
def captured_logs() -> Iterator[list[dict[str, Any]]]:
    """Capture structlog event dicts (context vars merged in, fields redacted as in the proxy's chain),
    whatever level another test configured."""
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG))
    try:
        with capture_logs(processors=[structlog.contextvars.merge_contextvars, redact_fields]) as logs:
            yield logs
    finally:
        structlog.configure(**saved)


# --- raw-socket fakes (for bytes no HTTP library sends on demand) ------------------------------------


@dataclass
class Upstream:
    """A running loopback server: its port, and which client connection carried each request."""

    port: int = 0
    peers: list[int] = field(default_factory=list)
    """The client's port for every request, in arrival order (one port per connection)."""
    accepted: int = 0
    """Connections accepted (raw fakes count them as they come; aiohttp servers by `peers`)."""

    @property
    def connections(self) -> int:
        """Distinct connections that carried requests (or were accepted, for a raw fake)."""
        return max(len(set(self.peers)), self.accepted)


Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def raw_fake_upstream(script: Script) -> AsyncIterator[Upstream]:
    """A fake on raw sockets: runs `script` for each accepted connection; every one is stopped on exit."""
    server = Upstream()
    handlers: set[asyncio.Task[Any]] = set()

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server.accepted += 1
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        try:
            await script(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass  # stopped at exit; Python 3.11's start_server logs a cancelled handler as an error
        finally:
            writer.close()

    listener = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    server.port = int(listener.sockets[0].getsockname()[1])
    try:
        yield server
    finally:
        listener.close()
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers)
        await listener.wait_closed()


async def read_request(reader: asyncio.StreamReader) -> bytes | None:
    """Inside a raw fake: read one request and return its (Content-Length) body; None at EOF."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length" and int(value) > 0:
            return await reader.readexactly(int(value))
    return b""


def exchange_ends(capture: Path) -> tuple[Counter[str], Counter[str]]:
    """How often each exchange was opened, and how often closed, in a capture file's observation lines."""
    lines = [orjson.loads(line) for line in capture.read_bytes().splitlines() if line.strip()]
    opened = Counter(o["exchange"] for o in lines if o.get("kind") == "exchange_opened")
    closed = Counter(o["exchange"] for o in lines if o.get("kind") == "exchange_closed")
    return opened, closed
