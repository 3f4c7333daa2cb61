"""A stdio MCP server as a message channel: the child process, its three pipes, its end.

The child runs in a process group of its own (`start_new_session`), so stopping it reaches whatever
it started too (`npx` starts `node`): its stdin is closed first (an MCP stdio server exits on EOF),
then the group gets SIGTERM, then SIGKILL after the grace. Should the proxy itself be killed
outright, the child gets SIGTERM from the kernel on Linux (`PR_SET_PDEATHSIG`, asked between fork
and exec), and sees its stdin close everywhere. Its stdout is newline-delimited JSON-RPC, each line
bounded by `max_body_bytes` (a longer one is dropped as it arrives and reported); its stderr goes to
the proxy's log as its own stream (`stream=upstream-stderr`), line by line, each line bounded and
at most `STDERR_LINES_PER_SECOND` lines a second (the rest are counted, the count logged when that
second is over).
What it writes while the proxy's own era probe is in flight (a handshake-era server's refusal of
`server/discover` is often a hundred lines of validation errors) is the proxy's doing, not news: once
the server has refused or answered the probe, those lines go to the log at debug only, summed up at
info in one line with their count. A probe with no such answer (the child exited, it timed out)
leaves them shown as any others, since they may say why.

The pipes are read through asyncio's subprocess protocol (no stream readers, no task per pipe): a
line of stdout reaches the channel's owner in the same loop turn its bytes arrived in.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import cast

from proxy.config_load import SECRET_ENV_VARS
from proxy.framing.http import masked_command, masked_text
from proxy.framing.ndjson import LineDecoder, Oversized, encode_line
from proxy.logs import get_logger
from proxy.transport.channel_upstream import ChannelEvents
from proxy.transport.tasks import spawn
from proxy.transport.upstream_pool import UpstreamError

STDERR_LINE_BYTES = 4096
"""Bytes of one stderr line logged whole; a longer one is logged as its first `EDGE_BYTES` (512),
marked with its full length."""
STDERR_LINES_PER_SECOND = 50
"""stderr lines logged per second at most; past it they are counted and the count logged once, when
the second is over."""
STDERR_TAIL_LINES = 5
"""stderr lines kept to explain an exit (the start-up message of a child that exits at once)."""
STDERR_TAIL_CHARS = 200
"""Characters of each of those lines kept."""
PROBE_HELD_LINES = 200
"""stderr lines written during the era probe held at most until its answer (all are counted)."""
STDIN_EOF_WAIT = 0.5
"""Seconds a stopping child gets after its stdin closed, before SIGTERM."""

shown_command = masked_command
"""The command as logs and screens show it: what may be a credential masked (`masked_command`)."""


def child_environment() -> dict[str, str]:
    """The proxy's environment less its own secrets: a stdio server (often a package fetched by npx)
    has no use for the admin token, `state_key` or `redact_key`, and one that shows its environment
    (server-everything's `get-env`) would hand them to any client."""
    return {name: value for name, value in os.environ.items() if name not in SECRET_ENV_VARS}


PR_SET_PDEATHSIG = 1
"""Linux prctl option: the signal a process gets when its parent dies (kept across exec)."""


def _linux_prctl() -> Callable[..., int] | None:
    """libc's `prctl` on Linux, else None (the child then relies on its stdin closing)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return cast(Callable[..., int], ctypes.CDLL(None, use_errno=True).prctl)
    except (OSError, AttributeError):
        return None


_PRCTL = _linux_prctl()


def parent_death_signal() -> Callable[[], None] | None:
    """What the child runs between fork and exec so it gets SIGTERM when the proxy dies, or None.

    A proxy killed outright (SIGKILL, the OOM killer) cannot stop its children; an MCP stdio server
    notices its stdin closing only once its current operation ends, which may be never. Should the
    proxy die before the child has asked, the child's parent is already another process: it ends
    itself at once.
    """
    prctl = _PRCTL
    if prctl is None:
        return None
    parent = os.getpid()

    def ask() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return ask


_START_HINTS = {
    errno.ENOENT: "Is it installed, and on PATH or named by its path?",
    errno.EACCES: "Is it an executable file?",
}


def start_failure(shown: str, program: str, exc: OSError) -> str:
    """Why the command could not be started, naming it and the OS error (`ENOENT`), with what to check."""
    code = errno.errorcode.get(exc.errno or 0, "")
    what = f"{exc.strerror or exc}" + (f" ({code})" if code else "")
    hint = _START_HINTS.get(exc.errno or 0, "")
    command = shown.removeprefix("stdio:")
    return (
        f"could not start the upstream command `{command}`: {masked_text(program)}: {what}. "
        f"{hint + ' ' if hint else ''}Check --upstream-cmd"
    )


def exit_reason(pid: int, code: int | None) -> str:
    """How the child ended, as a client's error message says it."""
    if code is None:
        return f"the upstream MCP server (pid {pid}) closed its stdout"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the upstream MCP server (pid {pid}) was killed by {name}"
    return f"the upstream MCP server (pid {pid}) exited with status {code}"


class StdioChannel(asyncio.SubprocessProtocol):
    """One child process speaking MCP on stdio (see the module docstring)."""

    def __init__(
        self,
        argv: Sequence[str],
        events: ChannelEvents,
        *,
        max_line: int,
        stop_grace: float,
        shown: str,
    ) -> None:
        self.argv = list(argv)
        self.events = events
        self.stop_grace = stop_grace
        self.shown = shown
        self.pid = 0
        self._transport: asyncio.SubprocessTransport | None = None
        self._stdin: asyncio.WriteTransport | None = None
        """The child's stdin, once looked up (every message is written there)."""
        self._lines = LineDecoder(max_line)
        self._stderr = _StderrLog(shown)
        self._asked = False
        self._reason = ""
        self._done: asyncio.Future[None] | None = None
        self._stopping: asyncio.Task[None] | None = None
        self._log = get_logger()

    async def start(self, headers: Iterable[tuple[str, str]] = ()) -> None:
        """Start the child (a process has no request headers: `headers` are not used)."""
        loop = asyncio.get_running_loop()
        self._done = loop.create_future()
        try:
            transport, _ = await loop.subprocess_exec(
                lambda: self,
                *self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                env=child_environment(),
                preexec_fn=parent_death_signal(),
            )
        except OSError as exc:
            raise UpstreamError("unreachable", start_failure(self.shown, self.argv[0], exc)) from None
        self._transport = transport
        self.pid = self._transport.get_pid()
        self._log.info("upstream_started", upstream=self.shown, pid=self.pid, transport="stdio")

    # -- asyncio.SubprocessProtocol ------------------------------------------------------------------

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1:
            self._deliver(self._lines.feed(data))
        else:
            self._stderr.feed(data, self.pid)

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 1:
            self._deliver(self._lines.end())
        elif fd == 2:
            self._stderr.end(self.pid)

    def process_exited(self) -> None:
        transport = self._transport
        code = transport.get_returncode() if transport is not None else None
        self._reason = exit_reason(self.pid, code)
        self._kill_group(signal.SIGTERM)  # what it started must not outlive it (and hold its pipes)

    def connection_lost(self, exc: Exception | None) -> None:
        """The child exited and its pipes closed: the channel is over."""
        reason = self._reason or exit_reason(self.pid, None)
        done = self._done
        if done is not None and not done.done():
            done.set_result(None)
        if self._transport is not None:
            self._transport.close()
        self.events.closed(reason, asked=self._asked, stderr=self._stderr.last_words())

    def _deliver(self, items: list[bytes | Oversized]) -> None:
        events = self.events
        for item in items:
            if isinstance(item, bytes):
                events.received(item)
            else:
                events.oversized(item.size, item.head, item.tail)

    # -- the owner's side ----------------------------------------------------------------------------

    def write(
        self, data: bytes, exchange: str | None, headers: Iterable[tuple[str, str]] | None = None
    ) -> None:
        stdin = self._stdin
        if stdin is None:
            transport = self._transport
            pipe = transport.get_pipe_transport(0) if transport is not None else None
            stdin = self._stdin = cast(asyncio.WriteTransport, pipe) if pipe is not None else None
        if stdin is None or stdin.is_closing():
            self.events.write_failed(exchange, "the upstream MCP server's stdin is closed")
            return
        stdin.write(encode_line(data))

    def probe_began(self) -> None:
        self._stderr.probe_began()

    def probe_ended(self, note: str | None, *, at_exit: bool = False) -> None:
        self._stderr.probe_ended(self.pid, note, at_exit=at_exit)

    def pause_reading(self) -> None:
        self._stdout_reading(pause=True)

    def resume_reading(self) -> None:
        self._stdout_reading(pause=False)

    def _stdout_reading(self, *, pause: bool) -> None:
        transport = self._transport
        stdout = transport.get_pipe_transport(1) if transport is not None else None
        if stdout is None or stdout.is_closing():
            return
        reader = cast(asyncio.ReadTransport, stdout)
        if pause:
            reader.pause_reading()
        else:
            reader.resume_reading()

    def stop(self, reason: str) -> None:
        if self._asked or self._done is None or self._done.done():
            return
        self._asked = True
        self._log.info("upstream_stopping", upstream=self.shown, pid=self.pid, reason=reason)
        self._stopping = spawn(self._stop(), name="upstream-stop")

    async def _stop(self) -> None:
        """stdin closed, then SIGTERM to the group, then SIGKILL to the group after the grace."""
        done = self._done
        assert done is not None
        transport = self._transport
        stdin = transport.get_pipe_transport(0) if transport is not None else None
        if stdin is not None:
            stdin.close()
        for sig, wait in ((signal.SIGTERM, STDIN_EOF_WAIT), (signal.SIGKILL, self.stop_grace)):
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await asyncio.shield(done)
                    return
            self._kill_group(sig)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.stop_grace):
                await asyncio.shield(done)

    async def stopped(self, grace: float) -> None:
        self.stop_grace = min(self.stop_grace, grace)
        if self._stopping is None:
            self.stop("the proxy is stopping")
        if self._stopping is not None:
            await self._stopping

    def _kill_group(self, sig: signal.Signals) -> None:
        if self.pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)


