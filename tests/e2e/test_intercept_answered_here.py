"""A client's request answered or dropped at the intercept desk is the proxy's answer, not the server's.

The upstream never sees such a request, so nothing of it is upstream time: its chain has no
`upstream_ms`, `mcp_proxy_upstream_latency_seconds` does not count it, and the TUI labels the
request `[client→proxy]` (relayed unchanged would be `[client→server]`). The same holds for the chain
read back from the capture. The proxy is the `mcp-proxy` command with `--capture` between the SDK's
server and client; the desk is driven through the admin API as a script would (tests.e2e.test_intercept).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proxy.flows.events import ChainSummary, MessageRecord
from tests.e2e.commanded import own_proxy
from tests.e2e.gated_runs import client_run
from tests.e2e.test_intercept import decide, next_held, with_desk
from tests.peers.clients import ClientKind
from tests.sidecar import run_mcp_proxy
from ui.render import answered_here, route

pytestmark = pytest.mark.asyncio

RUNS = [
    pytest.param("python-legacy", "legacy_server", "passthrough", id="legacy"),
    pytest.param("python-2026", "modern_server", "passthrough", id="2026-07-28"),
    pytest.param("python-2026", "legacy_server", "mrtr_to_legacy", id="bridged"),
]
"""(client kind, server fixture, the exchange's mode)."""

DESK_RESULT = {"content": [{"type": "text", "text": "from the desk"}], "isError": False}


def _request_route(chain: dict[str, Any], messages: list[dict[str, Any]]) -> tuple[str, str]:
    """Who sent the chain's first client request to whom, as the TUI's tree labels it."""
    summary = ChainSummary.model_validate(chain)
    sent = next(m for m in messages if m["direction"] == "to_server" and m["side"] != "upstream")
    return route(MessageRecord.model_validate(sent), summary.bridged, answered_here(summary))


@pytest.mark.parametrize(("client", "server", "mode"), RUNS)
async def test_a_request_answered_or_dropped_at_the_desk_took_no_upstream_time_live_and_from_the_capture(
    client: ClientKind, server: str, mode: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    upstream = request.getfixturevalue(server)
    capture = tmp_path / "capture.jsonl"
    async with own_proxy(upstream.url, "--capture", str(capture)) as proxy:
        await proxy.add_intercept("tool:echo dir:client")
        await proxy.add_intercept("tool:add dir:client")

        async def desk(http: aiohttp.ClientSession) -> None:
            first = await next_held(http, proxy)
            result = DESK_RESULT | ({"resultType": "complete"} if client == "python-2026" else {})
            assert (await decide(http, proxy, first["id"], {"decision": "answer", "result": result}))[
                0
            ] == 200
            second = await next_held(http, proxy, after=first["id"])
            assert (await decide(http, proxy, second["id"], {"decision": "drop"}))[0] == 200

        run = await with_desk(proxy, client_run(proxy, client, ["echo", "add", "ask_name"]), desk)
        timed = await proxy.counted(
            f'mcp_proxy_upstream_latency_seconds_count{{method="tools/call",mode="{mode}"}}'
        )
        live = {c["name"]: c for c in await proxy.chains() if c.get("method") == "tools/call"}
        routes = {name: _request_route(c, await proxy.messages(c["id"])) for name, c in live.items()}
    assert run.lines["echo"]["result"]["content"] == ["from the desk"], run.lines
    assert "dropped this request" in run.lines["add"]["error"]["message"], run.lines
    assert timed == 1.0  # ask_name went upstream; echo and add the proxy answered
    assert {name: c["upstream_ms"] is None for name, c in live.items()} == {
        "echo": True,
        "add": True,
        "ask_name": False,
    }
    relayed = ("client", "server") if mode == "passthrough" else ("client", "proxy")  # a bridge's own call
    assert routes == {"echo": ("client", "proxy"), "add": ("client", "proxy"), "ask_name": relayed}

    exported = await asyncio.to_thread(run_mcp_proxy, "export", "--json", "-", str(capture))
    assert exported.returncode == 0, exported.stderr
    read = {
        item["chain"]["name"]: item
        for item in json.loads(exported.stdout)["chains"]
        if item["chain"].get("method") == "tools/call"
    }
    assert {name: item["chain"]["upstream_ms"] is None for name, item in read.items()} == {
        "echo": True,
        "add": True,
        "ask_name": False,
    }
    assert {name: _request_route(item["chain"], item["messages"]) for name, item in read.items()} == routes
