"""An attached TUI shows the proxy as it is now: the calls parked there.

A real proxy in front of the real legacy test server, real clients, the real admin feed. The
`parked N` of the status bar is the proxy's count, whenever the view attached, and none is left
standing once a capture ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proxy.config import Settings
from proxy.flows.events import ChainStatus
from proxy.runtime import Proxy
from tests.e2e.modern_raw import modern_call
from tests.peers.runner import PeerServer
from tests.ui.helpers import wait_for
from ui.app import ProxyTui
from ui.feeds import AttachFeed, CaptureFeed
from ui.widgets.status_bar import ViewFlags, status_text

pytestmark = pytest.mark.e2e

ASK = {"name": "ask_name", "arguments": {}}
"""The legacy server's tool that asks in flight: the bridge parks the 2026-07-28 call on it."""


@asynccontextmanager
async def proxy_with_admin(upstream: str, **overrides: Any) -> AsyncIterator[Proxy]:
    proxy = Proxy(Settings(upstream=upstream, listen="127.0.0.1:0", admin="127.0.0.1:0", **overrides))
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


def state(app: ProxyTui) -> str | None:
    return app.feed_status.state if app.feed_status else None


def done(app: ProxyTui, name: str) -> bool:
    return any(
        e.summary.name == name and e.summary.status is ChainStatus.OK for e in app.model.chains.values()
    )


def bar(app: ProxyTui) -> str:
    return status_text(app.model, app.feed_status, ViewFlags()).plain


async def park(http: aiohttp.ClientSession, url: str, ident: int) -> None:
    """One 2026-07-28 call the bridge parks, left unanswered (its client never retries)."""
    status, answer = await modern_call(http, url, "tools/call", ASK, ident=ident)
    assert status == 200, answer
    assert answer["result"]["resultType"] == "input_required", answer


async def test_a_view_attached_after_calls_parked_counts_them_and_a_capture_that_ends_counts_none(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    async with proxy_with_admin(legacy_server.url, capture=capture) as proxy, aiohttp.ClientSession() as http:
        assert proxy.admin_url is not None
        other = proxy.bus.subscribe("another view")  # watched: chains are built as they happen
        await park(http, proxy.endpoint(), 1)
        await park(http, proxy.endpoint(), 2)
        await wait_for(lambda: len(other) > 0 and proxy.observations.pending == 0, what="the calls built")
        app = ProxyTui(AttachFeed(proxy.admin_url, history=0), batch_delay=0.01)
        async with app.run_test(size=(160, 30)):
            await wait_for(lambda: state(app) == "live", what="the attached feed to go live")
            await wait_for(lambda: app.model.parked == 2, what="the two parked calls to be counted")
            assert "parked 2" in bar(app)
        part = tmp_path / "capture.jsonl.1"
        capture.rename(part)  # as logrotate does: the part ends with both calls still parked
        proxy.reopen_files()
        await wait_for(capture.exists, what="the proxy to start a new capture file")

    app = ProxyTui(CaptureFeed(part), batch_delay=0.01)
    async with app.run_test(size=(160, 30)):
        await wait_for(lambda: state(app) == "ended", what="the capture to be read")
        assert app.model.parked == 0  # the capture ended with them parked: none can resume here
        assert "parked" not in bar(app)
        statuses = {e.summary.name: e.summary.status for e in app.model.chains.values()}
        assert statuses["ask_name"] is ChainStatus.INCOMPLETE
