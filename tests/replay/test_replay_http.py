"""The replay's HTTP side reports an answer it cannot use in the report's words, not its library's.

The server that answers HTML is the standard library's `http.server` (a real peer: it answers 501 to
a POST); the body cut short is a named fake, since no real server sends less than its Content-Length
on purpose.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from http.server import SimpleHTTPRequestHandler

import aiohttp
import pytest

from proxy.replay.http import ReplayHttp, ReplayHttpError
from tests.threaded_http import serving

CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "add"}}


@pytest.fixture
def html_server() -> Iterator[str]:
    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

    with serving(Quiet) as url:
        yield url


Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def fake_server(
    answer: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[str]:
    """A raw-socket fake on a loopback port serving `answer` per connection; its MCP URL."""
    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/mcp"
    finally:
        server.close()
        await server.wait_closed()


@pytest.fixture
async def cut_body_server() -> AsyncIterator[str]:
    """Fake: answers a JSON head promising 100 bytes, sends 10, and closes."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n")
        writer.write(b'{"jsonrpc"')
        await writer.drain()
        writer.close()

    async with fake_server(answer) as url:
        yield url


async def first_message(url: str, mask: Callable[[str], str] = str) -> None:
    async with aiohttp.ClientSession() as session, ReplayHttp(session, url, mask).post(CALL, {}) as reply:
        async for _ in reply.messages():
            pass


async def test_an_html_answer_is_named_by_status_type_size_and_its_first_bytes(html_server: str) -> None:
    with pytest.raises(ReplayHttpError) as caught:
        await first_message(html_server)

    text = str(caught.value)
    assert text.startswith("HTTP 501 answered text/html (")
    assert "not JSON-RPC: '<!DOCTYPE HTML>" in text
    assert "Expecting value" not in text  # the JSON parser's own words


async def test_a_body_cut_short_says_so_in_plain_words(cut_body_server: str) -> None:
    with pytest.raises(ReplayHttpError) as caught:
        await first_message(cut_body_server)

    assert str(caught.value) == "HTTP 200: the response body broke off after 10 of 100 bytes"


@pytest.fixture
async def hang_up_server() -> AsyncIterator[str]:
    """Fake: reads the request and closes without a byte of answer (a server that crashed on it)."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.close()

    async with fake_server(answer) as url:
        yield url


async def test_a_server_that_hangs_up_is_said_to_have_closed_the_connection(hang_up_server: str) -> None:
    with pytest.raises(ReplayHttpError) as caught:
        await first_message(hang_up_server)

    assert str(caught.value) == "POST tools/call: the connection closed before an answer"


TOKEN = "tok-0123456789abcdef-SECRET"
LEAD = "x" * 70
"""The quote's 80 characters end 10 characters into the token that follows."""


def _mask(text: str) -> str:
    return text.replace(TOKEN, "<masked>")


@pytest.fixture
async def echoing_server() -> AsyncIterator[str]:
    """Fake: answers text/plain quoting a token past the quote's cut (a gateway's error page; no SDK
    peer answers outside JSON-RPC), with a 500 to a call and a 401 to anything else."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        status = b"500 Oops" if b"tools/call" in await reader.readexactly(length) else b"401 No"
        body = f"{LEAD}{TOKEN} and more".encode()
        writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Type: text/plain\r\n")
        writer.write(b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        await writer.drain()
        writer.close()

    async with fake_server(answer) as url:
        yield url


async def test_a_body_quoted_is_masked_before_it_is_cut_so_no_piece_of_a_secret_shows(
    echoing_server: str,
) -> None:
    with pytest.raises(ReplayHttpError) as caught:
        await first_message(echoing_server, _mask)
    ping = {**CALL, "method": "ping"}
    async with (
        aiohttp.ClientSession() as session,
        ReplayHttp(session, echoing_server, _mask).post(ping, {}) as refused,
    ):
        opening = await refused.opening()

    assert f"not JSON-RPC: '{LEAD}<masked> a'..." in str(caught.value)
    assert opening == f"{LEAD}<masked> a..."


@pytest.fixture
async def open_refusal_server() -> AsyncIterator[str]:
    """Fake: answers a 401 whose chunked body sends a few words and never ends (no real server
    keeps a refusal open on purpose)."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 401 No\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(b"7\r\nrefused\r\n")
        await writer.drain()
        await reader.read()  # until the client hangs up
        writer.close()

    async with fake_server(answer) as url:
        yield url


async def test_a_refusal_whose_body_never_ends_is_quoted_as_far_as_it_came(open_refusal_server: str) -> None:
    async with (
        aiohttp.ClientSession() as session,
        ReplayHttp(session, open_refusal_server, _mask).post(CALL, {}) as reply,
    ):
        opening = await asyncio.wait_for(reply.opening(), 10)

    assert opening == "refused"
