"""The capture of an `mcp-proxy` killed mid-call, exported as a user exports it: the call is over.

server-everything runs a 20 s `trigger-long-running-operation` for an SDK client through the real
`mcp-proxy` command; the proxy is killed with SIGKILL while the server works on it,
and a new `mcp-proxy` appends to the same capture (as a restarted sidecar does) and carries one
more call. `mcp-proxy export` then shows the killed run's call `incomplete`, saying its run ended,
never `pending` (`--status pending` selects nothing), and the new run's exchanges, numbered from
`x1` again, as entries of their own.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from proxy.record.run_ends import CAPTURE_ENDS, OPEN_AT_RUN_END, RUN_REPLACED
from tests.peers.runner import NodeServer
from tests.peers.scenarios import client_for
from tests.sidecar import ProxyProcess, clean_env, exported_chains, run_mcp_proxy, settings_env, until

pytestmark = pytest.mark.e2e


@pytest.fixture
def everything() -> Iterator[NodeServer]:
    with NodeServer("everything") as server:
        yield server


async def kill_mid_call(url: str, capture: Path) -> None:
    """A long call through a proxy SIGKILLed while the server works on it."""
    with ProxyProcess(clean_env(**settings_env(upstream=url, capture=capture))) as proxy:
        async with (
            client_for(proxy.endpoint(), "legacy", read_timeout=30) as client,
            anyio.create_task_group() as tg,
        ):

            async def call() -> None:
                try:
                    await client.call_tool("trigger-long-running-operation", {"duration": 20, "steps": 20})
                except Exception:  # the proxy is gone: the client's call fails, as it would
                    return

            tg.start_soon(call)
            request = '"name":"trigger-long-running-operation"'
            await until(lambda: request in capture.read_text(), what="the call's request captured")
            proxy.signal(signal.SIGKILL)
            assert await proxy.exited(10) == -signal.SIGKILL
            tg.cancel_scope.cancel()


async def one_more_call(url: str, capture: Path) -> None:
    with ProxyProcess(clean_env(**settings_env(upstream=url, capture=capture))) as proxy:
        async with client_for(proxy.endpoint(), "legacy") as client:
            with anyio.fail_after(20):
                assert not (await client.call_tool("echo", {"message": "after"})).is_error
        assert proxy.stop() == 0


def har(capture: Path, *flags: str) -> list[dict[str, Any]]:
    done = run_mcp_proxy("export", "--har", "-", *flags, str(capture))
    assert done.returncode == 0, done.stderr
    entries: list[dict[str, Any]] = json.loads(done.stdout)["log"]["entries"]
    return entries


def test_a_killed_proxys_call_is_incomplete_in_its_export_and_stays_so_when_a_new_run_appends(
    everything: NodeServer, tmp_path: Path
) -> None:
    capture = tmp_path / "sidecar.jsonl"
    asyncio.run(kill_mid_call(everything.url, capture))

    _, chains = exported_chains(capture)
    (call,) = [c for c in chains if c.get("name") == "trigger-long-running-operation"]
    assert (call["status"], call["notes"][-1]) == ("incomplete", CAPTURE_ENDS)
    assert [c["id"] for c in chains if c["status"] == "pending"] == []
    assert har(capture, "--status", "pending") == []
    (open_post,) = [e for e in har(capture, "--status", "incomplete") if e["request"]["method"] == "POST"]
    assert open_post["_mcp"]["open"] is True
    assert open_post["comment"].startswith("still open where the capture ends")

    asyncio.run(one_more_call(everything.url, capture))

    _, chains = exported_chains(capture)
    (call,) = [c for c in chains if c.get("name") == "trigger-long-running-operation"]
    assert (call["status"], call["notes"][-1]) == ("incomplete", RUN_REPLACED)
    (echo,) = [c for c in chains if c.get("name") == "echo"]
    assert echo["status"] == "ok"
    assert [c["id"] for c in chains if c["status"] == "pending"] == []
    entries = har(capture)
    named = [(e["_mcp"]["run"], e["_mcp"]["exchange"]) for e in entries]
    assert len(set(named)) == len(named)  # the new run's x1, x2, ... are entries of their own
    assert len({run for run, _ in named}) == 2
    comments = [e.get("comment") for e in entries if e["_mcp"].get("open")]
    assert comments
    assert set(comments) == {OPEN_AT_RUN_END}
