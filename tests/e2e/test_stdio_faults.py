"""Faults of a stdio upstream, through the ``mcp-proxy`` command, against the hand-written FAKE
stdio server (``tests.e2e.fake_stdio_server``): a stray non-JSON line, an exit mid-call, an answer
over ``max_body_bytes``, a server that keeps dying, and stopping the proxy with a stubborn child.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from proxy.transport.stdio_upstream import STDERR_LINES_PER_SECOND
from tests.sidecar import ProxyProcess, clean_env, settings_env

pytestmark = pytest.mark.e2e

FAKE = Path(__file__).with_name("fake_stdio_server.py")
JSON = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def fake_command(*args: str) -> str:
    return shlex.join([sys.executable, str(FAKE), *args])


def post(url: str, message: dict[str, Any], session: str | None = None) -> tuple[int, dict[str, str], Any]:
    headers = dict(JSON, **({"Mcp-Session-Id": session} if session else {}))
    request = urllib.request.Request(url, json.dumps(message).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            status, head, body = response.status, _lower(response.headers.items()), response.read()
    except urllib.error.HTTPError as exc:
        status, head, body = exc.code, _lower(exc.headers.items()), exc.read()
    return status, head, json.loads(body) if body else None


def _lower(items: Any) -> dict[str, str]:
    return {name.lower(): value for name, value in items}


def initialize(url: str) -> str:
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    }
    status, head, body = post(url, {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})
    assert status == 200, body
    assert body["result"]["serverInfo"]["name"] == "fake-stdio"
    return head["mcp-session-id"]


def call(url: str, tool: str, session: str | None = None, ident: int = 1) -> tuple[int, Any]:
    message = {
        "jsonrpc": "2.0",
        "id": ident,
        "method": "tools/call",
        "params": {"name": tool, "arguments": {}},
    }
    status, _head, body = post(url, message, session)
    return status, body


def proxy_env(**settings: object) -> dict[str, str]:
    return clean_env(**settings_env(upstream_era="legacy", **settings))


def test_a_line_that_is_not_json_is_logged_as_the_servers_protocol_error_and_traffic_goes_on(
    tmp_path: Path,
) -> None:
    record = tmp_path / "read.jsonl"
    with ProxyProcess(proxy_env(upstream_cmd=fake_command("--record", str(record)))) as proxy:
        session = initialize(proxy.endpoint())
        status, body = call(proxy.endpoint(), "noisy", session)
        assert status == 200
        assert body["result"]["content"][0]["text"] == "echo {}"
        error = proxy.wait_for("upstream_protocol_error")  # logged; its line may trail the answer
        assert error is not None, proxy.stderr()
        assert error["preview"] == "this is not json, a stray print"
        assert error["action"] == "skipped"
        assert call(proxy.endpoint(), "echo", session, ident=2)[0] == 200
    lines = record.read_bytes().splitlines()
    assert json.loads(lines[0])["method"] == "initialize"  # what the client sent, one line each
    assert [json.loads(line).get("id") for line in lines[-2:]] == [1, 2]


def test_a_server_that_exits_mid_call_fails_the_call_naming_its_exit_status_and_is_started_again() -> None:
    with ProxyProcess(proxy_env(upstream_cmd=fake_command())) as proxy:
        url = proxy.endpoint()
        session = initialize(url)
        status, body = call(url, "die", session)
        assert status == 200
        assert body["id"] == 1
        assert "exited with status 3" in body["error"]["message"], body
        status, body = call(url, "echo", session, ident=2)
        assert status == 404  # the session died with its process: a legacy client initializes again
        assert body["error"]["message"] == "Session not found"
        again = initialize(url)
        assert call(url, "echo", again)[0] == 200
        exited = proxy.wait_for("upstream_exited")
        assert exited is not None
        assert "exited with status 3" in exited["reason"]
        assert exited["in_flight"] == 1, exited
        assert exited["hint"] == (  # what the client above had to do: initialize again
            "1 request in flight got a JSON-RPC error; its session is gone: that client's next request "
            "gets 404 (Session not found), and its client initializes again, which starts it again"
        )
        # The child's stderr is read on its own, so its last line may be logged after the exit is seen.
        events = proxy.wait_events(
            lambda lines: any(e.get("line") == "fake: dying on request" for e in lines)
        )
        stderr = [e["line"] for e in events if e.get("stream") == "upstream-stderr"]
        assert "fake: dying on request" in stderr


def test_an_answer_over_max_body_bytes_is_refused_with_an_error_and_never_held() -> None:
    env = proxy_env(upstream_cmd=fake_command("--huge", "200000"), max_body_bytes=65536)
    with ProxyProcess(env) as proxy:
        url = proxy.endpoint()
        session = initialize(url)
        status, body = call(url, "huge", session)
        assert status == 200
        assert "max_body_bytes" in body["error"]["message"], body
        logged = proxy.wait_for("upstream_message_too_large")
        assert logged is not None
        assert logged["limit"] == 65536
        assert logged["size"] > 200000
        assert call(url, "echo", session, ident=2)[0] == 200  # the same child goes on


def get_status(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_a_server_that_keeps_dying_is_refused_past_the_restart_limit_and_readyz_says_503() -> None:
    env = proxy_env(upstream_cmd=fake_command(), upstream_restarts_per_minute=2, health="127.0.0.1:0")
    with ProxyProcess(env) as proxy:
        url = proxy.endpoint()
        assert get_status(proxy.health + "/readyz")[0] == 200
        for ident in range(1, 4):  # sessionless calls share one child, started again after each death
            status, body = call(url, "die", ident=ident)
            assert status == 200
            assert "exited with status 3" in body["error"]["message"], body
        status, body = call(url, "echo", ident=9)
        assert status == 502, body
        assert "upstream_restarts_per_minute=2" in body["error"]["message"]
        status, text = get_status(proxy.health + "/readyz")
        assert status == 503
        assert "upstream_restarts_per_minute" in text


def alive(pid: int) -> bool:
    """The process exists and is not a zombie waiting for a parent to reap it."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stopping_the_proxy_stops_a_stubborn_child_and_what_it_started(sig: signal.Signals) -> None:
    command = fake_command("--ignore-term", "--grandchild")
    with ProxyProcess(proxy_env(upstream_cmd=command, upstream_stop_grace=0.5, drain_grace=1)) as proxy:
        initialize(proxy.endpoint())
        deadline = time.monotonic() + 10
        while (
            line := next(
                (e["line"] for e in proxy.events() if str(e.get("line", "")).startswith("grandchild")), None
            )
        ) is None:
            assert time.monotonic() < deadline, proxy.stderr()
            time.sleep(0.02)
        grandchild = int(line.split()[1])
        children = [e["pid"] for e in proxy.events() if e.get("event") == "upstream_started"]
        assert all(alive(pid) for pid in [*children, grandchild])
        proxy.signal(sig)
        assert proxy.process is not None
        assert proxy.process.wait(timeout=20) == 0
        deadline = time.monotonic() + 5
        while any(alive(pid) for pid in [*children, grandchild]):
            assert time.monotonic() < deadline, (
                f"left behind: {[p for p in [*children, grandchild] if alive(p)]}"
            )
            time.sleep(0.02)


