"""An HTTP+SSE server that drops the era probe's session is told apart from one that cut clients short.

The 1.3.0 SDK's FastMCP server (``mcp.run("sse")``, `Sdk2024Sse`) meets the probe's second round
(`server/discover` over the HTTP+SSE transport the first round found) with a traceback and the end of
that session's stream. No client request was on it, so the real `mcp-proxy` says so in one info line
naming the probe, not in a warning about an upstream that exited, and a client is served afterwards.
The probe still sends `server/discover` there: an mcp 2.x server answers it over that transport.
Its lines over HTTP+SSE say what the server answered on the stream (nothing, a result), never the
status of the proxy's own adapter, as a stdio server's do.
"""

from __future__ import annotations

import pytest

from tests.e2e.channel_peers import Sdk2024Sse
from tests.peers.clients import run_plan
from tests.peers.runner import DEFAULT_START_TIMEOUT, DEFAULT_STOP_TIMEOUT
from tests.sidecar import ProxyProcess, clean_env, settings_env

pytestmark = pytest.mark.e2e

PLAN = [
    {"id": "list_tools", "op": "list_tools"},
    {"id": "echo", "op": "call", "tool": "echo", "arguments": {"text": "hi"}},
]


def test_a_2024_sse_server_that_drops_the_probes_session_is_logged_once_at_info_naming_the_probe() -> None:
    server = Sdk2024Sse(start_timeout=DEFAULT_START_TIMEOUT, stop_timeout=DEFAULT_STOP_TIMEOUT)
    with server, ProxyProcess(clean_env(**settings_env(upstream=server.sse_url))) as proxy:
        run = run_plan("python-legacy", proxy.endpoint("/sse"), PLAN)
        proxy.stop()
        log = proxy.events()
        dropped_by_server = server.stderr_text()
    logs = f"{run.stderr}\n--- proxy ---\n{proxy.stderr()[-3000:]}"
    assert "Traceback" in dropped_by_server  # the server's own account of the probe, on its stderr
    assert run.lines["list_tools"]["result"] == ["ask_llm", "ask_twice", "count", "echo", "slow"], logs
    assert "hi" in str(run.lines["echo"]["result"]), logs
    assert [e["eras"] for e in log if e["event"] == "upstream_eras"] == ["legacy"], logs
    ended = [e for e in log if e["event"] == "upstream_probe_session_ended"]
    assert [(e["level"], e["transport"]) for e in ended] == [("info", "sse")], logs
    assert "era probe (server/discover)" in ended[0]["note"]
    assert [e for e in log if e["level"] in ("warning", "error")] == [], logs


def test_the_probes_lines_over_http_sse_say_what_the_server_answered_not_the_adapters_200() -> None:
    server = Sdk2024Sse(start_timeout=DEFAULT_START_TIMEOUT, stop_timeout=DEFAULT_STOP_TIMEOUT)
    with server, ProxyProcess(clean_env(**settings_env(upstream=server.sse_url))) as proxy:
        lines = proxy.wait_events(lambda seen: any(e["event"] == "upstream_eras" for e in seen), 30)
    probed = [
        (e["method"], e["status"], e["session_state"], e.get("answer"))
        for e in lines
        if e["event"] == "era_probe_request"
    ]
    # First over Streamable HTTP (the POSTs refused as HTTP+SSE endpoints refuse them), then over HTTP+SSE.
    assert probed == [
        ("server/discover", 405, None, None),
        ("initialize", 405, None, None),
        ("server/discover", None, None, "none: the upstream's HTTP+SSE stream ended before answering"),
        ("initialize", None, "opened", "result"),
        ("DELETE", None, "deleted", "its stream closed by the proxy"),
    ], probed
