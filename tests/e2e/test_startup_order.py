"""Start-up order does not matter: a proxy that starts before its upstream routes nothing on a guess.

In a sidecar pod the proxy and the MCP server start together, so the proxy's first era probe often
finds nobody listening. Requests that arrive while the upstream is out of reach wait for a probe and
get a 503 naming the cause (its `Retry-After` and `Content-Type` kept in the live and the capture's
exports); the first requests after the upstream comes up are bridged as they must be. The race runs
through the `mcp-proxy` command (uvloop, default settings but free ports), ten times per bridged
direction, with the clients starting the moment the server says it is ready.
"""

from __future__ import annotations

import asyncio
import io
import json
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import pytest

from proxy.flows.events import ProxyInfo
from proxy.record.export import Format, export_capture
from proxy.runtime import Proxy
from tests.peers.runner import REPO_ROOT, PeerServer, arun_peer
from tests.peers.scenarios import TOOL_CALLS, expected_result, run_scenario
from tests.sidecar import START_SECONDS, ProxyProcess, admin_get, clean_env, proxy_command, settings_env
from tests.transport.helpers import CLIENT_ACCEPT, dead_port, rpc
from ui.feeds import FeedStatus
from ui.model import ViewModel
from ui.widgets.status_bar import ViewFlags, status_text

pytestmark = pytest.mark.e2e

TOOLS = TOOL_CALLS
"""The eleven calls a proxy started before its upstream must bridge from the first one."""

ROUNDS = 10


async def race_once(mode: str, kind: str) -> dict[str, bool]:
    """Proxy first, then the upstream on the port it was told, then every tool at once; pass per tool."""
    port = dead_port()
    env = clean_env(**settings_env(upstream=f"http://127.0.0.1:{port}/mcp"))
    proxy = await asyncio.to_thread(ProxyProcess(env).start)
    try:
        async with arun_peer(kind, port=port):
            outcomes = await asyncio.gather(
                *(run_scenario(proxy.endpoint(), mode, tool) for tool in TOOLS), return_exceptions=True
            )
    finally:
        await asyncio.to_thread(proxy.stop)
    return {tool: got == expected_result(tool) for tool, got in zip(TOOLS, outcomes, strict=True)}


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("mode", "kind"),
    [("legacy", "modern-mrtr"), ("2026-07-28", "legacy-inflight")],
    ids=["legacy-client-to-modern-server", "modern-client-to-legacy-server"],
)
async def test_a_proxy_started_before_its_upstream_bridges_every_first_call(mode: str, kind: str) -> None:
    failures = []
    for attempt in range(ROUNDS):
        passed = await race_once(mode, kind)
        if not all(passed.values()):
            failures.append((attempt, sorted(tool for tool, ok in passed.items() if not ok)))
    assert not failures, f"rounds with failed tools (of {len(TOOLS)} each): {failures}"


async def test_requests_while_the_upstream_is_out_of_reach_get_a_503_naming_it(
    proxy_for: Callable[..., AbstractAsyncContextManager[Proxy]],
) -> None:
    port = dead_port()
    async with proxy_for(f"http://127.0.0.1:{port}/mcp") as proxy, aiohttp.ClientSession() as http:
        assert not proxy.router.eras.known
        started = time.monotonic()
        async with http.post(proxy.endpoint(), data=rpc("tools/list", 41), headers=CLIENT_ACCEPT) as resp:
            status, retry, body = resp.status, resp.headers.get("Retry-After"), await resp.json()
        waited = time.monotonic() - started

    assert status == 503
    assert retry == "1"
    assert body["id"] == 41
    message = body["error"]["message"]
    assert f"127.0.0.1:{port}/mcp" in message
    assert "check that the MCP server is running" in message
    assert waited < proxy.settings.upstream_connect_timeout + 1


