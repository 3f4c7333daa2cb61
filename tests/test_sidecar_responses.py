"""Big upstream answers under one global bound, end to end: the real `mcp-proxy` and a real SDK server.

`max_response_bytes_in_flight` bounds the response bytes the proxy holds at once across all clients:
what pass-through keeps to read an answer for the chains, and the messages a bridge holds whole. Past
it, pass-through relays an answer whole but unread, and a bridge refuses the message with a JSON-RPC
error naming the setting. Whatever the outcome, every exchange gives its share back, so the bytes
held return to zero.

The upstream is the 2026-07-28 SDK server: a 2026-07-28 client passes through (its answer is JSON
with a length, so the proxy counts the whole of it from its head), and a legacy client goes through
the legacy-client bridge. An intercept rule holding a bridged answer keeps its share of the budget
held until it is let go, which is how the first test fills the budget without racing; in the second,
held answers go on by the rule's timeout while the others meet the budget as they come.
"""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import aiohttp
import pytest
from mcp.shared.exceptions import MCPError

from proxy.transport.tasks import spawn
from tests.e2e.modern_raw import modern_call, modern_headers, modern_params
from tests.peers.runner import PeerServer
from tests.peers.scenarios import client_for
from tests.sidecar import ProxyProcess, metric, scrape, sidecar

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore:Sending a large body directly:ResourceWarning"),  # aiohttp's
]

LIMIT = 1024 * 1024
"""The budget of these tests, and the largest message read or bridged."""

SIZE = 900_000
"""Characters of each echoed text: two such answers never fit in the budget at once, and one fits
the SDK client's 1 MiB bound on an SSE event (a bridge answers a legacy client on SSE)."""

SETTING = "max_response_bytes_in_flight"

IN_FLIGHT = "mcp_proxy_response_bytes_in_flight"
PEAK = "mcp_proxy_response_bytes_in_flight_peak"
REFUSALS = "mcp_proxy_response_budget_refusals_total"

HOLD_FIRST_ANSWER = "dir:server body:*call-01:* timeout=30s"
"""An intercept rule holding the answer to the first echo call (its text) until the rule is deleted."""


def budget_proxy(server: PeerServer, **settings: object) -> ProxyProcess:
    """The real command, with room for one big answer at a time (by variables, as the Docker image)."""
    return sidecar(
        upstream=server.url,
        max_inspected_bytes=LIMIT,
        max_bridged_message_bytes=LIMIT,
        max_response_bytes_in_flight=LIMIT,
        **settings,
    )


def text_of(i: int) -> str:
    """The text call `i` has echoed: its own, so an answer delivered to the wrong call shows."""
    return f"call-{i:02d}:" + "x" * SIZE


async def held_until(proxy: ProxyProcess, holds: Any, what: str) -> str:
    """The /metrics page once the bytes held satisfy `holds` (a bounded wait: exchanges end, and
    bodies arrive, asynchronously)."""
    page = ""
    for _ in range(300):
        page = await scrape(proxy)
        if holds(metric(page, IN_FLIGHT)):
            return page
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}: {metric(page, IN_FLIGHT)} bytes held")


async def budget_back_to_zero(proxy: ProxyProcess) -> str:
    """The /metrics page once nothing is held any more; the peak never passed the limit."""
    page = await held_until(proxy, lambda held: held == 0, "the budget to be given back")
    assert 0 < metric(page, PEAK) <= LIMIT
    return page


async def modern_echo(http: aiohttp.ClientSession, url: str, i: int) -> dict[str, Any]:
    """A 2026-07-28 client's echo of `text_of(i)` (passed through): its JSON-RPC answer."""
    params = {"name": "echo", "arguments": {"text": text_of(i)}}
    _, answer = await modern_call(http, url, "tools/call", params, ident=i)
    return answer


