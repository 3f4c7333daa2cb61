"""OpenTelemetry traces of real traffic: the `mcp-proxy` command, SDK peers, an OTLP/HTTP receiver.

A legacy SDK client calls a 2026-07-28 SDK server through the proxy (legacy_to_mrtr: the server's
`input_required` becomes an `elicitation/create` on the client's stream, then a second upstream round)
sending W3C trace context in `params._meta`, with a bearer token; a 2026-07-28 client calls the same
server straight through without any. The proxy exports to a receiver that records the raw OTLP bytes
and decodes them with the official protobuf types. Then the same traffic as a capture is replayed by
`mcp-proxy export --otlp`, with the original times. Past the traces: a collector that is down or
never answers costs the traffic nothing, and the spans it could not take are counted in /metrics.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proxy.record.otlp_setup import ENDPOINT_VARS
from tests.e2e.modern_raw import modern_headers, modern_params
from tests.otlp_receiver import DecodedSpan, OtlpReceiver, closed_port, silent_collector
from tests.peers.runner import REPO_ROOT, PeerServer
from tests.peers.scenarios import CallbackLog, client_for
from tests.sidecar import ProxyProcess, admin_get, clean_env, proxy_command, settings_env

pytestmark = pytest.mark.e2e

SECRET = "otel-test-bearer-5c1d7e"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"


def by_name(spans: list[DecodedSpan], name: str, kind: str | None = None) -> list[DecodedSpan]:
    return sorted(
        (s for s in spans if s.name == name and (kind is None or s.kind == kind)), key=lambda s: s.start_ns
    )


async def drive(endpoint: str) -> None:
    """The bridged call with trace context and a bearer token, then a pass-through call without context."""
    auth = {"Authorization": f"Bearer {SECRET}"}
    log = CallbackLog()
    async with client_for(endpoint, "legacy", headers=auth, log=log) as legacy:
        asked = await legacy.call_tool("ask_name", {}, meta={"traceparent": TRACEPARENT})
    assert not asked.is_error
    assert any(c.startswith("elicitation:") for c in log.callbacks)
    async with client_for(endpoint, "2026-07-28", headers=auth) as modern:
        added = await modern.call_tool("add", {"a": 2, "b": 3})
    assert not added.is_error


def check_bridged_trace(spans: list[DecodedSpan]) -> None:
    """The bridged call's trace: the client's span's child, its two upstream rounds and the nested ask."""
    (root,) = by_name(spans, "tools/call ask_name", "server")
    assert (root.trace_id, root.parent_id) == (TRACE_ID, CLIENT_SPAN)
    attrs = root.attributes
    assert attrs["mcp.method.name"] == "tools/call"
    assert attrs["gen_ai.tool.name"] == "ask_name"
    assert attrs["gen_ai.operation.name"] == "execute_tool"
    assert attrs["jsonrpc.request.id"] == "2"
    assert attrs["mcp_proxy.mode"] == "legacy_to_mrtr"
    assert attrs["network.protocol.name"] == "http"
    assert str(attrs["mcp.session.id"]).startswith("<redacted len=")
    assert root.status_code == 0  # unset: it succeeded

    legs = by_name(spans, "tools/call ask_name", "client")
    assert [leg.attributes["mcp_proxy.round"] for leg in legs] == [1, 2]
    assert all(leg.trace_id == TRACE_ID and leg.parent_id == root.span_id for leg in legs)
    assert legs[0].attributes["mcp_proxy.result_type"] == "input_required"
    assert legs[0].attributes["server.address"] == "127.0.0.1"

    (asked,) = by_name(spans, "elicitation/create", "client")
    assert (asked.trace_id, asked.parent_id) == (TRACE_ID, root.span_id)
    assert asked.attributes["mcp_proxy.nested"] == "asked"
    assert legs[0].end_ns <= asked.start_ns <= asked.end_ns <= legs[1].start_ns
    assert root.start_ns <= legs[0].start_ns
    assert legs[1].end_ns <= root.end_ns


def check_passthrough_trace(spans: list[DecodedSpan]) -> None:
    """The call without trace context: a trace of its own, the proxy's span its root."""
    (added,) = by_name(spans, "tools/call add", "server")
    assert added.parent_id == ""
    assert added.trace_id != TRACE_ID
    assert added.attributes["mcp_proxy.mode"] == "passthrough"
    assert added.attributes["mcp.protocol.version"] == "2026-07-28"


