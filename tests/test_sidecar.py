"""The staging sidecar, end to end: the real `mcp-proxy` process, a real SDK server behind it.

Health and readiness (following the upstream away and back, open without the token, never showing
the upstream's credentials, on the health-only listener when the admin API is off), two proxies on
one host, metrics moving with real traffic, token enforcement on every other admin path, SIGTERM
draining a call in flight, SIGHUP stopping it, SIGUSR1 reopening a moved capture, capture rotation
by size, and the headless install. The proxy is configured through `MCP_PROXY_*` variables, as the
Docker image configures it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proxy.flows.events import ChainChanged, ChainStatus, FlowEvent, MessageRecorded, ProxyInfo
from proxy.record.capture import CaptureFormatError, read_capture
from tests.e2e.modern_raw import modern_headers, modern_params
from tests.peers.runner import PeerServer
from tests.peers.scenarios import CallbackLog, client_for, run_scenario
from tests.sidecar import (
    ProxyProcess,
    admin_get,
    admin_json,
    clean_env,
    headless_command,
    metric,
    proxy_command,
    run_mcp_proxy,
    scrape,
    settings_env,
    sidecar,
    until,
)

pytestmark = pytest.mark.e2e

TOKEN = "staging-admin-token-123"

OPEN_PATHS = ["/healthz", "/readyz"]
"""Status only: answered without the token, so probes need none."""

GUARDED_PATHS = [
    "/metrics",
    "/api/chains",
    "/api/chains/c1",
    "/api/continuations",
    "/api/feed",
    "/no/such/path",
]

ADMIN_PATHS = OPEN_PATHS + GUARDED_PATHS


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


def chain_finished(path: Path, name: str) -> bool:
    """Whether the capture holds the chain named `name` ended well (a half-written line is skipped).

    A file just reopened may not hold its header yet (the writer's buffer has it): not yet, then.
    """
    try:
        events = captured(path)
    except CaptureFormatError as exc:
        if "empty" in exc.reason or "cut short" in exc.reason:
            return False
        raise
    return any(
        isinstance(e, ChainChanged) and e.chain.name == name and e.chain.status is ChainStatus.OK
        for e in events
    )


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
    with sidecar(upstream=peer.url, health="127.0.0.1:0") as proxy:
        ready = await wait_for_status(proxy.admin + "/readyz", 200)
        assert ready == {"status": "ready", "upstream": f"http://127.0.0.1:{port}", "upstream_era": "legacy"}

        peer.stop()
        gone = await wait_for_status(proxy.admin + "/readyz", 503)
        assert gone["status"] == "not_ready"
        assert gone["reason"].startswith(f"upstream 127.0.0.1:{port} unreachable")
        assert await admin_json(proxy.admin + "/healthz") == {"status": "ok"}

        peer_factory("legacy-inflight", port=port)
        back = await wait_for_status(proxy.admin + "/readyz", 200)
        assert back["upstream_era"] == "legacy"
        await wait_for_status(proxy.health + "/readyz", 200)  # the health listener shares the check

        lines = proxy.wait_events(lambda lines: len(readiness_said(lines)) >= 3)
    # each change once, however often either listener was asked, and why it was not ready
    assert readiness_said(lines) == [(True, None), (False, gone["reason"]), (True, None)], lines


def readiness_said(lines: list[dict[str, Any]]) -> list[tuple[bool, str | None]]:
    """The `readiness` lines logged: ready or not, and why not."""
    return [(e["ready"], e["reason"]) for e in lines if e.get("event") == "readiness"]


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


async def test_with_the_admin_api_off_the_health_listener_answers_health_and_readiness_and_nothing_else(
    peer_factory: Callable[..., PeerServer],
) -> None:
    peer = peer_factory("legacy-inflight")
    with sidecar(upstream=peer.url, admin_enabled="false", health="127.0.0.1:0") as proxy:
        assert proxy.admin == ""
        assert proxy.health.startswith("http://127.0.0.1:")
        assert await admin_json(proxy.health + "/healthz") == {"status": "ok"}
        ready = await wait_for_status(proxy.health + "/readyz", 200)
        others = {path: await admin_get(proxy.health + path) for path in GUARDED_PATHS}
        peer.stop()
        gone = await wait_for_status(proxy.health + "/readyz", 503)
        proxy.signal(signal.SIGTERM)
        assert await proxy.exited(20) == 0

    assert ready["upstream_era"] == "legacy"
    assert "unreachable" in gone["reason"]
    assert {path: status for path, (status, _, _) in others.items()} == dict.fromkeys(GUARDED_PATHS, 404)
    for _, headers, body in others.values():
        assert headers["Content-Type"].startswith("application/json")
        assert "serves only GET /healthz and /readyz" in json.loads(body)["message"]


async def test_the_health_listener_turns_readyz_503_while_draining_and_healthz_stays_200(
    legacy_server: PeerServer,
) -> None:
    with sidecar(upstream=legacy_server.url, health="127.0.0.1:0", drain_grace=30) as proxy:
        log = CallbackLog()
        async with client_for(proxy.endpoint(), "legacy", log=log) as client, asyncio.TaskGroup() as tasks:
            # Listed first, so checking the result needs no new request (none is taken while draining).
            await client.list_tools()
            call = tasks.create_task(
                client.call_tool("slow_progress", {"steps": 100}, progress_callback=log.on_progress)
            )
            await until(lambda: len(log.progress) >= 3, what="the slow call to be under way")
            proxy.signal(signal.SIGTERM)
            draining = await wait_for_status(proxy.health + "/readyz", 503)
            alive = await admin_json(proxy.health + "/healthz")
        assert call.result().is_error is False
        assert await proxy.exited(20) == 0

    assert draining["reason"].startswith("draining")
    assert alive == {"status": "ok"}


# -- two proxies on one host ------------------------------------------------------------------------


def unset_admin_env(upstream: str) -> dict[str, str]:
    """The environment of a proxy whose admin address the user left alone (listen on a free port)."""
    return clean_env(MCP_PROXY_LOG_FORMAT="json", MCP_PROXY_LISTEN="127.0.0.1:0", MCP_PROXY_UPSTREAM=upstream)


async def test_two_proxies_with_the_default_admin_address_both_start_each_with_its_own_admin_api(
    legacy_server: PeerServer, modern_server: PeerServer
) -> None:
    with (
        ProxyProcess(unset_admin_env(legacy_server.url)) as first,
        ProxyProcess(unset_admin_env(modern_server.url)) as second,
    ):
        eras = [(await wait_for_status(p.admin + "/readyz", 200))["upstream_era"] for p in (first, second)]
        health = [await admin_json(p.admin + "/healthz") for p in (first, second)]
        moves = [p.find("admin_port_taken") for p in (first, second)]

    assert first.admin != second.admin
    assert eras == ["legacy", "modern"]  # each admin API belongs to its own proxy
    assert health == [{"status": "ok"}] * 2
    # Each has 9901 or says it found it taken and where its admin API went instead. When the first
    # has it, the second must have moved; when something else on this host holds it (another suite's
    # proxy, say), both move, unless that holder lets it go before the second starts.
    for proxy, moved in zip((first, second), moves, strict=True):
        if proxy.admin == "http://127.0.0.1:9901":
            assert moved is None
        else:
            assert moved is not None, proxy.stderr()
            assert (moved["wanted"], moved["admin"], moved["level"]) == (
                "127.0.0.1:9901",
                proxy.admin,
                "warning",
            )


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
        # Nobody watched: no chain was built for the counters; an API read builds them (and publishes).
        unbuilt = metric(after, "mcp_proxy_bus_published_events_total")
        await admin_json(proxy.admin + "/api/chains")
        built = metric(await scrape(proxy), "mcp_proxy_bus_published_events_total")
    assert metric(after, "mcp_proxy_requests_total", **calls) == 2
    assert metric(after, "mcp_proxy_chains_total", **calls) == 2
    assert metric(after, "mcp_proxy_requests_total", method="initialize", client_era="legacy") == 1
    assert metric(after, "mcp_proxy_errors_total", method="tools/call", mode="passthrough") == 1
    assert metric(after, "mcp_proxy_errors_total", method="initialize") == 0
    assert metric(after, "mcp_proxy_sessions_total", state="opened") == 1
    assert metric(after, "mcp_proxy_upstream_latency_seconds_sum", method="tools/call") > 0
    assert metric(after, "mcp_proxy_bus_dropped_events_total") == 0
    assert metric(after, "mcp_proxy_parked_continuations") == 0
    assert unbuilt == metric(before, "mcp_proxy_bus_published_events_total")
    assert built > unbuilt


# -- request bodies in flight ---------------------------------------------------------------------

BIG = 1_000_000
"""Bytes of each big body: two fit under a `max_body_bytes_in_flight` of 2 MiB, a third does not."""


def big_call(size: int) -> bytes:
    """A `tools/call` whose compact JSON body is exactly `size` bytes (padded in `_meta`)."""
    head = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"},'
    head += b'"_meta":{"pad":"'
    tail = b'"}}}'
    return head + b"x" * (size - len(head) - len(tail)) + tail


def big_head(proxy: ProxyProcess, size: int, *, expect: bool) -> bytes:
    """The head of a POST of a `size`-byte body to the proxy's MCP endpoint."""
    host = proxy.listen.removeprefix("http://")
    lines = [
        "POST /mcp HTTP/1.1",
        f"Host: {host}",
        "Content-Type: application/json",
        "Accept: application/json, text/event-stream",
        f"Content-Length: {size}",
        *(["Expect: 100-continue"] if expect else []),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    """One response head off a raw connection: its status and headers (names lower-cased)."""
    raw = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    first, *fields = raw.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in fields if line)
    return int(first.split(" ", 2)[1]), {k.lower(): v for k, v in headers.items()}


async def hold_a_big_body(proxy: ProxyProcess) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A client whose big body the proxy has taken on (its 100 Continue came) and that sends only the
    start of it, so the proxy holds it in flight until the rest comes or the client leaves."""
    host, port = proxy.listen.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(big_head(proxy, BIG, expect=True))
    status, _ = await read_head(reader)
    assert status == 100, f"the big body was not taken on ({status})"
    writer.write(big_call(BIG)[:4096])
    await writer.drain()
    return reader, writer


async def refused_at_once(proxy: ProxyProcess) -> tuple[dict[str, str], dict[str, Any]]:
    """A big body offered with `Expect: 100-continue` is refused 503 before any of it is sent: the
    answer's headers and JSON body."""
    host, port = proxy.listen.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(big_head(proxy, BIG, expect=True))
        status, headers = await read_head(reader)
        assert status == 503, f"the big body was taken on ({status}), not refused"
        body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), 10)
        return headers, json.loads(body)
    finally:
        writer.close()


