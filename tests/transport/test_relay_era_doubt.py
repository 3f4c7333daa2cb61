"""What a pass-through refusal says of the upstream's era is read from its body, however it arrives.

A 2026-07-28 server answers a client's own mistake with 400 and a JSON-RPC error; the relay reads
that body whether it came with the response head (the whole answer goes out in one write) or after
it (the body streams, and is judged once it has gone by), and falls back to the status alone when
the body never arrives whole. The upstream is a raw-socket fake so the test decides which: a real
server's head and body may or may not land in one read.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any

import aiohttp
import orjson
import pytest

from proxy.runtime import Proxy
from proxy.wire import errors
from tests.e2e.modern_raw import modern_headers, modern_params
from tests.transport.helpers import (
    RELAY_ONLY,
    bounded,
    captured_logs,
    hold,
    raw_fake_upstream,
    read_request,
    wait_until,
)

CALL = {"name": "echo", "arguments": {}}


def refusal(code: int) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": 1, "error": {"code": code, "message": "refused"}})


def head(length: int) -> bytes:
    fields = b"Content-Type: application/json\r\nContent-Length: %d\r\n" % length
    return b"HTTP/1.1 400 Bad Request\r\n" + fields + b"\r\n"


@asynccontextmanager
async def refusing(body: bytes, *, after: asyncio.Event | None, cut: bool = False) -> AsyncIterator[str]:
    """A fake upstream that refuses every request with 400 and `body`: with its head, or once `after`
    is set; `cut` declares more than it sends and closes the connection."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await read_request(reader) is not None:
            if after is None:
                writer.write(head(len(body)) + body)
                continue
            writer.write(head(len(body) + (10 if cut else 0)))
            await writer.drain()
            await hold(after)
            writer.write(body)
            if cut:
                await writer.drain()
                return

    async with raw_fake_upstream(script) as server:
        yield f"http://127.0.0.1:{server.port}/mcp"


async def refused_call(proxy: Proxy, headed: asyncio.Event | None) -> int:
    """A 2026-07-28 `tools/call` through the proxy; its status. With `headed`, the fake's body is let
    go once the proxy has taken the head (and recorded its status) without it."""
    params = modern_params(CALL)
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}

    async def call() -> int:
        async with (
            aiohttp.ClientSession() as http,
            http.post(proxy.endpoint(), json=body, headers=modern_headers("tools/call", params)) as resp,
        ):
            with suppress(aiohttp.ClientPayloadError):  # a body cut off upstream is cut off for the client
                await bounded(resp.read(), what="the refusal's body")
            return resp.status

    async def release(headed: asyncio.Event) -> None:
        def head_taken() -> bool:
            return any(chain.summary.http_status == 400 for chain in proxy.chains())

        await wait_until(head_taken, what="the proxy to take the refusal's head")
        headed.set()

    if headed is None:
        return await call()
    status, _ = await asyncio.gather(call(), release(headed))
    return status


def doubts(logs: list[dict[str, Any]]) -> list[str]:
    return [line["reason"] for line in logs if line["event"] == "upstream_eras_suspect"]


DOUBTED = "HTTP 400 (JSON-RPC -32600) for tools/call from a modern client"


@pytest.mark.parametrize("split", [False, True], ids=["with its head", "after its head"])
@pytest.mark.parametrize(
    ("code", "expected"),
    [(errors.INVALID_PARAMS, []), (errors.HEADER_MISMATCH, []), (errors.INVALID_REQUEST, [DOUBTED])],
)
async def test_a_refusals_body_decides_whether_it_doubts_the_upstreams_era(
    proxy_for: Callable[..., Any], split: bool, code: int, expected: list[str]
) -> None:
    headed = asyncio.Event() if split else None
    with captured_logs() as logs:
        async with refusing(refusal(code), after=headed) as url, proxy_for(url, **RELAY_ONLY) as proxy:
            assert await refused_call(proxy, headed) == 400
            await wait_until(lambda: proxy.relays.relaying == 0, what="the refused exchange to end")
    assert doubts(logs) == expected


async def test_a_refusal_whose_body_is_cut_off_is_judged_by_its_status(proxy_for: Callable[..., Any]) -> None:
    headed = asyncio.Event()
    with captured_logs() as logs:
        async with (
            refusing(refusal(errors.INVALID_PARAMS), after=headed, cut=True) as url,
            proxy_for(url, **RELAY_ONLY) as proxy,
        ):
            assert await refused_call(proxy, headed) == 400
            await wait_until(lambda: proxy.relays.relaying == 0, what="the cut exchange to end")
    assert doubts(logs) == ["HTTP 400 for tools/call from a modern client"]