async def test_past_the_budget_passthrough_relays_whole_but_unread_and_a_bridge_refuses_naming_it(
    modern_server: PeerServer,
) -> None:
    with budget_proxy(modern_server, intercepts=HOLD_FIRST_ANSWER) as proxy:
        url = proxy.endpoint()
        async with client_for(url, "legacy") as first, client_for(url, "legacy") as second:
            held = spawn(first.call_tool("echo", {"text": text_of(1)}), name="held-call")
            await held_until(proxy, lambda size: size > LIMIT - SIZE, "the held answer to count")

            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
                passed = await modern_echo(http, url, 2)
            assert passed["result"]["content"][0]["text"] == text_of(2)  # whole and correct, though unread
            line = await proxy.logged("body_not_inspected")
            assert SETTING in line["reason"]

            with pytest.raises(MCPError) as refused:
                await second.call_tool("echo", {"text": text_of(3)})
            assert SETTING in str(refused.value)
            assert (await proxy.logged("response_budget_full"))["limit"] == LIMIT

            status, _ = await admin_delete(proxy.admin + "/api/intercepts")  # the held answer goes on
            assert status == 200
            assert (await held).content[0].text == text_of(1)  # type: ignore[union-attr]
            page = await budget_back_to_zero(proxy)
            assert metric(page, REFUSALS, outcome="not_inspected") == 1
            assert metric(page, REFUSALS, outcome="refused") == 1

            again = await second.call_tool("echo", {"text": text_of(3)})  # room again: a retry succeeds
            assert again.content[0].text == text_of(3)  # type: ignore[union-attr]
        await budget_back_to_zero(proxy)


async def admin_delete(url: str) -> tuple[int, Any]:
    """DELETE an admin URL: its status and JSON body."""
    async with aiohttp.ClientSession() as http, http.delete(url) as resp:
        return resp.status, await resp.json(content_type=None)


class StalledClient:
    """A 2026-07-28 client that asks for a big echo and leaves without reading the answer."""

    def __init__(self, proxy: ProxyProcess, i: int) -> None:
        self.proxy = proxy
        self.i = i
        self.writer: asyncio.StreamWriter | None = None

    async def ask(self) -> None:
        host, port = self.proxy.listen.removeprefix("http://").rsplit(":", 1)
        params = modern_params({"name": "echo", "arguments": {"text": text_of(self.i)}})
        body = json.dumps({"jsonrpc": "2.0", "id": self.i, "method": "tools/call", "params": params}).encode()
        fields = "".join(f"{k}: {v}\r\n" for k, v in modern_headers("tools/call", params).items())
        head = f"POST /mcp HTTP/1.1\r\nHost: {host}\r\n{fields}Content-Length: {len(body)}\r\n\r\n"
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a small window: the proxy waits on it
        sock.connect((host, int(port)))
        sock.setblocking(False)
        _, self.writer = await asyncio.open_connection(sock=sock)
        self.writer.write(head.encode() + body)
        await self.writer.drain()

    def leave(self) -> None:
        assert self.writer is not None
        self.writer.close()


async def bridged_echo(url: str, i: int) -> str:
    """A legacy client's echo of `text_of(i)` through the bridge: the text, or the error it got."""
    async with client_for(url, "legacy") as client:
        try:
            result = await client.call_tool("echo", {"text": text_of(i)})
        except MCPError as error:
            return "refused" if SETTING in str(error) else str(error)
    text: str = result.content[0].text  # type: ignore[union-attr]
    return text


async def test_many_big_answers_at_once_and_every_outcome_give_the_budget_back(
    modern_server: PeerServer,
) -> None:
    rule = "tool:echo dir:server mode:legacy_to_mrtr timeout=1s"  # held answers go on by timeout
    with budget_proxy(modern_server, intercepts=rule) as proxy:
        url = proxy.endpoint()
        leaving = [StalledClient(proxy, 90 + i) for i in range(2)]
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
            for client in leaving:
                await client.ask()
            calls = await asyncio.gather(
                *(modern_echo(http, url, i) for i in range(4)),  # passed through: read, or relayed unread
                *(bridged_echo(url, 10 + i) for i in range(4)),  # bridged: answered, or refused
                modern_call(http, url, "tools/call", {"name": "fail", "arguments": {}}, ident=20),
                modern_call(http, url, "tools/call", {"name": "no_such_tool", "arguments": {}}, ident=21),
            )
            for client in leaving:  # they leave with their answers unread
                client.leave()
        for i, answer in enumerate(calls[:4]):
            assert answer["result"]["content"][0]["text"] == text_of(i)
        for i, text in enumerate(calls[4:8]):
            assert text in ("refused", text_of(10 + i))

        page = await budget_back_to_zero(proxy)
        refused = sum(text == "refused" for text in calls[4:8])
        assert metric(page, REFUSALS, outcome="refused") == refused
