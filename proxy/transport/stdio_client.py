"""A stdio client in front of the proxy: JSON-RPC lines on stdin, answers as lines on stdout.

`mcp-proxy stdio` is itself a stdio MCP server a desktop client launches. The client's lines are
read with the bounded line decoder (a line over `max_body_bytes` is refused with a JSON-RPC error
and skipped, never held whole) and served through the proxy's engines by a `ChannelClientShell`;
every message for the client is one line on stdout. Nothing else ever reaches stdout: `protocol_pipes`
moves the process's own stdout onto stderr before anything runs, so a stray print (the proxy's or a
library's) cannot corrupt the protocol. The end of stdin ends the session once what the client
sent has been answered (`finish_input`: at most `drain_grace` seconds, or until a signal); then what
is still in flight is cancelled, a legacy session is ended upstream, and `serve_stdio` returns.

A wrapped server (the shim, `mcp-proxy stdio -- CMD`) that dies during the start-up era probe, or
cannot be started, ends the run before stdin is read (`server_never_up`). One that exits on its own
later ends the run too
(`serve_stdio` returns why): a stdio client learns that its server is gone when the server's stdout
closes, and stdio hosts start a server again rather than initialize again on the same pipe, so the
proxy stops reading, lets the errors of the calls in flight out (bounded by `CLOSE_GRACE`), and closes
stdout, as the server would have. Restarting the child behind the client's back would hide the crash
and lose the session's state, which the client believes it still has.
"""

from __future__ import annotations

import asyncio
import os
import stat
import sys
from collections.abc import Coroutine
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, cast

from proxy.flows.observations import PROXY_STOPPING
from proxy.framing.ndjson import LineDecoder, Oversized
from proxy.logs import get_logger
from proxy.transport.channel_client import CLOSE_GRACE, ChannelClientShell, Serving
from proxy.transport.channel_upstream import ChannelUpstream
from proxy.transport.client_side import ClientGone
from proxy.transport.tasks import spawn

READ_CHUNK = 256 * 1024
"""Bytes read from stdin at a time when it is a plain file (a pipe is read as data comes)."""


def is_pipe(fd: int) -> bool:
    """Whether `fd` can be watched by the event loop: a pipe, a socket or a terminal.

    A plain file or `/dev/null` (`< requests.jsonl`, `> answers.jsonl`) cannot: asyncio refuses it
    and uvloop aborts the whole process, so those are read in a thread and written directly.
    """
    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


@dataclass(frozen=True, slots=True)
class ProtocolPipes:
    """The descriptors the protocol owns: the client's stdin, and a private copy of the real stdout."""

    stdin: int
    stdout: int


def protocol_pipes() -> ProtocolPipes:
    """Take stdin and stdout for the protocol; from now on fd 1 and `sys.stdout` write to stderr."""
    sys.stdout.flush()
    out = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return ProtocolPipes(stdin=0, stdout=out)


