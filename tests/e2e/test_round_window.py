"""The MRTR->legacy bridge's default round window: requests a server sends together make one round.

The test peers' server writes its two concurrent in-flight requests as two TCP segments a few
hundred microseconds apart (its sockets have TCP_NODELAY, as a user's uvicorn's do), so the round
must stay open past the first. Checked with the proxy in this process and as the `mcp-proxy`
command; both run on uvloop, which runs due timers before it polls its sockets.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from tests.e2e.modern_raw import modern_call
from tests.peers.runner import PeerServer
from tests.sidecar import ProxyProcess, clean_env, settings_env

pytestmark = pytest.mark.e2e

CALLS = 20
"""Calls made: enough that a window closing too early splits some of them."""

ANSWERS = {
    "elicitation/create": {"action": "accept", "content": {"name": "octocat"}},
    "sampling/createMessage": {
        "role": "assistant",
        "content": {"type": "text", "text": "Paris"},
        "model": "m",
    },
}


@contextlib.asynccontextmanager
async def endpoint(where: str, upstream: str, proxy_for: Callable[..., Any]) -> AsyncIterator[str]:
    """The MCP endpoint of a proxy in front of `upstream`: in this process, or the `mcp-proxy` command."""
    if where == "in-process":
        async with proxy_for(upstream) as proxy:
            yield proxy.endpoint()
        return
    with ProxyProcess(clean_env(**settings_env(upstream=upstream, admin_enabled="false"))) as process:
        yield process.endpoint()


@pytest.mark.parametrize("where", ["in-process", "command"])
async def test_concurrent_requests_of_a_legacy_server_reach_the_client_as_one_round(
    legacy_server: PeerServer, proxy_for: Callable[..., Any], where: str
) -> None:
    call = {"name": "ask_two_at_once", "arguments": {}}
    whole_rounds = 0
    async with endpoint(where, legacy_server.url, proxy_for) as url, aiohttp.ClientSession() as http:
        for ident in range(1, CALLS + 1):
            status, reply = await modern_call(http, url, "tools/call", call, ident=ident)
            assert status == 200, reply
            asked = reply["result"]["inputRequests"]
            whole_rounds += {r["method"] for r in asked.values()} == set(ANSWERS)
            for _ in range(len(ANSWERS)):  # a split round costs one more round, never the call
                params = {
                    **call,
                    "inputResponses": {key: ANSWERS[r["method"]] for key, r in asked.items()},
                    "requestState": reply["result"]["requestState"],
                }
                status, reply = await modern_call(http, url, "tools/call", params, ident=ident)
                assert status == 200, reply
                if reply["result"]["resultType"] == "complete":
                    break
                asked = reply["result"]["inputRequests"]
            assert reply["result"]["resultType"] == "complete", reply
    # With no window about half the calls split (the second request arrives after the first's
    # round went out); a scheduler stall on a loaded machine can still split one now and then (four
    # of twenty were seen with the machine's two cores running three test suites at once).
    assert whole_rounds >= CALLS * 3 // 4, f"only {whole_rounds} of {CALLS} calls asked both in one round"