async def test_the_asyncio_tasks_gauge_counts_the_loops_tasks_when_scraped(legacy_server: PeerServer) -> None:
    with sidecar(upstream=legacy_server.url) as proxy:
        await run_scenario(proxy.endpoint(), "legacy", "echo")  # what the first traffic starts for good
        idle = metric(
            await wait_for_metrics(proxy, lambda t: metric(t, "mcp_proxy_open_streams") == 0, "no stream"),
            "mcp_proxy_asyncio_tasks",
        )
        assert idle >= 1  # the scrape's own handler, at least

        await asyncio.gather(*(run_scenario(proxy.endpoint(), "legacy", "ask_name") for _ in range(3)))
        await wait_for_metrics(  # every task those clients' traffic started has ended
            proxy,
            lambda t: (
                metric(t, "mcp_proxy_open_streams") == 0 and metric(t, "mcp_proxy_asyncio_tasks") == idle
            ),
            "the tasks back to where they were",
        )


async def test_big_bodies_past_max_body_bytes_in_flight_get_503_naming_it_while_a_small_call_is_served(
    legacy_server: PeerServer,
) -> None:
    limit = 2 * 1024 * 1024
    with sidecar(upstream=legacy_server.url, max_body_bytes=BIG, max_body_bytes_in_flight=limit) as proxy:
        first = await hold_a_big_body(proxy)
        second = await hold_a_big_body(proxy)

        headers, answer = await refused_at_once(proxy)
        assert headers["retry-after"] == "1"
        assert "max_body_bytes_in_flight" in answer["error"]["message"]
        assert answer["error"]["data"] == {"limit": limit, "setting": "max_body_bytes_in_flight"}
        refused = await proxy.logged("request_bodies_refused")
        assert refused["limit"] == limit
        assert refused["size"] == BIG

        async with client_for(proxy.endpoint(), "legacy") as client:  # a small call still fits
            result = await client.call_tool("echo", {"text": "hi"})
        assert not result.is_error

        # One big body ends and is answered by the upstream; the other client leaves half way.
        reader, writer = first
        writer.write(big_call(BIG)[4096:])
        status, _ = await read_head(reader)
        assert status != 503
        writer.close()
        second[1].close()

        # Both are freed: two big bodies fit again.
        await until_two_fit(proxy)


