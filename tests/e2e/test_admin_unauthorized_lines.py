"""Requests the real `mcp-proxy`'s admin API refuses for who asked leave a trace: a 401 for its token,
a 403 for a web page's Origin, a 415 for a body that is not JSON. Each is a warning naming who asked
for what and why it was refused (never the credential sent), and a count by why.

Someone probing the admin port, or a page trying it, is what on-call wants to see; a flood is one line
a second per why, each refusal counted.
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


def _refused(proxy: Commanded, event: str = "admin_unauthorized") -> list[dict[str, object]]:
    return [e for e in proxy.lines() if e.get("event") == event]


async def _ask(url: str, headers: dict[str, str], method: str = "GET", data: bytes | None = None) -> int:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
        http.request(method, url, headers=headers, data=data) as resp,
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


async def test_a_403_or_415_from_the_admin_api_is_logged_by_why_and_counted_like_a_401(
    fleet: ProxyFleet, legacy_server: PeerServer
) -> None:
    proxy = await fleet.at(legacy_server)
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    page = {**bearer, "Origin": "http://evil.example"}
    for _ in range(GUESSES):
        assert await _ask(f"{proxy.admin_url}/api/chains?token={QUERY_SECRET}", page) == 403
    text = {**bearer, "Content-Type": "text/plain"}
    assert await _ask(f"{proxy.admin_url}/api/faults", text, "POST", b'{"rule": "* => drop"}') == 415

    await until(lambda: len(_refused(proxy, "admin_refused")) >= 2, what="the refusal warnings", seconds=20)
    lines = _refused(proxy, "admin_refused")
    shown = [(e["level"], e["status"], e["why"], e["method"], e["path"]) for e in lines]
    assert shown == [
        ("warning", 403, "foreign_origin", "GET", "/api/chains"),  # the others after it are counted
        ("warning", 415, "not_json", "POST", "/api/faults"),
    ]
    for why, count in (("foreign_origin", GUESSES), ("not_json", 1), ("foreign_host", 0)):
        assert await proxy.counted(f'mcp_proxy_admin_refused_total{{why="{why}"}}') == count
    assert QUERY_SECRET not in proxy.process.stderr()
