"""The front's deadlines and checks against a real SDK server, on uvloop as users run the proxy.

The figure: a thousand clients that send half a request head and stop are all closed within the
head-read timeout while a normal client keeps being served. Then the same bounds on a connection
that carried a bridged exchange (the front serves it throughout, whatever it carried): a half-sent
head closed after the head-read timeout, a body that never comes answered 408, a request split
behind the bridged one served, the `Host` check applied there too, and the connection cap.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from proxy.runtime import Proxy
from proxy.transport.tasks import spawn
from tests.peers.runner import PeerServer
from tests.transport.helpers import bounded, drained, wait_until
from tests.transport.test_front import (
    assert_discovered,
    assert_initialized,
    closed,
    connection,
    legacy_initialize,
    modern_discover,
    read_response,
    request_bytes,
)

pytestmark = pytest.mark.e2e

HALF_OPEN = 1000
HEAD_TIMEOUT = 1.0
HALF_HEAD = b"POST /mcp HTTP/1.1\r\nHost: proxy.test\r\nContent-Type: appli"


async def half_open(proxy: Proxy) -> tuple[float, float, bytes]:
    """One client that sends half a head and stops: when it sent, when the proxy closed, what came back."""
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    try:
        writer.write(HALF_HEAD)
        sent = time.monotonic()
        answer = await reader.read()  # to the end: the proxy must close
        return sent, time.monotonic(), answer
    finally:
        writer.close()


async def normal_client(proxy: Proxy, stop: asyncio.Event) -> list[float]:
    """Discover again and again (a fresh connection each time) until told to stop; each round trip's time."""
    times: list[float] = []
    ident = 0
    while not stop.is_set():
        ident += 1
        started = time.monotonic()
        async with connection(proxy) as (reader, writer):
            writer.write(modern_discover(ident))
            assert_discovered(await read_response(reader), ident)
        times.append(time.monotonic() - started)
    return times


async def test_a_thousand_half_open_clients_are_closed_within_the_head_timeout_while_one_is_served(
    modern_server: PeerServer, proxy_for: Any
) -> None:
    async with proxy_for(
        modern_server.url, head_read_timeout=HEAD_TIMEOUT, max_client_connections=HALF_OPEN + 50
    ) as proxy:
        assert proxy._front is not None
        sweep = proxy._front.sweep_every
        stop = asyncio.Event()
        served = spawn(normal_client(proxy, stop), name="normal-client")
        try:
            results = await bounded(
                asyncio.gather(*(half_open(proxy) for _ in range(HALF_OPEN))),
                what="every half-open client to be closed",
                seconds=60,
            )
        finally:
            stop.set()
        times = await bounded(served, what="the normal client's last round trip")
        held = [closed_at - sent for sent, closed_at, _ in results]
        answered = sum(1 for *_, answer in results if answer.startswith(b"HTTP/1.1 408 "))
        print(
            f"\n{HALF_OPEN} half-open clients: closed {min(held):.2f}..{max(held):.2f} s after half a head "
            f"(head_read_timeout {HEAD_TIMEOUT} s, sweep every {sweep} s), {answered} answered 408; "
            f"normal client: {len(times)} round trips, slowest {max(times) * 1000:.0f} ms"
        )
        assert answered == HALF_OPEN
        # Never before the deadline; after it, within one sweep (twice, for a loaded loop) and some slack.
        assert min(held) >= HEAD_TIMEOUT - 0.05
        assert max(held) <= HEAD_TIMEOUT + 2 * sweep + 1.0
        assert len(times) >= 3
        await wait_until(lambda: proxy._front is not None and not proxy._front.connections, what="all closed")
        await wait_until(lambda: drained(proxy), what="the exchanges to close")


# --- connections that carried a bridged exchange ----------------------------------------------------


