"""The composition root: builds the store, bus, chain builder, recorders and the aiohttp runner.

`Proxy` is what the CLI runs and what tests start in-process on a free port.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from aiohttp import web

from proxy import __version__
from proxy.config import Settings, parse_host_port
from proxy.engine.legacy_to_mrtr import LegacyToMrtrEngine
from proxy.engine.passthrough import PassthroughEngine
from proxy.engine.select import UpstreamEras
from proxy.flows.bus import EventBus, Subscription
from proxy.flows.chains import ChainBuilder
from proxy.flows.events import Mode, ProxyInfo
from proxy.flows.redact import Redactor
from proxy.flows.store import ChainStore
from proxy.framing.http import parse_upstream
from proxy.logs import get_logger
from proxy.record.capture import CaptureWriter
from proxy.transport.app import build_app
from proxy.transport.bridge import BridgeDriver
from proxy.transport.routing import Router
from proxy.transport.state import ProxyState
from proxy.transport.tasks import spawn


class Proxy:
    """One running proxy: listener, upstream client, observation pipeline and capture."""

    def __init__(self, settings: Settings) -> None:
        if not settings.upstream:
            raise ValueError("upstream is required")
        self.settings = settings
        self.bus = EventBus(settings.bus_queue_size)
        self.store = ChainStore(settings.max_chains, settings.max_messages_per_chain)
        self.redactor = Redactor(settings.redact_headers, settings.redact_header_patterns)
        self.builder = ChainBuilder(
            self.store,
            self.bus.publish,
            self.redactor,
            clock=time.time,
            body_limit=settings.capture_body_limit,
        )
        upstream = parse_upstream(settings.upstream)
        self.state = ProxyState(
            settings=settings,
            upstream=upstream,
            engine=PassthroughEngine(upstream),
            builder=self.builder,
            store=self.store,
            bus=self.bus,
        )
        self.router = Router(settings, upstream, lambda: self.state.http)
        self.state.router = self.router
        self.router.bridges[Mode.LEGACY_TO_MRTR] = BridgeDriver(
            LegacyToMrtrEngine(upstream, _id_factory(), max_rounds=settings.max_rounds),
            mode=Mode.LEGACY_TO_MRTR,
            upstream=upstream,
            http=lambda: self.state.http,
            builder=self.builder,
            timeout=settings.upstream_timeout,
        )
        self.router.on_change = self._eras_changed
        self._runner: web.AppRunner | None = None
        self._capture: CaptureWriter | None = None
        self._capture_task: asyncio.Task[Any] | None = None
        self.port = 0
        self.host = ""

    @property
    def url(self) -> str:
        """The base URL clients use (scheme, host, bound port)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def endpoint(self) -> str:
        """The proxy URL that stands for the upstream's MCP endpoint."""
        return self.url + self.state.upstream.base_path

    async def start(self) -> None:
        """Bind the listener (port 0 picks a free one) and start the capture writer."""
        if self.settings.capture is not None:
            self._capture = CaptureWriter(
                self.settings.capture,
                max_bytes=self.settings.capture_max_bytes,
                keep=self.settings.capture_keep,
            )
            sub = self.bus.subscribe("capture")
            self._capture_task = spawn(self._write_capture(sub), name="capture-writer")
        host, port = parse_host_port(self.settings.listen)
        app = build_app(self.state)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, reuse_address=True)
        try:
            await site.start()
        except OSError:
            await self.stop()
            raise
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.host, self.port = host, sockets[0].getsockname()[1] if sockets else port
        await self.router.ensure_probed()
        self._publish_info()
        log = get_logger()
        log.info("listening", listen=self.url, upstream=self.settings.upstream, eras=self.router.eras.label)

    def _publish_info(self) -> None:
        self.bus.publish(
            ProxyInfo(
                ts=time.time(),
                version=__version__,
                listen=self.url,
                upstream=self.settings.upstream or "",
                upstream_era=self.router.eras.label,
                bridge=self.settings.bridge,
            )
        )

    def _eras_changed(self, eras: UpstreamEras) -> None:
        if self.port:
            self._publish_info()

    async def _write_capture(self, sub: Subscription) -> None:
        writer = self._capture
        assert writer is not None
        try:
            async for event in sub:
                writer.write(event)
                if not len(sub):
                    writer.flush()
        finally:
            writer.flush()

    async def stop(self) -> None:
        """Stop listening, close the upstream client, flush and close the capture."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        for sub in self.bus.subscribers:
            sub.close()
        if self._capture_task is not None:
            with suppress(asyncio.CancelledError):
                await self._capture_task
            self._capture_task = None
        if self._capture is not None:
            self._capture.close()
            self._capture = None

    async def __aenter__(self) -> Proxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def run(self, stop: asyncio.Event) -> None:
        """Serve until `stop` is set."""
        await self.start()
        try:
            await stop.wait()
        finally:
            await self.stop()


def _id_factory() -> Callable[[str], str]:
    """Ids for the bridges: unguessable session ids, readable counters for everything else."""
    counter = itertools.count(1)

    def new_id(kind: str) -> str:
        if kind == "session":
            return secrets.token_hex(16)
        prefix = "mrtr" if kind == "nested" else kind
        return f"{prefix}-{next(counter)}"

    return new_id
