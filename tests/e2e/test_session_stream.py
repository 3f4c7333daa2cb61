"""A legacy SDK server that asks on its session's GET stream, behind `mrtr_to_legacy`.

The Python SDK sends `ctx.session.list_roots()` (and `elicit()` / `create_message()` without a
related request) on the session's standalone GET stream, not on the tool call's stream. A legacy
client answers it there; a 2026-07-28 client through the bridge must be asked it as part of its
call's round, and get the same result as a legacy client talking to the server directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from proxy.flows.events import Mode
from proxy.runtime import Proxy
from tests.e2e.test_mrtr_to_legacy import drained
from tests.peers.runner import PeerServer
from tests.peers.scenarios import CallbackLog, client_for, normalize_tool_result
from tests.transport.helpers import wait_until

pytestmark = pytest.mark.e2e

MODERN = "2026-07-28"
TOOLS = ("session_roots", "session_ask_name")
"""Peer tools that ask on the GET stream (`tests.peers.apps`), callable but not listed."""


async def call_tools(url: str, mode: str) -> list[dict[str, Any]]:
    """Each tool of `TOOLS` on one client: its normalized result and the callbacks it caused."""
    log = CallbackLog()
    outcomes = []
    async with client_for(url, mode, log=log, read_timeout=10.0) as client:
        for tool in TOOLS:
            log.clear()
            with anyio.fail_after(15):
                result = normalize_tool_result(await client.call_tool(tool, {}))
            outcomes.append({"tool": tool, "result": result, "callbacks": list(log.callbacks)})
    return outcomes


async def test_a_question_on_the_get_stream_reaches_a_modern_client_as_a_legacy_client_gets_it(
    legacy_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    direct = await call_tools(legacy_server.url, "legacy")
    assert [o["result"]["content"] for o in direct] == [["file:///home/u/proj"], ["Hello, octocat!"]]
    assert [o["callbacks"] for o in direct] == [["roots"], ["elicitation:What is your name?"]]
    async with proxy_for(legacy_server.url) as proxy:
        bridged = await call_tools(proxy.endpoint(), MODERN)
        await wait_until(lambda: drained(proxy), what="bridge tables to drain")
        rounds = _round_keys(proxy)
    assert bridged == direct
    assert rounds == [["roots-1"], ["elicitation-1"]]  # each asked in its call's round, as in-flight ones


async def test_the_session_keeps_its_get_stream_while_it_lives(
    legacy_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with proxy_for(legacy_server.url) as proxy:
        await call_tools(proxy.endpoint(), MODERN)
        bridge = proxy.router.bridges[Mode.MRTR_TO_LEGACY]
        sizes = bridge.engine.table_sizes()  # type: ignore[attr-defined]
        assert sizes["session_streams"] == sizes["upstream_sessions"] == 1
        assert bridge.table_sizes()["session_streams"] == 1


def _round_keys(proxy: Proxy) -> list[list[str]]:
    """The input keys each session_* call was asked in its first round, from the chains."""
    keys = []
    for chain in proxy.chains():
        if chain.summary.name not in TOOLS:
            continue
        for message in chain.messages:
            result = message.body.get("result") if isinstance(message.body, dict) else None
            if isinstance(result, dict) and result.get("resultType") == "input_required":
                keys.append(sorted(result["inputRequests"]))
    return keys
