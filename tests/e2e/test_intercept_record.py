"""What a capture keeps of a message an intercept changed, read back by `mock`, `export` and `replay`.

A user runs the `mcp-proxy` command with `--capture` between the SDK's legacy in-flight server and an
SDK client, holds a message through the admin API and decides on it, as a script would
(tests.e2e.test_intercept drives the desk the same way). The capture is then read by the other
commands: each must take the message as the server had it, since the server answered that.
"""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest
from mcp.shared.exceptions import MCPError

from tests.e2e.commanded import own_proxy
from tests.e2e.gated_runs import client_run
from tests.e2e.test_intercept import decide, next_held, with_desk
from tests.peers.runner import PeerServer
from tests.peers.scenarios import client_for, normalize_tool_result
from tests.sidecar import ProxyProcess, clean_env, settings_env

pytestmark = pytest.mark.asyncio


def _mock(capture: Path) -> ProxyProcess:
    """`mcp-proxy mock CAPTURE` on a free port (no upstream: the capture is all it has)."""
    return ProxyProcess(clean_env(**settings_env(admin_enabled="false", drain_grace=1)), "mock", str(capture))


async def test_a_mock_answers_an_edited_call_for_what_the_server_got_not_what_the_client_sent(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    async with own_proxy(
        legacy_server.url, "--intercept", "tool:add dir:client", "--capture", str(capture)
    ) as proxy:

        async def desk(http: aiohttp.ClientSession) -> None:
            held = await next_held(http, proxy)
            edited = json.loads(json.dumps(held["message"]))
            assert edited["params"]["arguments"] == {"a": 2, "b": 3}
            edited["params"]["arguments"]["a"] = 40
            assert (await decide(http, proxy, held["id"], {"decision": "forward", "message": edited}))[
                0
            ] == 200

        run = await with_desk(proxy, client_run(proxy, "python-legacy", ["add"]), desk)
    assert run.lines["add"]["result"]["content"] == ["43"], run.lines  # the server added 40 and 3

    with _mock(capture) as mock:
        async with client_for(mock.endpoint(), "legacy") as client:
            served = normalize_tool_result(await client.call_tool("add", {"a": 40, "b": 3}))
            with pytest.raises(MCPError) as as_sent:
                await client.call_tool("add", {"a": 2, "b": 3})
    assert served["content"] == ["43"]
    assert as_sent.value.error.code == -32602
    assert 'nearest recorded: tools/call add {"a":40,"b":3}' in as_sent.value.error.message