class _StderrLog:
    """The child's stderr as log lines: bounded in length and in rate. Lines written while the era
    probe is in flight are held until its answer: a server that took it as expected wrote them for
    the proxy (debug, and one summary), any other's are shown as they would have been."""

    def __init__(self, shown: str) -> None:
        self.shown = shown
        self._lines = LineDecoder(STDERR_LINE_BYTES)
        self._window = 0.0
        self._count = 0
        self._suppressed = 0
        self._tail: deque[bytes | Oversized] = deque(maxlen=STDERR_TAIL_LINES)
        """The last lines that held anything, as read, whether logged or suppressed: the lines that
        explain a crash come last, often after a flood. Turned into text only when asked for."""
        self._held: list[bytes | Oversized] | None = None
        """Lines written since the era probe began, the first `PROBE_HELD_LINES` (None: no probe is
        in flight); `_held_count` counts them all."""
        self._held_count = 0
        self._exit_note: str | None = None
        """How the lines held are summed up when the child ends (the probe stops it): None, as any
        child's last lines, which may say why it went."""
        self._flush_due: asyncio.TimerHandle | None = None
        """The count of lines suppressed is said when their second is over, not at the next line:
        a server that floods stderr once, then falls quiet, may write no next line for a long time."""
        self._log = get_logger()

    def probe_began(self) -> None:
        """Hold lines from now on, until `probe_ended` says how the server took the probe."""
        self._held, self._held_count = [], 0

    def probe_ended(self, pid: int, note: str | None, *, at_exit: bool = False) -> None:
        """The lines held: at debug, summed up in one info line (their count, the first that holds
        anything cut short, and `note`); with no `note` (the probe got no answer that tells an era),
        logged as any other lines would have been. `at_exit`: held on until the child ends, since the
        proxy stops it for the probe."""
        if at_exit and self._held is not None:
            self._exit_note = note
            return
        held, count = self._held, self._held_count
        self._held, self._held_count = None, 0
        if held is None:
            return
        if note is None:
            self._release(held, count, pid)
            return
        for item in held:
            self._log.debug(
                "upstream_stderr", stream="upstream-stderr", pid=pid, line=_text(item), probe=True
            )
        if held:
            first = next((t for t in (_text(item).strip() for item in held) if t), "")[:STDERR_TAIL_CHARS]
            self._log.info(
                "upstream_stderr_probe",
                stream="upstream-stderr",
                pid=pid,
                lines=count,
                first=first,
                note=note,
            )

    def _release(self, held: list[bytes | Oversized], count: int, pid: int) -> None:
        """Log held lines as if they came now (rate-bounded); those past the hold are suppressed."""
        for item in held:
            self._show(item, pid)
        self._suppressed += count - len(held)
        self._flush(pid)

    def last_words(self) -> str:
        """The last few stderr lines, each cut short and what may be a secret masked ("" for none)."""
        kept = (_text(item).strip() for item in self._tail)
        return " | ".join(t[:STDERR_TAIL_CHARS] + "..." if len(t) > STDERR_TAIL_CHARS else t for t in kept)

    def feed(self, data: bytes, pid: int) -> None:
        for item in self._lines.feed(data):
            self._line(item, pid)

    def end(self, pid: int) -> None:
        """The child closed its stderr (it is going away): held lines explain why, so they show now."""
        for item in self._lines.end():
            self._line(item, pid)
        self.probe_ended(pid, self._exit_note)
        self._flush(pid)

    def _line(self, item: bytes | Oversized, pid: int) -> None:
        if (item.head if isinstance(item, Oversized) else item).strip():
            self._tail.append(item)
        held = self._held
        if held is not None:  # the probe's lines count against no rate until they are told how to show
            self._held_count += 1
            if len(held) < PROBE_HELD_LINES:
                held.append(item)
            return
        self._show(item, pid)

    def _show(self, item: bytes | Oversized, pid: int) -> None:
        """Log one line at info, at most `STDERR_LINES_PER_SECOND` a second (the rest counted)."""
        now = time.monotonic()
        if now - self._window >= 1.0:
            self._flush(pid)
            self._window, self._count = now, 0
        self._count += 1
        if self._count > STDERR_LINES_PER_SECOND:
            self._suppressed += 1
            if self._flush_due is None:
                delay = max(0.0, self._window + 1.0 - now)
                self._flush_due = asyncio.get_running_loop().call_later(delay, self._flush, pid)
            return
        self._log.info("upstream_stderr", stream="upstream-stderr", pid=pid, line=_text(item))

    def _flush(self, pid: int) -> None:
        due, self._flush_due = self._flush_due, None
        if due is not None:
            due.cancel()
        if self._suppressed:
            self._log.warning(
                "upstream_stderr_suppressed",
                stream="upstream-stderr",
                pid=pid,
                lines=self._suppressed,
                reason=f"more than {STDERR_LINES_PER_SECOND} stderr lines a second",
            )
            self._suppressed = 0


def _text(item: bytes | Oversized) -> str:
    """One stderr line as text, what may be a secret in it masked (a token in a debug line)."""
    if isinstance(item, bytes):
        text = item.decode("utf-8", "replace")
    else:
        text = item.head.decode("utf-8", "replace") + f"... ({item.size} bytes)"
    return masked_text(text)
