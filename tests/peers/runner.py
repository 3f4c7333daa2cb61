"""Start and stop test peers as subprocesses, each in the environment a user would run it in.

Peers run in their own process so the proxy under test talks to a real server over real sockets,
and so a wedged server can always be killed. Python SDK peers (``tests.peers.serve``) run with the
interpreter of their own virtualenv (`tests.peers.envs.peer_python`), never the proxy's: with only
``mcp`` installed uvicorn parses HTTP with h11, as it does after a user's ``pip install mcp``. Node
peers run with ``node`` from the repository's own ``.cache/node``, under the loopback preload.

Every wait here is bounded: the ``READY <port> ...`` line is awaited for at most `start_timeout`
seconds, shutdown is SIGTERM, then SIGKILL after `stop_timeout`. Every peer binds 127.0.0.1 on a free
port of its own choosing (port 0), so there is no window in which another test could take it.
"""

from __future__ import annotations

import collections
import contextlib
import os
import queue
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from types import TracebackType
from typing import IO, Final, Literal

import anyio.to_thread

from tests.peers.apps import KINDS
from tests.peers.envs import (
    LOOPBACK_PRELOAD,
    NODE_DIR,
    REPO_ROOT,
    Http,
    node_binary,
    node_package,
    peer_python,
    sdk1_python,
)

__all__ = [
    "NODE_KINDS",
    "REPO_ROOT",
    "NodeOAuthExample",
    "NodeServer",
    "PeerServer",
    "PeerStartError",
    "Sdk1Server",
    "ServedPeer",
    "arun_peer",
    "run_peer",
]

DEFAULT_START_TIMEOUT: Final = 30.0
DEFAULT_STOP_TIMEOUT: Final = 5.0
STDOUT_TAIL: Final = 200
"""Lines of a peer's stdout kept after READY (server-everything logs every request there)."""

NodeKind = Literal["everything", "ts-v2", "ts-v1-example", "ts-v1-no-store", "ts-v1-json"]
NODE_KINDS: Final[tuple[NodeKind, ...]] = (
    "everything",
    "ts-v2",
    "ts-v1-example",
    "ts-v1-no-store",
    "ts-v1-json",
)
"""``everything``: @modelcontextprotocol/server-everything in Streamable HTTP mode (legacy era).
``ts-v2``: tests/peers/node/server.mjs, this catalogue on the TypeScript SDK v2 (2026-07-28 only).
``ts-v1-example``: the TypeScript SDK 1.x's own example server ``simpleStreamableHttp.js`` (legacy
era), whose tools log on the session's GET stream (``server.sendLoggingMessage(params, sessionId)``).
``ts-v1-no-store``: tests/peers/node/server-v1-no-store.mjs, a TypeScript SDK 1.x server with
sessions and no event store (legacy era): its SSE events carry no id, as most servers' do.
``ts-v1-json``: the same server answering plain JSON (`enableJsonResponse`): a JSON-RPC batch of
requests gets one JSON array of answers."""

SDK1_EXAMPLE: Final = "dist/esm/examples/server/simpleStreamableHttp.js"
"""The TypeScript SDK 1.x's example server, inside its package."""

ANNOUNCE_ENV: Final = "MCP_TEST_PEER_ANNOUNCE"
"""Set to 1, the loopback preload prints ``READY <port>`` when the first server starts listening."""


class PeerStartError(RuntimeError):
    """The peer process exited or stayed silent instead of printing ``READY <port>``."""


