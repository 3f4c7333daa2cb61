"""The conformance CLI's client scenarios run with an SDK client through the real `mcp-proxy`.

In a client scenario the CLI starts its own scenario server and runs a command with that server's
URL as its last argument. Run as `python -m tests.conformance.client_runs URL`, this module is that
command: it starts `mcp-proxy --upstream URL` (JSON log and capture kept in the directory the
`CLIENT_RUN_DIR` variable names) and runs the TypeScript SDK's OAuth client
(`tests/peers/node/oauth-client.mjs`) against the proxy's endpoint alone, passing on the client's
output and exit status. `run_client_scenario` runs the CLI with it, bounded, and returns what the
CLI checked and what the client and the proxy said.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from tests.conformance.checks import Check
from tests.conformance.harness import CLI_JS, NODE20_COMPAT, PRELOAD
from tests.peers.envs import NODE_DIR, REPO_ROOT, node_binary
from tests.peers.runner import node_environment
from tests.sidecar import ProxyProcess, clean_env, settings_env

RUN_DIR_VARIABLE: Final = "CLIENT_RUN_DIR"
"""Where the command keeps the proxy's log (`proxy.log`) and capture (`capture.jsonl`)."""

CLIENT_SECONDS: Final = 40.0
"""The most the client may take through the proxy (a login and a call take about a second)."""

SCENARIO_TIMEOUT_MS: Final = 60_000
"""The CLI's bound on the client command (the proxy's start included)."""

PROCESS_SECONDS: Final = 120.0
"""Our bound on the whole CLI process."""


@dataclass
class ClientRun:
    """One client scenario through the proxy: the CLI's checks, the client's JSON lines, the proxy's log."""

    checks: list[Check]
    client: list[dict[str, Any]]
    proxy_log: list[dict[str, Any]]
    capture: Path
    output: str
    """The CLI's own stdout and stderr, for failure messages."""

    def status(self, check_id: str) -> str | None:
        """The status the CLI gave `check_id` (None: it never reported it)."""
        return next((c.status for c in self.checks if c.id == check_id), None)


def run_client_scenario(scenario: str, spec_version: str, workdir: Path | None = None) -> ClientRun:
    """Run the CLI's client `scenario` at `spec_version` with the OAuth client through `mcp-proxy`."""
    workdir = workdir or Path(tempfile.mkdtemp(prefix="conformance-client-"))
    results, kept = workdir / "results", workdir / "proxy"
    kept.mkdir(parents=True, exist_ok=True)
    command = f"{sys.executable} -m tests.conformance.client_runs"
    cli = [node_binary(), "--require", str(PRELOAD), "--import", NODE20_COMPAT.as_uri(), str(CLI_JS)]
    cli += ["client", "--command", command, "--scenario", scenario, "--spec-version", spec_version]
    cli += ["-o", str(results), "--timeout", str(SCENARIO_TIMEOUT_MS)]
    env = {**os.environ, "NO_COLOR": "1", "FORCE_COLOR": "0", RUN_DIR_VARIABLE: str(kept)}
    done = subprocess.run(
        cli, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=PROCESS_SECONDS, check=False
    )
    output = f"--- stdout ---\n{done.stdout[-3000:]}\n--- stderr ---\n{done.stderr[-3000:]}"
    found = sorted(results.glob("**/checks.json"))
    assert len(found) == 1, output
    checks = [Check.parse(item) for item in json.loads(found[0].read_text(encoding="utf-8"))]
    return ClientRun(
        checks=checks,
        client=_json_lines((found[0].parent / "stdout.txt").read_text(encoding="utf-8")),
        proxy_log=_json_lines((kept / "proxy.log").read_text(encoding="utf-8")),
        capture=kept / "capture.jsonl",
        output=output,
    )


def _json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def main(url: str) -> int:
    """The CLI's client command: the OAuth client through a fresh `mcp-proxy` in front of `url`."""
    kept = Path(os.environ[RUN_DIR_VARIABLE])
    env = clean_env(**settings_env(upstream=url, capture=kept / "capture.jsonl"))
    proxy = ProxyProcess(env)
    try:
        proxy.start()
        endpoint = proxy.endpoint(urlsplit(url).path or "/")
        client = [node_binary(), str(NODE_DIR / "oauth-client.mjs"), endpoint]
        done = subprocess.run(
            client,
            cwd=REPO_ROOT,
            env=node_environment(),
            capture_output=True,
            text=True,
            timeout=CLIENT_SECONDS,
            check=False,
        )
    finally:
        proxy.stop()
        (kept / "proxy.log").write_text(proxy.stderr(), encoding="utf-8")
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[-1]))
