"""What the fault and intercept tests share: the two SDK server eras, and a client run that returns
once the proxy has closed every exchange it made and logged them (so chains and log lines are whole)."""

from __future__ import annotations

import asyncio

import pytest

from tests.e2e.commanded import Commanded
from tests.peers.clients import ClientKind, ClientRun, run_client

ERAS = [
    pytest.param("python-legacy", "legacy_server", id="legacy"),
    pytest.param("python-2026", "modern_server", id="2026-07-28"),
]
"""(client kind, server fixture) for each era, pass-through."""


async def client_run(proxy: Commanded, kind: ClientKind, scenarios: list[str]) -> ClientRun:
    """The SDK client's run of `scenarios` through the proxy, after every exchange has closed."""
    run = await asyncio.to_thread(run_client, kind, proxy.endpoint(), scenarios, timeout=40.0)
    await proxy.settled()
    return run
