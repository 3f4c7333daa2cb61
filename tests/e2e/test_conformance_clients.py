"""The conformance suite's client scenarios, a TS SDK v2 client direct and through `mcp-proxy`.

In these scenarios the suite's mock server judges every request it gets, the proxy's era probe
included (its `server/discover` and its throwaway `initialize`): the probe's requests must carry
what a 2026-07-28 client's carry (`Mcp-Method`, `MCP-Protocol-Version`, `_meta`), or the scenario
fails through the proxy and passes direct.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.harness import CLI_JS, NODE20_COMPAT, PRELOAD, check_installed
from tests.peers.runner import REPO_ROOT, PeerServer
from tests.sidecar import ProxyProcess, clean_env, settings_env

pytestmark = pytest.mark.e2e

CLIENT = REPO_ROOT / "tests" / "peers" / "node" / "conformance-client.mjs"


def run_client_scenario(scenario: str, version: str, command: str, out: Path) -> list[dict[str, object]]:
    """The suite's checks of one client scenario run with `command` as the client."""
    cli = ["node", "--require", str(PRELOAD), "--import", NODE20_COMPAT.as_uri(), str(CLI_JS)]
    args = ["client", "--command", command, "--scenario", scenario, "--spec-version", version]
    done = subprocess.run(
        [*cli, *args, "-o", str(out), "--timeout", "30000"],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
        env={**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(REPO_ROOT)},
    )
    files = list(out.glob("**/checks.json"))
    assert len(files) == 1, done.stdout[-2000:] + done.stderr[-2000:]
    checks: list[dict[str, object]] = json.loads(files[0].read_text())
    return checks


def failures(checks: list[dict[str, object]]) -> list[str]:
    """The failed checks, named with their message."""
    return [f"{c['id']}: {c.get('errorMessage')}" for c in checks if c["status"] == "FAILURE"]


@pytest.mark.parametrize("scenario", ["request-metadata", "http-standard-headers"])
def test_a_2026_client_scenario_passes_through_the_proxy_as_it_passes_direct(
    scenario: str, tmp_path: Path
) -> None:
    check_installed()
    node = f"node --require {PRELOAD} {CLIENT}"
    direct = run_client_scenario(scenario, "2026-07-28", node, tmp_path / "direct")
    via = f"{sys.executable} -m tests.conformance.via_proxy {node}"
    proxied = run_client_scenario(scenario, "2026-07-28", via, tmp_path / "proxied")
    assert failures(direct) == []
    assert failures(proxied) == []


def test_each_request_of_the_era_probe_is_in_the_proxy_log(dual_inflight_server: PeerServer) -> None:
    """The server logs the probe's `initialize` as a client session (`mcp-debug-proxy-probe`): the
    proxy's log shows each request, and the session opened and deleted (never its id)."""
    env = clean_env(**settings_env(upstream=dual_inflight_server.url, admin_enabled="false"))
    with ProxyProcess(env) as proxy:
        probed = proxy.wait_events(lambda lines: len(_probe_lines(lines)) == 3)
    sent = [(e["method"], e["status"], e.get("session_state"), e["level"]) for e in _probe_lines(probed)]
    assert sent == [
        ("server/discover", 200, None, "info"),
        ("initialize", 200, "opened", "info"),
        ("DELETE", 200, "deleted", "info"),
    ]


def _probe_lines(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("event") == "era_probe_request"]