class _Writer(asyncio.Protocol):
    """stdout as a write pipe: lines written at once, a wait while the client reads slowly."""

    def __init__(self) -> None:
        self.transport: asyncio.WriteTransport | None = None
        self.closed = False
        self.drain: asyncio.Future[None] | None = None
        """Set while the pipe is full: resolved when the client has read enough."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.WriteTransport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._wake()

    def pause_writing(self) -> None:
        if self.drain is None:
            self.drain = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        self._wake()

    def _wake(self) -> None:
        drain, self.drain = self.drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)


class _FileTransport(asyncio.WriteTransport):
    """stdout when it is a plain file or `/dev/null`: each write goes straight to the file.

    Writing to a file never waits on a reader, so there is nothing to pause; `close` tells the writer
    the channel is gone, as a closed pipe would.
    """

    def __init__(self, fd: int, protocol: _Writer) -> None:
        super().__init__()
        self._fd = fd
        self._protocol = protocol
        self._closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing:
            return
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError as exc:
            self._closing = True
            self._protocol.connection_lost(exc)

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self._protocol.connection_lost(None)


class StdoutChannel:
    """The `ChannelOut` of a stdio client: one line per message on stdout."""

    def __init__(self, writer: _Writer) -> None:
        self._writer = writer

    def send(self, data: bytes) -> None:
        writer = self._writer
        if writer.closed or writer.transport is None or writer.transport.is_closing():
            raise ClientGone("stdout closed")
        writer.transport.write(data + b"\n")

    async def room(self) -> None:
        writer = self._writer
        if writer.closed:
            raise ClientGone("stdout closed")
        drain = writer.drain
        if drain is not None:
            await drain
            if writer.closed:
                raise ClientGone("stdout closed")

    def full(self) -> bool:
        """The client reads more slowly than lines come: the pipe is full (`room` waits)."""
        return self._writer.drain is not None

    def close(self) -> None:
        transport = self._writer.transport
        if transport is not None:
            transport.close()


class _Reader(asyncio.Protocol):
    """stdin as a read pipe, split into bounded lines for the shell."""

    def __init__(self, shell: ChannelClientShell, limit: int, ended: asyncio.Event) -> None:
        self.shell = shell
        self.decoder = LineDecoder(limit)
        self.ended = ended
        """Set when stdin ends (the client is done)."""
        self.eof = False

    def data_received(self, data: bytes) -> None:
        self._lines(self.decoder.feed(data))

    def eof_received(self) -> bool:
        self._lines(self.decoder.end())
        self.eof = True
        self.ended.set()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof = True
        self.ended.set()

    def _lines(self, lines: list[bytes | Oversized]) -> None:
        for line in lines:
            if isinstance(line, Oversized):
                self.shell.oversized(line.size, line.head)
            else:
                self.shell.receive(line)


LOST_PREFIX = "mcp-proxy stdio is stopping: its server is gone"
"""How the errors of the client's messages not sent yet begin once the wrapped server is gone."""

NEVER_UP_PREFIX = "mcp-proxy stdio cannot serve: its server did not start"
"""How the one stderr line begins when the wrapped server died (or could not be started) at start-up."""


def server_never_up(serving: Serving) -> str | None:
    """Why the server a shim wraps is not running once the start-up era probe gave no era: it exited
    during the probe (its status, its last stderr lines) or could not be started; else None.

    A client that launched the shim (an IDE) must see that at once, as it would without the proxy,
    not a live process that answers every request with an error; a child the probe merely found
    silent is still running its command, and an HTTP upstream is another process's to start.
    """
    upstream = serving.relays.pool
    if not isinstance(upstream, ChannelUpstream) or upstream.transport != "stdio":
        return None
    if serving.router.eras.known or (upstream.last_exit is None and not upstream.start_failure):
        return None
    return serving.router.problem or upstream.start_failure or None