async def until_two_fit(proxy: ProxyProcess) -> None:
    """Two big bodies are taken on at once (each gets its 100 Continue), within a bounded wait: the
    proxy frees a leaving client's bytes when it sees the connection close."""
    deadline = time.monotonic() + 10
    while True:
        held: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        try:
            held.append(await hold_a_big_body(proxy))
            held.append(await hold_a_big_body(proxy))
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)
        finally:
            for _, writer in held:
                writer.close()


# -- token ----------------------------------------------------------------------------------------


BAD_AUTHORIZATIONS = {
    "missing": None,
    "wrong": "Bearer wrong-token",
    "longer": f"Bearer {TOKEN}x",
    "basic scheme": f"Basic {TOKEN}",
    "no scheme": TOKEN,
    "empty": "Bearer",
}


async def test_with_a_token_every_admin_path_but_health_and_readiness_answers_401_json_without_it(
    legacy_server: PeerServer,
) -> None:
    answers: dict[tuple[str, str], tuple[int, str, str]] = {}
    open_answers: dict[tuple[str, str], tuple[int, Any]] = {}
    with sidecar(upstream=legacy_server.url, admin_token=TOKEN) as proxy:
        await wait_for_status(proxy.admin + "/readyz", 200)
        async with aiohttp.ClientSession() as http:
            for case, authorization in BAD_AUTHORIZATIONS.items():
                headers = {"Authorization": authorization} if authorization else {}
                for path in GUARDED_PATHS:
                    async with http.get(proxy.admin + path, headers=headers) as resp:
                        body = await resp.json()
                        answers[case, path] = (resp.status, body["error"], resp.headers["WWW-Authenticate"])
                for path in OPEN_PATHS:
                    async with http.get(proxy.admin + path, headers=headers) as resp:
                        open_answers[case, path] = (resp.status, await resp.json())
    assert set(answers.values()) == {(401, "unauthorized", 'Bearer realm="mcp-proxy admin"')}
    assert len(answers) == len(BAD_AUTHORIZATIONS) * len(GUARDED_PATHS)
    health = [answer for (_, path), answer in open_answers.items() if path == "/healthz"]
    readiness = [(code, sorted(body)) for (_, p), (code, body) in open_answers.items() if p == "/readyz"]
    assert health == [(200, {"status": "ok"})] * len(BAD_AUTHORIZATIONS)
    assert readiness == [(200, ["status", "upstream", "upstream_era"])] * len(BAD_AUTHORIZATIONS)
    assert TOKEN not in proxy.stderr()


SECRETS = ("q-secret-123", "api_key")


async def test_readyz_never_shows_the_upstream_urls_query_ready_or_not(
    peer_factory: Callable[..., PeerServer],
) -> None:
    peer = peer_factory("legacy-inflight")
    port = peer.port
    upstream = f"http://127.0.0.1:{port}/mcp?api_key=q-secret-123"
    with sidecar(upstream=upstream, admin_token=TOKEN, health="127.0.0.1:0") as proxy:
        seen = [await wait_for_status(proxy.admin + "/readyz", 200)]
        seen.append(await wait_for_status(proxy.health + "/readyz", 200))
        peer.stop()
        seen.append(await wait_for_status(proxy.admin + "/readyz", 503))
        seen.append(await wait_for_status(proxy.health + "/readyz", 503))

    assert [body["status"] for body in seen] == ["ready", "ready", "not_ready", "not_ready"]
    assert {body["upstream"] for body in seen} == {f"http://127.0.0.1:{port}"}
    assert seen[2]["reason"].startswith(f"upstream 127.0.0.1:{port} unreachable")
    text = json.dumps(seen)
    assert [secret for secret in SECRETS if secret in text] == []


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
            # The MCP listener still takes connections (a conversation's next step may need one), but
            # new work, here a GET naming no session, is refused and told to retry elsewhere.
            status, headers, _ = await admin_get(proxy.endpoint())
            assert (status, headers["Retry-After"]) == (503, "1")

        assert call.result().content[0].text == f"done {steps}"  # type: ignore[union-attr]
        assert len(log.progress) == steps
        assert await proxy.exited(20) == 0

    drained = proxy.find("drained")
    assert drained is not None
    assert drained["in_flight"] == 0
    assert drained["how"] == "every conversation ended"
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