def answered_503(har: dict[str, Any], chains: dict[str, Any]) -> list[dict[str, str]]:
    """The response headers of the 503 in a HAR export and in a JSON export of chains."""
    (entry,) = [e for e in har["log"]["entries"] if e["response"]["status"] == 503]
    (chain,) = [c for c in chains["chains"] if c["chain"]["method"] == "tools/list"]
    (head,) = [m["http"] for m in chain["messages"] if (m.get("http") or {}).get("status") == 503]
    return [{h["name"]: h["value"] for h in entry["response"]["headers"]}, head["headers"]]


async def test_the_503_before_the_upstream_is_reachable_keeps_its_headers_in_live_and_capture_exports(
    proxy_for: Callable[..., AbstractAsyncContextManager[Proxy]], tmp_path: Path
) -> None:
    port, capture = dead_port(), tmp_path / "capture.jsonl"
    async with (
        proxy_for(f"http://127.0.0.1:{port}/mcp", capture=capture) as proxy,
        aiohttp.ClientSession() as http,
    ):
        async with http.post(proxy.endpoint(), data=rpc("tools/list", 41), headers=CLIENT_ACCEPT) as resp:
            assert (resp.status, resp.headers["Retry-After"]) == (503, "1")
        async with http.get(proxy.admin_url + "/api/export.har") as resp:
            live_har = await resp.json()
        async with http.get(proxy.admin_url + "/api/export.json") as resp:
            live_chains = await resp.json()
    exported = []
    for fmt in (Format.HAR, Format.JSON):
        out = io.BytesIO()
        export_capture([capture], fmt, out)
        exported.append(json.loads(out.getvalue()))

    sent = {"Retry-After": "1", "Content-Type": "application/json"}
    assert answered_503(live_har, live_chains) == [sent, sent]
    assert answered_503(*exported) == [sent, sent]


async def test_a_request_joins_the_probe_that_finds_the_upstream_up(
    proxy_for: Callable[..., AbstractAsyncContextManager[Proxy]],
) -> None:
    """No probe interval holds a request back once the upstream listens: the very next one is bridged."""
    port = dead_port()
    async with proxy_for(f"http://127.0.0.1:{port}/mcp") as proxy:
        assert proxy.router.reachable is False
        async with arun_peer("modern-mrtr", port=port):
            got = await run_scenario(proxy.endpoint(), "legacy", "ask_name")
        assert proxy.router.eras.label == "modern"
    assert got == expected_result("ask_name")


async def test_the_proxy_says_when_its_upstream_stops_and_starts_answering_its_probe(tmp_path: Path) -> None:
    """Whoever shows the proxy (the TUI's status bar, a capture's reader) learns the upstream is down
    from the proxy's announcement, and that it is up again from the next one. The `mcp-proxy`
    command starts first, as a sidecar does."""
    port, capture = dead_port(), tmp_path / "capture.jsonl"
    env = clean_env(**settings_env(upstream=f"http://127.0.0.1:{port}/mcp", capture=capture))
    with ProxyProcess(env) as proxy:
        async with arun_peer("modern-mrtr", port=port):
            got = await run_scenario(proxy.endpoint(), "2026-07-28", "echo")
        assert proxy.stop() == 0
    assert got == expected_result("echo")

    infos = [
        line for line in map(json.loads, capture.read_text().splitlines()) if line.get("type") == "proxy_info"
    ]
    assert "Connection refused" in infos[0]["upstream_unreachable"], infos[0]
    assert "upstream_unreachable" not in infos[-1], infos
    assert infos[-1]["upstream_era"] != "unknown", infos
    model = ViewModel()
    model.apply(ProxyInfo.model_validate(infos[0]))
    assert "upstream not answering" in status_text(model, FeedStatus("live"), ViewFlags()).plain
    model.apply(ProxyInfo.model_validate(infos[-1]))
    assert "not answering" not in status_text(model, FeedStatus("live"), ViewFlags()).plain