async def serve_stdio(serving: Serving, pipes: ProtocolPipes, stop: asyncio.Event) -> str | None:
    """Serve the stdio client on `pipes` until it closes stdin (or `stop` is set), then end cleanly.

    Returns why the run ended early, when the wrapped server exited on its own or never started
    (else None); in the latter case stdin is never read.
    """
    never_up = server_never_up(serving)
    if never_up is not None:
        get_logger().error(
            "stdio_server_not_started",
            reason=never_up,
            action="exit 1 without reading stdin: the client sees its server fail to start",
        )
        return f"{NEVER_UP_PREFIX} ({never_up})"
    loop = asyncio.get_running_loop()
    writer = _Writer()
    if is_pipe(pipes.stdout):
        await loop.connect_write_pipe(
            lambda: writer, os.fdopen(pipes.stdout, "wb", buffering=0, closefd=False)
        )
    else:
        writer.connection_made(_FileTransport(pipes.stdout, writer))
    out = StdoutChannel(writer)
    shell = ChannelClientShell(serving, out, transport="stdio", peer="stdio", full=out.full)
    ended = asyncio.Event()
    reader = _Reader(shell, serving.settings.max_body_bytes, ended)
    log = get_logger()
    read_task: asyncio.Future[Any] | None = None
    stdin = os.fdopen(pipes.stdin, "rb", buffering=0, closefd=False)
    transport: asyncio.BaseTransport | None = None
    if is_pipe(pipes.stdin):
        transport, _ = await loop.connect_read_pipe(lambda: reader, stdin)
    else:  # a plain file (`< requests.jsonl`): no pipe to watch, so read it in a thread
        read_task = loop.run_in_executor(None, _read_file, loop, stdin, reader)
    lost = _watch_server(serving, shell)
    log.info("stdio_client_ready", upstream=serving.relays.upstream.shown)
    try:
        await _first(stop.wait(), ended.wait(), lost.wait())
        if shell.gone is not None:
            if transport is not None:
                transport.close()  # what the client sends from now on is for a server that is gone
            await _settle(shell, stop, CLOSE_GRACE)
        elif not stop.is_set():
            await finish_input(shell, stop, serving.settings.drain_grace)
    finally:
        if shell.gone is not None:
            reason = "its server is gone"
        else:
            reason = "stdin closed" if reader.eof else "the proxy is stopping"
        log.info("stdio_client_closed", reason=reason)
        await shell.close(PROXY_STOPPING if stop.is_set() else "client_disconnected")
        if transport is not None:
            transport.close()
        if read_task is not None:
            read_task.cancel()
        with suppress(Exception):
            out.close()
    return shell.gone


def _watch_server(serving: Serving, shell: ChannelClientShell) -> asyncio.Event:
    """An event set when the server a shim wraps exits on its own (never set for an HTTP upstream,
    whose server the proxy did not start and whose sessions a client may start again)."""
    lost = asyncio.Event()
    upstream = serving.relays.pool
    if not isinstance(upstream, ChannelUpstream) or upstream.transport != "stdio":
        return lost

    def gone(why: str) -> None:
        if shell.gone is None:
            get_logger().error(
                "stdio_server_lost",
                reason=why,
                action="stdout closed, exit 1: the client sees its server go, as without the proxy",
            )
            shell.server_gone(f"{LOST_PREFIX} ({why})")
            lost.set()

    upstream.on_lost = gone
    return lost


async def _settle(shell: ChannelClientShell, stop: asyncio.Event, grace: float) -> None:
    """Let what is in flight end (the server's exit already failed it), at most `grace` seconds."""
    with suppress(TimeoutError):
        async with asyncio.timeout(grace):
            await _first(shell.settled(), stop.wait())


async def finish_input(shell: ChannelClientShell, stop: asyncio.Event, grace: float) -> None:
    """stdin ended: wait for the answers to what the client sent, at most `grace` seconds or a signal.

    The end of stdin is also the end of a file of requests (`< requests.jsonl`), whose answers are the
    point of the run; a desktop client that quits closes stdin too, and then has nothing in flight or
    stops waiting for the answers it no longer needs with a signal.
    """
    in_flight = shell.in_flight
    if not in_flight:
        return
    get_logger().info("stdio_input_ended", in_flight=in_flight, grace_s=grace)
    await _settle(shell, stop, grace)


async def _first(*waits: Coroutine[Any, Any, Any]) -> None:
    """Run `waits` until the first of them ends; cancel the others."""
    tasks = [spawn(wait, name="stdio-wait") for wait in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


def _read_file(loop: asyncio.AbstractEventLoop, stdin: Any, reader: _Reader) -> None:
    """Read a stdin that is a plain file to its end, handing each chunk to the loop."""
    while chunk := stdin.read(READ_CHUNK):
        loop.call_soon_threadsafe(reader.data_received, chunk)
    loop.call_soon_threadsafe(reader.eof_received)