def test_a_child_busy_in_a_call_is_gone_soon_after_the_proxy_is_killed_outright() -> None:
    # A server busy in a long operation reads nothing, so it sees its stdin close only when the
    # operation ends (here 30 s); the kernel's parent-death signal ends it at once.
    with ProxyProcess(proxy_env(upstream_cmd=fake_command())) as proxy:
        url = proxy.endpoint()
        session = initialize(url)
        # The child's start is logged before it answers, but the line may reach the reader after the
        # answer: without the wait the list could be empty and the check below vacuous.
        started = proxy.wait_events(lambda lines: any(e.get("event") == "upstream_started" for e in lines))
        children = [e["pid"] for e in started if e.get("event") == "upstream_started"]
        assert children, proxy.stderr()
        try:
            message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "busy"}}
            body = json.dumps(message).encode()
            headers = dict(JSON, **{"Mcp-Session-Id": session})
            request = urllib.request.Request(url, body, headers, method="POST")
            waiting = threading.Thread(target=_unanswered, args=(request,), daemon=True)
            waiting.start()
            assert proxy.wait_for("upstream_stderr", 15) is not None, proxy.stderr()  # "fake: busy"
            assert proxy.process is not None
            proxy.process.kill()
            proxy.process.wait(timeout=10)
            killed = time.monotonic()
            while any(alive(pid) for pid in children):
                assert time.monotonic() - killed < 5, f"left behind: {[p for p in children if alive(p)]}"
                time.sleep(0.02)
            waiting.join(timeout=10)
        finally:
            for pid in children:  # never leave one behind, even when the test fails
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _unanswered(request: urllib.request.Request) -> None:
    """POST a call whose answer never comes (the proxy is killed under it)."""
    with contextlib.suppress(OSError):
        urllib.request.urlopen(request, timeout=20).read()


