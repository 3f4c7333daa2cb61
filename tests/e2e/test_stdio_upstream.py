"""stdio MCP servers behind ``mcp-proxy --upstream-cmd``, with SDK clients of both eras.

server-everything (npm) in stdio mode is the same program the Streamable HTTP tests run, so each
client's results through the proxy must equal what the same client library gets from it directly
over HTTP (its session id, which it prints in a few texts, and its environment aside): pass-through
for legacy clients, the modern->legacy bridge for 2026-07-28 clients (a tool that asks in flight over
stdio comes back to them as `input_required`, which their SDK completes). The Python SDK's own stdio
server (in its own environment) takes the catalogue of ``tests.peers.apps`` the same way.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.channel_peers import everything_stdio_command, python_stdio_command
from tests.e2e.legacy_raw import HEADERS, initialize, session_headers
from tests.e2e.test_server_everything import (
    DIRECT_BASELINE,
    OUTSIDE_A_CALL,
    differences,
    normalized,
    plan,
)
from tests.peers.clients import ClientKind, ClientRun, run_plan
from tests.peers.runner import NodeServer
from tests.sidecar import ProxyProcess, clean_env, settings_env

pytestmark = pytest.mark.e2e

UNCOMPARED = {"get-env"}
"""Prints the server's environment, which differs between a child of the proxy and the HTTP peer."""
_SESSION_WORDS = re.compile(r"session (undefined|<uuid>)")


def comparable(lines: dict[str, dict[str, Any]], *, bridged: bool) -> dict[str, Any]:
    """A run's lines without the uncompared steps, with the session named alike (stdio has none)."""
    skip = UNCOMPARED | (OUTSIDE_A_CALL if bridged else set())
    text = {step: line for step, line in lines.items() if step not in skip}
    return {step: _unsession(line) for step, line in text.items()}


def _unsession(value: Any) -> Any:
    if isinstance(value, str):
        return _SESSION_WORDS.sub("session <id>", value)
    if isinstance(value, list):
        return [_unsession(v) for v in value]
    if isinstance(value, dict):
        return {k: _unsession(v) for k, v in value.items()}
    return value


@pytest.fixture(scope="module")
def everything_http() -> Iterator[NodeServer]:
    with NodeServer("everything") as server:
        yield server


@pytest.fixture(scope="module")
def stdio_proxy() -> Iterator[ProxyProcess]:
    with ProxyProcess(clean_env(**settings_env(upstream_cmd=everything_stdio_command()))) as process:
        yield process


def _logs(proxy: ProxyProcess) -> str:
    return f"--- mcp-proxy stderr ---\n{proxy.stderr()[-4000:]}"


@pytest.mark.parametrize("client", ["python-legacy", "ts-v1", "python-2026", "ts-v2"])
def test_a_client_of_either_era_gets_from_a_stdio_server_what_it_gets_over_http(
    client: ClientKind, everything_http: NodeServer, stdio_proxy: ProxyProcess
) -> None:
    bridged = client in ("python-2026", "ts-v2")
    want = comparable(
        normalized(run_plan(DIRECT_BASELINE[client], everything_http.url, plan(bridged=False))),
        bridged=bridged,
    )
    got = comparable(
        normalized(run_plan(client, stdio_proxy.endpoint(), plan(bridged=bridged))), bridged=bridged
    )
    assert got == want, f"{client} via stdio:\n{differences(got, want)}\n{_logs(stdio_proxy)}"


def test_a_modern_client_gets_input_required_from_a_legacy_stdio_server_and_completes_it(
    stdio_proxy: ProxyProcess,
) -> None:
    step = {"id": "ask", "op": "call", "tool": "trigger-elicitation-request", "arguments": {}}
    earlier = len(rounds(stdio_proxy.events()))  # the module's proxy served other tests' calls
    run = run_plan("python-2026", stdio_proxy.endpoint(), [step])
    line = run.lines["ask"]
    assert line["callbacks"] == ["elicitation:Please provide inputs for the following fields:"], run.stderr
    assert "- Name: octocat" in line["result"]["content"][1]["text"]
    # The last round's line is written as its answer goes out, so it may reach the reader after the
    # client has finished: wait (bounded) for this call's round that completes it.
    lines = stdio_proxy.wait_events(lambda lines: rounds(lines)[earlier:][-1:] == ["complete"])
    assert rounds(lines)[earlier:] == ["input_required", "complete"], _logs(stdio_proxy)


