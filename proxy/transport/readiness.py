"""Readiness: is the upstream reachable, and can requests be routed to it?

`/readyz` must be cheap enough for a probe every few seconds and must never hang a prober, so the
check is a bounded TCP connect to the upstream's host and port (no TLS, no MCP request; for a stdio
command, whether its restarts per minute are spent) plus the
router's era verdict, probing the upstream while that verdict is unknown or stale (the upstream
restarted, or answered outside it). Ready means requests
are routed: the era is known, or the upstream answers in no era the probe knows (then requests pass
through, so a server that wants credentials the probe lacks is not held unready forever), unless it
answered `initialize` with 404 (nothing serves MCP at that path) or 5xx (it fails what it is sent):
no request would get through. A ready
answer is cached for `ttl` seconds, a not-ready one only briefly, and concurrent probes share one
check. A draining proxy is never ready.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass

from proxy.framing.http import Upstream
from proxy.transport.channel_upstream import ChannelUpstream
from proxy.transport.dialing import open_tcp
from proxy.transport.probe import NOT_SERVING
from proxy.transport.routing import Router

NOT_READY_TTL = 0.25
"""Seconds a not-ready verdict is reused before the upstream is checked again."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """One readiness answer: ready or not, why not, and the upstream's era label."""

    ready: bool
    reason: str
    upstream_era: str


async def reachable(host: str, port: int, limit_s: float) -> str | None:
    """None when a TCP connection to host:port opens within `limit_s` seconds (its addresses raced),
    else why not."""
    try:
        async with asyncio.timeout(limit_s):
            _, writer = await open_tcp(host, port)
    except TimeoutError:
        return f"no TCP connection within {limit_s}s"
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    writer.close()
    with suppress(OSError):
        await writer.wait_closed()
    return None


class Readiness:
    """Answers `/readyz` from a cached, bounded check of the upstream."""

    def __init__(
        self,
        upstream: Upstream,
        router: Router | None,
        *,
        bridge_off: bool,
        draining: Callable[[], bool],
        timeout: float = 2.0,
        ttl: float = 2.0,
    ) -> None:
        self.upstream = upstream
        self.router = router
        self.bridge_off = bridge_off
        self.draining = draining
        self.timeout = timeout
        self.ttl = ttl
        self._cached: Verdict | None = None
        self._checked = 0.0
        self._lock = asyncio.Lock()

    async def check(self) -> Verdict:
        """The readiness verdict: a ready one is kept `ttl` seconds, a not-ready one `NOT_READY_TTL`.

        A not-ready verdict is kept only briefly, so the proxy reports ready within about a second of
        its upstream starting to answer, however often it is asked.
        """
        if self.draining():
            return Verdict(False, "draining: the proxy is shutting down", self._era())
        channels = self.router.pool if self.router is not None else None
        # a stdio command or an HTTP+SSE server whose restarts are spent: known at once, never cached
        if isinstance(channels, ChannelUpstream) and (spent := channels.problem()) is not None:
            return Verdict(False, spent, self._era())
        async with self._lock:
            cached = self._cached
            keep = self.ttl if cached is not None and cached.ready else min(self.ttl, NOT_READY_TTL)
            if cached is None or time.monotonic() - self._checked >= keep:
                cached = self._cached = await self._check()
                self._checked = time.monotonic()
            return cached

    async def _check(self) -> Verdict:
        up = self.upstream
        if up.transport != "stdio":
            problem = await reachable(up.host, up.port, self.timeout)
            if problem is not None:
                return Verdict(False, f"upstream {up.host}:{up.port} unreachable: {problem}", self._era())
        if self.router is not None and self.router.needs_probe() and not self.bridge_off:
            with suppress(TimeoutError, RuntimeError):  # RuntimeError: the upstream client is closing
                async with asyncio.timeout(self.timeout):
                    await self.router.ensure_probed()
        router = self.router
        if self.bridge_off or router is None or router.eras.known:
            return Verdict(True, "", self._era())
        if router.reachable and not any(hint in router.problem for hint in NOT_SERVING):
            return Verdict(True, "", "unknown")  # it answers in no era the probe knows: requests pass
        why = router.problem or "the era probe got no answer"
        return Verdict(False, f"upstream era not known yet: {why}", "unknown")

    def _era(self) -> str:
        return self.router.eras.label if self.router is not None else "unknown"
