"""The aiohttp application that clients talk to: one catch-all route, the upstream client's lifetime."""

from __future__ import annotations

from collections.abc import AsyncIterator

from aiohttp import web

from proxy.transport.driver import handle
from proxy.transport.state import STATE, ProxyState
from proxy.transport.upstream_pool import UpstreamPool


def build_app(state: ProxyState) -> web.Application:
    """An app that proxies every method on every path, with the upstream pool opened and closed with it."""
    app = web.Application(client_max_size=state.settings.max_body_bytes + 1)
    app[STATE] = state
    app.cleanup_ctx.append(_upstream_client)
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


async def _upstream_client(app: web.Application) -> AsyncIterator[None]:
    """Open the upstream pool for the app's life: it carries every upstream request, bytes undecoded."""
    state = app[STATE]
    settings = state.settings
    state.lean = UpstreamPool(
        state.upstream,
        connect_timeout=settings.upstream_connect_timeout,
        head_timeout=settings.upstream_timeout,
        max_head_bytes=settings.upstream_max_head_bytes,
        idle_timeout=settings.upstream_idle_timeout,
    )
    try:
        yield
    finally:
        state.lean.close()
        state.lean = None
