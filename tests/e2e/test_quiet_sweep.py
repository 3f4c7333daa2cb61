"""A call nobody comes back for ends on a quiet proxy, with a real 2026-07-28 server and `mcp-proxy`.

A pass-through call answered `input_required` whose client never retries ends at `continuation_ttl`,
yet no observation arrives to end it: only the proxy's periodic sweep does. An admin read sweeps as
well, so the test reads nothing from the proxy while it waits; an attached view (the feed
`mcp-proxy tui --attach` reads) must hear the end on its own, and /metrics and /api/chains agree after.
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import pytest

from proxy.flows.events import ChainChanged, ChainOpened, ChainStatus
from proxy.transport.tasks import spawn
from tests.e2e.commanded import TOKEN, counters, own_proxy
from tests.e2e.modern_raw import modern_call
from tests.peers.runner import PeerServer
from tests.transport.helpers import wait_until
from ui.feeds import AttachFeed, FeedItem, FeedStatus

pytestmark = pytest.mark.e2e

TTL = 0.5
"""Seconds the proxy waits for the retry (`--continuation-ttl`)."""

ASK = {"name": "ask_name"}


async def test_a_call_never_retried_ends_incomplete_in_an_attached_feed_with_no_read_to_sweep_it(
    modern_server: PeerServer,
) -> None:
    items: list[FeedItem] = []

    async def keep(item: FeedItem) -> None:
        items.append(item)

    def statuses() -> list[ChainStatus]:
        changed = [i for i in items if isinstance(i, ChainOpened | ChainChanged)]
        return [i.chain.status for i in changed if i.chain.method == "tools/call"]

    def live() -> bool:
        return any(isinstance(i, FeedStatus) and i.state == "live" for i in items)

    def ended() -> bool:
        return ChainStatus.INCOMPLETE in statuses()

    async with own_proxy(modern_server.url, "--continuation-ttl", str(TTL)) as proxy:
        watching = spawn(AttachFeed(proxy.admin_url, TOKEN).run(keep), name="attached-feed")
        try:
            await wait_until(live, what="the attached feed to go live")
            async with aiohttp.ClientSession() as http:
                status, reply = await modern_call(http, proxy.endpoint(), "tools/call", ASK, ident=1)
            assert status == 200, reply
            assert reply["result"]["resultType"] == "input_required", reply
            # Nothing reaches the proxy from here on: only its own timer can end the call.
            await wait_until(ended, what="the feed to end the call incomplete", seconds=TTL + 3.0)
        finally:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
        metrics = counters(await proxy.metrics())
        (chain,) = [c for c in await proxy.chains() if c["method"] == "tools/call"]

    assert ChainStatus.WAITING_CLIENT in statuses()  # it did wait on the client first
    assert metrics["mcp_proxy_waiting_on_client"] == 0.0
    assert chain["status"] == "incomplete", chain
