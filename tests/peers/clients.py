"""Run the test clients as subprocesses, each in its own environment, and read their JSON lines.

Four clients, as users run them: the Python SDK client (``python -m tests.peers.client``) with the
interpreter of the peers' own virtualenv, in legacy or 2026-07-28 mode; the TypeScript SDK v1 client
(legacy); and the TypeScript SDK v2 client pinned to 2026-07-28 (or legacy, for a direct baseline).
One process runs a whole list of scenarios (`run_client`) or one plan of steps on one session
(`run_plan`) and prints a JSON line each; see ``tests/peers/client.py`` and
``tests/peers/node/scenarios.mjs`` for the shapes. Every process is bounded: killed after
`timeout` seconds, and whatever it did not report is an error line saying so.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from tests.peers.envs import NODE_DIR, REPO_ROOT, Http, node_binary, node_modules, peer_python, sdk2024_python
from tests.peers.runner import node_environment

__all__ = [
    "CLIENTS",
    "ClientKind",
    "ClientRun",
    "client_command",
    "run_client",
    "run_plan",
    "run_sdk2024_client",
]

ClientKind = Literal["python-legacy", "python-2026", "ts-v1", "ts-v2", "ts-v2-legacy"]


@dataclass(frozen=True)
class ClientSpec:
    """How to run one client: its implementation and the era it speaks."""

    label: str
    mode: Literal["legacy", "2026-07-28"]
    script: str | None = None
    """The Node script under ``tests/peers/node``; None for the Python client."""


CLIENTS: Final[dict[ClientKind, ClientSpec]] = {
    "python-legacy": ClientSpec("Python SDK, legacy", "legacy"),
    "python-2026": ClientSpec("Python SDK, 2026-07-28", "2026-07-28"),
    "ts-v1": ClientSpec("TS SDK v1 (legacy)", "legacy", "client-v1.mjs"),
    "ts-v2": ClientSpec("TS SDK v2, 2026-07-28", "2026-07-28", "client-v2.mjs"),
    "ts-v2-legacy": ClientSpec("TS SDK v2, legacy", "legacy", "client-v2.mjs"),
}

PER_STEP_TIMEOUT: Final = 15.0
"""Seconds a client gives one scenario or step (its own bound, inside the process bound)."""


@dataclass
class ClientRun:
    """One client process: its JSON lines by scenario (or step id), stderr, how long it took."""

    kind: ClientKind
    url: str
    lines: dict[str, dict[str, Any]] = field(default_factory=dict)
    stderr: str = ""
    seconds: float = 0.0
    failure: str = ""
    """Why the process did not report every scenario (exit status, timeout), or empty."""


def client_command(kind: ClientKind, url: str, *, http: Http = "h11", transport: str = "http") -> list[str]:
    """The argv running client `kind` against `url` (scenario names or ``--plan`` are appended).

    `transport` (`http`, `sse`, or `stdio` with `url` the server's command line) is an argument of
    the Python client's; the Node clients take it from their environment (see `run_client`).
    """
    spec = CLIENTS[kind]
    timeout = ["--timeout", str(PER_STEP_TIMEOUT)]
    if spec.script is None:
        python = str(peer_python(http))
        via = ["--transport", transport]
        return [python, "-m", "tests.peers.client", "--url", url, "--mode", spec.mode, *via, *timeout]
    node_modules()
    return [node_binary(), str(NODE_DIR / spec.script), "--url", url, "--mode", spec.mode, *timeout]


def _environment(kind: ClientKind) -> dict[str, str]:
    if CLIENTS[kind].script is not None:
        return node_environment()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _execute(
    run: ClientRun, command: list[str], env: dict[str, str], timeout: float
) -> tuple[str, int | None]:
    """Run a client process to its end or `timeout`, filling `run`'s stderr, seconds and (when it was
    killed) failure; its stdout and exit status (None when killed)."""
    started = time.monotonic()
    try:
        done = subprocess.run(
            command,
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        stdout, run.stderr, status = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:  # subprocess.run has killed it
        stdout = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        run.stderr = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        run.failure = f"killed after {timeout:.0f}s"
        status = None
    run.seconds = time.monotonic() - started
    return stdout, status


def _run(
    kind: ClientKind,
    url: str,
    extra: Sequence[str],
    expected: Sequence[str],
    timeout: float,
    transport: str = "http",
) -> ClientRun:
    run = ClientRun(kind=kind, url=url)
    env = _environment(kind)
    if CLIENTS[kind].script is not None and transport != "http":
        env["MCP_TEST_CLIENT_TRANSPORT"] = transport  # the Node clients' switch (client-v1.mjs: sse)
    stdout, status = _execute(run, [*client_command(kind, url, transport=transport), *extra], env, timeout)
    if status not in (None, 0):
        run.failure = f"exit status {status}"
    for text in stdout.splitlines():
        try:
            line = json.loads(text)
        except ValueError:  # a line cut short by the kill
            continue
        run.lines[str(line.get("scenario", line.get("id")))] = line
    for name in expected:
        if name not in run.lines:
            why = run.failure or "no line"
            tail = run.stderr[-1500:]
            run.lines[name] = {
                "scenario": name,
                "error": {"code": None, "message": f"not reported ({why}): {tail}"},
            }
    return run


def run_client(
    kind: ClientKind,
    url: str,
    scenarios: Sequence[str],
    *,
    timeout: float = 45.0,
    transport: str = "http",
) -> ClientRun:
    """Run `scenarios` (one fresh client each) in one process of client `kind` against `url`."""
    return _run(kind, url, list(scenarios), scenarios, timeout, transport)


def run_plan(
    kind: ClientKind,
    url: str,
    plan: Sequence[dict[str, Any]],
    *,
    timeout: float = 45.0,
    transport: str = "http",
) -> ClientRun:
    """Run `plan`'s steps on one connected client of `kind`; lines keyed by step id."""
    steps = [str(step["id"]) for step in plan]
    return _run(kind, url, ["--plan", json.dumps(list(plan))], steps, timeout, transport)


def run_sdk2024_client(
    transport: Literal["sse", "stdio"], target: Sequence[str], *, timeout: float = 60.0
) -> ClientRun:
    """Run the 2024-11-05-only client (``tests.peers.sdk2024_client``) over `transport` against
    `target` (the proxy's ``/sse`` URL, or the command it spawns); lines keyed by step."""
    command = [str(sdk2024_python()), "-m", "tests.peers.sdk2024_client", transport, *target]
    run = ClientRun(kind="python-legacy", url=" ".join(target))
    stdout, _status = _execute(run, command, _environment("python-legacy"), timeout)
    for text in stdout.splitlines():
        with contextlib.suppress(ValueError):  # a line cut short by the kill
            line = json.loads(text)
            run.lines[str(line["step"])] = line
    return run
