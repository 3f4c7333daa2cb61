"""End-to-end tests run their event loop on uvloop, as the `mcp-proxy` command does.

The in-process proxy of these tests (`proxy_for`) then meets the same loop users run it on: uvloop's
transports, its timer and poll order. Every e2e test module gets it through pytest-asyncio's loop
factory hook.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
import uvloop
from pytest_asyncio.plugin import LoopFactory

from proxy.runtime import Proxy
from tests.conftest import running_proxy
from tests.e2e.commanded import ProxyFleet


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> Mapping[str, LoopFactory]:
    """uvloop for every async test under tests/e2e."""
    return {"uvloop": uvloop.new_event_loop}


@pytest.fixture
def proxy_for() -> Callable[..., AbstractAsyncContextManager[Proxy]]:
    """`async with proxy_for(upstream_url, **settings) as proxy:` with the settings users get by default.

    The admin API is on, as it is for a user who sets nothing (so chains are built live for its
    metrics), on a free loopback port so tests never collide; `settings` override anything else.
    """

    def start(upstream: str, **overrides: Any) -> AbstractAsyncContextManager[Proxy]:
        return running_proxy(upstream, **{"admin_enabled": True, "admin": "127.0.0.1:0", **overrides})

    return start


@pytest.fixture(scope="module")
def fleet() -> Iterator[ProxyFleet]:
    """`mcp-proxy` commands shared by a module's tests (`await fleet.at(peer)`), stopped at its end."""
    with contextlib.ExitStack() as stack:
        yield ProxyFleet(stack)
