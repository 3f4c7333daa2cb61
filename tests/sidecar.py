"""The real `mcp-proxy` as a subprocess, for the sidecar tests: start, read its JSON logs, signal, stop.

The proxy runs exactly as in a container: the console script, configured by environment variables,
JSON logs on stderr. Ports are `127.0.0.1:0` and the bound ones are read from the `listening` log
line, so no test races another for a port. Every wait is bounded; `stop()` (also on leaving the
`with` block) sends SIGTERM, then SIGKILL, so no process outlives its test. `headless_command()`
runs the same entry point the way a headless install (the Docker image's) has it: without the
TUI's packages.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.peers.runner import REPO_ROOT

START_SECONDS = 30.0
"""How long the proxy may take to print its `listening` line."""


def proxy_command() -> list[str]:
    """The installed `mcp-proxy` console script beside this interpreter (else `python -m proxy.cli`)."""
    script = Path(sys.executable).parent / "mcp-proxy"
    return [str(script)] if script.exists() else [sys.executable, "-m", "proxy.cli"]


def console_script_command() -> list[str]:
    """`mcp-proxy` as `pyproject.toml` declares its console script now, run the way the script pip
    writes runs it: for what happens before the entry point's own first line (an installed script
    keeps the entry point it was installed with until the next install)."""
    scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    module, _, function = scripts["mcp-proxy"].partition(":")
    return [sys.executable, "-c", f"import sys; from {module} import {function}; sys.exit({function}())"]


def run_mcp_proxy(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run `mcp-proxy ARGS...` once, as a user would, from the checkout; what it printed is kept."""
    return subprocess.run(
        [*proxy_command(), *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout, check=False
    )


def start_refusal(done: subprocess.CompletedProcess[str]) -> str:
    """What a refused start said, as a terminal shows it (`mcp-proxy: WHY`): with stderr piped, as
    here, the default log format is JSON, and the refusal is one `start_refused` line."""
    text = done.stderr.strip()
    if not text.startswith("{"):
        return text
    said = json.loads(text)
    assert (said["event"], said["level"]) == ("start_refused", "error"), said
    return f"mcp-proxy: {said['error']}"


def exported_chains(*captures: Path) -> tuple[str, list[dict[str, Any]]]:
    """`mcp-proxy export --json -` of the captures, run as a user runs it (it must succeed): what it
    printed, and each chain's headline (`id`, `method`, `name`, ...) in the order it wrote them."""
    listed = run_mcp_proxy("export", "--json", "-", *map(str, captures))
    assert listed.returncode == 0, listed.stderr
    return listed.stdout, [c["chain"] for c in json.loads(listed.stdout)["chains"]]


def exported_har(capture: Path, into: Path) -> Path:
    """`mcp-proxy export --har INTO CAPTURE`, run as a user runs it (it must succeed): the HAR file."""
    done = run_mcp_proxy("export", "--har", str(into), str(capture))
    assert done.returncode == 0, done.stderr
    return into


def chain_ids(chains: list[dict[str, Any]], field: str, value: str) -> list[str]:
    """The ids of the chains whose headline has `field` equal to `value`."""
    return [str(c["id"]) for c in chains if c.get(field) == value]


def run_into_a_closed_pipe(*args: str, timeout: float = 60) -> tuple[int, bytes]:
    """Run `mcp-proxy ARGS...` with a stdout whose reader left before the first byte (`| head -c 0`):
    its exit status and what it wrote on stderr."""
    child = subprocess.Popen(
        [*proxy_command(), *args], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert child.stdout is not None
    child.stdout.close()
    _, err = child.communicate(timeout=timeout)
    return child.returncode, err


def run_bash(command: str, env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run a command line in bash (an exported curl command, say) with exactly `env`."""
    return subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )


TUI_PACKAGES = ("textual", "rich", "httpx")
"""What the `tui` extra brings and a headless install lacks."""


def headless_command() -> list[str]:
    """`mcp-proxy` with the TUI's packages unimportable, as in an install without the `tui` extra.

    A `None` entry in `sys.modules` makes `import textual` raise ModuleNotFoundError naming it,
    exactly as when the package is not installed.
    """
    code = (
        f"import sys; sys.modules.update(dict.fromkeys({TUI_PACKAGES!r})); "
        "from proxy.cli import main; raise SystemExit(main(sys.argv[1:]))"
    )
    return [sys.executable, "-c", code]


def clean_env(**settings: str) -> dict[str, str]:
    """This process's environment without any MCP_PROXY_* variable, plus `settings` (already named)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_PROXY_")}
    env.update(settings)
    return env


def settings_env(**settings: object) -> dict[str, str]:
    """`MCP_PROXY_<NAME>` variables for settings given by field name (JSON logs unless told otherwise)."""
    env = {
        "MCP_PROXY_LOG_FORMAT": "json",
        "MCP_PROXY_LISTEN": "127.0.0.1:0",
        "MCP_PROXY_ADMIN": "127.0.0.1:0",
    }
    env.update({f"MCP_PROXY_{name.upper()}": str(value) for name, value in settings.items()})
    return env


class ProxyProcess:
    """One `mcp-proxy` subprocess; use as a context manager."""

    def __init__(
        self, env: Mapping[str, str], *args: str, cwd: Path | None = None, command: list[str] | None = None
    ) -> None:
        self.env = dict(env)
        self.args = list(args)
        self.cwd = cwd or REPO_ROOT
        self.command = command or proxy_command()
        self.process: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        self._reader: threading.Thread | None = None
        self.listen = ""
        self.admin = ""
        self.health = ""

    # -- lifetime ---------------------------------------------------------------------------------

    def start(self, ready: str = "listening") -> ProxyProcess:
        """Spawn the proxy and wait (bounded) for its `ready` line (`listening`: the one that names its
        addresses); fail with its stderr otherwise."""
        self.process = subprocess.Popen(
            [*self.command, *self.args],
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, name="proxy-stderr", daemon=True)
        self._reader.start()
        deadline = time.monotonic() + START_SECONDS
        while (found := self.find(ready)) is None:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"mcp-proxy did not start:\n{self.stderr()}")
            time.sleep(0.02)
        self.listen = found.get("listen") or ""
        self.admin = found.get("admin") or ""
        self.health = found.get("health") or ""
        return self

    def _read(self) -> None:
        assert self.process is not None
        stderr = self.process.stderr
        assert stderr is not None
        try:  # this thread owns the pipe: reads it to EOF (the proxy exited), then closes it
            for line in stderr:
                self.lines.append(line)
        finally:
            stderr.close()

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after 15 s; returns the exit code (idempotent)."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        if self._reader is not None:
            self._reader.join(timeout=5)
        return process.returncode

    def __enter__(self) -> ProxyProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- observing --------------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def stderr(self) -> str:
        """Everything the proxy wrote to stderr so far."""
        return "".join(self.lines)

    def events(self) -> list[dict[str, Any]]:
        """The JSON log lines so far, decoded (other lines skipped)."""
        out = []
        for line in list(self.lines):
            try:
                item = json.loads(line)
            except ValueError:
                continue
            if isinstance(item, dict):
                out.append(item)
        return out

    def find(self, event: str) -> dict[str, Any] | None:
        """The first log line with this `event`, or None."""
        return next((e for e in self.events() if e.get("event") == event), None)

    def wait_for(self, event: str, seconds: float = 10.0) -> dict[str, Any] | None:
        """The first log line with this `event`, waiting up to `seconds` for the proxy to write it
        (a log line may reach stderr after the answer it describes reaches the client)."""
        deadline = time.monotonic() + seconds
        while (found := self.find(event)) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        return found

    def wait_events(
        self, check: Callable[[list[dict[str, Any]]], bool], seconds: float = 10.0
    ) -> list[dict[str, Any]]:
        """The JSON log lines once `check` holds for them, waiting up to `seconds` (then the lines as
        they are, for the caller's assertion to name): lines reach this process's reader after the
        answers they describe reach the client."""
        deadline = time.monotonic() + seconds
        while not check(events := self.events()) and time.monotonic() < deadline:
            time.sleep(0.02)
        return events

    def signal(self, sig: signal.Signals) -> None:
        """Send a signal to the proxy."""
        assert self.process is not None
        self.process.send_signal(sig)

    async def exited(self, seconds: float) -> int:
        """Wait (bounded, without blocking the loop) for the process to exit; its exit code."""
        assert self.process is not None
        process = self.process
        await until(lambda: process.poll() is not None, what="mcp-proxy to exit", seconds=seconds)
        code = process.returncode
        assert code is not None
        return code

    async def logged(self, event: str, seconds: float = 10.0) -> dict[str, Any]:
        """Wait (bounded) for a log line with this `event`."""
        await until(lambda: self.find(event) is not None, what=f"log event {event!r}", seconds=seconds)
        found = self.find(event)
        assert found is not None
        return found

    def endpoint(self, path: str = "/mcp") -> str:
        """The proxy's MCP endpoint URL."""
        return self.listen + path


async def until(predicate: Callable[[], bool], *, what: str, seconds: float = 10.0) -> None:
    """Poll `predicate` until it holds, failing after `seconds` with a message naming `what`."""
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds}s waiting for {what}")
        await asyncio.sleep(0.02)


async def admin_get(
    url: str, token: str | None = None, *, seconds: float = 5.0
) -> tuple[int, dict[str, str], bytes]:
    """GET an admin URL once: status, headers, body."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=seconds)) as http,
        http.get(url, headers=headers) as resp,
    ):
        return resp.status, dict(resp.headers), await resp.read()


async def admin_outputs(admin: str, token: str | None = None) -> list[str]:
    """Every page a reader of the admin API gets (the chains, each chain, the three exports), as text:
    what a test that no secret reaches any output reads (each must answer 200)."""
    pages = []
    for page in ("/api/chains?limit=100", "/api/export.har", "/api/export.json", "/api/export.ndjson"):
        status, _, body = await admin_get(admin + page, token)
        assert status == 200, page
        pages.append(body.decode())
    for chain in json.loads(pages[0]):
        status, _, body = await admin_get(f"{admin}/api/chains/{chain['id']}", token)
        assert status == 200, chain
        pages.append(body.decode())
    return pages


async def admin_json(url: str, token: str | None = None) -> Any:
    """GET an admin URL that must answer 200 JSON; the decoded body."""
    status, _, body = await admin_get(url, token)
    assert status == 200, (url, status, body)
    return json.loads(body)


def sidecar(**settings: object) -> ProxyProcess:
    """A proxy process configured the way the Docker image is: environment variables only."""
    return ProxyProcess(clean_env(**settings_env(**settings)))


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of the samples called `name` whose labels include `labels` (0 when there is none)."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


async def scrape(proxy: ProxyProcess) -> str:
    """The proxy's /metrics page (Prometheus text)."""
    status, headers, body = await admin_get(proxy.admin + "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return body.decode()
