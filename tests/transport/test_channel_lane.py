"""Which messages take the shim's direct lane, with the Python SDK's stdio server as the child.

The lane's answers and observations are compared with the HTTP shape's end to end
(`tests/e2e/test_stdio_lane.py`); here the proxy runs in this process, so the test can tell which way
each message went: the HTTP shape asks the channel upstream for a response (`ChannelUpstream.request`),
the lane never does. The handshake takes the HTTP shape (it starts the child and names the session),
calls and notifications after it take the lane, and a fault rule in force sends them back.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest

from proxy.config import Settings
from proxy.engine.gate.rules import parse_rule
from proxy.runtime import Proxy
from proxy.transport.channel_client import ChannelClientShell
from proxy.transport.channel_upstream import ChannelUpstream
from proxy.transport.upstream_pool import UpstreamResponse
from tests.e2e.channel_peers import python_stdio_command
from tests.sidecar import until

WAIT_SECONDS = 15.0
"""Longest wait for one answer from the child."""

_INIT = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}


class Lines:
    """A client's channel that keeps what the proxy writes to it (never full)."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self.arrived = asyncio.Event()

    def send(self, data: bytes) -> None:
        assert b"\n" not in data
        self.lines.append(json.loads(data))
        self.arrived.set()

    async def room(self) -> None:
        return None

    def full(self) -> bool:
        return False

    async def answer(self, ident: int) -> dict[str, Any]:
        async with asyncio.timeout(WAIT_SECONDS):
            while True:
                for line in self.lines:
                    if line.get("id") == ident and "method" not in line:
                        return line
                self.arrived.clear()
                await self.arrived.wait()


class CountedUpstream:
    """Counts the requests the HTTP shape makes of the channel upstream (the real one answers them)."""

    def __init__(self, upstream: ChannelUpstream) -> None:
        self.upstream = upstream
        self.posts = 0
        self._request = upstream.request

    async def request(
        self, method: str, path: str, headers: Any, body: bytes, query: str = ""
    ) -> UpstreamResponse:
        if method == "POST":
            self.posts += 1
        return await self._request(method, path, headers, body, query)


@pytest.fixture
async def shim() -> AsyncIterator[tuple[Proxy, ChannelClientShell, Lines, CountedUpstream]]:
    proxy = Proxy(Settings(upstream_cmd=python_stdio_command(), admin_enabled=False), http_clients=False)
    await proxy.start()
    out = Lines()
    assert proxy.channels is not None
    counted = CountedUpstream(proxy.channels)
    proxy.channels.request = counted.request  # type: ignore[method-assign]
    shell = ChannelClientShell(proxy.serving(), out, transport="stdio", peer="stdio", full=out.full)
    try:
        yield proxy, shell, out, counted
    finally:
        await shell.close()
        await proxy.stop()


def _line(ident: int | None, method: str, params: dict[str, Any]) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if ident is not None:
        message["id"] = ident
    return json.dumps(message).encode()


async def test_calls_after_the_handshake_take_the_lane_and_a_rule_in_force_sends_them_the_http_way(
    shim: tuple[Proxy, ChannelClientShell, Lines, CountedUpstream],
) -> None:
    proxy, shell, out, counted = shim
    shell.receive(_line(1, "initialize", _INIT))
    assert "result" in await out.answer(1)
    assert counted.posts == 1  # the handshake: the HTTP shape
    shell.receive(_line(None, "notifications/initialized", {}))
    shell.receive(_line(2, "tools/call", {"name": "echo", "arguments": {"text": "hello"}}))
    answer = await out.answer(2)
    assert answer["result"]["content"][0]["text"] == "hello"
    assert counted.posts == 1  # the notification and the call took the lane

    proxy.faults.add(parse_rule("method:no/such/method => drop"))
    shell.receive(_line(3, "tools/call", {"name": "echo", "arguments": {"text": "again"}}))
    answer = await out.answer(3)
    assert answer["result"]["content"][0]["text"] == "again"
    assert counted.posts == 2  # a rule in force: the HTTP shape (the gated relay)


async def test_a_streaming_call_on_the_lane_gets_an_error_naming_the_exit_when_the_child_dies(
    shim: tuple[Proxy, ChannelClientShell, Lines, CountedUpstream],
) -> None:
    proxy, shell, out, counted = shim
    shell.receive(_line(1, "initialize", _INIT))
    await out.answer(1)
    shell.receive(_line(None, "notifications/initialized", {}))
    params = {"name": "slow_progress", "arguments": {"steps": 1000}, "_meta": {"progressToken": "p"}}
    shell.receive(_line(2, "tools/call", params))
    async with asyncio.timeout(WAIT_SECONDS):  # the call's progress reaches the client on the lane
        while not any(line.get("method") == "notifications/progress" for line in out.lines):
            out.arrived.clear()
            await out.arrived.wait()
    assert proxy.channels is not None
    (session,) = (s for s in proxy.channels._all if s.session is not None)
    pid = session.channel.pid  # type: ignore[attr-defined]
    os.kill(pid, signal.SIGKILL)
    answer = await out.answer(2)
    assert counted.posts == 1
    assert answer["error"]["code"] == -32000
    assert answer["error"]["message"] == (
        f"the upstream MCP server (pid {pid}) was killed by SIGKILL before answering"
    )


async def test_once_the_session_is_gone_a_notification_or_an_answer_gets_no_line_and_a_request_its_error(
    shim: tuple[Proxy, ChannelClientShell, Lines, CountedUpstream],
) -> None:
    # JSON-RPC answers no notification and no response: an error with no id is an unknown message to
    # the client's SDK, and one under the id of the client's answer (77) would fail the client's own
    # pending request 77.
    proxy, shell, out, _counted = shim
    shell.receive(_line(1, "initialize", _INIT))
    await out.answer(1)
    shell.receive(_line(None, "notifications/initialized", {}))
    shell.receive(_line(2, "tools/call", {"name": "echo", "arguments": {"text": "hello"}}))
    await out.answer(2)
    assert proxy.channels is not None
    (session,) = (s for s in proxy.channels._all if s.session is not None)
    os.kill(session.channel.pid, signal.SIGKILL)  # type: ignore[attr-defined]
    await until(lambda: session.ended, what="the session's channel to end", seconds=WAIT_SECONDS)
    shell.receive(_line(None, "notifications/roots/list_changed", {}))
    shell.receive(json.dumps({"jsonrpc": "2.0", "id": 77, "result": {"roots": []}}).encode())
    shell.receive(_line(6, "ping", {}))
    refused = await out.answer(6)  # after the two before it: each waits for the one before's head
    assert refused["error"]["message"] == "Session not found"
    assert [line for line in out.lines if line.get("id") in (None, 77) and "method" not in line] == []
