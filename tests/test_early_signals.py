"""A stop signal that comes while `mcp-proxy` is still importing is kept, and honoured at once.

The proxy's own handlers go in a second or more after the process starts. A SIGTERM before that must
neither kill the process outright (no `stopped_while_starting` line, no exit 0) nor, when the proxy
is a container's PID 1, be dropped by the kernel and leave the proxy serving until SIGKILL.

The signal is sent by the process itself, at the moment it first imports pydantic, the first of its
heavy imports: a `sitecustomize` hook on the path does it (a fault injected by the test, named so),
so the timing is the same on every run. As PID 1, the proxy runs in a PID namespace of its own
(`unshare`, as root), as under a container's entrypoint without an init.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.peers.runner import REPO_ROOT
from tests.sidecar import clean_env, console_script_command, settings_env
from tests.transport.helpers import dead_port

STOPPED_WITHIN = 15.0
"""Seconds the proxy may take to exit after the signal: far under a pod's grace period, and the
signal's only other end was SIGKILL."""

SIGNAL_AT_FIRST_HEAVY_IMPORT = '''
"""A fault the test injects: the process sends itself SIGNAL when it first imports pydantic."""
import os, signal, sys

class SignalAtImport:
    def find_spec(self, name, path=None, target=None):
        if name == "pydantic":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGNAL)
        return None

sys.meta_path.insert(0, SignalAtImport())
'''


def can_be_pid_1() -> bool:
    """Whether this user may run a process as PID 1 of a namespace of its own."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        return False
    done = subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True, check=False)
    return done.returncode == 0


def run_signalled_at_start(tmp_path: Path, sig: signal.Signals, *, pid_1: bool) -> tuple[int, list[dict]]:
    """Run `mcp-proxy` (an upstream nobody serves) with the hook sending `sig`; exit status, JSON lines."""
    (tmp_path / "sitecustomize.py").write_text(SIGNAL_AT_FIRST_HEAVY_IMPORT.replace("SIGNAL", sig.name))
    env = clean_env(**settings_env(upstream=f"http://127.0.0.1:{dead_port()}/mcp", health="127.0.0.1:0"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    command = console_script_command()
    if pid_1:
        command = ["unshare", "--pid", "--fork", "--kill-child", *command]
    try:
        done = subprocess.run(
            command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=STOPPED_WITHIN
        )
    except subprocess.TimeoutExpired as exc:  # the child is killed on the way out
        still = f"mcp-proxy still ran {STOPPED_WITHIN}s after {sig.name}"
        raise AssertionError(f"{still}:\n{exc.stderr!r}") from None
    logged = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    return done.returncode, logged


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_during_the_imports_stops_the_proxy_before_it_serves_and_it_exits_0(
    tmp_path: Path, sig: signal.Signals
) -> None:
    code, logged = run_signalled_at_start(tmp_path, sig, pid_1=False)
    events = [e.get("event") for e in logged]
    assert code == 0, logged
    assert {"event": "stopped_while_starting", "signal": sig.name}.items() <= logged[-1].items(), logged
    assert "listening" not in events, logged


@pytest.mark.skipif(not can_be_pid_1(), reason="needs root and unshare for a PID namespace")
def test_as_pid_1_a_sigterm_during_the_imports_is_not_dropped_the_proxy_exits_0_without_serving(
    tmp_path: Path,
) -> None:
    code, logged = run_signalled_at_start(tmp_path, signal.SIGTERM, pid_1=True)
    events = [e.get("event") for e in logged]
    assert code == 0, logged
    assert "stopped_while_starting" in events, logged
    assert "listening" not in events, logged