class ServedPeer:
    """One peer subprocess serving ``/mcp`` on 127.0.0.1. Use as a (sync) context manager.

    After `start()`, `.port` is the TCP port and `.url` the MCP endpoint. The peer's stderr goes to a
    temporary file (`stderr_text()`), so a chatty server can never block on a full pipe; stdout is
    drained by a daemon thread for the same reason. Subclasses say what to run.
    """

    label = "peer"
    path = "/mcp"
    """The MCP endpoint's path."""

    def __init__(self, *, start_timeout: float, stop_timeout: float) -> None:
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout
        self._process: subprocess.Popen[str] | None = None
        self._stderr: IO[str] | None = None
        self._port: int | None = None
        self._drain_thread: threading.Thread | None = None
        self._stdout_tail: collections.deque[str] = collections.deque(maxlen=STDOUT_TAIL)

    # -- what to run (subclasses) ------------------------------------------------------------------

    def command(self) -> list[str]:
        """The argv of the peer process."""
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        """The peer process's environment."""
        return dict(os.environ)

    def ready(self, words: list[str]) -> None:
        """Check the words after ``READY <port>`` (nothing by default)."""

    def announced(self, line: str) -> int | None:
        """The port a stdout line says the peer is ready on (``READY <port> ...``), else None."""
        if not line.startswith("READY "):
            return None
        words = line.split()
        self.ready(words[2:])
        return int(words[1])

    # -- where it is ------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port the peer listens on (127.0.0.1)."""
        if self._port is None:
            raise RuntimeError("peer not started")
        return self._port

    @property
    def url(self) -> str:
        """The peer's MCP endpoint, e.g. ``http://127.0.0.1:PORT/mcp``."""
        return f"http://127.0.0.1:{self.port}{self.path}"

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` without the endpoint path."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The subprocess id while it runs."""
        return self._process.pid if self._process is not None else None

    def stderr_text(self) -> str:
        """Everything the peer wrote to stderr so far (server logs, tracebacks)."""
        if self._stderr is None:
            return ""
        try:
            with open(self._stderr.name, encoding="utf-8", errors="replace") as fh:
                return fh.read()
        except OSError:
            return ""

    def stdout_tail(self) -> str:
        """The last lines the peer wrote to stdout after READY."""
        return "".join(self._stdout_tail)

    # -- lifetime ---------------------------------------------------------------------------------

    def start(self) -> ServedPeer:
        """Spawn the peer and wait (bounded) for its ``READY <port>`` line."""
        if self._process is not None:
            raise RuntimeError("peer already started")
        cmd = self.command()
        self._stderr = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in stop()
            mode="w+", prefix=f"peer-{self.label}-", suffix=".log", delete=False, encoding="utf-8"
        )
        self._process = subprocess.Popen(
            cmd,
            cwd=REPO_ROOT,
            env=self.environment(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        lines: queue.Queue[str | None] = queue.Queue()
        announced = threading.Event()
        stdout = self._process.stdout
        assert stdout is not None

        def drain() -> None:
            # Owns the pipe: reads to EOF (the peer exited) and closes it, so no other thread ever
            # closes it underneath a pending read. Lines go to the READY wait, then to a bounded tail.
            try:
                for line in stdout:
                    if announced.is_set():
                        self._stdout_tail.append(line)
                    else:
                        lines.put(line)
            finally:
                stdout.close()
                lines.put(None)

        self._drain_thread = threading.Thread(target=drain, name=f"peer-{self.label}-stdout", daemon=True)
        self._drain_thread.start()
        try:
            self._port = self._await_ready(lines)
            announced.set()
        except BaseException:
            self.cleanup()
            raise
        return self

    def _await_ready(self, lines: queue.Queue[str | None]) -> int:
        deadline = time.monotonic() + self._start_timeout
        seen: list[str] = []
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise PeerStartError(
                    f"peer {self.label} printed no READY line within {self._start_timeout}s "
                    f"(stdout: {''.join(seen)[-2000:]!r})\n{self.stderr_text()}"
                ) from None
            if line is None:
                raise PeerStartError(
                    f"peer {self.label} exited before READY (stdout: {''.join(seen)[-2000:]!r})\n"
                    f"{self.stderr_text()}"
                )
            port = self.announced(line)
            if port is not None:
                return port
            seen.append(line)

    def stop(self) -> None:
        """Terminate the peer (SIGTERM, then SIGKILL after the stop timeout); idempotent."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=self._stop_timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=self._stop_timeout)
        if self._drain_thread is not None:
            self._drain_thread.join(timeout=self._stop_timeout)
            self._drain_thread = None
        if self._stderr is not None and not self._stderr.closed:
            self._stderr.close()

    def cleanup(self) -> None:
        """Stop the peer and delete its stderr log file."""
        self.stop()
        if self._stderr is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._stderr.name)

    def __enter__(self) -> ServedPeer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()

    def __repr__(self) -> str:
        where = self.url if self._port is not None else "not started"
        return f"{type(self).__name__}({self.label!r}, {where})"


class PeerServer(ServedPeer):
    """A Python SDK peer (``python -m tests.peers.serve KIND``) in its own environment.

    `http` picks the environment, and with it uvicorn's HTTP implementation: ``h11`` (the default,
    what ``pip install mcp`` gives) or ``httptools``. The peer reports the implementation uvicorn
    picked and `start()` fails if it is not the one asked for.
    """

    def __init__(
        self,
        kind: str,
        *,
        port: int = 0,
        seal_state: bool = True,
        http: Http = "h11",
        start_timeout: float = DEFAULT_START_TIMEOUT,
        stop_timeout: float = DEFAULT_STOP_TIMEOUT,
        extra_args: list[str] | None = None,
        path: str = "/mcp",
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown peer kind {kind!r}; expected one of {', '.join(KINDS)}")
        super().__init__(start_timeout=start_timeout, stop_timeout=stop_timeout)
        self.kind = kind
        self.label = kind
        self.http = http
        self.http_implementation = ""
        self._requested_port = port
        self._seal_state = seal_state
        self._extra_args = list(extra_args or [])
        self.path = path

    def command(self) -> list[str]:
        cmd = [str(peer_python(self.http)), "-m", "tests.peers.serve", self.kind]
        cmd += ["--port", str(self._requested_port), "--path", self.path]
        if not self._seal_state:
            cmd.append("--no-seal")
        return cmd + self._extra_args

    def environment(self) -> dict[str, str]:
        return python_peer_environment()

    def ready(self, words: list[str]) -> None:
        self.http_implementation = words[0] if words else "(not reported)"
        if self.http_implementation != self.http:
            raise PeerStartError(
                f"peer {self.kind} in the {self.http} environment runs uvicorn on "
                f"{self.http_implementation}; rebuild the environments (python3 -m tests.peers.envs)"
            )

    def start(self) -> PeerServer:
        super().start()
        return self

    def __enter__(self) -> PeerServer:
        return self.start()


class Sdk1Server(ServedPeer):
    """A server on the SDK's last 1.x release (``tests.peers.sdk1_server``) in ``.cache/peers/sdk1``,
    as most servers users run are; `stateless` serves it as ``stateless_http=True`` does, `oauth` with
    its own authorization server on the same origin (``tests.peers.sdk1_oauth``), `advertise` naming
    its own URL there, `gzip` behind Starlette's compression middleware."""

    def __init__(
        self,
        *,
        stateless: bool = False,
        oauth: bool = False,
        advertise: bool = False,
        gzip: bool = False,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        stop_timeout: float = DEFAULT_STOP_TIMEOUT,
    ) -> None:
        super().__init__(start_timeout=start_timeout, stop_timeout=stop_timeout)
        self.stateless = stateless
        self.oauth = oauth
        self.advertise = advertise
        """With `oauth`: the server advertises its own URL and accepts only tokens issued for it."""
        self.gzip = gzip
        self.label = "sdk1-stateless" if stateless else "sdk1"

    def command(self) -> list[str]:
        cmd = [str(sdk1_python()), "-m", "tests.peers.sdk1_server", "--port", "0"]
        cmd += ["--stateless"] if self.stateless else []
        cmd += ["--advertise"] if self.advertise else []
        cmd += ["--gzip"] if self.gzip else []
        return [*cmd, "--oauth"] if self.oauth else cmd

    def environment(self) -> dict[str, str]:
        return python_peer_environment()

    def start(self) -> Sdk1Server:
        super().start()
        return self

    def __enter__(self) -> Sdk1Server:
        return self.start()


class NodeServer(ServedPeer):
    """A Node MCP server from the repository's own ``.cache/node``, under the loopback preload.

    ``everything`` is ``@modelcontextprotocol/server-everything`` in Streamable HTTP mode (it reads
    its port from ``PORT`` and prints nothing useful about it, so the preload announces the port it
    really bound), and ``ts-v1-example`` the SDK 1.x example ``simpleStreamableHttp.js`` (port from
    ``MCP_PORT``, announced the same way); ``ts-v2`` is ``tests/peers/node/server.mjs`` and
    ``ts-v1-no-store`` ``tests/peers/node/server-v1-no-store.mjs`` (``ts-v1-json`` with ``--json``),
    which announce themselves. The process
    gets a small environment of its own (server-everything's ``get-env`` tool prints all of it).
    """

    def __init__(
        self,
        kind: NodeKind,
        *,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        stop_timeout: float = DEFAULT_STOP_TIMEOUT,
    ) -> None:
        if kind not in NODE_KINDS:
            raise ValueError(f"unknown Node peer kind {kind!r}; expected one of {', '.join(NODE_KINDS)}")
        super().__init__(start_timeout=start_timeout, stop_timeout=stop_timeout)
        self.kind = kind
        self.label = f"node-{kind}"

    def command(self) -> list[str]:
        node = node_binary()
        if self.kind == "everything":
            entry = node_package("@modelcontextprotocol/server-everything") / "dist" / "index.js"
            return [node, "--require", str(LOOPBACK_PRELOAD), str(entry), "streamableHttp"]
        if self.kind == "ts-v1-example":
            entry = node_package("@modelcontextprotocol/sdk") / SDK1_EXAMPLE
            return [node, "--require", str(LOOPBACK_PRELOAD), str(entry)]
        if self.kind in ("ts-v1-no-store", "ts-v1-json"):
            node_package("@modelcontextprotocol/sdk")
            cmd = [node, "--require", str(LOOPBACK_PRELOAD), str(NODE_DIR / "server-v1-no-store.mjs")]
            return [*cmd, "--json"] if self.kind == "ts-v1-json" else cmd
        node_package("@modelcontextprotocol/server")
        return [node, "--require", str(LOOPBACK_PRELOAD), str(NODE_DIR / "server.mjs"), "--port", "0"]

    def environment(self) -> dict[str, str]:
        announce = "0" if self.kind in ("ts-v2", "ts-v1-no-store", "ts-v1-json") else "1"
        return node_environment(PORT="0", MCP_PORT="0", **{ANNOUNCE_ENV: announce})

    def start(self) -> NodeServer:
        super().start()
        return self

    def __enter__(self) -> NodeServer:
        return self.start()


class NodeOAuthExample(ServedPeer):
    """The TypeScript SDK v1's example server with OAuth (``simpleStreamableHttp.js --oauth``), under the
    loopback preload: ``/mcp`` and its protected resource metadata on one port, its authorization
    server (``/authorize``, ``/token``, ``/register``, metadata) on another, both advertised as
    ``http://localhost:PORT``, as the example always does.

    The example reads both ports from its environment and advertises them, so they are chosen before
    it starts (free at that moment; another process could take one before the example binds it, and
    the start then fails naming the port). Ready once both servers say they listen.
    """

    label = "node-oauth-example"

    def __init__(
        self, *, start_timeout: float = DEFAULT_START_TIMEOUT, stop_timeout: float = DEFAULT_STOP_TIMEOUT
    ) -> None:
        super().__init__(start_timeout=start_timeout, stop_timeout=stop_timeout)
        self.mcp_port, self.auth_port = free_port(), free_port()
        self._listening: set[str] = set()

    @property
    def url(self) -> str:
        """The endpoint as the example advertises it (`localhost`, which the proxy must be given too)."""
        return f"http://localhost:{self.port}{self.path}"

    @property
    def auth_origin(self) -> str:
        """The authorization server's origin as the example advertises it."""
        return f"http://localhost:{self.auth_port}"

    def command(self) -> list[str]:
        example = (
            node_package("@modelcontextprotocol/sdk") / "dist/esm/examples/server/simpleStreamableHttp.js"
        )
        return [node_binary(), "--require", str(LOOPBACK_PRELOAD), str(example), "--oauth"]

    def environment(self) -> dict[str, str]:
        return node_environment(MCP_PORT=str(self.mcp_port), MCP_AUTH_PORT=str(self.auth_port))

    def announced(self, line: str) -> int | None:
        for server in ("OAuth Authorization Server", "MCP Streamable HTTP Server"):
            if line.startswith(f"{server} listening on port"):
                self._listening.add(server)
        return self.mcp_port if len(self._listening) == 2 else None

    def start(self) -> NodeOAuthExample:
        super().start()
        return self

    def __enter__(self) -> NodeOAuthExample:
        return self.start()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (for a peer that must be told its port up front)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def python_peer_environment() -> dict[str, str]:
    """Ours, less what would leak the proxy's interpreter into the peer's import path, unbuffered."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def node_environment(**extra: str) -> dict[str, str]:
    """A small, fixed environment for Node processes: PATH and HOME from ours, colours off, `extra`."""
    env = {key: os.environ[key] for key in ("PATH", "HOME", "TMPDIR") if key in os.environ}
    env.update({"NO_COLOR": "1", "FORCE_COLOR": "0", "NODE_ENV": "test"})
    env.update(extra)
    return env


@contextlib.contextmanager
def run_peer(
    kind: str,
    *,
    port: int = 0,
    seal_state: bool = True,
    http: Http = "h11",
    start_timeout: float = DEFAULT_START_TIMEOUT,
) -> Iterator[PeerServer]:
    """Run a Python peer for the duration of a ``with`` block; always stopped on exit."""
    peer = PeerServer(kind, port=port, seal_state=seal_state, http=http, start_timeout=start_timeout)
    with peer:
        yield peer


@contextlib.asynccontextmanager
async def arun_peer(
    kind: str,
    *,
    port: int = 0,
    seal_state: bool = True,
    http: Http = "h11",
    start_timeout: float = DEFAULT_START_TIMEOUT,
) -> AsyncIterator[PeerServer]:
    """Async twin of `run_peer`: start/stop run in a worker thread so the event loop keeps going."""
    peer = PeerServer(kind, port=port, seal_state=seal_state, http=http, start_timeout=start_timeout)
    await anyio.to_thread.run_sync(peer.start)
    try:
        yield peer
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(peer.cleanup)
