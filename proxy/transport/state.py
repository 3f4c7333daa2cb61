"""What the running proxy shares between handlers, stored on the aiohttp app under typed keys."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web

from proxy.config import Settings
from proxy.flows.bus import EventBus
from proxy.flows.chains import ChainBuilder
from proxy.flows.sink import ObservationSink
from proxy.flows.store import ChainStore
from proxy.framing.http import Upstream
from proxy.transport.upstream_pool import UpstreamPool

if TYPE_CHECKING:
    from proxy.transport.routing import Router


@dataclass
class ProxyState:
    """The proxy's shared parts: settings, upstream, chain builder, store and bus."""

    settings: Settings
    upstream: Upstream
    builder: ChainBuilder
    observations: ObservationSink
    """Where the relay and the bridges report what they see (queued or built into chains)."""
    store: ChainStore
    bus: EventBus
    lean: UpstreamPool | None = None
    router: Router | None = None
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    listen_url: str = ""
    """The proxy's own base URL once it listens (`http://127.0.0.1:8080`)."""
    open_streams: int = 0
    relaying: int = 0
    """Pass-through exchanges between their upstream request and their end (drained to zero when idle)."""

    def next_exchange(self) -> str:
        """A fresh exchange id (unique within this process)."""
        return f"x{next(self._ids)}"

    @property
    def pool(self) -> UpstreamPool:
        """The keep-alive connections that carry every upstream request (exist while the app runs)."""
        if self.lean is None:
            raise RuntimeError("upstream pool not started")
        return self.lean


STATE: web.AppKey[ProxyState] = web.AppKey("proxy_state", ProxyState)
"""Where the app keeps its ProxyState."""
