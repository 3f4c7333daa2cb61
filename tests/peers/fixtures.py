"""Pytest fixtures for the SDK test peers (load with ``pytest_plugins = ["tests.peers.fixtures"]``).

The four named peers are module-scoped: starting one costs a subprocess and ~0.6 s, and they keep
no state between tests that could leak (each test's client gets its own session or, on
2026-07-28, none at all). A test that needs a private or differently configured server uses
`peer_factory`, whose servers are stopped when that test ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.peers.runner import PeerServer

__all__ = [
    "dual_inflight_server",
    "dual_mrtr_server",
    "legacy_server",
    "modern_server",
    "peer_factory",
]

PeerFactory = Callable[..., PeerServer]


def _serve(kind: str) -> Iterator[PeerServer]:
    with PeerServer(kind) as peer:
        yield peer


@pytest.fixture(scope="module")
def legacy_server() -> Iterator[PeerServer]:
    """A legacy-only (2025-11-25 and older) server with tools that ask in flight."""
    yield from _serve("legacy-inflight")


@pytest.fixture(scope="module")
def modern_server() -> Iterator[PeerServer]:
    """A 2026-07-28-only server with MRTR tools (sealed requestState)."""
    yield from _serve("modern-mrtr")


@pytest.fixture(scope="module")
def dual_inflight_server() -> Iterator[PeerServer]:
    """The SDK's default dual-era server with tools that ask in flight."""
    yield from _serve("dual-inflight")


@pytest.fixture(scope="module")
def dual_mrtr_server() -> Iterator[PeerServer]:
    """The SDK's default dual-era server with MRTR tools (sealed requestState)."""
    yield from _serve("dual-mrtr")


@pytest.fixture
def peer_factory() -> Iterator[PeerFactory]:
    """Start extra peers inside one test: ``peer_factory("modern-mrtr", seal_state=False)``.

    Takes `PeerServer`'s arguments; returns the started peer. All are stopped at teardown.
    """
    started: list[PeerServer] = []

    def start(kind: str, **kwargs: object) -> PeerServer:
        peer = PeerServer(kind, **kwargs)  # type: ignore[arg-type]
        started.append(peer)
        return peer.start()

    try:
        yield start
    finally:
        for peer in reversed(started):
            peer.cleanup()