async def test_readyz_turns_ready_within_a_second_of_the_upstream_listening() -> None:
    port = dead_port()
    env = clean_env(**settings_env(upstream=f"http://127.0.0.1:{port}/mcp"))
    with ProxyProcess(env) as proxy:
        status, _, body = await admin_get(proxy.admin + "/readyz")
        assert status == 503, body
        assert "unreachable" in json.loads(body)["reason"]
        peer = PeerServer("legacy-inflight", port=port)
        await asyncio.to_thread(peer.start)
        try:
            up = time.monotonic()
            while (status := (await admin_get(proxy.admin + "/readyz"))[0]) != 200:
                assert time.monotonic() - up < 5, "not ready 5 s after the upstream came up"
                await asyncio.sleep(0.05)
            took = time.monotonic() - up
        finally:
            await asyncio.to_thread(peer.cleanup)
    assert took < 1.0, f"ready {took:.2f}s after the upstream listened"


def test_an_upstream_nobody_answers_at_start_is_explained_not_only_named() -> None:
    port = dead_port()
    env = clean_env(**settings_env(upstream=f"http://127.0.0.1:{port}/mcp", admin_enabled="false"))
    with ProxyProcess(env) as proxy:
        unknown = proxy.wait_for("upstream_era_unknown")

    assert unknown is not None, proxy.stderr()
    assert unknown["level"] == "info", unknown  # a sidecar often starts before its server
    assert "Connection refused" in unknown["problem"]
    assert "probes the upstream again on the next request" in unknown["hint"]
    assert "/readyz answers 503" in unknown["hint"]


def test_an_unknown_era_that_a_waiting_request_meets_is_a_warning() -> None:
    port = dead_port()
    env = clean_env(**settings_env(upstream=f"http://127.0.0.1:{port}/mcp", admin_enabled="false"))
    with ProxyProcess(env) as proxy:
        assert proxy.wait_for("upstream_era_unknown") is not None, proxy.stderr()
        answer = httpx.post(proxy.endpoint(), content=rpc("tools/list"), headers=CLIENT_ACCEPT, timeout=20)
        assert answer.status_code == 503  # it waited on a probe, which found nobody either
        said = proxy.wait_events(lambda lines: len(_unknown(lines)) >= 2)
    assert [e["level"] for e in _unknown(said)][:2] == ["info", "warning"], proxy.stderr()


def _unknown(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in lines if e.get("event") == "upstream_era_unknown"]


def test_a_start_up_probe_the_upstream_leaves_unanswered_is_said_in_the_log_before_listening() -> None:
    # A hand-written FAKE upstream, as below: a socket that accepts and never answers.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        env = clean_env(**settings_env(upstream=f"http://127.0.0.1:{port}/mcp", upstream_timeout=120))
        proxy = ProxyProcess(env).start(ready="era_probe_waiting")
        try:
            waiting = proxy.find("era_probe_waiting")
            events = [e.get("event") for e in proxy.events()]
        finally:
            proxy.stop()

    assert waiting is not None
    assert waiting["level"] == "info"
    assert (waiting["upstream"], waiting["waited_s"], waiting["limit_s"]) == (
        f"http://127.0.0.1:{port}/mcp",
        5.0,
        120.0,
    )
    assert "listening" not in events, events  # said while it still waits, not after


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stop_signal_while_the_start_up_probe_waits_stops_the_proxy_at_once(sig: signal.Signals) -> None:
    # A hand-written FAKE upstream: a socket that accepts and never answers (a hung server, a
    # half-open tunnel), which no real server does on demand. The probe waits up to 120 s on it.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        env = clean_env(**settings_env(upstream=f"http://127.0.0.1:{port}/mcp", upstream_timeout=120))
        process = subprocess.Popen(
            proxy_command(),
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            silent.settimeout(START_SECONDS)
            probe, _ = silent.accept()  # the era probe is connected and waits for its answer
            with probe:
                process.send_signal(sig)
                code = process.wait(timeout=15)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=5)
            assert process.stderr is not None
            with process.stderr:
                logged = [json.loads(line) for line in process.stderr if line.startswith("{")]
    events = [e.get("event") for e in logged]
    assert code == 0, logged
    assert "stopped_while_starting" in events, logged
    assert "listening" not in events, logged  # never announced as serving after it was told to stop
