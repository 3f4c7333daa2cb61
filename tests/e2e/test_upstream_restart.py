"""The upstream restarts under a running proxy: the bridge's upstream session is found lost and reopened.

server-everything (Streamable HTTP, TypeScript SDK v1, from the repository's ``.cache/node``) forgets
its sessions when it restarts, and answers a request in a session it does not know with HTTP 400 and a
JSON-RPC error naming no request (``Bad Request: No valid session ID provided``), where the Python SDK
answers 404. One ``mcp-proxy`` (default settings) stays up while the server is stopped and started
again on the same port; a 2026-07-28 client's call through the modern->legacy bridge must work on
both sides of the restart, at once, without waiting for the session's idle timeout (the clients on
either side send one `Authorization`, so they share the bridge's upstream session whatever
`anonymous_upstream_sessions` says); and a stdio
client (`mcp-proxy stdio --upstream URL`) that initializes again after the restart gets a new session,
its handshake carrying no dead session id; the server's refusals of that client's notification and
answer in the forgotten session are written nowhere (JSON-RPC answers neither). A call parked
between rounds when the server stops is lost with it: the client's correct retry is told so
(-32000, HTTP 502), not that its `requestState` is invalid.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Final

import aiohttp
import mcp_types as types
import pytest

from tests.e2e.modern_raw import modern_call
from tests.e2e.test_stdio_clients import INIT, RawStdioClient
from tests.peers.runner import NodeServer
from tests.peers.scenarios import client_for
from tests.sidecar import START_SECONDS, ProxyProcess, clean_env, settings_env

pytestmark = pytest.mark.e2e

CALLER: Final = {"Authorization": "Bearer restart-test"}
"""The one caller of the bridge's session (server-everything ignores it)."""


class EverythingOnPort(NodeServer):
    """server-everything on a port chosen beforehand, so a second one can take the first one's place."""

    def __init__(self, port: int) -> None:
        super().__init__("everything")
        self.wanted_port = port

    def environment(self) -> dict[str, str]:
        return {**super().environment(), "PORT": str(self.wanted_port)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def echoed(proxy: ProxyProcess) -> list[str]:
    """What `echo` answers a fresh 2026-07-28 SDK client of `CALLER` through the proxy."""
    async with client_for(proxy.endpoint(), "2026-07-28", headers=CALLER, read_timeout=20.0) as client:
        result = await client.call_tool("echo", {"message": "x"})
    return [block.text for block in result.content if isinstance(block, types.TextContent)]


async def test_a_2026_client_calls_through_the_bridge_right_after_the_upstream_restarted() -> None:
    port = free_port()
    first = EverythingOnPort(port).start()
    try:
        with ProxyProcess(clean_env(**settings_env(upstream=first.url))) as proxy:
            before = await echoed(proxy)
            assert before == ["Echo: x"], proxy.stderr()[-3000:]
            first.stop()
            with EverythingOnPort(port) as second:
                assert second.url == first.url
                after = await echoed(proxy)
                assert after == before, proxy.stderr()[-3000:]
            lost = proxy.find("upstream_session_lost")
            assert lost is not None, proxy.stderr()[-3000:]
            assert "400 (Bad Request: No valid session ID provided)" in lost["why"]
    finally:
        first.stop()


async def test_a_retry_of_a_call_parked_when_the_upstream_restarted_is_told_the_call_was_lost() -> None:
    port = free_port()
    first = EverythingOnPort(port).start()
    ask = {"name": "trigger-elicitation-request", "arguments": {}}
    try:
        with ProxyProcess(clean_env(**settings_env(upstream=first.url))) as proxy:
            async with aiohttp.ClientSession() as http:
                _, parked = await modern_call(
                    http, proxy.endpoint(), "tools/call", ask, ident=1, headers=CALLER
                )
                result = parked.get("result", {})
                assert result.get("resultType") == "input_required", (parked, proxy.stderr()[-3000:])
                first.stop()
                assert proxy.wait_for("bridge_continuation_dead", 20.0), proxy.stderr()[-3000:]
                with EverythingOnPort(port):
                    answers = {key: {"action": "decline"} for key in result["inputRequests"]}
                    retry = {**ask, "requestState": result["requestState"], "inputResponses": answers}
                    status, told = await modern_call(
                        http, proxy.endpoint(), "tools/call", retry, ident=2, headers=CALLER
                    )
        assert status == 502, told
        assert told["error"]["code"] == -32000
        assert "the upstream call was lost while it waited for your answers" in told["error"]["message"]
        assert told["error"]["message"].endswith("it did not complete, start it again")
    finally:
        first.stop()


def test_a_stdio_client_that_initializes_again_after_the_restart_is_served_in_a_new_session(
    tmp_path: Path,
) -> None:
    port = free_port()
    first = EverythingOnPort(port).start()
    client = RawStdioClient(["--upstream", first.url], tmp_path)
    try:
        client.logged("stdio_client_ready", seconds=START_SECONDS)
        client.request(1, "initialize", **INIT)
        assert "result" in client.answer(1)
        client.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
        client.request(2, "tools/call", name="echo", arguments={"message": "before"})
        assert client.answer(2)["result"]["content"][0]["text"] == "Echo: before"
        first.stop()
        with EverythingOnPort(port):
            # The server refuses the client's notification and its answer to a server's request too
            # (HTTP 400, an error naming no id): JSON-RPC answers neither, so no line goes out for them.
            client.send(b'{"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}')
            client.send(b'{"jsonrpc": "2.0", "id": 77, "result": {"roots": []}}')
            client.request(3, "tools/call", name="echo", arguments={"message": "lost"})
            assert "error" in client.answer(3)  # the server forgot the session: the client hears it
            written = [json.loads(line) for line in list(client.out)]
            assert [m for m in written if "error" in m and m.get("id") in (None, 77)] == []
            client.request(4, "initialize", **INIT)  # and starts again, as a client does
            assert "result" in client.answer(4), client.stderr()[-2000:]
            client.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
            client.request(5, "tools/call", name="echo", arguments={"message": "after"})
            assert client.answer(5).get("result", {}).get("content") == [
                {"type": "text", "text": "Echo: after"}
            ]
    finally:
        client.kill()
        first.stop()
