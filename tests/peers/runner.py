"""Start and stop test peers (``tests.peers.serve``) as subprocesses.

Peers run in their own process so the proxy under test talks to a real server over real sockets,
and so a wedged server can always be killed. Every wait here is bounded: the READY line is awaited
for at most `start_timeout` seconds, shutdown is SIGTERM, then SIGKILL after `stop_timeout`.
The repository root is derived from this file, so the peers work from a fresh clone anywhere.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Final

import anyio.to_thread

from tests.peers.apps import KINDS

__all__ = ["REPO_ROOT", "PeerServer", "PeerStartError", "arun_peer", "run_peer"]

REPO_ROOT: Final[Path] = Path(__file__).resolve().parents[2]
"""The repository root (the directory holding ``tests/``); the peers' working directory."""

DEFAULT_START_TIMEOUT: Final = 30.0
DEFAULT_STOP_TIMEOUT: Final = 5.0


class PeerStartError(RuntimeError):
    """The peer process exited or stayed silent instead of printing ``READY <port>``."""


class PeerServer:
    """One peer subprocess. Use as a (sync) context manager, or `start()` / `stop()` it.

    After `start()`, `.port` is the TCP port on 127.0.0.1 and `.url` the MCP endpoint.
    The peer's stderr goes to a temporary file (`stderr_text()`), so a chatty server can never
    block on a full pipe; stdout is drained by a daemon thread for the same reason.
    """

    def __init__(
        self,
        kind: str,
        *,
        port: int = 0,
        seal_state: bool = True,
        start_timeout: float = DEFAULT_START_TIMEOUT,
        stop_timeout: float = DEFAULT_STOP_TIMEOUT,
        extra_args: list[str] | None = None,
    ) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown peer kind {kind!r}; expected one of {', '.join(KINDS)}")
        self.kind = kind
        self._requested_port = port
        self._seal_state = seal_state
        self._start_timeout = start_timeout
        self._stop_timeout = stop_timeout
        self._extra_args = list(extra_args or [])
        self._process: subprocess.Popen[str] | None = None
        self._stderr: IO[str] | None = None
        self._port: int | None = None
        self._drain_thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The port the peer listens on (127.0.0.1)."""
        if self._port is None:
            raise RuntimeError("peer not started")
        return self._port

    @property
    def url(self) -> str:
        """The peer's MCP endpoint, e.g. ``http://127.0.0.1:PORT/mcp``."""
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` without the endpoint path."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The subprocess id while it runs."""
        return self._process.pid if self._process is not None else None

    def stderr_text(self) -> str:
        """Everything the peer wrote to stderr so far (uvicorn and SDK logs, tracebacks)."""
        if self._stderr is None:
            return ""
        try:
            with open(self._stderr.name, encoding="utf-8", errors="replace") as fh:
                return fh.read()
        except OSError:
            return ""

    def start(self) -> PeerServer:
        """Spawn the peer and wait (bounded) for its ``READY <port>`` line."""
        if self._process is not None:
            raise RuntimeError("peer already started")
        cmd = [sys.executable, "-m", "tests.peers.serve", self.kind, "--port", str(self._requested_port)]
        if not self._seal_state:
            cmd.append("--no-seal")
        cmd.extend(self._extra_args)
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        self._stderr = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in stop()
            mode="w+", prefix=f"peer-{self.kind}-", suffix=".log", delete=False, encoding="utf-8"
        )
        self._process = subprocess.Popen(
            cmd,
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        lines: queue.Queue[str | None] = queue.Queue()
        stdout = self._process.stdout
        assert stdout is not None

        def drain() -> None:
            # Owns the pipe: reads to EOF (the peer exited) and closes it, so no other thread
            # ever closes it underneath a pending read.
            try:
                for line in stdout:
                    lines.put(line)
            finally:
                stdout.close()
                lines.put(None)

        self._drain_thread = threading.Thread(target=drain, name=f"peer-{self.kind}-stdout", daemon=True)
        self._drain_thread.start()
        try:
            self._port = self._await_ready(lines)
        except BaseException:
            self.cleanup()
            raise
        return self

    def _await_ready(self, lines: queue.Queue[str | None]) -> int:
        try:
            line = lines.get(timeout=self._start_timeout)
        except queue.Empty:
            raise PeerStartError(
                f"peer {self.kind} printed nothing within {self._start_timeout}s\n{self.stderr_text()}"
            ) from None
        if line is None or not line.startswith("READY "):
            raise PeerStartError(f"peer {self.kind} did not start (stdout: {line!r})\n{self.stderr_text()}")
        return int(line.split()[1])

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

    def __enter__(self) -> PeerServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.cleanup()

    def __repr__(self) -> str:
        where = self.url if self._port is not None else "not started"
        return f"PeerServer({self.kind!r}, {where})"


@contextlib.contextmanager
def run_peer(
    kind: str, *, port: int = 0, seal_state: bool = True, start_timeout: float = DEFAULT_START_TIMEOUT
) -> Iterator[PeerServer]:
    """Run a peer for the duration of a ``with`` block; always stopped on exit."""
    peer = PeerServer(kind, port=port, seal_state=seal_state, start_timeout=start_timeout)
    with peer:
        yield peer


@contextlib.asynccontextmanager
async def arun_peer(
    kind: str, *, port: int = 0, seal_state: bool = True, start_timeout: float = DEFAULT_START_TIMEOUT
) -> AsyncIterator[PeerServer]:
    """Async twin of `run_peer`: start/stop run in a worker thread so the event loop keeps going."""
    peer = PeerServer(kind, port=port, seal_state=seal_state, start_timeout=start_timeout)
    await anyio.to_thread.run_sync(peer.start)
    try:
        yield peer
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(peer.cleanup)