def export_otlp(url: str, capture: Path) -> subprocess.CompletedProcess[str]:
    """Run `mcp-proxy export --otlp URL CAPTURE` as a user would."""
    return subprocess.run(
        [*proxy_command(), "export", "--otlp", url, str(capture)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
        check=False,
    )


def upstream_traceparents(capture: Path) -> list[Any]:
    """The `_meta.traceparent` of every tools/call the proxy sent upstream, as the capture recorded it."""
    found = []
    for line in capture.read_text().splitlines():
        data = json.loads(line)
        msg = data.get("msg") or {}
        if data.get("kind") == "leg_message" and msg.get("method") == "tools/call":
            found.append(msg["raw"]["params"].get("_meta", {}).get("traceparent"))
    return found


async def test_real_traffic_is_traced_to_an_otlp_receiver_and_a_capture_replays_the_same_spans(
    modern_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    with OtlpReceiver() as receiver:
        env = clean_env(
            **settings_env(upstream=modern_server.url, capture=capture, otlp_endpoint=receiver.url)
        )
        with ProxyProcess(env) as proxy:
            await drive(proxy.endpoint())
            proxy.stop()  # SIGTERM: the proxy drains and sends what is queued before it exits
        assert proxy.find("otlp_tracing") is not None
        live = receiver.spans()
        assert all(r.path == "/v1/traces" for r in receiver.requests)
        assert all(r.headers["content-type"] == "application/x-protobuf" for r in receiver.requests)
        raw = receiver.raw()

    check_bridged_trace(live)
    check_passthrough_trace(live)
    assert {s.resource["service.name"] for s in live} == {"mcp-debug-proxy"}
    assert SECRET.encode() not in raw
    assert b"Bearer" not in raw
    assert upstream_traceparents(capture) == [TRACEPARENT, TRACEPARENT]

    with OtlpReceiver() as replay:
        done = export_otlp(replay.url, capture)
        assert done.returncode == 0, done.stderr
        replayed = replay.spans()
    assert f"sent {len(live)} spans" in done.stderr
    check_bridged_trace(replayed)
    check_passthrough_trace(replayed)

    def shape(spans: list[DecodedSpan]) -> list[tuple[str, str, int, int, bool]]:
        return sorted((s.name, s.kind, s.start_ns, s.end_ns, s.trace_id == TRACE_ID) for s in spans)

    assert shape(replayed) == shape(live)  # the same spans, at the times they happened


async def test_a_modern_clients_bridged_call_carries_its_trace_through_rounds_and_the_upstreams_ask(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    with OtlpReceiver() as receiver:
        env = clean_env(
            **settings_env(upstream=legacy_server.url, capture=capture, otlp_endpoint=receiver.url)
        )
        with ProxyProcess(env) as proxy:
            async with client_for(proxy.endpoint(), "2026-07-28") as modern:
                asked = await modern.call_tool("ask_name", {}, meta={"traceparent": TRACEPARENT})
            assert not asked.is_error
            proxy.stop()
        spans = receiver.spans()

    first, retry = by_name(spans, "tools/call ask_name", "server")
    assert (first.trace_id, first.parent_id) == (TRACE_ID, CLIENT_SPAN)
    assert first.attributes["mcp_proxy.result_type"] == "input_required"
    assert (retry.trace_id, retry.parent_id) == (TRACE_ID, first.span_id)
    assert retry.attributes["mcp_proxy.round"] == 2
    assert retry.attributes["mcp_proxy.mode"] == "mrtr_to_legacy"

    (session,) = by_name(spans, "initialize", "client")
    (leg,) = by_name(spans, "tools/call ask_name", "client")
    assert session.parent_id == leg.parent_id == first.span_id
    (nested,) = by_name(spans, "elicitation/create", "server")
    assert (nested.trace_id, nested.parent_id) == (TRACE_ID, leg.span_id)
    assert nested.attributes["mcp_proxy.nested"] == "relayed"
    assert leg.start_ns < nested.start_ns < nested.end_ns < leg.end_ns
    assert retry.start_ns < nested.end_ns
    assert upstream_traceparents(capture) == [TRACEPARENT]


CALLS = 150
"""Calls driven against a collector that cannot take spans: well past the queue below."""

QUEUE = 16


async def timed_calls(endpoint: str) -> list[float]:
    """Seconds each of `CALLS` pass-through tools/call requests took, one after another."""
    took = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        for ident in range(CALLS):
            params = modern_params({"name": "add", "arguments": {"a": ident, "b": 1}})
            body = {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": params}
            started = time.monotonic()
            async with http.post(endpoint, json=body, headers=modern_headers("tools/call", params)) as resp:
                assert resp.status == 200
                await resp.read()
            took.append(time.monotonic() - started)
    return took


def counter(metrics: str, name: str) -> float:
    for line in metrics.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} in /metrics")


@contextmanager
def down() -> Iterator[str]:
    yield closed_port()


@pytest.mark.parametrize("collector", [down, silent_collector], ids=["port-closed", "never-answers"])
async def test_an_unreachable_collector_never_slows_traffic_and_the_dropped_spans_are_counted(
    modern_server: PeerServer, collector: Any
) -> None:
    opened: AbstractContextManager[str] = collector()
    with opened as url:
        env = clean_env(**settings_env(upstream=modern_server.url, otlp_endpoint=url, otlp_queue_size=QUEUE))
        with ProxyProcess(env) as proxy:
            took = await timed_calls(proxy.endpoint())
            _, _, body = await admin_get(proxy.admin + "/metrics")
            metrics = body.decode()
            started = time.monotonic()
            proxy.signal(signal.SIGTERM)
            await proxy.exited(15)
            stopped_in = time.monotonic() - started

    # The exporter waits up to 10 s on each batch; had a call waited for it, it would show here.
    assert max(took) < 2.0, max(took)
    assert sorted(took)[len(took) // 2] < 0.25
    full = counter(metrics, 'mcp_proxy_otlp_spans_dropped_total{reason="queue_full"}')
    failed = counter(metrics, 'mcp_proxy_otlp_spans_dropped_total{reason="export_failed"}')
    assert counter(metrics, "mcp_proxy_otlp_spans_exported_total") == 0
    # Every span is dropped but those still queued or in the batch being tried.
    assert full + failed >= CALLS - 2 * QUEUE, (full, failed)
    if collector is silent_collector:  # the exporter hangs on its first batch: the queue fills
        assert full >= CALLS - 2 * QUEUE
    assert stopped_in < 10.0


async def test_the_standard_variables_name_the_service_so_sidecars_stay_apart(
    modern_server: PeerServer,
) -> None:
    with OtlpReceiver() as receiver:
        env = clean_env(
            **settings_env(upstream=modern_server.url, otlp_endpoint=receiver.url, admin_enabled="false"),
            OTEL_SERVICE_NAME="sidecar-a",
            OTEL_RESOURCE_ATTRIBUTES="deployment.environment=staging,service.name=overridden",
        )
        with ProxyProcess(env) as proxy:
            async with client_for(proxy.endpoint(), "2026-07-28") as client:
                assert not (await client.call_tool("add", {"a": 2, "b": 3})).is_error
            proxy.stop()
        spans = receiver.spans()

    assert spans
    assert {s.resource["service.name"] for s in spans} == {
        "sidecar-a"
    }  # OTEL_SERVICE_NAME wins, as the spec says
    assert {s.resource["deployment.environment"] for s in spans} == {"staging"}


@pytest.mark.parametrize(
    ("variable", "given", "path"),
    [
        ("MCP_PROXY_OTLP_ENDPOINT", "?tenant=team-a", "/v1/traces?tenant=team-a"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "/?tenant=team-b", "/v1/traces?tenant=team-b"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "/otlp/traces?tenant=team-c", "/otlp/traces?tenant=team-c"),
    ],
    ids=["otlp_endpoint", "standard-base", "standard-traces-as-is"],
)
async def test_a_collector_url_with_a_query_gets_the_traces_path_before_its_query(
    modern_server: PeerServer, variable: str, given: str, path: str
) -> None:
    with OtlpReceiver() as receiver:
        env = clean_env(**settings_env(upstream=modern_server.url, admin_enabled="false"))
        for name in (*ENDPOINT_VARS, "OTEL_SDK_DISABLED"):
            env.pop(name, None)
        env[variable] = receiver.url + given
        with ProxyProcess(env) as proxy:
            async with client_for(proxy.endpoint(), "2026-07-28") as client:
                assert not (await client.call_tool("add", {"a": 2, "b": 3})).is_error
            proxy.stop()
        targets = {r.path for r in receiver.requests}  # the request line's target, as the collector got it
        spans = receiver.spans()

    assert targets == {path}
    assert by_name(spans, "tools/call add", "server")
    tracing = proxy.find("otlp_tracing")
    assert tracing is not None
    # The log line names the URL posted to, its query value masked: the path now shows before it.
    assert tracing["endpoint"] == receiver.url + path.rsplit("=", 1)[0] + "=<redacted>"


COLLECTOR_PASSWORD = "collector-pw-90c2"


@pytest.mark.parametrize("variable", ENDPOINT_VARS)
async def test_a_standard_variable_with_a_password_in_its_url_is_refused_as_otlp_endpoint_is(
    modern_server: PeerServer, variable: str
) -> None:
    with OtlpReceiver() as receiver:
        env = clean_env(**settings_env(upstream=modern_server.url, admin_enabled="false"))
        for name in (*ENDPOINT_VARS, "OTEL_SDK_DISABLED"):
            env.pop(name, None)
        env[variable] = receiver.url.replace("http://", f"http://otel:{COLLECTOR_PASSWORD}@")
        with ProxyProcess(env) as proxy:
            async with client_for(proxy.endpoint(), "2026-07-28") as client:
                assert not (await client.call_tool("add", {"a": 2, "b": 3})).is_error  # traffic runs
            proxy.stop()
        received = list(receiver.requests)

    refused = proxy.find("otlp_refused")
    assert refused is not None, proxy.stderr()
    assert str(refused["error"]).startswith(
        f"{variable}=http://otel:<redacted>@127.0.0.1:{receiver.port} is refused: "
        "the URL carries credentials (user:password@)"
    )
    assert proxy.find("otlp_tracing") is None
    assert received == []  # the password never went out in a URL
    assert COLLECTOR_PASSWORD not in proxy.stderr()
