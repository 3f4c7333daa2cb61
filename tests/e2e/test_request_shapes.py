"""Request shapes that cost the proxy more than they are worth: huge batches and deeply nested JSON.

A batch of 150,000 notifications (7 MB) once held the event loop for seconds while it was parsed and
observed message by message, stalling every other client; valid JSON nested a few hundred levels deep
got a text/plain 500 without its id. Both are now refused at classification in every mode, as
JSON-RPC errors naming the setting, and the loop stays free while the batch is refused (a lag probe
runs on the loop the proxy serves from).
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import aiohttp
import pytest

from proxy.runtime import Proxy
from tests.e2e.recording_upstream import recording_upstream
from tests.e2e.test_hostile_methods import MODES, Client, Mode, client_in
from tests.transport.helpers import raw_fake_upstream, read_request

pytestmark = pytest.mark.e2e

ProxyFor = Callable[..., AbstractAsyncContextManager[Proxy]]

LEGACY_2025_03 = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def nested(depth: int) -> Any:
    """A valid JSON value `depth` containers deep (arrays, an object at the bottom)."""
    value: Any = {"leaf": True}
    for _ in range(depth - 1):
        value = [value]
    return value


class LoopLag:
    """Measures the loop's longest turn: a callback that re-schedules itself runs once per turn.

    `worst` is the longest wall time between two runs; `worst_cpu` the CPU time this thread spent in
    between, which other processes on a busy machine cannot inflate: the longest the proxy held the
    loop without letting anything else run.
    """

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.worst = 0.0
        self.worst_cpu = 0.0
        self.turns = 0
        self._last = 0.0
        self._cpu = 0.0
        self._stopped = False

    def start(self) -> None:
        self._last, self._cpu = time.perf_counter(), time.thread_time()
        self.loop.call_soon(self._turn)

    def _turn(self) -> None:
        if self._stopped:
            return
        now, cpu = time.perf_counter(), time.thread_time()
        self.worst = max(self.worst, now - self._last)
        self.worst_cpu = max(self.worst_cpu, cpu - self._cpu)
        self.turns += 1
        self._last, self._cpu = now, cpu
        self.loop.call_soon(self._turn)

    def stop(self) -> None:
        self._stopped = True


def post_from_another_thread(port: int, path: str, body: bytes) -> tuple[int, dict[str, Any]]:
    """POST `body` on a blocking socket (run in a worker thread, so its CPU is not the loop's)."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head.encode() + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), json.loads(rest.partition(b"\r\n\r\n")[2])


async def test_a_batch_of_150000_notifications_is_refused_without_stalling_the_loop(
    proxy_for: ProxyFor,
) -> None:
    notice = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    batch = json.dumps([notice] * 150_000, separators=(",", ":")).encode()
    assert len(batch) > 7_000_000
    async with (
        recording_upstream("legacy") as upstream,
        proxy_for(upstream.url("/mcp"), upstream_era="legacy") as proxy,
        aiohttp.ClientSession() as http,
    ):
        lag = LoopLag()
        lag.start()
        try:
            status, answer = await asyncio.to_thread(post_from_another_thread, proxy.port, "/mcp", batch)
        finally:
            lag.stop()
        worst = f"{lag.worst * 1000:.1f} ms wall, {lag.worst_cpu * 1000:.1f} ms CPU, over {lag.turns} turns"
        print(f"\nlongest loop turn while a {len(batch)} byte batch was refused: {worst}")
        async with http.post(proxy.endpoint(), json=notice, headers=LEGACY_2025_03) as resp:
            assert resp.status == 202, "the next client is served"
    assert status == 400
    assert answer["error"]["code"] == -32600
    assert "max_batch_messages" in answer["error"]["message"]
    assert answer["error"]["data"] == {"limit": 256, "setting": "max_batch_messages"}
    assert [h.method for h in upstream.heads] == ["notifications/initialized"], (
        "the batch never went upstream"
    )
    # Once ~4 s; what is left is reading 8 MB (the front joins the body, ~6 ms) and one scan of its start.
    assert lag.worst_cpu < 0.050, f"the loop stalled for {lag.worst_cpu * 1000:.1f} ms of CPU"


async def test_a_batch_within_the_limit_still_passes_through(proxy_for: ProxyFor) -> None:
    notice = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info"}}
    async with (
        recording_upstream("legacy") as upstream,
        proxy_for(upstream.url("/mcp"), upstream_era="legacy", max_batch_messages=3) as proxy,
        aiohttp.ClientSession() as http,
    ):
        async with http.post(proxy.endpoint(), json=[notice] * 3, headers=LEGACY_2025_03) as resp:
            assert resp.status != 400, await resp.text()
        async with http.post(proxy.endpoint(), json=[notice] * 4, headers=LEGACY_2025_03) as resp:
            assert resp.status == 400
            assert (await resp.json())["error"]["data"]["limit"] == 3
    assert len(upstream.heads) == 1


@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
@pytest.mark.parametrize("depth", [65, 256, 1024, 5000])
async def test_deep_json_is_refused_with_its_id_as_json_rpc(
    proxy_for: ProxyFor, mode: Mode, depth: int
) -> None:
    async with client_in(proxy_for, mode) as (client, upstream, _proxy):
        params = {"name": "echo", "arguments": {"deep": "DEEP"}}
        text = json.dumps(client.body(77, "tools/call", params))
        deep = "[" * (depth - 1) + '{"leaf":true}' + "]" * (depth - 1)  # too deep for json.dumps to build
        body = text.replace('"DEEP"', deep).encode()
        status, headers, raw = await client.post_raw(body, client.headers("tools/call", params))
        assert status == 400, raw
        assert headers["Content-Type"].startswith("application/json")
        answer = json.loads(raw)
        assert answer["id"] == 77
        assert answer["error"]["code"] == -32600
        assert answer["error"]["data"] == {"limit": 64, "setting": "max_json_depth"}
    assert "tools/call" not in [h.method for h in upstream.heads]


@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
async def test_json_as_deep_as_the_limit_is_relayed(proxy_for: ProxyFor, mode: Mode) -> None:
    async with client_in(proxy_for, mode) as (client, upstream, _proxy):
        # The body adds its own levels (message, params, arguments) above the argument's.
        status, answer = await client.call(78, "tools/call", {"name": "echo", "arguments": {"d": nested(56)}})
        assert status == 200, answer
        assert answer["id"] == 78
    assert "tools/call" in [h.method for h in upstream.heads]


def deep_upstream(depth: int, sse: bool, pad: int = 0) -> Any:
    """A 2026-07-28 fake whose tools/call result is JSON `depth` levels deep (as JSON or one SSE event).

    `pad` adds a string of that many bytes to the result.
    """

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (body := await read_request(reader)) is not None:
            message = json.loads(body)
            if message["method"] == "server/discover":
                result = (
                    '{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"tools":{}}}'
                )
            else:
                result = (
                    '{"resultType":"complete","content":[],"pad":"'
                    + "x" * pad
                    + '","deep":'
                    + "[" * depth
                    + "]" * depth
                    + "}"
                )
            text = f'{{"jsonrpc":"2.0","id":{json.dumps(message["id"])},"result":{result}}}'
            payload = f"event: message\ndata: {text}\n\n".encode() if sse else text.encode()
            kind = b"text/event-stream" if sse else b"application/json"
            head = (
                b"HTTP/1.1 200 OK\r\nContent-Type: " + kind + b"\r\nContent-Length: %d\r\n\r\n" % len(payload)
            )
            writer.write(head + payload)
            await writer.drain()

    return serve


@pytest.mark.parametrize("sse", [False, True], ids=["json", "sse"])
async def test_a_bridged_upstream_answer_too_deep_to_re_encode_is_a_json_rpc_error_with_the_id(
    proxy_for: ProxyFor, sse: bool
) -> None:
    async with (
        raw_fake_upstream(deep_upstream(300, sse)) as server,
        proxy_for(f"http://127.0.0.1:{server.port}/mcp", upstream_era="modern") as proxy,
        aiohttp.ClientSession() as http,
    ):
        client = Client(http, proxy.endpoint(), "legacy")
        await client.initialize()
        status, answer = await client.call(31, "tools/call", {"name": "t", "arguments": {}})
    assert status == 200
    assert answer["id"] == 31
    assert "nested deeper than 250 levels" in json.dumps(answer)


@pytest.mark.parametrize("sse", [False, True], ids=["json", "sse"])
async def test_a_bridged_upstream_message_over_the_bound_is_a_json_rpc_error_naming_the_setting(
    proxy_for: ProxyFor, sse: bool
) -> None:
    async with (
        raw_fake_upstream(deep_upstream(1, sse, pad=64 * 1024)) as server,
        proxy_for(
            f"http://127.0.0.1:{server.port}/mcp", upstream_era="modern", max_bridged_message_bytes=32 * 1024
        ) as proxy,
        aiohttp.ClientSession() as http,
    ):
        client = Client(http, proxy.endpoint(), "legacy")
        await client.initialize()
        status, answer = await client.call(33, "tools/call", {"name": "t", "arguments": {}})
    assert status == 200
    assert answer["id"] == 33
    assert "error" in answer, answer
    assert "max_bridged_message_bytes" in json.dumps(answer)


async def test_a_passed_through_upstream_answer_of_any_depth_reaches_the_client_as_sent(
    proxy_for: ProxyFor,
) -> None:
    async with (
        raw_fake_upstream(deep_upstream(300, sse=False)) as server,
        proxy_for(f"http://127.0.0.1:{server.port}/mcp", upstream_era="modern") as proxy,
        aiohttp.ClientSession() as http,
    ):
        client = Client(http, proxy.endpoint(), "modern")
        status, _, raw = await client.post_raw(
            json.dumps(client.body(32, "tools/call", {"name": "t", "arguments": {}})).encode(),
            client.headers("tools/call", {"name": "t", "arguments": {}}),
        )
    assert status == 200
    assert b"[" * 300 + b"]" * 300 in raw, "relayed byte for byte"


@pytest.mark.parametrize("mode", MODES, ids=[m.name for m in MODES])
@pytest.mark.parametrize("body", [b"{not json", b"[]"], ids=["not-json", "empty-batch"])
async def test_a_body_that_holds_no_message_is_kept_in_a_chain_of_its_own_in_every_mode(
    proxy_for: ProxyFor, mode: Mode, body: bytes
) -> None:
    async with client_in(proxy_for, mode) as (client, _upstream, proxy):
        status, _, raw = await client.post_raw(body, client.headers("tools/call", {}))
        async with aiohttp.ClientSession() as http, http.get(proxy.admin_url + "/api/export.json") as resp:
            exported = await resp.json()
    assert status == 400, raw
    (chain,) = [c for c in exported["chains"] if c["chain"].get("invalid")]
    asked = chain["messages"][0]
    assert (asked["direction"], asked["kind"], asked["body"]) == ("to_server", "invalid", body.decode())
    if not mode.name.startswith("pass-through"):
        # The proxy answers in the server's place, as JSON-RPC 2.0 says: `[]` is an invalid request.
        code = json.loads(raw)["error"]["code"]
        assert code == (-32600 if body == b"[]" else -32700), raw
