"""The peers' own environments: SDK peers run as after ``pip install mcp``, Node peers from the repo.

The h11 environment is the point of the exercise: with only ``mcp`` installed, uvicorn parses HTTP
with h11, which routes on the raw request target, so a proxy that sends an absolute-form request
line (``POST http://host:port/mcp``) gets 404 from it while an httptools server would serve it. These
tests pin that difference, the check that a peer really runs on the parser its environment stands
for, the clear error when an environment is missing, and the project's own Node preloads.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
from pathlib import Path

import pytest

from tests.peers import envs
from tests.peers.envs import (
    BUILD_COMMAND,
    LOOPBACK_PRELOAD,
    NODE20_FS_SHIM,
    REPO_ROOT,
    EnvironmentMissingError,
    node_binary,
    node_package,
    peer_python,
)
from tests.peers.runner import PeerServer, PeerStartError
from tests.peers.uvicorn_ready import bind

pytestmark = pytest.mark.e2e

INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
).encode()


def post_status(port: int, target: str) -> int:
    """POST an initialize with `target` as the request line's target; the response's status code."""
    head = (
        f"POST {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: application/json, text/event-stream\r\nContent-Length: {len(INITIALIZE)}\r\n"
        "Connection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode() + INITIALIZE)
        status_line = sock.makefile("rb").readline()
    return int(status_line.split()[1])


def test_sdk_peer_runs_on_h11_and_answers_404_to_an_absolute_form_target() -> None:
    with PeerServer("legacy-inflight") as peer:
        assert peer.http_implementation == "h11"
        assert post_status(peer.port, "/mcp") == 200
        assert post_status(peer.port, peer.url) == 404


def test_httptools_peer_routes_an_absolute_form_target() -> None:
    with PeerServer("legacy-inflight", http="httptools") as peer:
        assert peer.http_implementation == "httptools"
        assert post_status(peer.port, peer.url) == 200


def test_the_h11_environment_has_mcp_but_neither_httptools_nor_the_proxy() -> None:
    code = (
        "import importlib.util as u, sys\n"
        "import tests.peers.serve, tests.peers.client, tests.peers.conformance_app, tests.peers.polling_app\n"
        "print(u.find_spec('httptools') is None, u.find_spec('mcp') is not None,\n"
        "      [m for m in sys.modules if m == 'proxy' or m.startswith('proxy.')])\n"
    )
    out = subprocess.run(
        [peer_python("h11"), "-c", code],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.split("\n")[0] == "True True []", out.stderr


def test_a_peer_on_another_parser_than_asked_for_does_not_start(monkeypatch: pytest.MonkeyPatch) -> None:
    httptools_python = peer_python("httptools")
    monkeypatch.setattr("tests.peers.runner.peer_python", lambda http: httptools_python)
    with pytest.raises(PeerStartError, match="in the h11 environment runs uvicorn on httptools"):
        PeerServer("legacy-inflight").start()


def test_a_missing_environment_names_the_command_that_builds_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(envs, "PYTHON_ENVS", tmp_path)
    with pytest.raises(EnvironmentMissingError, match=BUILD_COMMAND) as missing:
        peer_python("h11")
    assert "does not exist" in str(missing.value)


def test_an_environment_built_from_other_requirements_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "h11" / "bin").mkdir(parents=True)
    (tmp_path / "h11" / "bin" / "python").touch()
    (tmp_path / "h11" / envs.STAMP).write_text("0" * 64 + "  tests/peers/requirements.txt\n")
    monkeypatch.setattr(envs, "PYTHON_ENVS", tmp_path)
    with pytest.raises(EnvironmentMissingError, match="other requirements"):
        peer_python("h11")


# --------------------------------------------------------------------------------------------
# The Node preloads (the project's own, loaded from the repository).
# --------------------------------------------------------------------------------------------

LISTENERS = """
const net = require('node:net');
const servers = [];
const record = (server) => servers.push(server);
const a = net.createServer(); record(a); a.listen(0);
const sync = a.address();
const b = net.createServer(); record(b); b.listen(0, '0.0.0.0');
const c = net.createServer(); record(c); c.listen({ port: 0, host: '::' });
const d = net.createServer(); record(d); d.listen(() => {});
setTimeout(() => {
  console.log(JSON.stringify({ sync, hosts: servers.map((s) => s.address().address) }));
  servers.forEach((s) => s.close());
}, 200);
"""


def test_loopback_preload_keeps_every_listener_on_127_0_0_1_and_addresses_synchronous() -> None:
    out = subprocess.run(
        [node_binary(), "--require", str(LOOPBACK_PRELOAD), "-e", LISTENERS],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        env={"MCP_TEST_PEER_ANNOUNCE": "1"},
    )
    ready, report = out.stdout.splitlines()
    seen = json.loads(report)
    assert seen["hosts"] == ["127.0.0.1"] * 4
    assert seen["sync"]["address"] == "127.0.0.1"
    assert ready == f"READY {seen['sync']['port']}"


GLOB = """
import { globSync, readFileSync } from 'fs';
const found = globSync('**/checks.json', { cwd: process.argv[2] }).sort();
console.log(JSON.stringify([found, typeof readFileSync]));
"""


def test_node20_fs_shim_gives_the_conformance_package_a_globsync(tmp_path: Path) -> None:
    package = tmp_path / "node_modules" / "@modelcontextprotocol" / "conformance"
    package.mkdir(parents=True)
    (package / "probe.mjs").write_text(GLOB)
    data = tmp_path / "results"
    (data / "a" / "b").mkdir(parents=True)
    (data / "checks.json").write_text("[]")
    (data / "a" / "b" / "checks.json").write_text("[]")
    (data / "a" / "other.json").write_text("[]")
    out = subprocess.run(
        [node_binary(), "--import", NODE20_FS_SHIM.as_uri(), str(package / "probe.mjs"), str(data)],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert json.loads(out.stdout) == [["a/b/checks.json", "checks.json"], "function"]


def test_conformance_cli_loads_on_this_node_with_the_preloads() -> None:
    cli = node_package("@modelcontextprotocol/conformance") / "dist" / "index.js"
    out = subprocess.run(
        [
            node_binary(),
            "--require",
            str(LOOPBACK_PRELOAD),
            "--import",
            NODE20_FS_SHIM.as_uri(),
            cli,
            "--help",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "server" in out.stdout


async def test_peer_connections_have_tcp_nodelay_as_under_uvicorns_own_binding() -> None:
    """Without it a response written in pieces waits ~40 ms on a delayed ACK, which users never see."""
    sock = bind(0)
    accepted: asyncio.Queue[asyncio.BaseTransport] = asyncio.Queue()

    class Keep(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            accepted.put_nowait(transport)

    server = await asyncio.get_running_loop().create_server(Keep, sock=sock)
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
        transport = await asyncio.wait_for(accepted.get(), timeout=10)
        peer_socket = transport.get_extra_info("socket")
        assert peer_socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        transport.close()
        writer.close()
        await writer.wait_closed()
    finally:
        server.close()
        await server.wait_closed()
