"""Feeding the capture file: every observation, straight from the observation sink, never via the bus.

The capture records observations (see `proxy.flows.observations`), whether or not chains are built,
and no bounded queue stands between them and the file: a slow writer, a full bus or a chain evicted
from the store never costs the capture a record. The only events written are the proxy's own
(`ProxyInfo`), handed over directly. Observations are held as they happen, encoded at the end of the
loop turn (after the turn's responses went out, a few at a time, so no request waits behind a whole
flush's encoding) and written together `FLUSH_INTERVAL` after the first of them (or at
`MAX_PENDING`, or before the next event, so the file keeps the order things happened in): a write(2)
per few milliseconds, not one per exchange.

A file truncated under the proxy (`logrotate`'s `copytruncate`) is started again at the next flush,
as a reopen starts one, and said once each time (`capture_truncated`).

While the file refuses writes (`capture_failed`), nothing is encoded, but the table of what is still
open keeps hearing what ends, and what opens (kept unencoded, bounded), and a few counters say how
much went by: the file a reopen starts then repeats only what is really open, also what opened
meanwhile, so its later lines have their exchange, followed by a `capture_gap` line saying what was
not recorded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from proxy.flows.events import FlowEvent
from proxy.flows.observations import ExchangeClosed, ExchangeOpened, Observation
from proxy.logs import get_logger
from proxy.record.capture import CaptureError, CaptureWriter
from proxy.record.capture_gap import GapCount
from proxy.record.observations import ObservationEncoder, OpenLines

FLUSH_INTERVAL = 0.01
"""Seconds a captured line may wait in the writer's buffer before it is flushed to the file."""

MAX_PENDING = 4096
"""Observations held for the next flush before they are encoded and written at once, whatever the timer
says."""


class CaptureSink:
    """Writes observations and events to one capture writer, flushing on a short timer."""

    def __init__(
        self, writer: CaptureWriter, encoder: ObservationEncoder, clock: Callable[[], float] = time.time
    ) -> None:
        self.writer = writer
        self._clock = clock
        self._gap: GapCount | None = None
        """What went by since writing stopped (None while the file takes writes)."""
        self._encoder = encoder
        self._flush: asyncio.TimerHandle | None = None
        self._failed = False
        self._closing = False
        self._taken: list[Observation] = []
        self._lines: list[bytes] = []
        self._encoded: list[Observation] = []  # the observations of `_lines`, in order
        self._encoding = False
        self._open = OpenLines()
        writer.preamble = self._open.preamble  # a new file repeats what is still open
        writer.on_cut = self._file_cut

    def observe_all(self, batch: Sequence[Observation]) -> None:
        """Take observations in order (a listener of the observation sink)."""
        for obs in batch:
            self.observe(obs)

    def observe(self, obs: Observation) -> None:
        """Take one observation (on the traffic path): encoded later this loop turn, written at the flush."""
        if self._failed:
            self._missed(obs)
            return
        self._taken.append(obs)
        if len(self._taken) + len(self._lines) >= MAX_PENDING:
            self._flush_now()
            return
        if not self._encoding:
            try:
                asyncio.get_running_loop().call_soon(self._encode)
                self._encoding = True
            except RuntimeError:
                self._encode()
        if self._flush is None:
            self._schedule()

    def event(self, event: FlowEvent) -> None:
        """Write one event that is no observation (the proxy's `ProxyInfo`), after the observations before."""
        if self._failed:
            return
        self._write_lines()
        try:
            self.writer.write(event)
        except CaptureError as exc:
            self._fail(exc)
            return
        self._schedule()

    def close(self) -> None:
        """Write what is held, flush and close the file (the proxy is stopping); later observations and
        events are ignored. A file that refuses the last lines is said once, as during the run: the stop
        goes on (it drained the traffic), whatever the disk does."""
        self._cancel()
        self._write_lines()
        if not self._failed:
            try:
                self.writer.flush()
            except CaptureError as exc:
                self._fail(exc)
        try:
            self.writer.close()
        except CaptureError as exc:
            if not self._failed:  # else said already: what the file could not take is lost with it
                self._fail(exc)
        self._closing = True
        self._failed = True
        self._gap = None

    def _encode(self) -> None:
        """Encode the observations taken so far, once a loop turn, after the turn's responses went out.

        Encoding a whole flush's observations at once would hold up the requests arriving meanwhile.
        """
        self._encoding = False
        taken, self._taken = self._taken, []
        if taken and not self._failed:
            encode = self._encoder.encode
            self._lines += [encode(obs) for obs in taken]
            self._encoded += taken

    def _write_lines(self) -> None:
        self._encode()
        lines, self._lines = self._lines, []
        written, self._encoded = self._encoded, []
        if self._failed:
            return
        opened = self._open

        def wrote(start: int, end: int) -> None:  # before a rotation: the new file repeats these
            for i in range(start, end):
                opened.wrote(written[i], lines[i])

        try:
            self.writer.write_lines(lines, wrote)
        except CaptureError as exc:
            self._fail(exc)
            for obs in written:  # the write that failed: counted as not written, its ends still heard
                self._missed(obs)

    def _fail(self, exc: CaptureError) -> None:
        self._failed = True  # said once; the traffic goes on without its capture
        if not self._closing:
            self._gap = GapCount(self._clock())
        get_logger().error("capture_failed", error=str(exc))

    def _file_cut(self, found: int, flushed: int) -> None:
        """The file was truncated under the proxy (`copytruncate`) and started again: said at each."""
        get_logger().warning(
            "capture_truncated",
            path=str(self.writer.path),
            found_bytes=found,
            written_bytes=flushed,
            hint="the file was started again with a header and what is still open; lines written between "
            "the copy and the truncation are in neither file: rotate with a move and SIGUSR1 instead",
        )

    def _missed(self, obs: Observation) -> None:
        """An observation the file does not get: what it ends leaves the open table, and it is counted."""
        gap = self._gap
        if gap is None:  # closing: nothing more is written anywhere
            return
        self._open.unwritten(obs)
        gap.observations += 1
        kind = type(obs)
        if kind is ExchangeOpened:
            gap.exchanges_opened += 1
        elif kind is ExchangeClosed:
            gap.exchanges_ended += 1

    def _schedule(self) -> None:
        if self._flush is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self._flush_now()
                return
            self._flush = loop.call_later(FLUSH_INTERVAL, self._flush_now)

    def _flush_now(self) -> None:
        self._flush = None
        self._write_lines()
        if self._failed:
            return
        try:  # the OS takes the lines here: a full disk or a lost mount shows now, not at the write
            self.writer.flush()
        except CaptureError as exc:
            self._fail(exc)

    def resume(self) -> bool:
        """Write again after a failure, into the file just reopened (SIGUSR1); whether it had failed.

        What arrived meanwhile is lost; the new file repeats what is still open, as a rotated one does,
        and the opening lines of what opened meanwhile and is still open, then a `capture_gap` line
        says what was not recorded.
        """
        if not self.failed:
            return False
        self._failed = False
        gap, self._gap = self._gap, None
        if gap is not None:
            try:
                opened = self._open.unwritten_lines(self._encoder.encode)
                self.writer.write_lines([*opened, gap.ended(self._clock()).line()])
                self.writer.flush()
            except CaptureError as exc:
                self._fail(exc)
        return True

    @property
    def failed(self) -> bool:
        """The capture stopped being written (`capture_failed` said why); traffic goes on without it."""
        return self._failed and not self._closing

    def _cancel(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