async def test_sigterm_releases_a_message_a_fault_delay_holds_so_the_call_is_answered_at_once(
    legacy_server: PeerServer,
) -> None:
    # The proxy chose to hold the call; draining must not spend its grace (nor leave the client
    # without an answer) on that wait.
    rule = "tool:echo dir:client => delay=10m"
    with sidecar(upstream=legacy_server.url, faults=rule, drain_grace=60) as proxy:
        async with client_for(proxy.endpoint(), "legacy") as client, asyncio.TaskGroup() as tasks:
            await client.list_tools()  # the SDK checks a result against it: no request while draining
            call = tasks.create_task(client.call_tool("echo", {"text": "held"}))

            deadline = time.monotonic() + 10
            while True:  # until the chain says the call is held
                _code, _, body = await admin_get(proxy.admin + "/api/chains")
                chains = json.loads(body or "[]")
                if any("fault injected by the proxy: delay" in n for c in chains for n in c.get("notes", [])):
                    break
                assert time.monotonic() < deadline, f"the call was never held: {chains}"
                await asyncio.sleep(0.05)
            signalled = time.monotonic()
            proxy.signal(signal.SIGTERM)
            result = await asyncio.wait_for(call, 15)
        assert result.content[0].text == "held"  # type: ignore[union-attr]
        assert await proxy.exited(20) == 0
        assert time.monotonic() - signalled < 15  # not the 60 s grace, nor the 10 min delay
    drained = proxy.find("drained")
    assert drained is not None
    assert drained["in_flight"] == 0


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
    assert drained["how"] == (
        "the grace (1 s) ran out: what is left has up to 1 s more to end (HTTP+SSE client streams "
        "are ended first), then is cut "
        "(client_connections_cut says how many were)"
    )
    cut = proxy.find("client_connections_cut")
    assert cut is not None
    assert cut["connections"] == 1  # the call's, still streaming
    assert b'"result"' not in rest
    headline = final_headline(captured(capture), "slow_progress")
    assert headline.chain.status is ChainStatus.ERROR
    assert _call_outcomes(proxy) == ["proxy_stopping"]  # the proxy cut it, not the client


async def test_an_http_sse_client_stream_a_drain_outlasted_is_counted_as_cut(
    legacy_server: PeerServer,
) -> None:
    # A legacy client's HTTP+SSE stream keeps the drain waiting (its session is in use) until the
    # grace runs out; the stop then ends it, and the count of cut connections includes it.
    with sidecar(upstream=legacy_server.url, drain_grace=1) as proxy:
        url = proxy.endpoint("/sse")
        async with aiohttp.ClientSession() as http, http.get(url) as stream:
            assert stream.status == 200
            first = await asyncio.wait_for(stream.content.readuntil(b"\n\n"), 10)
            assert first.startswith(b"event: endpoint")
            proxy.signal(signal.SIGTERM)
            assert await proxy.exited(10) == 0
    drained = proxy.find("drained")
    assert drained is not None
    assert drained["connections"] == 1, proxy.stderr()
    cut = proxy.find("client_connections_cut")
    assert cut is not None, proxy.stderr()
    assert cut["connections"] == 1


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


async def test_a_call_in_flight_at_sigint_is_logged_as_cut_by_the_proxys_stop(
    modern_server: PeerServer,
) -> None:
    params = modern_params(
        {"name": "slow_progress", "arguments": {"steps": 1000}, "_meta": {"progressToken": 1}}
    )
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    with sidecar(upstream=modern_server.url, drain_grace=30) as proxy:
        async with (
            aiohttp.ClientSession() as http,
            http.post(proxy.endpoint(), json=body, headers=modern_headers("tools/call", params)) as resp,
        ):
            first = await asyncio.wait_for(resp.content.readany(), 10)
            assert b"notifications/progress" in first
            proxy.signal(signal.SIGINT)
            assert await proxy.exited(10) == 0
            await asyncio.wait_for(_read_to_the_cut(resp), 10)
    assert _call_outcomes(proxy) == ["proxy_stopping"]


def _call_outcomes(proxy: Any) -> list[str | None]:
    """The outcome of each `tools/call` exchange the proxy logged."""
    lines = proxy.events()
    return [
        e.get("outcome") for e in lines if e.get("event") == "exchange" and e.get("method") == "tools/call"
    ]


async def test_sighup_stops_at_once_like_a_closed_terminal_and_exits_0(legacy_server: PeerServer) -> None:
    with sidecar(upstream=legacy_server.url, drain_grace=30) as proxy:
        proxy.signal(signal.SIGHUP)
        assert await proxy.exited(10) == 0
    assert proxy.find("drained") is not None


