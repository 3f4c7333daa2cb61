"""The staging sidecar, end to end: the real `mcp-proxy` process, a real SDK server behind it.

Health and readiness (following the upstream away and back), metrics moving with real traffic,
token enforcement on every admin path, SIGTERM draining a call in flight, SIGHUP reopening a moved
capture, and capture rotation by size. The proxy is configured through `MCP_PROXY_*` variables, as
the Docker image configures it.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from proxy.flows.events import ChainChanged, ChainStatus, FlowEvent, MessageRecorded, ProxyInfo
from proxy.record.capture import read_capture
from tests.e2e.modern_raw import modern_headers, modern_params
from tests.peers.runner import PeerServer
from tests.peers.scenarios import CallbackLog, client_for
from tests.sidecar import ProxyProcess, admin_get, admin_json, clean_env, proxy_command, settings_env, until

pytestmark = pytest.mark.e2e

TOKEN = "staging-admin-token-123"

ADMIN_PATHS = [
    "/healthz",
    "/readyz",
    "/metrics",
    "/api/chains",
    "/api/chains/c1",
    "/api/continuations",
    "/api/feed",
    "/no/such/path",
]


def sidecar(**settings: object) -> ProxyProcess:
    """A proxy process configured the way the Docker image is: environment variables only."""
    return ProxyProcess(clean_env(**settings_env(**settings)))


async def wait_for_status(url: str, status: int, *, token: str | None = None, seconds: float = 15.0) -> Any:
    """Poll an admin URL until it answers `status`; its JSON body."""
    seen: list[Any] = []

    async def poll() -> Any:
        while True:
            code, _, body = await admin_get(url, token)
            seen[:] = [code, body]
            if code == status:
                return json.loads(body)
            await asyncio.sleep(0.1)

    try:
        return await asyncio.wait_for(poll(), seconds)
    except TimeoutError:
        raise AssertionError(f"{url} never answered {status} within {seconds}s; last {seen}") from None


def metric(text: str, name: str, **labels: str) -> float:
    """The sum of the samples called `name` whose labels include `labels` (0 when there is none)."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