def rounds(lines: list[dict[str, Any]]) -> list[str]:
    """The outcomes of the bridge's rounds of `trigger-elicitation-request` the log lines name."""
    return [
        e["outcome"]
        for e in lines
        if e.get("event") == "bridge_round" and e.get("name") == "trigger-elicitation-request"
    ]


def test_each_legacy_session_gets_a_child_of_its_own_and_ends_it_with_the_session(
    stdio_proxy: ProxyProcess,
) -> None:
    before = {e["pid"] for e in stdio_proxy.events() if e.get("event") == "upstream_started"}
    steps = [{"id": "sum", "op": "call", "tool": "get-sum", "arguments": {"a": 1, "b": 2}}]
    run_plan("python-legacy", stdio_proxy.endpoint(), steps)
    run_plan("python-legacy", stdio_proxy.endpoint(), steps)

    def started(lines: list[dict[str, Any]]) -> list[int]:
        return [e["pid"] for e in lines if e.get("event") == "upstream_started" and e["pid"] not in before]

    def stopped(lines: list[dict[str, Any]]) -> set[int]:
        return {e["pid"] for e in lines if e.get("event") == "upstream_stopping"}

    # The client may exit as soon as its DELETE is answered, before the child's stop is logged.
    lines = stdio_proxy.wait_events(
        lambda lines: len(started(lines)) >= 2 and set(started(lines)) <= stopped(lines)
    )
    new = started(lines)
    assert len(new) == 2, _logs(stdio_proxy)
    assert set(new) <= stopped(lines)  # each client's DELETE ended its child


def test_a_request_right_after_delete_gets_404_while_the_child_stops(stdio_proxy: ProxyProcess) -> None:
    with httpx.Client(timeout=20) as http:
        opened = http.post(stdio_proxy.endpoint(), json=initialize(), headers=HEADERS)
        session = session_headers(opened.headers["mcp-session-id"])
        assert http.delete(stdio_proxy.endpoint(), headers=session).status_code == 200
        late = http.post(
            stdio_proxy.endpoint(), json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, headers=session
        )
    assert late.status_code == 404  # at once: the client initializes again, as for a legacy server
    assert late.json()["error"] == {"code": -32001, "message": "Session not found"}


def test_the_stdio_server_inherits_the_environment_but_not_the_proxys_own_secrets() -> None:
    secrets = {
        "admin_token": "adm1n-t0ken-for-the-proxy",
        "state_key": "st4te-key-0123456789abcdef0123456789abcdef",
        "redact_key": "r3dact-key-0123456789abcdef0123456789abcdef",
    }
    env = clean_env(**settings_env(upstream_cmd=everything_stdio_command(), **secrets))
    env["MCP_TEST_INHERITED"] = "passed-on"
    with ProxyProcess(env) as proxy:
        run = run_plan("python-legacy", proxy.endpoint(), [{"id": "env", "op": "call", "tool": "get-env"}])
    shown = run.lines["env"]["result"]["content"][0]["text"]
    assert "passed-on" in shown, run.stderr
    for name, value in secrets.items():
        assert value not in shown, name
        assert f"MCP_PROXY_{name.upper()}" not in shown


# -- the Python SDK's stdio server ---------------------------------------------------------------


@pytest.fixture(scope="module")
def python_stdio_proxy() -> Iterator[ProxyProcess]:
    env = settings_env(upstream_cmd=python_stdio_command(), upstream_era="legacy")
    with ProxyProcess(clean_env(**env)) as process:
        yield process


PY_PLAN = [
    {"id": "list_tools", "op": "list_tools"},
    {"id": "echo", "op": "call", "tool": "echo", "arguments": {"text": "hi"}},
    {"id": "ask_name", "op": "call", "tool": "ask_name", "arguments": {}},
]


