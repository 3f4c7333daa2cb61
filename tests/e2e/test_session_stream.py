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
from tests.peers.runner import PeerServer
from tests.peers.scenarios import CallbackLog, client_for, normalize_tool_result
from tests.sidecar import ProxyProcess, admin_json, clean_env, settings_env

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
    legacy_server: PeerServer,
) -> None:
    direct = await call_tools(legacy_server.url, "legacy")
    assert [o["result"]["content"] for o in direct] == [["file:///home/u/proj"], ["Hello, octocat!"]]
    assert [o["callbacks"] for o in direct] == [["roots"], ["elicitation:What is your name?"]]
    with ProxyProcess(clean_env(**settings_env(upstream=legacy_server.url))) as proxy:  # the command
        bridged = await call_tools(proxy.endpoint(), MODERN)
        exported = await admin_json(proxy.admin + "/api/export.json")
    assert bridged == direct
    assert _round_keys(exported["chains"]) == [["roots-1"], ["elicitation-1"]]  # each in its call's round


async def test_the_session_keeps_its_get_stream_while_it_lives(
    legacy_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with proxy_for(legacy_server.url) as proxy:
        await call_tools(proxy.endpoint(), MODERN)
        bridge = proxy.router.bridges[Mode.MRTR_TO_LEGACY]
        sizes = bridge.engine.table_sizes()  # type: ignore[attr-defined]
        assert sizes["session_streams"] == sizes["upstream_sessions"] == 1
        assert bridge.table_sizes()["session_streams"] == 1


def _round_keys(chains: list[dict[str, Any]]) -> list[list[str]]:
    """The input keys each session_* call was asked in its rounds, from the admin API's chains."""
    keys = []
    for chain in chains:
        if chain["chain"].get("name") not in TOOLS:
            continue
        for message in chain["messages"]:
            body = message.get("body")
            result = body.get("result") if isinstance(body, dict) else None
            if isinstance(result, dict) and result.get("resultType") == "input_required":
                keys.append(sorted(result["inputRequests"]))
    return keys