async def test_sigusr1_reopens_the_capture_at_its_path_after_it_was_moved_away(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    moved = tmp_path / "capture.jsonl.old"
    with sidecar(upstream=legacy_server.url, capture=capture) as proxy:
        async with client_for(proxy.endpoint(), "legacy") as client:
            await client.call_tool("echo", {"text": "before"})
            # The request body holds `"name":"echo"` too; wait for the chain's own final headline.
            await until(lambda: chain_finished(capture, "echo"), what="the echo chain captured")
            capture.rename(moved)
            proxy.signal(signal.SIGUSR1)
            await proxy.logged("capture_reopened")
            await client.call_tool("add", {"a": 1, "b": 2})
            await until(
                lambda: capture.exists() and chain_finished(capture, "add"),
                what="the add chain captured in the new file",
            )
        assert proxy.stop() == 0

    old, new = captured(moved), captured(capture)
    assert {e.chain.name for e in old if isinstance(e, ChainChanged)} >= {"echo"}
    assert "add" not in {e.chain.name for e in old if isinstance(e, ChainChanged)}
    assert isinstance(new[0], ProxyInfo)  # each file is readable on its own
    assert final_headline(new, "add").chain.status is ChainStatus.OK


async def test_a_capture_truncated_under_the_proxy_by_copytruncate_starts_again_readable_and_says_so(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    # logrotate's `copytruncate`: the file is copied, then truncated in place while the proxy keeps
    # it open; the session's stream is still open then, so the new file must repeat it.
    capture = tmp_path / "capture.jsonl"
    copy = tmp_path / "capture.jsonl.1"
    with sidecar(upstream=legacy_server.url, capture=capture) as proxy:
        async with client_for(proxy.endpoint(), "legacy") as client:
            await client.call_tool("echo", {"text": "before"})
            await until(lambda: chain_finished(capture, "echo"), what="the echo chain captured")
            shutil.copyfile(capture, copy)
            os.truncate(capture, 0)
            await client.call_tool("add", {"a": 1, "b": 2})
            warned = await proxy.logged("capture_truncated")
            await until(lambda: chain_finished(capture, "add"), what="the add chain captured")
        assert proxy.stop() == 0

    assert warned["level"] == "warning"
    assert (warned["path"], warned["found_bytes"]) == (str(capture), 0)
    assert warned["written_bytes"] >= copy.stat().st_size  # a flush may land between copy and cut
    assert len([e for e in proxy.events() if e["event"] == "capture_truncated"]) == 1
    data = capture.read_bytes()
    assert data.startswith(b'{"format":"mcp-debug-proxy-capture","version":"1.')
    old_header = json.loads(copy.read_bytes().split(b"\n", 1)[0])
    lines = [json.loads(line) for line in data.splitlines()]
    assert lines[0]["follows"] == old_header["created"]
    assert lines[0]["series"] == old_header["series"]
    assert lines[1]["type"] == "proxy_info"
    assert [line["kind"] for line in lines if line.get("repeat")][:1] == ["exchange_opened"]
    for parts in ([capture], [copy, capture]):
        done = run_mcp_proxy("export", "--json", "-", *map(str, parts))
        assert done.returncode == 0, done.stderr
        chains = [c["chain"] for c in json.loads(done.stdout)["chains"]]
        assert [c["status"] for c in chains if c.get("name") == "add"] == ["ok"]
    assert [c["status"] for c in chains if c.get("name") == "echo"] == ["ok"]


async def test_sigusr1_reopens_the_log_file_at_its_path_after_it_was_moved_away(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    """logrotate's way without copytruncate: the file is moved, SIGUSR1 sent, and the proxy's lines go
    to a new file at the path (as nginx does), not on into the moved one."""
    log = tmp_path / "proxy.log"
    moved = tmp_path / "proxy.log.1"
    env = clean_env(**settings_env(upstream=legacy_server.url, log_file=log, log_format="json"))
    process = await asyncio.create_subprocess_exec(
        *proxy_command(), env=env, stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        await until(lambda: log.exists() and b'"listening"' in log.read_bytes(), what="the listening line")
        listening = next(json.loads(line) for line in log.read_bytes().splitlines() if b'"listening"' in line)
        async with client_for(listening["endpoint"], "legacy") as client:
            await client.call_tool("echo", {"text": "before"})
            await until(lambda: b'"name":"echo"' in log.read_bytes(), what="the echo line in the log file")
            log.rename(moved)
            process.send_signal(signal.SIGUSR1)
            await until(
                lambda: log.exists() and b"log_file_reopened" in log.read_bytes(), what="a new log file"
            )
            await client.call_tool("add", {"a": 1, "b": 2})
            await until(lambda: b'"name":"add"' in log.read_bytes(), what="the add line in the new file")
    finally:
        process.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(process.wait(), 15) == 0

    assert b'"name":"add"' not in moved.read_bytes()
    assert all(json.loads(line) for line in log.read_bytes().splitlines())


def test_a_capture_that_cannot_be_opened_exits_2_naming_capture_and_the_variable_that_set_it(
    tmp_path: Path,
) -> None:
    (tmp_path / "a-file").write_text("")
    capture = tmp_path / "a-file" / "c.jsonl"  # under a file: no directory can be made there
    settings = {"upstream": "http://127.0.0.1:9/mcp", "capture": capture}
    (line,) = refused(clean_env(**settings_env(**settings, log_format="console")), tmp_path)

    assert line.startswith("mcp-proxy: capture (env MCP_PROXY_CAPTURE): "), line
    assert f"capture file {capture}: File exists" in line


def test_a_log_file_that_cannot_be_opened_exits_2_naming_log_file_and_the_cause(tmp_path: Path) -> None:
    settings = {"upstream": "http://127.0.0.1:9/mcp", "log_file": tmp_path / "no-such-dir" / "p.log"}
    (line,) = refused(clean_env(**settings_env(**settings, log_format="console")), tmp_path)

    assert line == (
        f"mcp-proxy: log_file (env MCP_PROXY_LOG_FILE): cannot open {tmp_path / 'no-such-dir' / 'p.log'}: "
        "No such file or directory"
    )


def size_limited(limit: int) -> list[str]:
    """The `mcp-proxy` command under a file-size limit (`prlimit --fsize`): the kernel refuses the
    capture's writes past it (EFBIG), as a full disk does (ENOSPC), at the flush, not at the write."""
    return ["prlimit", f"--fsize={limit}", *proxy_command()]


async def call_until_refused(proxy: ProxyProcess, client: Any, text: str = "") -> dict[str, Any]:
    """Make 40 calls, enough to pass any limit these tests set, and wait for the refusal's line."""
    for n in range(40):
        assert (await client.call_tool("echo", {"text": f"call {n}{text}"})).content
    return await proxy.logged("capture_failed")


async def test_a_capture_the_disk_stops_taking_is_said_once_counted_traffic_goes_on_and_sigusr1_resumes_it(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    # The file-size limit (`prlimit --fsize`) makes the kernel refuse the capture's writes past it
    # (EFBIG), as a full disk does (ENOSPC): the OS refuses at the flush, not at the proxy's write.
    capture = tmp_path / "capture.jsonl"
    limit = 16 * 1024
    env = clean_env(**settings_env(upstream=legacy_server.url, capture=capture, admin_token=TOKEN))
    with ProxyProcess(env, command=size_limited(limit)) as proxy:
        async with client_for(proxy.endpoint(), "legacy") as client:
            failed = await call_until_refused(proxy, client)
            text = (await admin_get(proxy.admin + "/metrics", TOKEN))[2].decode()
            assert "mcp_proxy_capture_failed 1.0" in text
            capture.rename(tmp_path / "full.jsonl")
            proxy.signal(signal.SIGUSR1)
            reopened = await proxy.logged("capture_reopened")
            await client.call_tool("echo", {"text": "after"})
            await until(lambda: chain_finished(capture, "echo"), what="the call after the reopen captured")
            text = (await admin_get(proxy.admin + "/metrics", TOKEN))[2].decode()
        assert proxy.stop() == 0

    assert "File too large" in failed["error"], failed
    assert failed["level"] == "error"
    assert [e for e in proxy.events() if e.get("event") == "capture_failed"] == [failed]  # said once
    assert reopened["resumed_after_failure"] is True
    assert "mcp_proxy_capture_failed 0.0" in text
    assert (tmp_path / "full.jsonl").stat().st_size <= limit


async def test_after_a_refused_capture_the_reopened_file_repeats_only_what_is_open_and_says_what_it_missed(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    # A legacy client's session stream is open when the file-size limit stops the capture, and ends
    # (the client leaves) before the SIGUSR1: the new file must not repeat it as still open, and a
    # `capture_gap` line says what went by unrecorded.
    capture = tmp_path / "capture.jsonl"
    env = clean_env(**settings_env(upstream=legacy_server.url, capture=capture))
    with ProxyProcess(env, command=size_limited(16 * 1024)) as proxy:
        async with client_for(proxy.endpoint(), "legacy") as client:
            await call_until_refused(proxy, client)
        capture.rename(tmp_path / "full.jsonl")
        proxy.signal(signal.SIGUSR1)
        await proxy.logged("capture_reopened")
        async with client_for(proxy.endpoint(), "legacy") as client:
            await client.call_tool("echo", {"text": "after"})
        await until(lambda: chain_finished(capture, "echo"), what="the call after the reopen captured")
        assert proxy.stop() == 0

    lines = [json.loads(line) for line in capture.read_bytes().splitlines()]
    assert [line for line in lines if line.get("repeat")] == []  # nothing was open at the reopen
    (gap,) = [line for line in lines if line.get("type") == "capture_gap"]
    assert gap["began"] < gap["ended"]
    assert gap["observations"] > 0, gap
    assert gap["exchanges_ended"] >= 1, gap
    done = run_mcp_proxy("export", "--json", "-", str(capture))
    assert done.returncode == 0, done.stderr
    assert f"{capture}:{lines.index(gap) + 1}: nothing was recorded from " in done.stderr
    exported = json.loads(done.stdout)
    assert {c["chain"]["status"] for c in exported["chains"]} == {"ok"}
    (noted,) = exported["skipped"]["not_recorded"]
    assert noted["exchanges_ended"] == gap["exchanges_ended"]


async def test_what_opened_while_the_capture_was_refused_and_is_still_open_is_repeated_so_export_places_it(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    # A legacy client connects while the file-size limit stops the capture and stays connected across
    # the SIGUSR1, a slow call under way: the call's answer, its session's GET stream's end and its
    # DELETE land in the new file, which repeats what opened meanwhile before the `capture_gap` line,
    # so export places every line and exits 0. The limit leaves the new file room for the slow call.
    capture = tmp_path / "capture.jsonl"
    env = clean_env(**settings_env(upstream=legacy_server.url, capture=capture))
    with ProxyProcess(env, command=size_limited(64 * 1024)) as proxy:
        async with client_for(proxy.endpoint(), "legacy") as client:
            await call_until_refused(proxy, client, " " + "x" * 4000)
        capture.rename(tmp_path / "full.jsonl")
        log = CallbackLog()
        async with client_for(proxy.endpoint(), "legacy", log=log) as client, asyncio.TaskGroup() as tasks:
            call = tasks.create_task(
                client.call_tool("slow_progress", {"steps": 100}, progress_callback=log.on_progress)
            )
            await until(lambda: len(log.progress) >= 3, what="the slow call to be under way")
            proxy.signal(signal.SIGUSR1)
            await proxy.logged("capture_reopened")
        assert call.result().is_error is False
        await until(lambda: b'"http_method":"DELETE"' in capture.read_bytes(), what="the DELETE captured")
        assert proxy.stop() == 0

    done = run_mcp_proxy("export", "--json", "-", str(capture))
    assert done.returncode == 0, done.stderr
    assert "joined no chain" not in done.stderr
    exported = json.loads(done.stdout)
    skipped = exported["skipped"]
    assert (skipped.get("unplaced_lines", 0), skipped.get("left_out_lines", 0)) == (0, 0), skipped
    (slow,) = [c["chain"] for c in exported["chains"] if c["chain"].get("name") == "slow_progress"]
    assert slow["status"] == "ok", slow
    lines = [json.loads(line) for line in capture.read_bytes().splitlines()]
    (gap,) = [line for line in lines if line.get("type") == "capture_gap"]
    repeated = [line for line in lines if line.get("repeat")]
    opened = [line["http_method"] for line in repeated if line["kind"] == "exchange_opened"]
    assert sorted(opened) == ["GET", "POST"], repeated
    assert all(lines.index(line) < lines.index(gap) for line in repeated)
    assert gap["exchanges_opened"] >= 1, gap


async def test_a_drain_while_the_capture_is_refused_still_exits_0_without_a_start_refusal(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    env = clean_env(**settings_env(upstream=legacy_server.url, capture=capture))
    with ProxyProcess(env, command=size_limited(16 * 1024)) as proxy:
        async with client_for(proxy.endpoint(), "legacy") as client:
            await call_until_refused(proxy, client)
        code = proxy.stop()  # SIGTERM: the file still refuses what the proxy holds for it

    assert code == 0, proxy.stderr()
    assert [e.get("event") for e in proxy.events() if e.get("level") == "error"] == ["capture_failed"]


async def test_the_capture_rotates_by_size_keeping_capture_keep_older_files(
    modern_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    limit = 6000
    calls = 40
    with sidecar(
        upstream=modern_server.url, capture=capture, capture_max_bytes=limit, capture_keep=2
    ) as proxy:
        # A 2026-07-28 client holds no session and no stream, so its last call is the last traffic
        # captured: the newest file holds that call's chain wherever the last rotation fell (it
        # repeats what is still open). A legacy client's DELETE and stream end come after its last
        # call, and how many lines a call takes varies with timing (writes coalesce under load), so
        # a rotation could fall among them and leave the newest file with no call at all.
        async with client_for(proxy.endpoint(), "2026-07-28") as client:
            for i in range(calls):
                await client.call_tool("echo", {"text": f"call {i} " + "x" * 200})
        assert proxy.stop() == 0

    files = capture_files(tmp_path)
    assert [f.name for f in files] == ["capture.jsonl", "capture.jsonl.1", "capture.jsonl.2"]
    for path in files:
        assert path.stat().st_size <= limit
        events = captured(path)
        assert isinstance(events[0], ProxyInfo), path
    newest = captured(capture)
    assert final_headline(newest, "echo").chain.status is ChainStatus.OK
    assert f"call {calls - 1} " in echoed(newest)
    assert "call 0 " not in "".join(echoed(captured(path)) for path in files)  # the oldest went


def echoed(events: list[FlowEvent]) -> str:
    """The texts of the `echo` calls whose requests these events hold, one per line."""
    return "".join(
        f"{e.message.body['params']['arguments']['text']}\n"
        for e in events
        if isinstance(e, MessageRecorded) and e.message.method == "tools/call" and e.message.kind == "request"
    )


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
    if env.get("MCP_PROXY_LOG_FORMAT") == "console":
        return lines
    # stderr is piped here, so the default format (auto) is JSON, as the image's is: the refusal is
    # one more JSON line
    said = json.loads(lines[0])
    assert (said["event"], said["level"]) == ("start_refused", "error"), said
    return [f"mcp-proxy: {said['error']}"]


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port this test holds bound and listening."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_an_admin_address_set_in_the_environment_and_taken_exits_2_naming_it_with_the_hint(
    busy_port: int, tmp_path: Path
) -> None:
    admin = f"127.0.0.1:{busy_port}"
    env = clean_env(**settings_env(upstream="http://127.0.0.1:9/mcp", admin=admin))

    (line,) = refused(env, tmp_path)

    assert line == (
        f"mcp-proxy: admin ({admin}, set by env MCP_PROXY_ADMIN): Address already in use; "
        "pick another port, or --admin 127.0.0.1:0 for any free one (logged at start)"
    )


def test_an_admin_address_set_by_flag_to_the_default_and_taken_still_fails_fast(
    busy_port: int, tmp_path: Path
) -> None:
    admin = f"127.0.0.1:{busy_port}"
    env = clean_env(MCP_PROXY_UPSTREAM="http://127.0.0.1:9/mcp", MCP_PROXY_LISTEN="127.0.0.1:0")

    (line,) = refused(env, tmp_path, "--admin", admin)

    assert line.startswith(f"mcp-proxy: admin ({admin}, set by flag --admin): Address already in use; ")
    assert "--admin 127.0.0.1:0" in line


def test_a_listen_address_that_is_taken_exits_2_naming_listen_and_how_to_pick_another(
    busy_port: int, tmp_path: Path
) -> None:
    listen = f"127.0.0.1:{busy_port}"
    env = clean_env(**settings_env(upstream="http://127.0.0.1:9/mcp", listen=listen))

    (line,) = refused(env, tmp_path)

    assert line.startswith(f"mcp-proxy: listen ({listen}, set by env MCP_PROXY_LISTEN): ")
    assert "Address already in use; another process serves there, perhaps an mcp-proxy still draining" in line
    assert "pick another port with --listen HOST:PORT and point clients at it" in line


def test_the_default_listen_address_when_taken_fails_fast_rather_than_moving_behind_the_clients_back(
    tmp_path: Path,
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        # SO_REUSEPORT lets this test hold the port while another run of it (another checkout's suite
        # on this host) holds it too; the proxy, without the option, is refused by either. Without it,
        # the run that found the port taken could see the other release it and its proxy start there.
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        # Held by another process without SO_REUSEPORT (a proxy someone runs on its default port): wait
        # for it to let go and hold the port ourselves, since it may let go while the proxy starts; if
        # it holds on all along, it holds the port for this test just as well.
        deadline = time.monotonic() + 10.0
        while True:
            try:
                holder.bind(("127.0.0.1", 8080))
                holder.listen()
                break
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
        env = clean_env(MCP_PROXY_UPSTREAM="http://127.0.0.1:9/mcp", MCP_PROXY_ADMIN_ENABLED="false")

        (line,) = refused(env, tmp_path)

    assert line.startswith("mcp-proxy: listen (127.0.0.1:8080, the default): Address already in use; ")
    assert "--listen" in line


def test_a_health_address_that_is_taken_exits_2_naming_health(busy_port: int, tmp_path: Path) -> None:
    health = f"127.0.0.1:{busy_port}"
    env = clean_env(**settings_env(upstream="http://127.0.0.1:9/mcp", health=health, admin_enabled="false"))

    (line,) = refused(env, tmp_path)

    assert line == (
        f"mcp-proxy: health ({health}, set by env MCP_PROXY_HEALTH): Address already in use; "
        "pick another port, or --health 127.0.0.1:0 for any free one (logged at start)"
    )


def test_a_second_proxy_given_the_capture_another_writes_exits_2_naming_it(tmp_path: Path) -> None:
    capture = tmp_path / "capture.jsonl"
    settings = {"upstream": "http://127.0.0.1:9/mcp", "capture": capture, "admin_enabled": "false"}
    with ProxyProcess(clean_env(**settings_env(**settings))):
        (line,) = refused(clean_env(**settings_env(**settings, log_format="console")), tmp_path)

    assert line == (
        f"mcp-proxy: capture (env MCP_PROXY_CAPTURE): capture file {capture} is being written by another "
        "process (it holds the "
        "file's lock): give each proxy a capture path of its own"
    )


def test_a_bad_upstream_url_in_the_environment_exits_2_naming_upstream_and_the_variable(
    tmp_path: Path,
) -> None:
    env = clean_env(**settings_env(upstream="ftp://server/mcp"))

    (line,) = refused(env, tmp_path)

    assert line.startswith("mcp-proxy: upstream (env MCP_PROXY_UPSTREAM): ")
    assert "'ftp://server/mcp'" in line


def test_a_file_key_a_variable_overrides_is_warned_of_at_start_naming_both(tmp_path: Path) -> None:
    config = tmp_path / "proxy.toml"
    config.write_text("capture_keep = 20\nupstream_timeout = 45\n")
    env = clean_env(
        **settings_env(upstream="http://127.0.0.1:9/mcp", capture_keep=5),
        MCP_PROXY_CONFIG=str(config),
    )
    with ProxyProcess(env) as proxy:
        said = [e for e in proxy.events() if e.get("event") == "config_key_overridden"]

    assert [(e["setting"], e["file"], e["by"], e["level"]) for e in said] == [
        ("capture_keep", str(config), "env MCP_PROXY_CAPTURE_KEEP", "warning")
    ]  # the file's upstream_timeout took effect: not said


def test_a_config_file_named_by_mcp_proxy_config_that_is_missing_exits_2_naming_the_file(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "etc" / "config.toml"
    env = clean_env(MCP_PROXY_CONFIG=str(missing), MCP_PROXY_UPSTREAM="http://127.0.0.1:9/mcp")

    (line,) = refused(env, tmp_path)

    assert line == (
        f"mcp-proxy: cannot read config file {missing} (named by MCP_PROXY_CONFIG): No such file or directory"
    )


def test_an_admin_on_all_interfaces_without_a_token_exits_2_naming_admin(tmp_path: Path) -> None:
    env = clean_env(**settings_env(upstream="http://127.0.0.1:9/mcp", admin="0.0.0.0:9901"))

    (line,) = refused(env, tmp_path)

    assert line.startswith("mcp-proxy: admin (env MCP_PROXY_ADMIN): ")
    assert "--admin-token or MCP_PROXY_ADMIN_TOKEN" in line


# -- the headless install ------------------------------------------------------------------------------


async def test_without_the_tui_packages_the_proxy_relays_and_answers_probes(
    legacy_server: PeerServer,
) -> None:
    env = clean_env(**settings_env(upstream=legacy_server.url, health="127.0.0.1:0", admin_token=TOKEN))

    with ProxyProcess(env, command=headless_command()) as proxy:
        async with client_for(proxy.endpoint(), "legacy") as client:
            result = await client.call_tool("echo", {"text": "headless"})
        ready = await wait_for_status(proxy.health + "/readyz", 200)
        assert proxy.stop() == 0

    assert result.is_error is False
    assert ready["status"] == "ready"
