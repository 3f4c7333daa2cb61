"""Requests the real `mcp-proxy`'s admin API refuses 401 for its token leave a trace: a warning naming
who asked for what and why it was refused (never the credential sent), and a count by why.

Someone probing the admin port is what on-call wants to see; a flood of guesses is one line a second
per why, each guess counted.
"""

from __future__ import annotations

import aiohttp
import pytest

from tests.e2e.commanded import TOKEN, Commanded, ProxyFleet
from tests.peers.runner import PeerServer
from tests.sidecar import until

pytestmark = pytest.mark.e2e

WRONG = "SECRET-guessed-token-4711"
QUERY_SECRET = "SECRET-in-the-query-0815"
GUESSES = 5


def _refused(proxy: Commanded) -> list[dict[str, object]]:
    return [e for e in proxy.lines() if e.get("event") == "admin_unauthorized"]


async def _ask(url: str, headers: dict[str, str]) -> int:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
        http.get(url, headers=headers) as resp,
    ):
        return resp.status


async def test_a_401_from_the_admin_api_is_logged_by_why_and_counted_never_with_the_token_given(
    fleet: ProxyFleet, legacy_server: PeerServer
) -> None:
    proxy = await fleet.at(legacy_server)
    chains = f"{proxy.admin_url}/api/chains?token={QUERY_SECRET}"
    assert await _ask(chains, {}) == 401
    assert await _ask(f"{proxy.admin_url}/metrics", {"Authorization": f"Basic {WRONG}"}) == 401
    for _ in range(GUESSES):
        assert await _ask(chains, {"Authorization": f"Bearer {WRONG}"}) == 401
    assert await _ask(f"{proxy.admin_url}/metrics", {"Authorization": f"Bearer {TOKEN}"}) == 200

    await until(lambda: len(_refused(proxy)) >= 3, what="the 401 warnings", seconds=20)
    lines = _refused(proxy)
    shown = [(e["level"], e["status"], e["why"], e["method"], e["path"]) for e in lines]
    assert shown == [
        ("warning", 401, "missing", "GET", "/api/chains"),
        ("warning", 401, "not_bearer", "GET", "/metrics"),
        ("warning", 401, "wrong_token", "GET", "/api/chains"),  # the guesses after it are counted
    ]
    assert all(str(e["peer"]) == "127.0.0.1" for e in lines)
    for why, count in (("missing", 1), ("not_bearer", 1), ("wrong_token", GUESSES)):
        assert await proxy.counted(f'mcp_proxy_admin_unauthorized_total{{why="{why}"}}') == count
    log = proxy.process.stderr()
    assert WRONG not in log
    assert QUERY_SECRET not in log
