"""`nested` in `/api/chains` counts the questions a server asked, the same in every mode, with SDK peers.

A tool that asks the client once (`ask_name`), twice in turn (`ask_twice`) or twice at once
(`ask_two_at_once`) is called by the Python SDK client through the proxy in each of the four modes:
pass-through for either era (a legacy server asks in flight, a 2026-07-28 server with
`input_required`) and both bridges (the MRTR->legacy bridge meets the legacy server's in-flight
requests on its upstream leg; the legacy->MRTR bridge asks the client in flight what the
`input_required` asks). Each question counts once, wherever the chain holds it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from tests.peers.runner import PeerServer
from tests.peers.scenarios import run_scenario

pytestmark = pytest.mark.e2e

ASKED = {"ask_name": 1, "ask_twice": 2, "ask_two_at_once": 2}
"""Each tool and how many questions it asks the client."""

MODES = {
    "passthrough-legacy": ("legacy", "legacy_server", "passthrough"),
    "passthrough-2026": ("2026-07-28", "modern_server", "passthrough"),
    "mrtr_to_legacy": ("2026-07-28", "legacy_server", "mrtr_to_legacy"),
    "legacy_to_mrtr": ("legacy", "modern_server", "legacy_to_mrtr"),
}
"""Client era, server fixture and the mode the proxy must pick for them."""


@pytest.mark.parametrize(("client", "server", "mode"), MODES.values(), ids=MODES.keys())
async def test_each_question_the_server_asks_counts_once_in_nested_in_every_mode(
    client: str, server: str, mode: str, request: pytest.FixtureRequest, proxy_for: Callable[..., Any]
) -> None:
    upstream: PeerServer = request.getfixturevalue(server)
    async with proxy_for(upstream.url) as proxy:
        for tool in ASKED:
            await run_scenario(proxy.endpoint(), client, tool)
        async with (
            aiohttp.ClientSession() as http,
            http.get(proxy.admin_url + "/api/chains?method=tools/call") as resp,
        ):
            assert resp.status == 200
            chains = await resp.json()

    calls = {c["name"]: c for c in chains}
    assert {name: (c["mode"], c["status"]) for name, c in calls.items()} == dict.fromkeys(ASKED, (mode, "ok"))
    assert {name: c["nested"] for name, c in calls.items()} == ASKED
