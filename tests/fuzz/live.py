"""A proxy and its byte-recording upstream on a loop of their own, for tests that speak raw sockets.

Fuzz examples run as plain synchronous functions (hypothesis drives them), each sending bytes on a
blocking socket with a deadline; the proxy under test must meanwhile run as users run it, on uvloop,
undisturbed by the test's waits. So the upstream and the proxy live on a uvloop in a thread started
once per module, and everything the test reads from them (the heads the upstream recorded) is plain
data appended on that loop and read here.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import structlog
import uvloop

from proxy.logs import configure
from proxy.runtime import Proxy
from tests.conftest import running_proxy
from tests.e2e.recording_upstream import Era, RecordingUpstream, recording_upstream

START_TIMEOUT = 30.0


class LiveProxy:
    """A running proxy (host, port, MCP path) in front of a recording upstream of one era."""

    def __init__(self, proxy: Proxy, upstream: RecordingUpstream, loop: asyncio.AbstractEventLoop) -> None:
        self.proxy = proxy
        self.upstream = upstream
        self.loop = loop
        self.errors: list[dict[str, Any]] = []
        """Error-level log events of the proxy (its own failures), appended as they happen."""
        self.canary_session: str | None = None
        """The session the canary client uses on a bridging proxy (never named by a fuzz input)."""

    def __repr__(self) -> str:  # short: hypothesis prints it with every failing example
        return f"LiveProxy(port={self.proxy.port}, upstream={self.upstream.era}:{self.upstream.port})"

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.proxy.port)

    @property
    def path(self) -> str:
        return self.proxy.upstream.base_path

    def call(self, coro: Any, timeout: float = 10.0) -> Any:
        """Run a coroutine on the proxy's loop and wait for its result (bounded)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


@contextlib.contextmanager
def json_logs(path: Path) -> Iterator[list[dict[str, Any]]]:
    """Log as `mcp-proxy` does when its output is not a terminal (JSON lines), to `path`; restored after.

    Yields the error-level events as they are logged (an error is the proxy's own failure), since the
    file is flushed on the proxy's timer, not when a test looks.
    """
    saved = structlog.get_config()
    opened = configure(level="info", fmt="json", file=path)
    errors: list[dict[str, Any]] = []

    def keep_errors(logger: Any, name: str, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("level") in ("error", "critical"):
            errors.append(dict(event))
        return event

    processors = list(structlog.get_config()["processors"])
    processors.insert(-1, keep_errors)  # before the renderer turns the event into a line
    structlog.configure(processors=processors)
    try:
        yield errors
    finally:
        structlog.configure(**saved)
        if opened is not None:
            opened.close()


@contextlib.contextmanager
def live_proxy(era: Era, log: Path, **settings: Any) -> Iterator[LiveProxy]:
    """Start upstream and proxy on a uvloop thread, logging JSON to `log`; all stopped on exit."""
    ready: dict[str, Any] = {}
    started = threading.Event()
    loop = uvloop.new_event_loop()
    stop = asyncio.Event()

    async def main() -> None:
        try:
            async with (
                recording_upstream(era) as upstream,
                running_proxy(upstream.url("/mcp"), **settings) as proxy,
            ):
                ready["live"] = LiveProxy(proxy, upstream, loop)
                started.set()
                await stop.wait()
        except BaseException as exc:
            ready["error"] = exc
            started.set()
            raise

    def run() -> None:
        asyncio.set_event_loop(loop)
        with contextlib.suppress(BaseException):
            loop.run_until_complete(main())
        loop.close()

    with json_logs(log) as errors:
        thread = threading.Thread(target=run, name=f"live-proxy-{era}", daemon=True)
        thread.start()
        try:
            if not started.wait(START_TIMEOUT):
                raise RuntimeError(f"the {era} proxy did not start within {START_TIMEOUT}s")
            if "error" in ready:
                raise RuntimeError(f"the {era} proxy failed to start: {ready['error']!r}")
            live: LiveProxy = ready["live"]
            live.errors = errors
            yield live
        finally:
            loop.call_soon_threadsafe(stop.set)
            thread.join(START_TIMEOUT)
            assert not thread.is_alive(), "the proxy's loop did not stop"
