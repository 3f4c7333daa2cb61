"""The MRTR->legacy bridge's round window, against a real legacy server's concurrent requests.

A round opens with the first in-flight request of a call and closes when its window runs out: every
request the server sent before then joins it, and a later one comes as a round of its own, which
costs the client one more retry and never the call. The test peers' `ask_two_at_once` sends its two
requests together, as two TCP writes a few hundred microseconds apart; on a loaded machine the
server can be paused between them for longer than the default millisecond. How often the default
holds the two in one round is therefore a measurement, reported by `bench/` beside the same with no
window; here the window's rule is checked where the server's timing cannot decide it: with the
default, every call ends whatever the split, and with a wide window every call's two requests come
in one round that answers no sooner than the window. Each check runs with the proxy in this
process and as the `mcp-proxy` command, both on uvloop.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from tests.e2e.modern_raw import modern_call
from tests.peers.runner import PeerServer
from tests.sidecar import ProxyProcess, clean_env, settings_env

pytestmark = pytest.mark.e2e

ANSWERS = {
    "elicitation/create": {"action": "accept", "content": {"name": "octocat"}},
    "sampling/createMessage": {
        "role": "assistant",
        "content": {"type": "text", "text": "Paris"},
        "model": "m",
    },
}
CALL = {"name": "ask_two_at_once", "arguments": {}}
WIDE = 0.3
"""A round window far longer than any pause of the server between its two writes."""


@contextlib.asynccontextmanager
async def endpoint(
    where: str, upstream: str, proxy_for: Callable[..., Any], **settings: Any
) -> AsyncIterator[str]:
    """The MCP endpoint of a proxy in front of `upstream`: in this process, or the `mcp-proxy` command."""
    if where == "in-process":
        async with proxy_for(upstream, **settings) as proxy:
            yield proxy.endpoint()
        return
    with ProxyProcess(clean_env(**settings_env(upstream=upstream, **settings))) as process:
        yield process.endpoint()


async def finish(http: aiohttp.ClientSession, url: str, ident: int, reply: dict[str, Any]) -> int:
    """Answer the call's rounds until its result; returns the retries it took."""
    for retries in range(1, len(ANSWERS) + 1):  # a split round costs one more round, never the call
        asked = reply["result"]["inputRequests"]
        params = {
            **CALL,
            "inputResponses": {key: ANSWERS[r["method"]] for key, r in asked.items()},
            "requestState": reply["result"]["requestState"],
        }
        status, reply = await modern_call(http, url, "tools/call", params, ident=ident)
        assert status == 200, reply
        if reply["result"]["resultType"] == "complete":
            assert reply["result"]["content"][0]["text"] == "name=octocat llm=Paris", reply
            return retries
    raise AssertionError(f"call {ident} still asks after {len(ANSWERS)} retries: {reply}")


@pytest.mark.parametrize("where", ["in-process", "command"])
async def test_with_the_default_window_every_call_ends_whether_its_requests_came_in_one_round_or_two(
    legacy_server: PeerServer, proxy_for: Callable[..., Any], where: str
) -> None:
    retries = []
    async with endpoint(where, legacy_server.url, proxy_for) as url, aiohttp.ClientSession() as http:
        for ident in range(1, 21):
            status, reply = await modern_call(http, url, "tools/call", CALL, ident=ident)
            assert status == 200, reply
            asked = {r["method"] for r in reply["result"]["inputRequests"].values()}
            assert asked, reply
            assert asked <= set(ANSWERS), reply
            retries.append(await finish(http, url, ident, reply))
    assert set(retries) <= {1, 2}, retries


@pytest.mark.parametrize("where", ["in-process", "command"])
async def test_a_round_holds_every_request_sent_within_its_window_and_answers_when_the_window_closes(
    legacy_server: PeerServer, proxy_for: Callable[..., Any], where: str
) -> None:
    async with (
        endpoint(where, legacy_server.url, proxy_for, round_window=WIDE) as url,
        aiohttp.ClientSession() as http,
    ):
        for ident in range(1, 6):
            sent = time.monotonic()
            status, reply = await modern_call(http, url, "tools/call", CALL, ident=ident)
            waited = time.monotonic() - sent
            assert status == 200, reply
            asked = sorted(r["method"] for r in reply["result"]["inputRequests"].values())
            assert asked == sorted(ANSWERS), reply
            # The round goes out when its window closes, which opened once the first request came.
            assert waited >= WIDE, f"call {ident} was answered after {waited:.3f}s, inside its window"
            assert await finish(http, url, ident, reply) == 1
