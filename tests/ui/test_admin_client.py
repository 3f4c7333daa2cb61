"""The TUI's admin client with `HTTP_PROXY` set: a loopback admin API is reached directly, never
through the forward proxy (which would carry the admin token in clear, and cannot reach this
machine's loopback); an admin API on another host still goes through it, as httpx does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import aiohttp
import httpx
import pytest

from tests.e2e.legacy_raw import HEADERS, initialize
from tests.peers.runner import PeerServer
from tests.sidecar import ProxyProcess, clean_env, settings_env
from tests.ui.helpers import wait_for
from ui.admin_client import admin_client
from ui.app import ProxyTui
from ui.desk_http import HttpDesk
from ui.feeds import AttachFeed

TOKEN = "admin-token-not-for-the-forward-proxy"

PROXY_VARIABLES = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
NO_PROXY_VARIABLES = ("NO_PROXY", "no_proxy")


class FakeForwardProxy:
    """A fake forward proxy (no real one is among the peers): records the head of each request it is
    given and answers 502, as a forward proxy does that cannot reach where it is asked to go."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []
        self.server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aenter__(self) -> FakeForwardProxy:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(5):
                self.heads.append(await reader.readuntil(b"\r\n\r\n"))
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, OSError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def forward_proxy(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeForwardProxy]:
    """The fake forward proxy, named in every proxy variable of the environment; no `NO_PROXY`."""
    async with FakeForwardProxy() as fake:
        for name in PROXY_VARIABLES:
            monkeypatch.setenv(name, fake.url)
        for name in NO_PROXY_VARIABLES:
            monkeypatch.delenv(name, raising=False)
        yield fake


@pytest.fixture
def proxy_with_token(legacy_server: PeerServer) -> Iterator[ProxyProcess]:
    env = clean_env(**settings_env(upstream=legacy_server.url, admin_token=TOKEN))
    with ProxyProcess(env) as proxy:
        yield proxy


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "[::1]"])
async def test_a_loopback_admin_url_never_goes_to_the_environments_proxy(
    host: str, forward_proxy: FakeForwardProxy
) -> None:
    async with admin_client(f"http://{host}:9/", timeout=5) as client:
        with pytest.raises(httpx.ConnectError):  # nothing listens there: tried directly
            await client.get(f"http://{host}:9/api/status", headers={"Authorization": f"Bearer {TOKEN}"})

    assert forward_proxy.heads == []


async def test_an_admin_url_on_another_host_keeps_the_environments_proxy(
    forward_proxy: FakeForwardProxy,
) -> None:
    async with admin_client("http://admin.example.invalid:9/", timeout=5) as client:
        answer = await client.get("http://admin.example.invalid:9/api/status")

    assert answer.status_code == 502
    assert [head.split(b"\r\n")[0] for head in forward_proxy.heads] == [
        b"GET http://admin.example.invalid:9/api/status HTTP/1.1"
    ]


@pytest.mark.e2e
async def test_the_attached_tui_reads_the_feed_and_the_desk_with_http_proxy_set(
    proxy_with_token: ProxyProcess, forward_proxy: FakeForwardProxy
) -> None:
    """`mcp-proxy tui --attach http://127.0.0.1:PORT` in a shell with `HTTP_PROXY` set: the feed goes
    live, a client's exchange shows, the rule desk answers, and the forward proxy sees none of it."""
    proxy = proxy_with_token
    desk = HttpDesk(proxy.admin, TOKEN)
    app = ProxyTui(AttachFeed(proxy.admin, TOKEN, backoff=(0.05,)), batch_delay=0.01, desk=desk)
    async with app.run_test(size=(120, 36)):
        await wait_for(lambda: bool(app.feed_status and app.feed_status.state == "live"), what="live")
        # aiohttp leaves the environment's proxy alone: only the TUI's requests are in question here.
        async with (
            aiohttp.ClientSession() as http,
            http.post(proxy.endpoint(), json=initialize(), headers=HEADERS) as answer,
        ):
            assert answer.status == 200, await answer.text()
        await wait_for(lambda: bool(app.model.chains), what="the client's exchange in the TUI")
        assert await desk.fault_rules() == []

    assert forward_proxy.heads == []
