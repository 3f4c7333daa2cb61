"""The aiohttp application that clients talk to: one catch-all route, the upstream client's lifetime."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

from proxy.transport.driver import handle
from proxy.transport.state import STATE, ProxyState
from proxy.transport.upstream_pool import UpstreamPool


def build_app(state: ProxyState) -> web.Application:
    """An app that proxies every method on every path, with the upstream client opened and closed with it."""
    app = web.Application(client_max_size=state.settings.max_body_bytes + 1)
    app[STATE] = state
    app.cleanup_ctx.append(_upstream_client)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


async def _upstream_client(app: web.Application) -> AsyncIterator[None]:
    """Open the upstream clients for the app's life: aiohttp's for the bridges and the probe, the lean
    pool for pass-through traffic; bytes pass undecoded."""
    state = app[STATE]
    settings = state.settings
    connector = aiohttp.TCPConnector(limit=2048, limit_per_host=0, enable_cleanup_closed=False)
    timeout = aiohttp.ClientTimeout(
        total=None, connect=settings.upstream_connect_timeout, sock_connect=settings.upstream_connect_timeout
    )
    state.client = aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept", "Content-Type"),
        cookie_jar=aiohttp.DummyCookieJar(),
    )
    upstream = state.upstream
    state.lean = UpstreamPool(
        upstream.host,
        upstream.port,
        tls=upstream.scheme == "https",
        connect_timeout=settings.upstream_connect_timeout,
        head_timeout=settings.upstream_timeout,
    )
    try:
        yield
    finally:
        state.lean.close()
        state.lean = None
        await state.client.close()
        state.client = None
