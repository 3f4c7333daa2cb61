"""2024-11-05 HTTP+SSE servers behind ``mcp-proxy --upstream http://HOST/sse``, found by the era probe.

server-everything (npm) in ``sse`` mode and the Python SDK's SSE server: for the first, the proxy's probe sees
their endpoint refuse a POST, opens the GET stream, waits for the ``endpoint`` event, and from then
on speaks HTTP+SSE to them (one GET stream per client session, POSTs to the endpoint the server
named). Legacy clients pass through; 2026-07-28 clients get the server's in-flight questions as
``input_required`` and complete them.
"""

from __future__ import annotations

from collections.abc import Iterator

import aiohttp
import pytest

from tests.e2e.channel_peers import EverythingSse, PythonSse
from tests.e2e.legacy_raw import HEADERS, initialize
from tests.peers.clients import ClientKind, run_plan
from tests.peers.runner import DEFAULT_START_TIMEOUT, DEFAULT_STOP_TIMEOUT
from tests.sidecar import ProxyProcess, clean_env, settings_env, until

pytestmark = pytest.mark.e2e

EVERYTHING_PLAN = [
    {"id": "list_tools", "op": "list_tools"},
    {"id": "sum", "op": "call", "tool": "get-sum", "arguments": {"a": 2, "b": 3}},
    {"id": "ask", "op": "call", "tool": "trigger-elicitation-request", "arguments": {}},
    {
        "id": "progress",
        "op": "call",
        "tool": "trigger-long-running-operation",
        "arguments": {"duration": 0.3, "steps": 3},
        "progress": True,
    },
]
PYTHON_PLAN = [
    {"id": "list_tools", "op": "list_tools"},
    {"id": "echo", "op": "call", "tool": "echo", "arguments": {"text": "hi"}},
    {"id": "ask_name", "op": "call", "tool": "ask_name", "arguments": {}},
]


@pytest.fixture(scope="module")
def everything_sse() -> Iterator[ProxyProcess]:
    server = EverythingSse(start_timeout=DEFAULT_START_TIMEOUT, stop_timeout=DEFAULT_STOP_TIMEOUT)
    with server, ProxyProcess(clean_env(**settings_env(upstream=server.sse_url))) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def python_sse() -> Iterator[ProxyProcess]:
    # The SDK's server answers both eras' requests, so the proxy is told its tools ask in flight
    # (legacy); with the era named there is no probe, so the transport is named too.
    server = PythonSse(start_timeout=DEFAULT_START_TIMEOUT, stop_timeout=DEFAULT_STOP_TIMEOUT)
    with server:
        env = settings_env(upstream=server.sse_url, upstream_era="legacy", upstream_transport="sse")
        with ProxyProcess(clean_env(**env)) as proxy:
            yield proxy


def test_the_probe_finds_the_http_sse_transport_and_the_legacy_era(everything_sse: ProxyProcess) -> None:
    found = everything_sse.find("upstream_transport")
    assert found is not None, everything_sse.stderr()
    assert found["transport"] == "sse"
    eras = everything_sse.find("upstream_eras")
    assert eras is not None
    assert eras["eras"] == "legacy"


@pytest.mark.parametrize("client", ["python-legacy", "ts-v1", "python-2026", "ts-v2"])
def test_server_everything_over_http_sse_serves_clients_of_both_eras(
    client: ClientKind, everything_sse: ProxyProcess
) -> None:
    run = run_plan(client, everything_sse.endpoint("/sse"), EVERYTHING_PLAN)
    lines = run.lines
    logs = f"{run.stderr}\n--- proxy ---\n{everything_sse.stderr()[-3000:]}"
    assert "get-sum" in lines["list_tools"]["result"], logs
    assert lines["sum"]["result"]["content"][0]["text"] == "The sum of 2 and 3 is 5.", logs
    assert lines["ask"]["callbacks"] == ["elicitation:Please provide inputs for the following fields:"], logs
    assert "- Name: octocat" in lines["ask"]["result"]["content"][1]["text"], logs
    assert [float(p) for p in lines["progress"]["progress"]] == [1.0, 2.0, 3.0], logs


