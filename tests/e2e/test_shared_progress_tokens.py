"""Several 2026-07-28 clients' calls with the same progress token, on one upstream channel.

A stdio server (one child for every 2026-07-28 client) and an HTTP+SSE server (one session for every
anonymous client by default) carry all progress on one stream, told apart only by the progress token.
Clients choose tokens that collide (SDK clients use their request id), so the proxy sends each call
upstream under a token no other call in flight there has, and each client hears only its own
progress, all of it, under the token it chose. Client A's call is still reporting when client B's
starts with the same id and the same token; each call's step count is its own, so a progress
notification of the other call shows in its `total`.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import anyio
import pytest

from tests.e2e.channel_peers import Sdk2024Sse, python_stdio_command
from tests.e2e.modern_raw import modern_messages
from tests.peers.runner import DEFAULT_START_TIMEOUT, DEFAULT_STOP_TIMEOUT
from tests.sidecar import ProxyProcess, clean_env, settings_env

pytestmark = pytest.mark.e2e

TOKEN = 7
"""Both clients' progress token (and request id), as two SDK clients' first calls have."""
STEPS = {"A": 40, "B": 5}
"""Each client's step count: A's call runs long enough for B's to start while A's still reports."""


async def _call(
    http: aiohttp.ClientSession, url: str, tool: str, steps: int, *, reporting: anyio.Event | None = None
) -> tuple[list[tuple[Any, Any, Any]], Any]:
    """One client's call: the (token, progress, total) of each progress notification it heard, and its
    result (its error when it failed); `reporting` is set at its first progress."""
    params = {"name": tool, "arguments": {"steps": steps}, "_meta": {"progressToken": TOKEN}}
    heard: list[tuple[Any, Any, Any]] = []
    outcome: Any = None
    async for message in modern_messages(http, url, "tools/call", params, ident=TOKEN):
        if message.get("method") == "notifications/progress":
            said = message["params"]
            heard.append((said.get("progressToken"), said.get("progress"), said.get("total")))
            if reporting is not None:
                reporting.set()
        elif "result" in message or "error" in message:
            outcome = message.get("result", message.get("error"))
    return heard, outcome


async def _two_clients_one_token(url: str, tool: str) -> dict[str, tuple[list[tuple[Any, Any, Any]], Any]]:
    """A's and B's calls from separate connections, B's sent once A's first progress came."""
    seen: dict[str, tuple[list[tuple[Any, Any, Any]], Any]] = {}
    reporting = anyio.Event()

    async def run(who: str) -> None:
        async with aiohttp.ClientSession() as http:
            if who == "B":
                await reporting.wait()
            seen[who] = await _call(http, url, tool, STEPS[who], reporting=reporting if who == "A" else None)
            reporting.set()  # B still runs when A heard no progress at all

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            group.start_soon(run, "A")
            group.start_soon(run, "B")
    return seen


def _proxy(**settings: str) -> ProxyProcess:
    return ProxyProcess(clean_env(**settings_env(**settings)))


def _assert_each_heard_only_its_own(seen: dict[str, tuple[list[tuple[Any, Any, Any]], Any]]) -> None:
    for who, steps in STEPS.items():
        heard, _ = seen[who]
        assert heard == [(TOKEN, step, steps) for step in range(1, steps + 1)], (who, heard)


@pytest.mark.parametrize("era", ["auto", "legacy"], ids=["passed-through", "bridged"])
async def test_two_clients_with_one_progress_token_behind_a_stdio_server_each_hear_only_their_own(
    era: str,
) -> None:
    with _proxy(upstream_cmd=python_stdio_command(), upstream_era=era) as proxy:
        seen = await _two_clients_one_token(proxy.endpoint(), "slow_progress")
    _assert_each_heard_only_its_own(seen)
    for who, steps in STEPS.items():
        assert seen[who][1]["content"][0]["text"] == f"done {steps}", seen[who]


async def test_two_clients_with_one_progress_token_behind_an_http_sse_server_each_hear_only_their_own() -> (
    None
):
    server = Sdk2024Sse(start_timeout=DEFAULT_START_TIMEOUT, stop_timeout=DEFAULT_STOP_TIMEOUT)
    with server, _proxy(upstream=server.sse_url, upstream_era="legacy", upstream_transport="sse") as proxy:
        seen = await _two_clients_one_token(proxy.endpoint("/sse"), "count")
    _assert_each_heard_only_its_own(seen)
    for who, steps in STEPS.items():
        assert seen[who][1]["content"][0]["text"] == f"counted {steps}", seen[who]
