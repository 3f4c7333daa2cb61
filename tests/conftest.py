"""Shared fixtures: real SDK peers (tests.peers.fixtures) and an in-process proxy on a free port."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import pytest
import structlog

from proxy import logs
from proxy.config import Settings
from proxy.runtime import Proxy

pytest_plugins = ["tests.peers.fixtures"]


@asynccontextmanager
async def running_proxy(upstream: str, **overrides: Any) -> AsyncIterator[Proxy]:
    """Start a real proxy in this event loop on 127.0.0.1 and a free port; always stop it."""
    values: dict[str, Any] = {"upstream": upstream, "listen": "127.0.0.1:0", "admin_enabled": False}
    settings = Settings(**{**values, **overrides})
    proxy = Proxy(settings)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


@pytest.fixture
def proxy_for() -> Callable[..., AbstractAsyncContextManager[Proxy]]:
    """`async with proxy_for(upstream_url, **settings) as proxy:` — a proxy stopped by the test."""
    return running_proxy


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """Put back the logging configuration and redactor a test replaced (`logs.configure`)."""
    saved = structlog.get_config()
    try:
        yield
    finally:
        logs.use_redactor(None)
        structlog.configure(**saved)