async def scrape(proxy: ProxyProcess) -> str:
    status, headers, body = await admin_get(proxy.admin + "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return body.decode()


async def wait_for_metrics(proxy: ProxyProcess, check: Callable[[str], bool], what: str) -> str:
    last = [""]

    async def poll() -> str:
        while True:
            last[0] = await scrape(proxy)
            if check(last[0]):
                return last[0]
            await asyncio.sleep(0.05)

    try:
        return await asyncio.wait_for(poll(), 10)
    except TimeoutError:
        raise AssertionError(f"metrics never showed {what}:\n{last[0]}") from None


def capture_files(folder: Path) -> list[Path]:
    return sorted(folder.iterdir())


def captured(path: Path) -> list[FlowEvent]:
    return list(read_capture(path))


def final_headline(events: list[FlowEvent], name: str) -> ChainChanged:
    changes = [e for e in events if isinstance(e, ChainChanged) and e.chain.name == name]
    assert changes, f"no chain for {name} in the capture"
    return changes[-1]


# -- health and readiness -------------------------------------------------------------------------


async def test_readyz_follows_the_upstream_going_away_and_coming_back_while_healthz_stays_ok(
    peer_factory: Callable[..., PeerServer],
) -> None:
    peer = peer_factory("legacy-inflight")
    port = peer.port
    with sidecar(upstream=peer.url) as proxy:
        ready = await wait_for_status(proxy.admin + "/readyz", 200)
        assert ready == {"status": "ready", "upstream": peer.url, "upstream_era": "legacy"}

        peer.stop()
        gone = await wait_for_status(proxy.admin + "/readyz", 503)
        assert gone["status"] == "not_ready"
        assert gone["reason"].startswith(f"upstream 127.0.0.1:{port} unreachable")
        assert await admin_json(proxy.admin + "/healthz") == {"status": "ok"}

        peer_factory("legacy-inflight", port=port)
        back = await wait_for_status(proxy.admin + "/readyz", 200)
        assert back["upstream_era"] == "legacy"


async def test_readyz_is_503_until_an_upstream_that_was_down_at_start_appears_and_is_probed(
    peer_factory: Callable[..., PeerServer],
) -> None:
    peer = peer_factory("modern-mrtr")
    port, url = peer.port, peer.url
    peer.stop()
    with sidecar(upstream=url) as proxy:
        down = await wait_for_status(proxy.admin + "/readyz", 503)
        assert "unreachable" in down["reason"]
        assert down["upstream_era"] == "unknown"

        peer_factory("modern-mrtr", port=port)
        up = await wait_for_status(proxy.admin + "/readyz", 200)
        assert up["upstream_era"] == "modern"


# -- metrics ----------------------------------------------------------------------------------------


async def test_metrics_count_requests_chains_errors_latency_and_open_streams_as_real_traffic_flows(
    legacy_server: PeerServer,
) -> None:
    calls = {"method": "tools/call", "client_era": "legacy", "mode": "passthrough"}
    with sidecar(upstream=legacy_server.url) as proxy:
        before = await scrape(proxy)
        assert metric(before, "mcp_proxy_requests_total", **calls) == 0
        assert metric(before, "mcp_proxy_info", upstream_era="legacy") == 1

        async with client_for(proxy.endpoint(), "legacy") as client:
            await client.call_tool("echo", {"text": "hi"})
            await client.call_tool("fail", {})
            # the legacy SDK client holds a GET stream open while it is connected
            await wait_for_metrics(
                proxy, lambda t: metric(t, "mcp_proxy_open_streams") >= 1, "an open SSE stream"
            )

        after = await wait_for_metrics(
            proxy,
            lambda t: (
                metric(t, "mcp_proxy_upstream_latency_seconds_count", method="tools/call") == 2
                and metric(t, "mcp_proxy_open_streams") == 0
            ),
            "both calls finished and the stream closed",
        )
    assert metric(after, "mcp_proxy_requests_total", **calls) == 2
    assert metric(after, "mcp_proxy_chains_total", **calls) == 2
    assert metric(after, "mcp_proxy_requests_total", method="initialize", client_era="legacy") == 1
    assert metric(after, "mcp_proxy_errors_total", method="tools/call", mode="passthrough") == 1
    assert metric(after, "mcp_proxy_errors_total", method="initialize") == 0
    assert metric(after, "mcp_proxy_sessions_total", state="opened") == 1
    assert metric(after, "mcp_proxy_upstream_latency_seconds_sum", method="tools/call") > 0
    assert metric(after, "mcp_proxy_bus_dropped_events_total") == 0
    assert metric(after, "mcp_proxy_parked_continuations") == 0
    assert metric(after, "mcp_proxy_bus_published_events_total") > metric(
        before, "mcp_proxy_bus_published_events_total"
    )


# -- token ----------------------------------------------------------------------------------------


BAD_AUTHORIZATIONS = {
    "missing": None,
    "wrong": "Bearer wrong-token",
    "longer": f"Bearer {TOKEN}x",
    "basic scheme": f"Basic {TOKEN}",
    "no scheme": TOKEN,
    "empty": "Bearer",
}


async def test_with_a_token_every_admin_path_answers_401_json_to_a_request_without_it(
    legacy_server: PeerServer,
) -> None:
    answers: dict[tuple[str, str], tuple[int, str, str]] = {}
    with sidecar(upstream=legacy_server.url, admin_token=TOKEN) as proxy:
        async with aiohttp.ClientSession() as http:
            for case, authorization in BAD_AUTHORIZATIONS.items():
                headers = {"Authorization": authorization} if authorization else {}
                for path in ADMIN_PATHS:
                    async with http.get(proxy.admin + path, headers=headers) as resp:
                        body = await resp.json()
                        answers[case, path] = (resp.status, body["error"], resp.headers["WWW-Authenticate"])
    assert set(answers.values()) == {(401, "unauthorized", 'Bearer realm="mcp-proxy admin"')}
    assert len(answers) == len(BAD_AUTHORIZATIONS) * len(ADMIN_PATHS)
    assert TOKEN not in proxy.stderr()


async def test_with_the_token_every_admin_path_answers_as_documented(legacy_server: PeerServer) -> None:
    with sidecar(upstream=legacy_server.url, admin_token=TOKEN) as proxy:
        auth = {"Authorization": f"bearer {TOKEN}"}  # the scheme is case-insensitive
        statuses = {}
        async with aiohttp.ClientSession() as http:
            for path in ADMIN_PATHS:
                async with http.get(proxy.admin + path, headers=auth) as resp:
                    statuses[path] = resp.status
                    if path == "/api/feed":
                        first = await asyncio.wait_for(resp.content.readuntil(b"\n\n"), 5)
                        assert first.startswith(b'data: {"type":"proxy_info"')
    assert statuses == {
        "/healthz": 200,
        "/readyz": 200,
        "/metrics": 200,
        "/api/chains": 200,
        "/api/chains/c1": 404,
        "/api/continuations": 200,
        "/api/feed": 200,
        "/no/such/path": 404,
    }


# -- signals ----------------------------------------------------------------------------------------


async def test_sigterm_drains_a_call_in_flight_which_completes_then_the_proxy_exits_0_with_it_captured(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "captures" / "capture.jsonl"
    steps = 150
    with sidecar(upstream=legacy_server.url, capture=capture, drain_grace=30) as proxy:
        log = CallbackLog()
        async with client_for(proxy.endpoint(), "legacy", log=log) as client, asyncio.TaskGroup() as tasks:
            # Listed first, so checking the result needs no new request (none is taken while draining).
            await client.list_tools()
            call = tasks.create_task(
                client.call_tool("slow_progress", {"steps": steps}, progress_callback=log.on_progress)
            )
            await until(lambda: len(log.progress) >= 3, what="the slow call to be under way")
            proxy.signal(signal.SIGTERM)
            draining = await proxy.logged("draining")
            assert draining["in_flight"] >= 1
            assert not call.done()

            refused = await wait_for_status(proxy.admin + "/readyz", 503)
            assert refused["reason"].startswith("draining")
            with pytest.raises(aiohttp.ClientConnectionError):
                await admin_get(proxy.endpoint())  # the MCP listener takes no new connection

        assert call.result().content[0].text == f"done {steps}"  # type: ignore[union-attr]
        assert len(log.progress) == steps
        assert await proxy.exited(20) == 0

    drained = proxy.find("drained")
    assert drained is not None
    assert drained["in_flight"] == 0
    events = captured(capture)
    headline = final_headline(events, "slow_progress")
    assert headline.chain.status is ChainStatus.OK
    progress = [
        e
        for e in events
        if isinstance(e, MessageRecorded)
        and e.chain_id == headline.chain.id
        and e.message.method == "notifications/progress"
    ]
    assert len(progress) == steps


async def test_a_drain_that_outlasts_drain_grace_is_cut_at_the_grace_and_still_exits_0(
    modern_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    params = modern_params(
        {"name": "slow_progress", "arguments": {"steps": 1000}, "_meta": {"progressToken": 1}}
    )
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    with sidecar(upstream=modern_server.url, capture=capture, drain_grace=1) as proxy:
        async with (
            aiohttp.ClientSession() as http,
            http.post(proxy.endpoint(), json=body, headers=modern_headers("tools/call", params)) as resp,
        ):
            assert resp.headers["Content-Type"].startswith("text/event-stream")
            first = await asyncio.wait_for(resp.content.readany(), 10)  # the server's line ends are CRLF
            assert b"notifications/progress" in first
            proxy.signal(signal.SIGTERM)
            sent = time.monotonic()
            assert await proxy.exited(10) == 0
            waited = time.monotonic() - sent
            rest = await asyncio.wait_for(_read_to_the_cut(resp), 10)

    assert 1.0 <= waited < 6.0
    drained = proxy.find("drained")
    assert drained is not None
    assert drained["in_flight"] == 1  # the call was still open when the grace ran out
    assert b'"result"' not in rest
    headline = final_headline(captured(capture), "slow_progress")
    assert headline.chain.status is ChainStatus.ERROR


async def _read_to_the_cut(resp: aiohttp.ClientResponse) -> bytes:
    """What is left of a response body whose connection the proxy closed (cut or ended)."""
    data = b""
    try:
        async for chunk in resp.content.iter_any():
            data += chunk
    except aiohttp.ClientPayloadError:
        pass
    return data


async def test_sigint_stops_at_once_and_exits_0(legacy_server: PeerServer) -> None:
    with sidecar(upstream=legacy_server.url, drain_grace=30) as proxy:
        proxy.signal(signal.SIGINT)
        assert await proxy.exited(10) == 0
    assert proxy.find("drained") is not None


async def test_sighup_reopens_the_capture_at_its_path_after_it_was_moved_away(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    moved = tmp_path / "capture.jsonl.old"
    with sidecar(upstream=legacy_server.url, capture=capture) as proxy:
        async with client_for(proxy.endpoint(), "legacy") as client:
            await client.call_tool("echo", {"text": "before"})
            await until(lambda: b'"name":"echo"' in capture.read_bytes(), what="the echo chain captured")
            capture.rename(moved)
            proxy.signal(signal.SIGHUP)
            await proxy.logged("capture_reopened")
            await client.call_tool("add", {"a": 1, "b": 2})
            await until(
                lambda: capture.exists() and b'"name":"add"' in capture.read_bytes(),
                what="the add chain captured in the new file",
            )
        assert proxy.stop() == 0

    old, new = captured(moved), captured(capture)
    assert {e.chain.name for e in old if isinstance(e, ChainChanged)} >= {"echo"}
    assert "add" not in {e.chain.name for e in old if isinstance(e, ChainChanged)}
    assert isinstance(new[0], ProxyInfo)  # each file is readable on its own
    assert final_headline(new, "add").chain.status is ChainStatus.OK


async def test_the_capture_rotates_by_size_keeping_capture_keep_older_files(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    limit = 6000
    with sidecar(
        upstream=legacy_server.url, capture=capture, capture_max_bytes=limit, capture_keep=2
    ) as proxy:
        async with client_for(proxy.endpoint(), "legacy") as client:
            for i in range(40):
                await client.call_tool("echo", {"text": f"call {i} " + "x" * 200})
        assert proxy.stop() == 0

    files = capture_files(tmp_path)
    assert [f.name for f in files] == ["capture.jsonl", "capture.jsonl.1", "capture.jsonl.2"]
    for path in files:
        assert path.stat().st_size <= limit
        events = captured(path)
        assert isinstance(events[0], ProxyInfo), path
    newest = captured(capture)
    assert any(isinstance(e, ChainChanged) and e.chain.name == "echo" for e in newest)


# -- misconfiguration --------------------------------------------------------------------------------


def refused(env: dict[str, str], tmp_path: Path, *args: str) -> list[str]:
    """Run the proxy that must refuse to start; assert exit 2 and return its stderr lines."""
    done = subprocess.run(
        [*proxy_command(), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    return lines


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port this test holds bound and listening."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_an_admin_port_already_in_use_exits_2_with_one_line_naming_admin(
    busy_port: int, tmp_path: Path
) -> None:
    admin = f"127.0.0.1:{busy_port}"
    env = clean_env(**settings_env(upstream="http://127.0.0.1:9/mcp", admin=admin))

    (line,) = refused(env, tmp_path)

    assert line.startswith(f"mcp-proxy: admin ({admin}): ")
    assert "in use" in line


def test_a_bad_upstream_url_in_the_environment_exits_2_naming_upstream_and_the_variable(
    tmp_path: Path,
) -> None:
    env = clean_env(**settings_env(upstream="ftp://server/mcp"))

    (line,) = refused(env, tmp_path)

    assert line.startswith("mcp-proxy: upstream (env MCP_PROXY_UPSTREAM): ")
    assert "'ftp://server/mcp'" in line


def test_a_config_file_named_by_mcp_proxy_config_that_is_missing_exits_2_naming_the_file(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "etc" / "config.toml"
    env = clean_env(MCP_PROXY_CONFIG=str(missing), MCP_PROXY_UPSTREAM="http://127.0.0.1:9/mcp")

    (line,) = refused(env, tmp_path)

    assert line == f"mcp-proxy: cannot read config file {missing}: No such file or directory"


def test_an_admin_on_all_interfaces_without_a_token_exits_2_naming_admin(tmp_path: Path) -> None:
    env = clean_env(**settings_env(upstream="http://127.0.0.1:9/mcp", admin="0.0.0.0:9901"))

    (line,) = refused(env, tmp_path)

    assert line.startswith("mcp-proxy: admin (env MCP_PROXY_ADMIN): ")
    assert "admin_token" in line
