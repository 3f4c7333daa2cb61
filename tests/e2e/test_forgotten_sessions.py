"""A pass-through session the server forgot counts as `expired`, once, through the `mcp-proxy` command.

A real legacy SDK server forgets a session (here it is deleted behind the proxy's back, as a server
restart would lose it) and answers each later request of it 404 "Session not found". The proxy
passes every 404 through; `mcp_proxy_sessions_total{state="expired"}` must count the session once,
however many requests the client keeps sending with it, as an SRE alerting on an upstream restart
expects.
"""

from __future__ import annotations

import aiohttp
import anyio
import pytest

from tests.e2e.legacy_raw import HEADERS, initialize, session_headers
from tests.peers.runner import PeerServer
from tests.sidecar import ProxyProcess, admin_get, clean_env, settings_env

pytestmark = pytest.mark.e2e

CALL = {
    "jsonrpc": "2.0",
    "id": 2,
    "method": "tools/call",
    "params": {"name": "add", "arguments": {"a": 1, "b": 2}},
}


async def _sessions_counted(admin: str) -> dict[str, float]:
    _, _, body = await admin_get(admin + "/metrics")
    counted = {}
    for line in body.decode().splitlines():
        if line.startswith("mcp_proxy_sessions_total{"):
            state = line.split('state="', 1)[1].split('"', 1)[0]
            counted[state] = float(line.rsplit(" ", 1)[1])
    return counted


async def _settled(admin: str) -> dict[str, float]:
    """The session counts once the last request's observations are in (bounded poll: a relayed answer
    reaches the client a moment before its observations are counted)."""
    with anyio.move_on_after(5):
        while True:
            if "expired" in await _sessions_counted(admin):
                break
            await anyio.sleep(0.05)
    return await _sessions_counted(admin)


async def test_a_session_the_server_forgot_counts_expired_once_however_often_it_is_refused(
    legacy_server: PeerServer,
) -> None:
    with ProxyProcess(clean_env(**settings_env(upstream=legacy_server.url))) as proxy:
        url = proxy.endpoint()
        async with aiohttp.ClientSession() as http:
            async with http.post(url, json=initialize(), headers=HEADERS) as resp:
                assert resp.status == 200, await resp.text()
                session = resp.headers["Mcp-Session-Id"]
            async with http.delete(legacy_server.url, headers=session_headers(session)) as resp:
                assert resp.status == 200, await resp.text()  # the server forgets it; the proxy never saw
            statuses = []
            for _ in range(3):
                async with http.post(url, json=CALL, headers=session_headers(session)) as resp:
                    statuses.append(resp.status)
        counted = await _settled(proxy.admin)

    assert statuses == [404, 404, 404]
    assert counted.get("expired") == 1
    assert counted.get("ended", 0) == 0