@pytest.mark.parametrize("client", ["python-legacy", "python-2026"])
def test_the_python_sdks_stdio_server_serves_both_eras_through_the_proxy(
    client: ClientKind, python_stdio_proxy: ProxyProcess
) -> None:
    run: ClientRun = run_plan(client, python_stdio_proxy.endpoint(), PY_PLAN)
    lines = run.lines
    assert "echo" in lines["list_tools"]["result"], run.stderr + _logs(python_stdio_proxy)
    assert "hi" in str(lines["echo"]["result"]), run.stderr
    assert lines["ask_name"]["callbacks"], run.stderr + _logs(python_stdio_proxy)
    assert "error" not in lines["ask_name"], lines["ask_name"]


def single_instance(command: str, lock: Path) -> str:
    """The command run under `flock -n`: a second copy started while one runs exits at once with
    status 1, as a server that allows one instance at a time (a lock file, a fixed port) does."""
    return shlex.join(["flock", "-n", str(lock), *shlex.split(command)])


def _children(lines: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    """The pids of the children started, and of those the proxy stopped, in the log's order."""
    started = [e["pid"] for e in lines if e.get("event") == "upstream_started"]
    return started, [e["pid"] for e in lines if e.get("event") == "upstream_stopping"]


def _most_at_once(lines: list[dict[str, Any]]) -> int:
    """The most children alive at once, from their starts and their ends (stopped, or exited)."""
    alive: set[int] = set()
    most = 0
    for e in lines:
        if e.get("event") == "upstream_started":
            alive.add(e["pid"])
            most = max(most, len(alive))
        elif e.get("event") in ("upstream_stopping", "upstream_exited"):
            alive.discard(e.get("pid", -1))
    return most


def test_the_probes_child_of_a_single_instance_legacy_server_serves_the_first_client(tmp_path: Path) -> None:
    # server-everything refuses `server/discover` as every handshake-era server does, so the probe
    # needs no `initialize` and no second child: the child it asked is the first session's.
    command = single_instance(everything_stdio_command(), tmp_path / "lock")
    with ProxyProcess(clean_env(**settings_env(upstream_cmd=command))) as proxy:
        eras = proxy.wait_for("upstream_eras", 60)
        assert eras is not None, _logs(proxy)
        assert eras["eras"] == "legacy", _logs(proxy)
        steps = [{"id": "sum", "op": "call", "tool": "get-sum", "arguments": {"a": 1, "b": 2}}]
        run = run_plan("python-legacy", proxy.endpoint(), steps)
        assert "3" in str(run.lines["sum"]["result"]), run.stderr + _logs(proxy)
        lines = proxy.wait_events(lambda lines: bool(_children(lines)[1]))  # its DELETE ended the child
        started, stopped = _children(lines)
        assert started == stopped, _logs(proxy)  # one child, the probe's, ended with the session
        assert len(started) == 1, _logs(proxy)


def test_a_dual_era_stdio_server_is_probed_one_child_at_a_time_and_none_is_left_behind(
    tmp_path: Path,
) -> None:
    # The Python SDK's stdio server answers `server/discover` and then serves that connection in the
    # 2026-07-28 era only, so its handshake is probed on a second child: started once the first has
    # ended, and ended before any client's child starts.
    command = single_instance(python_stdio_command(), tmp_path / "lock")
    with ProxyProcess(clean_env(**settings_env(upstream_cmd=command))) as proxy:
        eras = proxy.wait_for("upstream_eras", 60)
        assert eras is not None, _logs(proxy)
        assert eras["eras"] == "dual", _logs(proxy)
        run = run_plan("python-legacy", proxy.endpoint(), PY_PLAN)
        assert run.lines["ask_name"]["callbacks"], run.stderr + _logs(proxy)
        lines = proxy.wait_events(lambda lines: len(_children(lines)[1]) >= 3)
        started, stopped = _children(lines)
        assert _most_at_once(lines) == 1, _logs(proxy)
        assert len(started) == 3, _logs(proxy)  # two for the probe, one for the session
        assert set(started) == set(stopped), _logs(proxy)
