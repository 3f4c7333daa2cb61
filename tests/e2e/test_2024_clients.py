"""A client that speaks only 2024-11-05 (the official SDK's 1.3.0) through the proxy, over HTTP+SSE and stdio.

Such a client refuses an `initialize` answered with any other version, so whatever the upstream's
era the proxy must answer with 2024-11-05: passed through from a legacy server, negotiated by the
legacy-client bridge in front of a 2026-07-28 one (which then carries a sampling round to it too).
The stdio run spawns `python -m proxy.cli stdio` from the checkout, as a desktop client spawns a
stdio server. The same SDK's stdio server leaves the era probe's `server/discover` unanswered (it
stops reading), which must cost a client seconds, not the minute of `upstream_timeout`.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from typing import Final

import pytest

from tests.e2e.channel_peers import sdk2024_stdio_command
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


STEPS_WITH_LLM: Final = {**EXPECTED, "ask_llm": {"isError": False, "text": ["Paris"]}}
"""What the 1.3.0 client gets from the 1.3.0 server itself (its sampling callback answers Paris)."""


def _log_lines(stderr: str) -> list[dict[str, object]]:
    """The proxy's JSON log lines among a client's stderr (the shim's stderr is the client's)."""
    return [json.loads(text) for text in stderr.splitlines() if text.startswith("{")]


def test_a_2024_11_05_stdio_server_that_ignores_discover_serves_its_client_through_the_shim_in_time() -> None:
    # The client gives each step 15 s; the probe's server/discover, never answered, must not hold its
    # initialize for the whole upstream_timeout, and the log says what skips the wait.
    shim = [sys.executable, "-m", "proxy.cli", "stdio", "--admin=127.0.0.1:0", "--log-format=json", "--"]
    run = run_sdk2024_client("stdio", [*shim, *sdk2024_stdio_command()])
    for step, result in STEPS_WITH_LLM.items():
        assert run.lines.get(step) == {"step": step, "result": result}, run.stderr[-3000:]
    unanswered = [e for e in _log_lines(run.stderr) if e.get("event") == "upstream_discover_unanswered"]
    assert len(unanswered) == 1, run.stderr[-3000:]
    assert unanswered[0]["level"] == "warning"
    assert "--upstream-era legacy" in str(unanswered[0]["hint"])


def test_an_upstream_cmd_that_ignores_discover_is_judged_legacy_within_the_discover_timeout() -> None:
    env = settings_env(upstream_cmd=shlex.join(sdk2024_stdio_command()), stdio_discover_timeout=2)
    with ProxyProcess(clean_env(**env)) as proxy:
        eras = proxy.wait_for("upstream_eras", 20)
        assert eras is not None, proxy.stderr()
        assert eras["eras"] == "legacy", proxy.stderr()
        warned = proxy.find("upstream_discover_unanswered")
        assert warned is not None, proxy.stderr()
        assert warned["level"] == "warning"
        # Silence is also what a server still starting gives: the hint names both causes, that first.
        assert warned["hint"].startswith("either the server is still starting"), warned
        assert "--upstream-era legacy" in warned["hint"], warned
        # The traceback the silent child writes as the probe stops it is the probe's doing: summed up.
        assert proxy.find("upstream_stderr_probe") is not None, proxy.stderr()
        assert proxy.find("upstream_stderr") is None, proxy.stderr()
