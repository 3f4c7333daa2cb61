"""`mcp-proxy replay` in CI: a replay that could not check what it was asked to never passes.

A recording step that saw no traffic (the proxy started late, the client aimed at another port)
leaves a capture of its header and `proxy_info` only; a line of a capture cut or garbled leaves a
chain out. Both are read by the real `mcp-proxy replay` command, against the demo's real SDK server,
from captures the real `mcp-proxy --capture` wrote, and the exit status and `--json`'s `ok` say that
nothing, or not everything, was checked.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.demo.clients import run_client
from tests.e2e.replay_peers import DemoPeer
from tests.sidecar import ProxyProcess, clean_env, run_mcp_proxy, settings_env

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """The demo's legacy SDK server (asking in flight)."""
    with DemoPeer("legacy") as peer:
        yield peer.url


def _record(server: str, capture: Path, *, era: str | None = "legacy") -> Path:
    """A capture the real proxy writes in front of `server`, with one run of the demo's client of
    `era` through it (None: no traffic at all)."""
    env = settings_env(upstream=server, capture=capture, admin_enabled="false", drain_grace=1)
    with ProxyProcess(clean_env(**env)) as proxy:
        if era is not None:
            calls = asyncio.run(run_client(proxy.endpoint(), era))
            assert [c.detail for c in calls if not c.ok] == []
        assert proxy.stop() == 0
    return capture


@pytest.fixture(scope="module")
def recorded(server: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's legacy client's calls, recorded once."""
    return _record(server, tmp_path_factory.mktemp("ci") / "run.jsonl")


def _replay(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return run_mcp_proxy("replay", *(str(a) for a in args), timeout=50)


def test_a_capture_of_a_recording_that_saw_no_traffic_exits_2_and_is_not_ok(
    server: str, tmp_path: Path
) -> None:
    capture = _record(server, tmp_path / "empty.jsonl", era=None)
    assert len(capture.read_text().splitlines()) == 2  # the header and `proxy_info`, as a proxy writes them

    lines = _replay(capture, "--all")
    document = _replay(capture, "--all", "--json")

    assert lines.returncode == 2, lines.stderr
    assert "the capture holds no chain to replay" in lines.stderr
    assert "0 chains replayed" not in lines.stdout
    assert document.returncode == 2
    assert json.loads(document.stdout)["ok"] is False


def test_a_chain_named_that_is_skipped_compares_nothing_and_exits_2(recorded: Path, server: str) -> None:
    stream = _chain_of(recorded, "GET stream")

    done = _replay(recorded, "--chain", stream, "--upstream", server)

    assert done.returncode == 2, done.stdout + done.stderr
    assert f"{stream} GET stream: skipped" in done.stdout
    assert "1 chain to replay, all skipped" in done.stderr


def _chain_of(capture: Path, headline: str) -> str:
    exported = run_mcp_proxy("export", "--json", "-", str(capture))
    for entry in json.loads(exported.stdout)["chains"]:
        chain = entry["chain"]
        if " ".join(p for p in (chain["method"], chain.get("name")) if p) == headline:
            return str(chain["id"])
    raise AssertionError(f"no {headline} chain in {capture}")
