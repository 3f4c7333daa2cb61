"""stdio clients in front of the proxy: `mcp-proxy stdio --upstream URL`, and the shim `... -- CMD`.

The Python SDK's stdio client launches `mcp-proxy stdio` the way a desktop client launches any stdio
server (one process per connection) and runs the scenarios of the test peers through it:

- in front of the SDK's Streamable HTTP servers in all four pairings of eras: pass-through where they
  match, either bridge where they differ (in-flight elicitation and sampling included);
- as the shim, in front of the SDK's own stdio server and of server-everything in stdio mode.

Each run records a capture, whose exchanges must name the client's transport (`stdio`) and the
upstream's, and a log file, whose round-trip lines must say `client: stdio`. The faults a real client
cannot produce (a line that is no JSON, a line over `max_body_bytes`) are written by hand to a
running `mcp-proxy stdio`, which must answer each with a JSON-RPC error on stdout and go on serving;
its admin API (`/api/chains`) shows the transport while it runs, and closing stdin stops it and its
child cleanly.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import pytest

from tests.e2e.channel_peers import everything_stdio_command, python_stdio_command, sdk1_stdio_command
from tests.peers.clients import ClientKind, run_client, run_plan
from tests.peers.envs import REPO_ROOT
from tests.peers.runner import PeerServer
from tests.peers.scenarios import expected_result
from tests.sidecar import START_SECONDS, admin_json, clean_env, proxy_command, until

pytestmark = pytest.mark.e2e

SCENARIOS: Final = ["echo", "ask_name", "ask_two_at_once", "progress"]
"""A plain call, an in-flight elicitation, two questions at once, and progress notifications."""

FAKE_SERVER: Final = Path(__file__).with_name("fake_stdio_server.py")
"""The hand-written FAKE stdio server, for a crash no real server produces on demand."""

READ_SECONDS: Final = 15.0
"""Longest wait for one line from a running `mcp-proxy stdio`."""


def stdio_command(tmp_path: Path, *upstream: str, **settings: object) -> str:
    """The command line a client launches: `mcp-proxy stdio ...` with a capture and a log file.

    `upstream` is `--upstream=URL`, or `--` and a server's command (which must come last).
    """
    flags = [f"--{name.replace('_', '-')}={value}" for name, value in settings.items()]
    words = [
        *proxy_command(),
        "stdio",
        "--admin=127.0.0.1:0",
        f"--capture={tmp_path / 'capture.jsonl'}",
        f"--log-file={tmp_path / 'proxy.log'}",
        "--log-format=json",
        *flags,
        *upstream,
    ]
    return shlex.join(words)


def captured_exchanges(tmp_path: Path) -> list[dict[str, Any]]:
    """The `exchange_opened` lines of the capture every run appended to."""
    lines = (tmp_path / "capture.jsonl").read_text().splitlines()
    found = [json.loads(line) for line in lines if '"exchange_opened"' in line]
    return [line for line in found if line.get("kind") == "exchange_opened"]


def logged_exchanges(tmp_path: Path) -> list[dict[str, Any]]:
    lines = (tmp_path / "proxy.log").read_text().splitlines()
    return [item for item in map(json.loads, lines) if item.get("event") == "exchange"]


@pytest.mark.parametrize(
    ("client", "server", "mode"),
    [
        ("python-legacy", "legacy-inflight", "passthrough"),
        ("python-2026", "modern-mrtr", "passthrough"),
        ("python-legacy", "modern-mrtr", "legacy_to_mrtr"),
        ("python-2026", "legacy-inflight", "mrtr_to_legacy"),
    ],
)
def test_a_stdio_client_reaches_an_http_server_through_the_proxy_in_either_era(
    tmp_path: Path, client: ClientKind, server: str, mode: str
) -> None:
    with PeerServer(server) as peer:
        command = stdio_command(tmp_path, f"--upstream={peer.url}")
        run = run_client(client, command, SCENARIOS, transport="stdio")
    for scenario in SCENARIOS:
        assert run.lines[scenario] == expected_result(scenario), run.stderr[-3000:]
    exchanges = captured_exchanges(tmp_path)
    assert exchanges
    # Streamable HTTP, the usual, is left unwritten (read back as http).
    assert {(e["client_transport"], e.get("upstream_transport", "http")) for e in exchanges} == {
        ("stdio", "http")
    }
    assert mode in {e["mode"] for e in exchanges}
    calls = [line for line in logged_exchanges(tmp_path) if line["method"] == "tools/call"]
    assert len(calls) >= len(SCENARIOS)
    assert {(line["client"], line["upstream"]) for line in calls} == {("stdio", "http")}


@pytest.mark.parametrize("client", ["python-legacy", "python-2026"])
def test_the_shim_serves_a_stdio_client_from_the_sdks_stdio_server(
    tmp_path: Path, client: ClientKind
) -> None:
    # The SDK's server speaks both eras but asks in flight: a 2026-07-28 client reaches its questions
    # only through the bridge, which --upstream-era legacy asks for (docs/transports.md).
    command = stdio_command(tmp_path, "--", *shlex.split(python_stdio_command()), upstream_era="legacy")
    run = run_client(client, command, ["echo", "ask_name"], transport="stdio")
    for scenario in ("echo", "ask_name"):
        assert run.lines[scenario] == expected_result(scenario), run.stderr[-3000:]
    exchanges = captured_exchanges(tmp_path)
    assert {(e["client_transport"], e["upstream_transport"]) for e in exchanges} == {("stdio", "stdio")}


def test_the_shim_serves_server_everything_over_stdio_with_an_in_flight_elicitation(tmp_path: Path) -> None:
    command = stdio_command(tmp_path, "--", *shlex.split(everything_stdio_command()))
    plan = [
        {"id": "echo", "op": "call", "tool": "echo", "arguments": {"message": "hi"}},
        {"id": "elicit", "op": "call", "tool": "trigger-elicitation-request", "arguments": {}},
    ]
    run = run_plan("python-legacy", command, plan, transport="stdio")
    assert run.lines["echo"]["result"]["content"][0]["text"] == "Echo: hi", run.stderr[-3000:]
    elicit = run.lines["elicit"]
    assert elicit["callbacks"] == ["elicitation:Please provide inputs for the following fields:"]
    assert "octocat" in json.dumps(elicit["result"])
    lines = logged_exchanges(tmp_path)
    assert {(line["client"], line["upstream"]) for line in lines} == {("stdio", "stdio")}


# -- faults a real client cannot produce, written by hand -------------------------------------------


class RawStdioClient:
    """A hand-written stdio client (for faults): writes raw lines to `mcp-proxy stdio`, reads its lines."""

    def __init__(self, args: list[str], tmp_path: Path) -> None:
        self.process = subprocess.Popen(
            [*proxy_command(), "stdio", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=clean_env(MCP_PROXY_LOG_FORMAT="json", MCP_PROXY_ADMIN="127.0.0.1:0"),
            cwd=REPO_ROOT,
        )
        self.out: list[bytes] = []
        self.err: list[bytes] = []
        self._threads = [
            threading.Thread(target=self._pump, args=(self.process.stdout, self.out), daemon=True),
            threading.Thread(target=self._pump, args=(self.process.stderr, self.err), daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @staticmethod
    def _pump(pipe: Any, into: list[bytes]) -> None:
        for line in pipe:
            into.append(line)

    def send(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data + b"\n")
        self.process.stdin.flush()

    def request(self, ident: int, method: str, **params: Any) -> None:
        self.send(json.dumps({"jsonrpc": "2.0", "id": ident, "method": method, "params": params}).encode())

    def answer(self, ident: object) -> dict[str, Any]:
        """The line answering `ident` (waits, bounded)."""
        deadline = time.monotonic() + READ_SECONDS
        while time.monotonic() < deadline:
            for line in list(self.out):
                message = json.loads(line)
                if message.get("id") == ident and "method" not in message:
                    return dict(message)
            time.sleep(0.01)
        raise AssertionError(f"no answer to {ident!r}; stdout {self.out!r}; stderr {self.stderr()[-2000:]}")

    def stderr(self) -> str:
        return b"".join(self.err).decode("utf-8", "replace")

    def logged(self, event: str, seconds: float = READ_SECONDS) -> dict[str, Any]:
        """The first log line with this `event` (waits, bounded: stderr is its own pipe, read apart
        from the answers on stdout, so a line may arrive after the answer that followed it)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for line in list(self.err):
                item = json.loads(line)
                if item.get("event") == event:
                    return dict(item)
            time.sleep(0.01)
        raise AssertionError(f"no {event} line in {self.stderr()[-2000:]}")

    def close(self) -> int:
        """Close stdin (the client is done) and wait for the proxy to exit."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        code = self.process.wait(timeout=15)
        self._release()
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=5)
        self._release()

    def _release(self) -> None:
        """Read the pipes to their end and close them."""
        for thread in self._threads:
            thread.join(timeout=5)
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None and not pipe.closed:
                pipe.close()


@pytest.fixture
def raw_client(tmp_path: Path) -> Iterator[Any]:
    started: list[RawStdioClient] = []

    def start(*args: str) -> RawStdioClient:
        client = RawStdioClient(list(args), tmp_path)
        started.append(client)
        # Started (its imports, and a child's with its era probe) before any answer is waited for:
        # on a loaded machine the start alone has taken the whole of one answer's READ_SECONDS.
        client.logged("stdio_client_ready", seconds=START_SECONDS)
        return client

    yield start
    for client in started:
        client.kill()


INIT: Final = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "raw", "version": "0"},
}


async def test_bad_lines_get_json_rpc_errors_on_stdout_and_traffic_goes_on(
    raw_client: Any, legacy_server: PeerServer
) -> None:
    client: RawStdioClient = raw_client("--upstream", legacy_server.url, "--max-body-bytes", "4096")
    client.send(b"this is not json")
    parse = client.answer(None)
    assert parse["error"]["code"] == -32700
    assert parse["error"]["data"] == {"received": "this is not json"}
    client.request(1, "initialize", **INIT)
    assert client.answer(1)["result"]["serverInfo"]
    client.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    big = b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"'
    client.send(big + b"x" * 10_000 + b'"}}}')
    refused = client.answer(7)
    assert refused["error"]["code"] == -32600
    assert refused["error"]["data"] == {"limit": 4096, "setting": "max_body_bytes"}
    client.request(8, "tools/call", name="echo", arguments={"text": "still here"})
    assert client.answer(8)["result"]["content"][0]["text"] == "still here"
    admin = client.logged("listening")["admin"]
    chains = await admin_json(f"{admin}/api/chains")
    echo = [c for c in chains if c.get("name") == "echo"]
    assert echo
    assert {(c["client_transport"], c["upstream_transport"]) for c in echo} == {("stdio", "http")}
    assert client.close() == 0
    problems = [json.loads(line) for line in client.err if b"client_protocol_error" in line]
    assert len(problems) == 2  # the line that was no JSON, the line over the limit


async def test_closing_stdin_stops_the_shim_and_its_child(raw_client: Any) -> None:
    client: RawStdioClient = raw_client("--", *shlex.split(python_stdio_command()))
    client.request(1, "initialize", **INIT)
    assert client.answer(1)["result"]["serverInfo"]
    client.logged("upstream_started")  # waits (bounded) for the line, which may trail the answer
    pids = [json.loads(line)["pid"] for line in list(client.err) if b'"upstream_started"' in line]
    assert pids
    assert client.close() == 0
    await until(lambda: not any(_alive(pid) for pid in pids), what="the stdio server to exit", seconds=10)


async def test_when_the_wrapped_server_dies_the_shim_closes_stdout_and_exits_1_saying_why(
    raw_client: Any,
) -> None:
    # Without the proxy, the client sees its server's stdout close and its host offers to start the
    # server again (stdio hosts start a process, they never initialize again on the same pipe): the
    # shim ends the same way, not answering "Session not found" for ever. This dual-era server
    # answers the era probe's `server/discover`, so its handshake is probed on a second child: both
    # probe children have ended before the client's session child starts, and only that one is killed.
    client: RawStdioClient = raw_client("--", *shlex.split(python_stdio_command()))
    client.request(1, "initialize", **INIT)
    assert "result" in client.answer(1)
    client.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
    client.request(
        2, "tools/call", name="slow_progress", arguments={"steps": 1000}, _meta={"progressToken": 7}
    )
    await until(
        lambda: any(b"notifications/progress" in line for line in list(client.out)),
        what="the call's progress",
        seconds=READ_SECONDS,
    )
    events = [json.loads(line) for line in list(client.err) if line.startswith(b"{")]
    started = [e["pid"] for e in events if e.get("event") == "upstream_started"]
    assert len(started) == 3, client.stderr()[-2000:]  # the probe's two, then the client's session's
    order = [(e.get("event"), e.get("pid")) for e in events]
    session_start = order.index(("upstream_started", started[2]))
    for probe_child in started[:2]:  # each stopped, and gone, before the session's child started
        assert order.index(("upstream_stopping", probe_child)) < session_start, client.stderr()[-2000:]
        assert not _alive(probe_child)
    os.kill(started[-1], signal.SIGKILL)
    failed = client.answer(2)
    assert failed["error"]["message"] == (
        f"the upstream MCP server (pid {started[-1]}) was killed by SIGKILL before answering"
    )
    assert client.process.wait(timeout=READ_SECONDS) == 1  # stdin still open: the proxy ended itself
    client.kill()  # reads the pipes to their end
    last = client.err[-1].decode()
    assert last.startswith("mcp-proxy stdio is stopping: its server is gone"), client.stderr()[-2000:]
    assert f"(pid {started[-1]}) was killed by SIGKILL" in last
    lost = [json.loads(line) for line in client.err[:-1] if b'"stdio_server_lost"' in line]
    assert [entry["level"] for entry in lost] == ["error"]
    answers = [json.loads(line) for line in client.out]
    assert [m for m in answers if m.get("error", {}).get("message") == "Session not found"] == []
    await until(lambda: not any(_alive(pid) for pid in started), what="every child to exit", seconds=10)


@pytest.mark.parametrize(
    ("server", "said"),
    [
        (
            [*shlex.split(sdk1_stdio_command()), "--no-such-flag"],
            ["exited with status 2", "unrecognized arguments: --no-such-flag"],
        ),
        (["no-such-mcp-server-anywhere", "--stdio"], ["could not start the upstream command", "ENOENT"]),
    ],
    ids=["dies-during-the-probe", "cannot-be-started"],
)
def test_a_wrapped_server_that_never_comes_up_ends_the_shim_at_once_with_exit_1_saying_why(
    tmp_path: Path, server: list[str], said: list[str]
) -> None:
    # The SDK's server given a flag it does not know exits at once (argparse, status 2), as a
    # misconfigured server in an IDE's settings does. Without the proxy the IDE sees its server
    # exit; the shim must not stay up answering errors until stdin closes (stdin stays open here).
    client = RawStdioClient(["--", *server], tmp_path)
    try:
        code = client.process.wait(timeout=START_SECONDS)
    finally:
        client.kill()  # reads the pipes to their end
    assert code == 1, client.stderr()[-2000:]
    last = client.err[-1].decode()
    assert last.startswith("mcp-proxy stdio cannot serve: its server did not start ("), last
    for words in said:
        assert words in last
    assert client.out == []  # nothing on the protocol's stream, which is closed
    logged = [json.loads(line) for line in client.err[:-1] if line.startswith(b"{")]
    events = [entry["event"] for entry in logged]
    assert "stdio_client_ready" not in events
    (failed,) = [entry for entry in logged if entry["event"] == "stdio_server_not_started"]
    assert failed["level"] == "error"


def test_when_the_wrapped_server_dies_each_request_still_waiting_is_answered_before_stdout_closes(
    raw_client: Any, tmp_path: Path
) -> None:
    # The hand-written FAKE server dies on `initialize` (a crash at start-up, which no real server
    # does on demand). What the client wrote behind the handshake waits for its answer: the
    # notification, then a request behind the notification. The request is never sent to the dead
    # server, but its client still hears why, before stdout closes; and no exchange of the run is
    # recorded as the client leaving, since it did not.
    capture = tmp_path / "capture.jsonl"
    client: RawStdioClient = raw_client(
        f"--capture={capture}", "--", sys.executable, str(FAKE_SERVER), "--die-on-initialize"
    )
    client.request(1, "initialize", **INIT)
    client.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
    client.request(2, "tools/list")
    assert "exited with status 3" in client.answer(1)["error"]["message"], client.stderr()[-2000:]
    held = client.answer(2)
    assert held["error"]["message"].startswith("mcp-proxy stdio is stopping: its server is gone")
    assert client.process.wait(timeout=READ_SECONDS) == 1
    client.kill()
    closed = [json.loads(line) for line in capture.read_text().splitlines() if '"exchange_closed"' in line]
    assert closed, capture.read_text()
    assert [c for c in closed if c.get("outcome") == "client_disconnected"] == []


async def test_the_shim_starts_a_legacy_server_once_and_serves_it_even_when_single_instance(
    raw_client: Any, tmp_path: Path
) -> None:
    # Under `flock -n` a second copy exits at once: the era probe's child must be the session's.
    server = ["flock", "-n", str(tmp_path / "lock"), *shlex.split(everything_stdio_command())]
    client: RawStdioClient = raw_client("--", *server)
    client.request(1, "initialize", **INIT)
    assert client.answer(1)["result"]["serverInfo"], client.stderr()
    client.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    client.request(2, "tools/call", name="get-sum", arguments={"a": 1, "b": 2})
    assert "3" in json.dumps(client.answer(2)["result"]), client.stderr()
    assert client.close() == 0
    started = [json.loads(line)["pid"] for line in list(client.err) if b'"upstream_started"' in line]
    assert len(started) == 1, client.stderr()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.parametrize("stdin_kind", ["file", "devnull"])
def test_plain_files_as_stdin_and_stdout_are_served_and_end_with_exit_0(
    tmp_path: Path, legacy_server: PeerServer, stdin_kind: str
) -> None:
    # `mcp-proxy stdio < requests.jsonl > answers.jsonl`: no pipe for the event loop to watch, yet the
    # lines are read, answers written, and the end of the file ends the run cleanly.
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(b"this is not json\n" if stdin_kind == "file" else b"")
    answers = tmp_path / "answers.jsonl"
    with (
        open(os.devnull, "rb") if stdin_kind == "devnull" else requests.open("rb") as stdin,
        answers.open("wb") as stdout,
    ):
        done = subprocess.run(
            [*proxy_command(), "stdio", "--upstream", legacy_server.url, "--admin", "127.0.0.1:0"],
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            env=clean_env(MCP_PROXY_LOG_FORMAT="json"),
            cwd=REPO_ROOT,
            timeout=30,
            check=False,
        )
    stderr = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 0, stderr[-2000:]
    assert '"stdio_client_closed"' in stderr
    lines = [json.loads(line) for line in answers.read_text().splitlines()]
    if stdin_kind == "file":
        assert [line["error"]["code"] for line in lines] == [-32700]
        assert lines[0]["error"]["data"] == {"received": "this is not json"}
    else:
        assert lines == []


def _requests_file(tmp_path: Path, *calls: dict[str, Any]) -> Path:
    """A legacy client's whole session as a file: the handshake, then `calls` (ids 2, 3, ...)."""
    lines: list[dict[str, Any]] = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ]
    lines += [
        {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": c} for n, c in enumerate(calls, 2)
    ]
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _run_file(tmp_path: Path, requests: Path, *args: str) -> tuple[int, list[dict[str, Any]], str]:
    """`mcp-proxy stdio ARGS < requests > answers`: exit code, the answers, stderr."""
    answers = tmp_path / "answers.jsonl"
    with requests.open("rb") as stdin, answers.open("wb") as stdout:
        done = subprocess.run(
            [*proxy_command(), "stdio", "--admin", "127.0.0.1:0", *args],
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            env=clean_env(MCP_PROXY_LOG_FORMAT="json"),
            cwd=REPO_ROOT,
            timeout=40,
            check=False,
        )
    lines = [json.loads(line) for line in answers.read_text().splitlines()]
    return done.returncode, lines, done.stderr.decode("utf-8", "replace")


@pytest.mark.parametrize("upstream", ["http", "shim"])
def test_a_file_of_requests_is_answered_in_full_before_the_end_of_stdin_ends_the_run(
    tmp_path: Path, legacy_server: PeerServer, upstream: str
) -> None:
    # The end of the file comes long before the answers: the calls in flight then are waited for.
    requests = _requests_file(
        tmp_path,
        {"name": "echo", "arguments": {"text": "one"}},
        {"name": "add", "arguments": {"a": 2, "b": 3}},
    )
    target = (
        ["--upstream", legacy_server.url]
        if upstream == "http"
        else ["--", *shlex.split(python_stdio_command())]
    )
    code, lines, stderr = _run_file(tmp_path, requests, *target)
    assert code == 0, stderr[-2000:]
    answers = {line["id"]: line for line in lines if "id" in line and "method" not in line}
    assert sorted(answers) == [1, 2, 3], (lines, stderr[-2000:])
    assert answers[2]["result"]["content"][0]["text"] == "one"
    assert answers[3]["result"]["content"][0]["text"] == "5"
    assert '"stdio_input_ended"' in stderr


def test_a_shims_call_still_running_at_the_end_of_stdin_is_answered_before_the_run_ends(
    raw_client: Any,
) -> None:
    # Once the session is up, a shim serves calls on its direct lane to the stdio server: the end
    # of stdin waits for those too (slow_progress of 100 steps takes over a second).
    client: RawStdioClient = raw_client("--", *shlex.split(python_stdio_command()))
    client.request(1, "initialize", **INIT)
    assert "result" in client.answer(1)
    client.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
    client.request(2, "tools/call", name="slow_progress", arguments={"steps": 100})

    assert client.close() == 0
    answered = [json.loads(line) for line in client.out]
    (call,) = [m for m in answered if m.get("id") == 2 and "method" not in m] or [None]
    assert call is not None, (answered, client.stderr()[-2000:])
    assert call["result"]["content"][0]["text"] == "done 100"
    assert client.logged("stdio_input_ended")["in_flight"] == 1


@pytest.mark.parametrize("way", ["lane", "http shape"])
async def test_a_call_the_legacy_client_cancels_is_closed_as_cancelled_and_the_end_of_stdin_waits_not(
    raw_client: Any, way: str
) -> None:
    # The SDK's stdio server drops a cancelled call without answering it, as the protocol allows, so
    # only the client's cancellation can close the call's exchange: a legacy client's is sent on,
    # then closes it. slow_progress of 1000 steps takes over 10 s, drain_grace's default. A fault
    # rule that matches nothing sends every message the HTTP shape's way instead of the direct lane.
    rule = ["--fault=method:no/such/method => drop"] if way == "http shape" else []
    server = shlex.split(python_stdio_command())
    client: RawStdioClient = raw_client("--upstream-era=legacy", *rule, "--", *server)
    client.request(1, "initialize", **INIT)
    assert "result" in client.answer(1)
    client.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
    client.request(
        2, "tools/call", name="slow_progress", arguments={"steps": 1000}, _meta={"progressToken": 7}
    )
    await until(
        lambda: any(b"notifications/progress" in line for line in list(client.out)),
        what="the call's progress",
        seconds=READ_SECONDS,
    )
    client.send(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}')
    line = _exchange_line(client, "tools/call slow_progress")  # logged on the cancel, stdin still open
    assert (line["trouble"], line["outcome"], line["end"]) == (None, None, "cancelled")
    admin = client.logged("listening")["admin"]
    chains = await admin_json(f"{admin}/api/chains")
    assert [c["status"] for c in chains if c.get("name") == "slow_progress"] == ["cancelled"]
    assert client.close() == 0
    assert '"stdio_input_ended"' not in client.stderr()  # nothing left in flight to wait for
    assert [m for m in map(json.loads, client.out) if m.get("id") == 2 and "method" not in m] == []


def _exchange_line(client: RawStdioClient, carried: str) -> dict[str, Any]:
    """The round-trip log line of the exchange that carried `carried` (waits, bounded)."""
    deadline = time.monotonic() + READ_SECONDS
    while time.monotonic() < deadline:
        for text in list(client.err):
            item = json.loads(text)
            if item.get("event") == "exchange" and item.get("carried") == carried:
                return dict(item)
        time.sleep(0.01)
    raise AssertionError(f"no exchange line for {carried!r} in {client.stderr()[-2000:]}")


def test_the_wait_for_answers_after_the_end_of_stdin_is_bounded_by_drain_grace(
    tmp_path: Path, legacy_server: PeerServer
) -> None:
    # slow_progress of 1000 steps takes over 10 s; a drain_grace of 1 s gives up on it.
    requests = _requests_file(
        tmp_path,
        {"name": "echo", "arguments": {"text": "quick"}},
        {"name": "slow_progress", "arguments": {"steps": 1000}},
    )
    code, lines, stderr = _run_file(tmp_path, requests, "--upstream", legacy_server.url, "--drain-grace", "1")
    assert code == 0, stderr[-2000:]
    answered = {line["id"] for line in lines if "id" in line and "method" not in line}
    assert answered == {1, 2}, lines
    # The wait is timed by the proxy's own log, from the end of stdin to the client's close: the
    # command's start-up and exit around it take seconds of their own on a loaded machine.
    ended, closed = (_logged_at(stderr, event) for event in ("stdio_input_ended", "stdio_client_closed"))
    assert closed - ended < 9, stderr[-2000:]  # the slow call alone would take over 10 s


def _logged_at(stderr: str, event: str) -> float:
    """When the first JSON log line with this `event` was logged (its ISO `timestamp`), in seconds."""
    for text in stderr.splitlines():
        with contextlib.suppress(ValueError):
            line = json.loads(text)
            if isinstance(line, dict) and line.get("event") == event:
                return datetime.fromisoformat(line["timestamp"]).timestamp()
    raise AssertionError(f"no {event} line in:\n{stderr[-2000:]}")


def test_a_call_in_flight_when_a_signal_stops_mcp_proxy_stdio_is_logged_as_cut_by_the_stop(
    raw_client: Any, legacy_server: PeerServer
) -> None:
    client: RawStdioClient = raw_client("--upstream", legacy_server.url)
    client.request(1, "initialize", **INIT)
    assert client.answer(1)["result"]["serverInfo"]
    client.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
    client.request(
        2, "tools/call", name="slow_progress", arguments={"steps": 1000}, _meta={"progressToken": 7}
    )
    deadline = time.monotonic() + READ_SECONDS
    while not any(b"notifications/progress" in line for line in list(client.out)):
        assert time.monotonic() < deadline, client.stderr()[-2000:]
        time.sleep(0.01)
    client.process.send_signal(signal.SIGINT)
    assert client.process.wait(timeout=15) == 0
    client.kill()  # reads the pipes to their end
    calls = [json.loads(line) for line in client.err if b'"exchange"' in line and b"tools/call" in line]
    assert [c.get("outcome") for c in calls if c.get("event") == "exchange"] == ["proxy_stopping"]
    closed = [json.loads(line) for line in client.err if b'"stdio_client_closed"' in line]
    assert [c["reason"] for c in closed] == ["the proxy is stopping"]