INIT_MESSAGE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}


def test_a_command_that_cannot_be_started_is_named_with_its_os_error_at_start_to_clients_and_in_readyz() -> (
    None
):
    # The proxy still starts (start-up order is free); everything it says names the command and ENOENT.
    env = clean_env(**settings_env(upstream_cmd="no-such-binary --flag", health="127.0.0.1:0"))
    with ProxyProcess(env) as proxy:
        failed = proxy.wait_for("upstream_start_failed")
        assert failed is not None, proxy.stderr()
        assert failed["level"] == "error"
        assert "`no-such-binary --flag`" in failed["error"]
        assert "No such file or directory (ENOENT)" in failed["error"]
        status, _head, body = post(proxy.endpoint(), INIT_MESSAGE)
        assert status == 503, body
        message = body["error"]["message"]
        assert "`no-such-binary --flag`" in message
        assert "ENOENT" in message
        assert "listening" not in message
        status, text = get_status(proxy.health + "/readyz")
        assert status == 503
        answer = json.loads(text)
        assert "ENOENT" in answer["reason"]
        assert answer["upstream"] == "stdio"  # the command line is not the probe's caller's to read
        assert "--flag" not in text
    logged = [e for e in proxy.events() if e.get("event") == "upstream_start_failed"]
    assert len(logged) == 1  # once, not at every retry
    # With the era named there is no probe: the call's own error says the same, with no HTTP advice.
    env = clean_env(**settings_env(upstream_cmd="no-such-binary --flag", upstream_era="legacy"))
    with ProxyProcess(env) as proxy:
        status, _head, body = post(proxy.endpoint(), INIT_MESSAGE)
        assert status == 502, body
        message = body["error"]["message"]
        assert "`no-such-binary --flag`" in message
        assert "ENOENT" in message
        assert "--upstream names it" not in message


def test_a_child_that_exits_at_once_is_explained_by_its_exit_status_and_last_stderr_lines_masked() -> None:
    # A FAKE in shell: a server that dies at start, saying why on stderr, a secret (from the
    # environment the child inherits) among it.
    script = "echo \"config: token=$FAKE_SECRET\" >&2; echo 'cannot go on' >&2; exit 3"
    env = clean_env(FAKE_SECRET="s3cret-value", **settings_env(upstream_cmd=shlex.join(["sh", "-c", script])))
    with ProxyProcess(env) as proxy:
        unknown = proxy.wait_for("upstream_era_unknown")
    assert unknown is not None, proxy.stderr()
    assert unknown["level"] == "warning", unknown  # nothing routes until the command is fixed
    assert "--upstream-era" in unknown["hint"], unknown
    problem = unknown["problem"]
    assert "exited with status 3" in problem, problem
    assert "config: token=<redacted> | cannot go on" in problem, problem
    assert "HTTP" not in problem, problem
    exited = proxy.find("upstream_exited")
    assert exited is not None
    assert "s3cret" not in json.dumps([unknown, exited])
    assert (exited["in_flight"], exited["hint"]) == (0, "the next request starts it again"), exited
    # The child's own stderr stream reaches the log line by line, masked the same way.
    said = proxy.wait_for("upstream_stderr")
    assert said is not None, proxy.stderr()
    assert said["stream"] == "upstream-stderr"
    assert "s3cret" not in proxy.stderr()
    assert "config: token=<redacted>" in proxy.stderr()


def test_a_childs_last_words_after_a_flood_of_stderr_still_explain_its_exit() -> None:
    # A FAKE in shell: a server that prints more debug lines than the log takes in a second, then
    # why it stops. The log suppresses the flood; the exit still quotes the last lines it printed.
    flood = STDERR_LINES_PER_SECOND + 30
    fatal = "echo 'FATAL: DATABASE_URL is not set' >&2; exit 3"
    script = f'for i in $(seq {flood}); do echo "debug line $i" >&2; done; {fatal}'
    with ProxyProcess(clean_env(**settings_env(upstream_cmd=shlex.join(["sh", "-c", script])))) as proxy:
        unknown = proxy.wait_for("upstream_era_unknown")
        assert unknown is not None, proxy.stderr()
        assert proxy.wait_for("upstream_stderr_suppressed") is not None, proxy.stderr()
    problem = unknown["problem"]
    assert "exited with status 3" in problem, problem
    assert f"debug line {flood} | FATAL: DATABASE_URL is not set" in problem, problem
