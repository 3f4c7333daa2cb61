"""Routing: which engine serves a client request, from the client's era and what the probe found.

The upstream's eras are probed once at start (unless `--upstream-era` forces them) and again when
they are unknown (upstream down at start) or when its answers stop fitting the verdict.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import aiohttp

from proxy.config import Settings
from proxy.engine.select import UNKNOWN_ERAS, UpstreamEras, forced_eras, select_mode
from proxy.flows.events import Mode
from proxy.framing.classify import Route
from proxy.framing.http import Upstream
from proxy.logs import get_logger
from proxy.transport.bridge import BridgeDriver
from proxy.transport.probe import probe_upstream
from proxy.wire.versions import Era

REPROBE_INTERVAL = 2.0
"""Seconds between probes while the upstream's eras are unknown (it was down, or it changed)."""


class Router:
    """Knows the upstream's eras and the running bridges; picks the engine for each request."""

    def __init__(
        self, settings: Settings, upstream: Upstream, http: Callable[[], aiohttp.ClientSession]
    ) -> None:
        self.settings = settings
        self.upstream = upstream
        self._http = http
        forced = forced_eras(settings.upstream_era)
        self.forced = forced is not None
        self.eras: UpstreamEras = forced or UNKNOWN_ERAS
        self.bridges: dict[Mode, BridgeDriver] = {}
        self._lock = asyncio.Lock()
        self._last_probe = 0.0
        self._stale = False
        self.on_change: Callable[[UpstreamEras], None] | None = None

    def needs_probe(self) -> bool:
        """The verdict is unknown or stale and no probe ran in the last REPROBE_INTERVAL seconds."""
        if self.forced or self.settings.bridge == "off" or (self.eras.known and not self._stale):
            return False
        return not (self._last_probe and time.monotonic() - self._last_probe < REPROBE_INTERVAL)

    async def ensure_probed(self) -> UpstreamEras:
        """Probe when the verdict is unknown or stale (at most every REPROBE_INTERVAL seconds)."""
        if not self.needs_probe():
            return self.eras
        async with self._lock:
            if self.eras.known and not self._stale:
                return self.eras
            self._last_probe = time.monotonic()
            found = await probe_upstream(self._http(), self.upstream, self.settings.upstream_timeout)
            if found.known or not self.eras.known:
                changed = found != self.eras
                self.eras, self._stale = found, False
                if changed:
                    get_logger().info("upstream_eras", eras=found.label, upstream=self.upstream.url)
                    if self.on_change is not None:
                        self.on_change(found)
        return self.eras

    def suspect(self, reason: str) -> None:
        """The upstream answered in a way its verdict does not explain: probe again soon."""
        if not self.forced and not self._stale:
            self._stale = True
            get_logger().info("upstream_eras_suspect", reason=reason)

    def mode_for(self, route: Route) -> Mode:
        """The engine that serves this request."""
        session = route.session_id
        if session is not None:
            for mode, bridge in self.bridges.items():
                if bridge.engine.owns_session(session):
                    return mode
        era = route.era
        if era is Era.UNKNOWN:
            return Mode.PASSTHROUGH
        return select_mode(era, self.eras, self.settings.bridge)

    def bridge_for(self, route: Route) -> BridgeDriver | None:
        """The bridge driver for this request, or None for pass-through."""
        mode = self.mode_for(route)
        return self.bridges.get(mode) if mode is not Mode.PASSTHROUGH else None
