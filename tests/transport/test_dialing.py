"""Every upstream connect races the addresses of its name, so one address that drops packets does not
make the upstream unreachable.

Two fakes stand in for what no real peer produces on loopback, each named as such:
- `BlackholeListener`: a port that never completes a connection. Its accept queue is full and
  nobody accepts, so the kernel drops further SYNs unanswered, as a broken IPv6 route or a stale
  pod IP does. A refused port would not show the fault: a refusal falls through to the next address
  at once.
- `FakeResolver`: event loops (asyncio's, and uvloop, which the command runs on) whose
  `getaddrinfo` answers one name with the blackhole first and a real server second, as a dual-stack
  Service name whose AAAA route is broken resolves. The machine's own resolver cannot be told to do
  this without root and a private mount namespace.
The servers behind the second address are real: aiohttp's HTTP/1.1 server and the loop's own TCP
server.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import uvloop

from proxy.framing.http import parse_upstream
from proxy.transport.readiness import reachable
from proxy.transport.tls_failures import speaks_tls
from proxy.transport.upstream_pool import UpstreamPool
from tests.transport.test_upstream_pool import aiohttp_upstream, answer_with_path, fetch

MULTI = "two-addresses.test"
"""The name the fake resolver answers with two addresses."""

CONNECT_TIMEOUT = 3.0
"""The connect budget given to each connect: ample for the second address, spent whole on the first."""


class BlackholeListener:
    """A fake: a loopback port whose SYNs go unanswered (listen backlog 0, queue filled, never accepted)."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(0)
        self.port: int = self.listener.getsockname()[1]
        self.fillers = []
        for _ in range(3):  # more than the queue holds: the rest wait in SYN-SENT, as later ones will
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", self.port))
            self.fillers.append(filler)

    def close(self) -> None:
        for sock in (*self.fillers, self.listener):
            sock.close()


class FakeResolver:
    """A fake: resolves `MULTI` to two loopback addresses, the first given; any other name as usual."""

    addresses: list[tuple[str, int]] = []

    async def getaddrinfo(self, host: Any, port: Any, **hints: Any) -> list[Any]:
        if host == MULTI:
            return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", a) for a in self.addresses]
        resolved: list[Any] = await super().getaddrinfo(host, port, **hints)  # type: ignore[misc]
        return resolved


class FakeResolverAsyncioLoop(FakeResolver, asyncio.SelectorEventLoop):
    """asyncio's own loop, with the fake resolver."""


class FakeResolverUvloop(FakeResolver, uvloop.Loop):
    """uvloop, the loop the `mcp-proxy` command runs on, with the fake resolver."""


@pytest.fixture(params=[FakeResolverAsyncioLoop, FakeResolverUvloop], ids=["asyncio", "uvloop"])
def loop_factory(request: pytest.FixtureRequest) -> Callable[[], asyncio.AbstractEventLoop]:
    factory: Callable[[], asyncio.AbstractEventLoop] = request.param
    return factory


@pytest.fixture
def blackhole() -> Iterator[BlackholeListener]:
    hole = BlackholeListener()
    try:
        yield hole
    finally:
        hole.close()


@contextmanager
def resolving_first_to(blackhole: BlackholeListener, then_port: int) -> Iterator[None]:
    """`MULTI` resolves to the blackhole, then to 127.0.0.1:`then_port`, while the block runs."""
    FakeResolver.addresses = [("127.0.0.1", blackhole.port), ("127.0.0.1", then_port)]
    try:
        yield
    finally:
        FakeResolver.addresses = []


def run_on(
    loop_factory: Callable[[], asyncio.AbstractEventLoop], scenario: Callable[[], Awaitable[None]]
) -> None:
    """Run `scenario` on an event loop from `loop_factory`."""
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(scenario())


@contextmanager
def tcp_server() -> Iterator[int]:
    """A plain listening socket on 127.0.0.1 whose connections the kernel completes: its port."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield server.getsockname()[1]


def test_the_blackhole_fake_really_drops_connections(
    blackhole: BlackholeListener, loop_factory: Callable[[], asyncio.AbstractEventLoop]
) -> None:
    async def scenario() -> None:
        assert await reachable("127.0.0.1", blackhole.port, 0.5) == "no TCP connection within 0.5s"

    run_on(loop_factory, scenario)


def test_the_pool_reaches_a_name_whose_first_address_drops_connections_through_its_next_address(
    blackhole: BlackholeListener, loop_factory: Callable[[], asyncio.AbstractEventLoop]
) -> None:
    async def scenario() -> None:
        async with aiohttp_upstream(answer_with_path) as server:
            pool = UpstreamPool(
                parse_upstream(f"http://{MULTI}:{server.port}/"), connect_timeout=CONNECT_TIMEOUT
            )
            try:
                with resolving_first_to(blackhole, server.port):
                    status, body = await fetch(pool, "/mcp")
            finally:
                pool.close()
        assert (status, body) == (200, b"you asked for /mcp")

    run_on(loop_factory, scenario)


def test_readiness_finds_a_name_whose_first_address_drops_connections_reachable(
    blackhole: BlackholeListener, loop_factory: Callable[[], asyncio.AbstractEventLoop]
) -> None:
    async def scenario() -> None:
        with tcp_server() as port, resolving_first_to(blackhole, port):
            assert await reachable(MULTI, port, CONNECT_TIMEOUT) is None

    run_on(loop_factory, scenario)


def test_the_tls_check_of_a_plain_http_upstream_tries_the_next_address_too(
    blackhole: BlackholeListener, loop_factory: Callable[[], asyncio.AbstractEventLoop]
) -> None:
    """Past the blackhole the check reaches the plain HTTP server, whose answer to the TLS hello ends
    the check at once: the blackhole's silence does not spend its limit."""

    async def scenario() -> None:
        async with aiohttp_upstream(answer_with_path) as server:
            with resolving_first_to(blackhole, server.port):
                loop = asyncio.get_running_loop()
                started = loop.time()
                assert await speaks_tls(MULTI, server.port, CONNECT_TIMEOUT) is False
                assert loop.time() - started < CONNECT_TIMEOUT / 2

    run_on(loop_factory, scenario)
