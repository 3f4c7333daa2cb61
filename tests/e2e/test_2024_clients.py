"""A client that speaks only 2024-11-05 (the official SDK's 1.3.0) through the proxy, over HTTP+SSE and stdio.

Such a client refuses an `initialize` answered with any other version, so whatever the upstream's
era the proxy must answer with 2024-11-05: passed through from a legacy server, negotiated by the
legacy-client bridge in front of a 2026-07-28 one (which then carries a sampling round to it too).
The stdio run spawns `python -m proxy.cli stdio` from the checkout, as a desktop client spawns a
stdio server.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Final

import pytest

from tests.peers.clients import run_sdk2024_client
from tests.peers.runner import PeerServer
from tests.sidecar import ProxyProcess, clean_env, settings_env

pytestmark = pytest.mark.e2e

EXPECTED: Final = {
    "initialize": {"protocolVersion": "2024-11-05"},
    "echo": {"isError": False, "text": ["hi"]},
    "ask_llm": {"isError": False, "text": ["LLM said: Paris"]},
}


def assert_served(lines: dict[str, dict[str, object]], stderr: str) -> None:
    for step, result in EXPECTED.items():
        assert lines.get(step) == {"step": step, "result": result}, stderr[-3000:]
    assert "echo" in lines["list_tools"]["result"]  # type: ignore[operator]


@pytest.mark.parametrize("server", ["legacy_server", "modern_server"])
async def test_a_2024_11_05_client_over_http_sse_gets_its_version_whatever_the_upstreams_era(
    server: str, request: pytest.FixtureRequest
) -> None:
    peer: PeerServer = request.getfixturevalue(server)
    with ProxyProcess(clean_env(**settings_env(upstream=peer.url))) as proxy:
        run = await asyncio.to_thread(run_sdk2024_client, "sse", [proxy.endpoint("/sse")])
    assert_served(run.lines, run.stderr)


def test_a_2024_11_05_client_over_stdio_gets_its_version_from_the_bridge(modern_server: PeerServer) -> None:
    upstream = f"--upstream={modern_server.url}"
    command = [sys.executable, "-m", "proxy.cli", "stdio", upstream, "--admin=127.0.0.1:0"]
    run = run_sdk2024_client("stdio", command)
    assert_served(run.lines, run.stderr)