async def handed_over(proxy: Proxy, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A legacy `initialize` against a modern server: bridged, on the connection the front still serves."""
    writer.write(request_bytes(legacy_initialize(1)))
    assert_initialized(await read_response(reader), 1)
    assert proxy._front is not None
    assert len(proxy._front.connections) == 1  # never handed to another server


async def test_a_half_sent_head_after_a_bridged_exchange_is_closed_after_the_head_read_timeout(
    modern_server: PeerServer, proxy_for: Any
) -> None:
    timeout = 0.5
    async with (
        proxy_for(modern_server.url, head_read_timeout=timeout) as proxy,
        connection(proxy) as (reader, writer),
    ):
        await handed_over(proxy, reader, writer)
        writer.write(HALF_HEAD)
        started = time.monotonic()
        answer = await bounded(reader.read(), what="the proxy to answer and close")  # to the end
        assert answer.startswith(b"HTTP/1.1 408 "), answer[:80]
        assert b"head_read_timeout" in answer
        assert timeout - 0.05 <= time.monotonic() - started <= timeout + 1.0


async def test_a_body_that_never_comes_after_a_bridged_exchange_gets_408(
    modern_server: PeerServer, proxy_for: Any
) -> None:
    timeout = 0.5
    async with (
        proxy_for(modern_server.url, body_read_timeout=timeout) as proxy,
        connection(proxy) as (reader, writer),
    ):
        await handed_over(proxy, reader, writer)
        body = legacy_initialize(2)
        writer.write(request_bytes(body)[:-10])
        started = time.monotonic()
        response = await read_response(reader)
        assert response.status == 408
        assert response.json()["error"]["data"] == {"limit": timeout, "setting": "body_read_timeout"}
        assert await closed(reader)
        assert timeout - 0.05 <= time.monotonic() - started <= timeout + 1.0


async def test_a_request_split_behind_a_bridged_one_is_served_after_it(
    modern_server: PeerServer, proxy_for: Any
) -> None:
    async with proxy_for(modern_server.url) as proxy, connection(proxy) as (reader, writer):
        second = modern_discover(2)
        # The bridged request and the first half of a pass-through one, in one write: the second is
        # half read while the bridged one is served.
        writer.write(request_bytes(legacy_initialize(1)) + second[:40])
        await wait_until(
            lambda: proxy._front is not None and any(c.current is not None for c in proxy._front.connections),
            what="the second request to be half read",
        )
        writer.write(second[40:])
        assert_initialized(await read_response(reader), 1)
        assert_discovered(await read_response(reader), 2)


async def test_host_and_the_target_are_checked_after_a_bridged_exchange_too(
    modern_server: PeerServer, proxy_for: Any
) -> None:
    async with proxy_for(modern_server.url) as proxy:
        async with connection(proxy) as (reader, writer):
            await handed_over(proxy, reader, writer)
            writer.write(request_bytes(legacy_initialize(3), path="/mcp/../mcp"))
            response = await read_response(reader)
            assert (response.status, response.json()["id"]) == (400, 3)
            assert response.json()["error"]["data"] == {"field": "request target"}
            # a missing or second Host is refused before the request is routed
            writer.write(request_bytes(legacy_initialize(4)).replace(b"Host: proxy.test\r\n", b""))
            response = await read_response(reader)
            assert response.status == 400
            assert b"Host" in response.body
        async with connection(proxy) as (reader, writer):
            await handed_over(proxy, reader, writer)
            writer.write(request_bytes(legacy_initialize(5), headers=(("Host", "other.test"),)))
            response = await read_response(reader)
            assert response.status == 400
            assert b"Host" in response.body


async def test_a_request_refused_without_its_body_behind_a_bridged_one_ends_the_connection_after_it(
    modern_server: PeerServer, proxy_for: Any
) -> None:
    async with (
        proxy_for(modern_server.url, max_body_bytes=4096) as proxy,
        connection(proxy) as (reader, writer),
    ):
        over = request_bytes(headers=(("Expect", "100-continue"), ("Content-Length", "8192")), length=False)
        writer.write(request_bytes(legacy_initialize(1)) + over)
        assert_initialized(await read_response(reader), 1)
        # Refused in its turn as on any connection, never forwarded as a request with an empty body
        assert (await read_response(reader)).status == 413
        assert await closed(reader)


async def test_a_connection_that_carried_a_bridged_exchange_counts_toward_the_connection_cap(
    modern_server: PeerServer, proxy_for: Any
) -> None:
    async with (
        proxy_for(modern_server.url, max_client_connections=1) as proxy,
        connection(proxy) as (reader, writer),
    ):
        await handed_over(proxy, reader, writer)  # the one connection allowed
        async with connection(proxy) as (second_reader, second_writer):
            second_writer.write(modern_discover(2))
            response = await read_response(second_reader)
            assert response.status == 503
            assert response.json()["error"]["data"] == {"limit": 1, "setting": "max_client_connections"}
        writer.write(modern_discover(3))  # the connection within the cap is served throughout
        assert_discovered(await read_response(reader), 3)