@pytest.mark.parametrize("client", ["python-legacy", "python-2026"])
def test_the_python_sdks_sse_server_serves_clients_of_both_eras(
    client: ClientKind, python_sse: ProxyProcess
) -> None:
    run = run_plan(client, python_sse.endpoint("/sse"), PYTHON_PLAN)
    lines = run.lines
    logs = f"{run.stderr}\n--- proxy ---\n{python_sse.stderr()[-3000:]}"
    assert "echo" in lines["list_tools"]["result"], logs
    assert "hi" in str(lines["echo"]["result"]), logs
    assert lines["ask_name"]["callbacks"], logs
    assert "error" not in lines["ask_name"], logs


def test_an_era_named_without_the_transport_on_an_sse_url_warns_naming_the_flag(
    python_sse: ProxyProcess,
) -> None:
    # --upstream-era skips the probe, which is what finds the HTTP+SSE transport: without the hint
    # a client gets only the server's 404 to a POST on /sse.
    server = EverythingSse(start_timeout=DEFAULT_START_TIMEOUT, stop_timeout=DEFAULT_STOP_TIMEOUT)
    with (
        server,
        ProxyProcess(clean_env(**settings_env(upstream=server.sse_url, upstream_era="legacy"))) as proxy,
    ):
        warning = proxy.find("upstream_transport_unknown")
    assert warning is not None, proxy.stderr()[-3000:]
    assert warning["level"] == "warning"
    assert "add --upstream-transport sse" in warning["hint"]
    assert python_sse.find("upstream_transport_unknown") is None  # the transport named: no warning


@pytest.fixture(scope="module")
def python_sse_probed() -> Iterator[ProxyProcess]:
    """The Python SDK's SSE server behind a proxy that found its transport by the era probe."""
    server = PythonSse(start_timeout=DEFAULT_START_TIMEOUT, stop_timeout=DEFAULT_STOP_TIMEOUT)
    with server, ProxyProcess(clean_env(**settings_env(upstream=server.sse_url))) as proxy:
        assert proxy.wait_for("upstream_eras") is not None, proxy.stderr()[-3000:]
        yield proxy


async def test_a_request_off_the_endpoint_is_answered_by_the_proxy_naming_it_and_blames_nobody(
    python_sse_probed: ProxyProcess,
) -> None:
    proxy = python_sse_probed
    opened = len([e for e in proxy.events() if e.get("event") == "upstream_session_opened"])
    async with aiohttp.ClientSession() as http:
        for _ in range(2):  # a second one would re-probe, were the first blamed on the server
            async with http.post(proxy.endpoint("/mcp"), json=initialize(), headers=HEADERS) as resp:
                assert resp.status == 404, await resp.text()
                answer = await resp.json()
        async with http.post(proxy.endpoint("/sse"), json=initialize(), headers=HEADERS) as resp:
            assert resp.status == 200, await resp.text()
    assert answer["id"] == 1
    message = answer["error"]["message"]
    assert message.startswith("this proxy serves MCP at /sse (and /) only: its upstream is an HTTP+SSE")
    assert "/mcp is not it, point the client at /sse" in message

    def logged() -> list[dict[str, object]]:
        return [e for e in proxy.events() if e.get("event") == "exchange"]

    await until(lambda: len(logged()) == 3, what="the three exchanges' log lines")
    events = proxy.events()
    assert not [e for e in events if e.get("event") == "upstream_eras_suspect"], proxy.stderr()[-3000:]
    lines = logged()
    assert [(e["carried"], e["trouble"]) for e in lines] == [
        ("initialize", "not_the_endpoint"),
        ("initialize", "not_the_endpoint"),
        ("initialize", None),
    ], lines
    assert len([e for e in events if e.get("event") == "upstream_session_opened"]) == opened + 1
