"""The MRTR->legacy bridge resumes a call stream a polling legacy server closes (SEP-1699).

The Python SDK server in its polling configuration (``legacy-polling``) closes each tool call's SSE
stream after its priming event (an id and a `retry`); the elicitation and the result follow only on
a GET with `Last-Event-ID`. A 2026-07-28 client cannot resume a stream it never saw, so the bridge
must: the engine orders the resume (ResumeLeg), the driver waits and reopens, and the client sees
one ordinary MRTR round and its result. The proxy is the `mcp-proxy` command with default settings.
"""

from __future__ import annotations

from collections.abc import Callable

import aiohttp
import pytest

from tests.e2e.commanded import own_proxy
from tests.e2e.modern_raw import modern_call
from tests.peers.runner import PeerServer

pytestmark = pytest.mark.e2e


async def test_a_call_stream_the_legacy_server_closes_is_resumed_and_the_round_completes(
    peer_factory: Callable[..., PeerServer],
) -> None:
    server = peer_factory("legacy-polling")
    call = {"name": "ask_name", "arguments": {}}
    async with own_proxy(server.url) as proxy, aiohttp.ClientSession() as http:
        url = proxy.endpoint()
        status, reply = await modern_call(http, url, "tools/call", call, ident=1)
        assert status == 200, reply
        asked = reply["result"]["inputRequests"]
        assert [r["method"] for r in asked.values()] == ["elicitation/create"]
        answers = {key: {"action": "accept", "content": {"name": "octocat"}} for key in asked}
        retry = {**call, "inputResponses": answers, "requestState": reply["result"]["requestState"]}
        status, reply = await modern_call(http, url, "tools/call", retry, ident=2)

    assert status == 200, reply
    assert reply["result"]["resultType"] == "complete"
    assert reply["result"]["content"][0]["text"] == "Hello, octocat!"
