"""An upstream that stops in the middle of a JSON body: the client's call ends, never hangs.

A fake upstream on raw sockets (no SDK server stalls inside a body on demand) answers the call with a
head announcing more body than it sends, then sends nothing more and keeps the connection open. The
real `mcp-proxy` command, with `upstream_body_idle_timeout` short, must end the exchange: a client that
got part of the body sees it cut (the connection closes) and the line says `upstream_cut`, counting
the bytes it did get; a client that got nothing yet gets a 504 with its JSON-RPC id
(`upstream_timeout`). An SSE stream as quiet as that is no stall: it goes on. A client that leaves
before the deadline is counted the bytes it got.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.e2e.test_head_then_close import PING, PONG, is_call, post_raw
from tests.sidecar import ProxyProcess, clean_env, settings_env
from tests.transport.helpers import raw_fake_upstream, read_request, rpc

pytestmark = pytest.mark.e2e

IDLE = 1.0
"""`upstream_body_idle_timeout` for these tests: short, so a stall ends within the test's bounds."""

PART = b'{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"ok"}]}}'
"""What the fake sends of its announced body before it stalls."""


async def left_after_part(port: int, body: bytes) -> bytes:
    """`body` POSTed; what the proxy sends until the first bytes of the body, then the client leaves."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode() + body)
    got = b""
    try:
        while not got.endswith(PART):
            got += await asyncio.wait_for(reader.read(65536), 10)
    finally:
        writer.close()
        await writer.wait_closed()
    return got


def call(tool: str) -> bytes:
    return rpc("tools/call", 7, name=tool, arguments={})


def head_bytes(content_type: str, length: int) -> bytes:
    return f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {length}\r\n\r\n".encode()


async def stalling_mid_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A hand-written fake, hostile on purpose: a ping gets its answer; the call `part` a head and the
    first bytes of a body 100 000 bytes longer, `head` a head alone, `quiet_sse` an SSE head and, after
    more than the deadline, its event. Then it waits for the proxy to close the connection."""
    while (body := await read_request(reader)) is not None:
        if body == PING:
            writer.write(head_bytes("application/json", len(PONG)) + PONG)
            continue
        tool = json.loads(body)["params"]["name"]
        if tool == "quiet_sse":
            event = b"event: message\ndata: " + PART + b"\n\n"
            writer.write(head_bytes("text/event-stream", len(event)))
            await writer.drain()
            await asyncio.sleep(2.5 * IDLE)
            writer.write(event)
            await writer.drain()
            continue
        sent = PART if tool == "part" else b""
        writer.write(head_bytes("application/json", len(PART) + 100_000) + sent)
        await writer.drain()
        await reader.read()  # silent until the proxy gives up on the body and closes
        return


async def served(
    tool: str, *, warm: bool, idle: float = IDLE, leaving: bool = False
) -> tuple[bytes, float, list[dict[str, Any]]]:
    """The call to `tool` through a real proxy: what the client got, how long it took, the log lines.
    `leaving`: the client hangs up once it has the first bytes of the body."""
    async with raw_fake_upstream(stalling_mid_body) as fake:
        upstream = f"http://127.0.0.1:{fake.port}/mcp"
        env = clean_env(
            **settings_env(upstream=upstream, upstream_era="legacy", upstream_body_idle_timeout=idle)
        )
        with ProxyProcess(env) as proxy:
            port = int(proxy.listen.rsplit(":", 1)[1])
            if warm:
                assert (await post_raw(port, PING)).endswith(PONG)
            started = asyncio.get_running_loop().time()
            answered = await (left_after_part(port, call(tool)) if leaving else post_raw(port, call(tool)))
            took = asyncio.get_running_loop().time() - started
            events = proxy.wait_events(lambda lines: any(is_call(e) for e in lines))
            assert proxy.stop() == 0
    (line,) = [e for e in events if is_call(e)]
    return answered, took, [line, *[e for e in events if e.get("event") == "upstream_fault"]]


@pytest.mark.parametrize("warm", [False, True], ids=["new-connection", "pooled-connection"])
async def test_a_body_that_stalls_after_its_first_bytes_is_cut_and_counted_as_relayed(warm: bool) -> None:
    answered, took, (line, *faults) = await served("part", warm=warm)
    head, _, body = answered.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 "), answered
    assert body == PART  # the bytes the upstream sent, then the close: a cut body, not a wait
    assert took < IDLE + 5
    assert (line["trouble"], line["outcome"]) == ("upstream_cut", "upstream_cut")
    assert line["bytes_out"] == len(PART)
    assert any("upstream_body_idle_timeout" in f["detail"] for f in faults), faults


@pytest.mark.parametrize("warm", [False, True], ids=["new-connection", "pooled-connection"])
async def test_a_body_that_never_starts_gets_the_client_a_504_with_its_id(warm: bool) -> None:
    answered, took, (line, *_) = await served("head", warm=warm)
    head, _, body = answered.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 504 "), answered
    reply = json.loads(body)
    assert reply["id"] == 7
    assert "upstream-body-idle-timeout" in reply["error"]["message"]
    assert took < IDLE + 5
    assert (line["status"], line["trouble"]) == (504, "upstream_timeout")


async def test_an_sse_answer_quieter_than_the_deadline_is_no_stall() -> None:
    answered, _, (line, *_) = await served("quiet_sse", warm=False)
    assert answered.startswith(b"HTTP/1.1 200 "), answered
    assert PART in answered
    assert line["trouble"] is None


@pytest.mark.parametrize("warm", [False, True], ids=["new-connection", "pooled-connection"])
async def test_a_client_that_leaves_a_stalled_body_is_counted_the_bytes_it_got(warm: bool) -> None:
    answered, _, (line, *_) = await served("part", warm=warm, idle=60, leaving=True)
    assert answered.endswith(PART)
    assert line["outcome"] == "client_disconnected"
    assert line["bytes_out"] == len(PART)
