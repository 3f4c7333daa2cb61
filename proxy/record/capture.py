"""The versioned JSONL capture: the on-disk form of a proxy run, written live and read back later.

A capture file is one header line, `{"format": "mcp-debug-proxy-capture", "version": "1.16",
"created": <epoch seconds>, "proxy_version": "...", "follows": <the previous file's created>,
"series": <the first file's created>}`, then
one line per observation (`{"type": "obs", ...}`, see `proxy.record.observations`), which the
reader builds into events as a live watcher would have seen them, or one `FlowEvent` (the proxy's own
`proxy_info`, or lines of other writers). `follows` is absent from the first file a run starts, and
`series` is that file's `created` in it and in every file that follows it.
`docs/capture-format.md` is the reference: every line type and field, and the version rule
(`major.minor`: a reader refuses a newer major by name and reads a newer minor, ignoring what it does
not know).

The writer is synchronous and buffered (the transport hands it a few milliseconds' lines at a time,
one write(2) per flush, never through a queue that could drop them), rotates by size, and reopens on
request for external log rotation. The reader validates the header, tolerates a final line cut
short by a killed proxy, and skips any other bad line, counting it and naming it by number.

Events arrive here already redacted and bounded (`proxy.flows.redact`); observations are redacted by
`ObservationEncoder` with the proxy's own redactor before they are written.
It drives no traffic and imports neither aiohttp, structlog, textual nor the engine or transport.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Final, get_args

import orjson
from pydantic import ValidationError

from proxy import __version__
from proxy.flows.events import FlowEvent, ProxyInfo, event_from_json, event_to_json
from proxy.record.capture_gap import GAP_PREFIX, CaptureGap, parse_gap
from proxy.record.observations import OBS_PREFIX, ObservationReplayer, UnknownKind
from proxy.record.old_header_text import headers_as_text, stores_latin1

FORMAT_NAME: Final = "mcp-debug-proxy-capture"
"""The `format` value of every capture header."""

FORMAT_MAJOR: Final = 1
"""The capture format major version this code writes and reads (any minor of it)."""

FORMAT_MINOR: Final = 16
"""The minor version this code writes: a newer minor only adds fields or observation kinds."""

FORMAT_VERSION: Final = f"{FORMAT_MAJOR}.{FORMAT_MINOR}"
"""The `version` of every header this code writes."""

HEADER_PREFIX: Final = b'{"format":"' + FORMAT_NAME.encode() + b'"'
"""How every capture file this code writes begins (its header line's first member)."""
_MAX_HEADER_LINE: Final = 64 * 1024
WRITE_BUFFER: Final = 1024 * 1024
"""Bytes buffered between flushes: the writer's owner flushes on a short timer, so a busy proxy makes
one write(2) per flush instead of one per 8 KiB of lines."""


def _known_event_types() -> frozenset[str]:
    union = get_args(FlowEvent)[0]
    return frozenset(str(member.model_fields["type"].default) for member in get_args(union))


KNOWN_EVENT_TYPES: Final[frozenset[str]] = _known_event_types()
"""The `type` tags this version understands; lines with other tags come from a newer proxy."""


class CaptureError(OSError):
    """A capture file could not be opened, written or rotated; the message names the path."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


class CaptureFormatError(ValueError):
    """A file is not a readable capture (wrong format, newer version, corrupt line); names path and line."""

    def __init__(self, message: str, path: Path, line: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.reason = message
        self.path = path
        self.line = line


def make_header(created: float, follows: float | None = None, series: float | None = None) -> dict[str, Any]:
    """Build the header object that starts every capture file, so readers can check what they hold.

    `follows` is the `created` of the file the writer wrote before this one (a rotation or a reopen
    started this one): a reader given parts with one left out between them can tell, and say so.
    `series` is the `created` of the first file of those parts (None: not known, and not written): a
    reader tells a part missing from one capture's parts from another capture given beside them.
    """
    header: dict[str, Any] = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "created": created,
        "proxy_version": __version__,
    }
    if follows is not None:
        header["follows"] = follows
    if series is not None:
        header["series"] = series
    return header


def header_time(header: dict[str, Any], name: str) -> float | None:
    """A header's time field (`created`, `follows`, `series`) as a number, or None when absent or not one."""
    value = header.get(name)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def check_header(obj: Any, path: Path) -> dict[str, Any]:
    """Validate a decoded header line, so a foreign file or a newer format fails with a clear message."""
    if not isinstance(obj, dict) or obj.get("format") != FORMAT_NAME:
        raise CaptureFormatError(f"not a {FORMAT_NAME} file (first line is not a capture header)", path, 1)
    version = obj.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version >= 1:
        raise CaptureFormatError(
            f"capture format {version} (chain-builder calls) predates the observation schema "
            f"({FORMAT_VERSION}); open it with the mcp-proxy that wrote it",
            path,
            1,
        )
    major = parse_version(version)
    if major is None:
        raise CaptureFormatError(f"capture header has an invalid version {version!r}", path, 1)
    if major > FORMAT_MAJOR:
        raise CaptureFormatError(
            f"capture format {version} is newer than this mcp-proxy reads ({FORMAT_MAJOR}.x); "
            "upgrade mcp-proxy",
            path,
            1,
        )
    return obj


def newer_minor(header: dict[str, Any]) -> bool:
    """Whether a checked header's minor version is newer than the one this code writes: only such a
    file can hold kinds and types this version does not know; in any other, an unknown one is damage."""
    minor = minor_version(header)
    return minor is not None and minor > FORMAT_MINOR


def minor_version(header: dict[str, Any]) -> int | None:
    """The minor of a checked header's version, or None when it has none."""
    version = header.get("version")
    minor = version.partition(".")[2] if isinstance(version, str) else ""
    return int(minor) if minor.isdigit() else None


def file_minor(f: IO[bytes]) -> int | None:
    """The minor version the header line of an open capture names; None when it names none.

    Reads from the file's start (its position is left after the header line), for readers that take
    lines from a capture without a `CaptureReader`: the tail shown first, the records built back from
    an index. Each reads a file whose header was checked by the pass that chose it.
    """
    f.seek(0)
    try:
        header = orjson.loads(f.readline(_MAX_HEADER_LINE))
    except orjson.JSONDecodeError:
        return None
    return minor_version(header) if isinstance(header, dict) else None


def parse_version(version: Any) -> int | None:
    """The major of a `major.minor` version string, or None when malformed."""
    if not isinstance(version, str):
        return None
    major, dot, minor = version.partition(".")
    if not (major.isdigit() and dot and minor.isdigit()) or int(major) < 1:
        return None
    return int(major)


class CaptureWriter:
    """Appends flow events to a JSONL capture, with size rotation and reopen for external log rotation.

    `max_bytes > 0` caps each file: an event that would push the current file past it first moves
    `run.jsonl` to `run.jsonl.1` (older files shift up to `.{keep}`; the oldest is deleted; `keep=0`
    keeps none) and starts a new file. A single event larger than `max_bytes` still gets a file of its
    own. Every new file starts with a header, the latest `ProxyInfo` event when the writer has seen
    one, and the `preamble` lines (what is still open, repeated), so each file is readable on its own.
    Opening an existing capture appends to it (dropping a final line cut short by a killed proxy);
    opening a file that is not a capture raises `CaptureError` rather than writing into it.
    """

    def __init__(
        self,
        path: Path,
        *,
        max_bytes: int = 0,
        keep: int = 5,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0 (0 disables rotation), got {max_bytes}")
        if keep < 0:
            raise ValueError(f"keep must be >= 0, got {keep}")
        self._path = Path(path)
        self._max_bytes = max_bytes
        self._keep = keep
        self._clock = clock
        self._file: IO[bytes] | None = None
        self._size = 0  # bytes in the current file, buffered ones included
        self._flushed = 0  # bytes of the current file the OS had at the last flush: it never holds fewer
        self._own_events = 0
        self._bytes_written = 0
        self._events_written = 0
        self._proxy_info: bytes | None = None
        self._created: float | None = None
        """The `created` of the file being written: the next file's header says it `follows` it."""
        self._series: float | None = None
        """The `created` of the first file of the parts being written, which each new part repeats."""
        self._closed = False
        self.preamble: Callable[[], list[bytes]] | None = None
        """Lines to start every new file with, after the header and `proxy_info` (on rotation and
        reopen): the sink's repeated opening lines, so each file is readable on its own."""
        self.on_cut: Callable[[int, int], None] | None = None
        """Told `(bytes found, bytes flushed)` when the file turned out shorter than what was flushed
        into it (`logrotate`'s `copytruncate`) and was started again, so its owner can say so."""
        self._open()

    # -- public ------------------------------------------------------------------------------

    @property
    def path(self) -> Path:
        """The path the writer appends to (rotated files sit beside it as `<path>.1` ...)."""
        return self._path

    @property
    def bytes_written(self) -> int:
        """Bytes this writer has written across all files, headers included (for metrics)."""
        return self._bytes_written

    @property
    def events_written(self) -> int:
        """Events this writer has written across all files, repeated `ProxyInfo` lines included."""
        return self._events_written

    @property
    def closed(self) -> bool:
        """True once `close()` was called; further writes raise `CaptureError`."""
        return self._closed

    def write(self, event: FlowEvent) -> None:
        """Append one event (buffered), rotating first if it would overflow `max_bytes`."""
        if self._closed:
            raise CaptureError(f"capture writer for {self._path} is closed", self._path)
        line = event_to_json(event) + b"\n"
        is_info = isinstance(event, ProxyInfo)
        if self._max_bytes > 0 and self._own_events > 0 and self._size + len(line) > self._max_bytes:
            self._rotate(repeat_info=not is_info)
        self._put(line)
        self._own_events += 1
        self._events_written += 1
        if is_info:
            self._proxy_info = line

    def write_lines(self, lines: list[bytes], wrote: Callable[[int, int], None] | None = None) -> None:
        """Append lines already encoded, together; a line that would overflow `max_bytes` rotates first.

        `wrote(start, end)` hears of each run of `lines[start:end]` once it is in a file, before the
        next rotation, so the `preamble` a new file starts with already counts them.
        """
        if not lines:
            return
        if self._closed:
            raise CaptureError(f"capture writer for {self._path} is closed", self._path)
        self._start_again_if_cut()
        start, pending = 0, 0
        if self._max_bytes > 0:
            for i, line in enumerate(lines):
                held = self._own_events + i - start
                if held > 0 and self._size + pending + len(line) > self._max_bytes:
                    self._put_lines(lines, start, i, wrote)
                    self._rotate(repeat_info=True)
                    start, pending = i, 0
                pending += len(line)
        self._put_lines(lines, start, len(lines), wrote)

    def _put_lines(
        self, lines: list[bytes], start: int, end: int, wrote: Callable[[int, int], None] | None
    ) -> None:
        if start >= end:
            return
        chunk = lines if start == 0 and end == len(lines) else lines[start:end]
        self._put(b"".join(chunk))
        self._own_events += end - start
        self._events_written += end - start
        if wrote is not None:
            wrote(start, end)

    def flush(self) -> None:
        """Push buffered lines to the OS so readers tailing the file see them."""
        if self._file is not None:
            try:
                self._file.flush()
            except OSError as exc:
                raise self._error("cannot write capture file", exc) from exc
            self._flushed = self._size

    def close(self) -> None:
        """Flush and close the file; safe to call twice."""
        self._closed = True
        self._close_file()

    def reopen(self) -> None:
        """Close and reopen the same path (after an external tool moved it away, e.g. on SIGUSR1)."""
        if self._closed:
            raise CaptureError(f"capture writer for {self._path} is closed", self._path)
        with contextlib.suppress(CaptureError):  # what the old file could not take (a full disk) is
            self._close_file()  # lost with it; the new one starts clean
        self._open()
        self.flush()  # the new file is a capture at once (its header), not only after the next exchange

    def __enter__(self) -> CaptureWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------

    def _error(self, what: str, exc: OSError, path: Path | None = None) -> CaptureError:
        target = path or self._path
        return CaptureError(f"{what} {target}: {exc.strerror or exc}", target)

    def _open(self, *, repeat_info: bool = True) -> None:
        path = self._path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._error("cannot create the directory for capture file", exc) from exc
        try:
            size = self._prepare_existing(path)
            self._file = path.open("ab", buffering=WRITE_BUFFER)
        except CaptureError:
            raise
        except OSError as exc:
            raise self._error("cannot open capture file", exc) from exc
        if not _lock(self._file):
            self._close_file()
            raise CaptureError(
                f"capture file {path} is being written by another process (it holds the file's lock): "
                "give each proxy a capture path of its own",
                path,
            )
        self._size = self._flushed = size
        # Events written into this file by write(); an existing capture counts as holding some, so it
        # can be rotated, while a fresh file always takes at least one event (no rotation loop).
        self._own_events = 1 if size else 0
        if size == 0:
            self._start_file(repeat_info=repeat_info)

    def _prepare_existing(self, path: Path) -> int:
        """Check an existing file is a capture and cut a torn final line; return its size."""
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            return 0
        if size == 0:
            return 0
        with path.open("r+b") as f:
            first = f.readline(_MAX_HEADER_LINE)
            if not first.endswith(b"\n"):
                if HEADER_PREFIX.startswith(first) or first.startswith(HEADER_PREFIX):
                    f.truncate(0)  # only a torn header was ever written
                    return 0
                raise CaptureError(f"refusing to append to {path}: it is not a {FORMAT_NAME} file", path)
            try:
                header = check_header(orjson.loads(first), path)
            except (orjson.JSONDecodeError, CaptureFormatError) as exc:
                reason = exc.reason if isinstance(exc, CaptureFormatError) else "first line is not JSON"
                raise CaptureError(f"refusing to append to {path}: {reason}", path) from exc
            self._created = header_time(header, "created")
            self._series = _series_of(header)
            return _cut_torn_tail(f, size)

    def _start_again_if_cut(self) -> None:
        """Start the file again when something truncated it under the writer (`copytruncate`).

        The file is opened for appending, so the lines after a truncation would land in a file with no
        header, which every reader refuses. Checked once a batch of lines (a flush's worth), before they
        are put, with one fstat: the OS never holds fewer bytes than the last flush gave it unless the
        file was cut. The file is then emptied and started as a reopen starts one (header, the latest
        `proxy_info`, what is still open), so the batch lands in a readable file.
        """
        f = self._file
        if f is None or self._flushed == 0:
            return
        try:
            found = os.fstat(f.fileno()).st_size
        except OSError:
            return
        if found >= self._flushed:
            return
        flushed = self._flushed
        try:
            f.flush()  # empty after the last flush but for a `write` since: that lands in the cut file
            os.ftruncate(f.fileno(), 0)  # a partial truncation leaves a cut line: nothing of it is kept
        except OSError as exc:
            raise self._error("cannot start again the truncated capture file", exc) from exc
        self._size = self._flushed = 0
        self._own_events = 0
        self._start_file(repeat_info=True)
        if self.on_cut is not None:
            self.on_cut(found, flushed)

    def _start_file(self, *, repeat_info: bool) -> None:
        follows, self._created = self._created, self._clock()
        if follows is None:
            self._series = self._created
        header = orjson.dumps(make_header(self._created, follows, self._series)) + b"\n"
        self._put(header)
        if repeat_info and self._proxy_info is not None:
            self._put(self._proxy_info)
            self._events_written += 1
        if self.preamble is not None:
            for line in self.preamble():
                self._put(line)

    def _put(self, data: bytes) -> None:
        if self._file is None:
            raise CaptureError(f"capture file {self._path} is not open", self._path)
        try:
            self._file.write(data)
        except OSError as exc:
            raise self._error("cannot write capture file", exc) from exc
        self._size += len(data)
        self._bytes_written += len(data)

    def _close_file(self) -> None:
        f, self._file = self._file, None
        if f is not None:
            try:
                f.close()
            except OSError as exc:
                raise self._error("cannot write capture file", exc) from exc

    def _rotate(self, *, repeat_info: bool) -> None:
        self._close_file()
        path = self._path
        try:
            if self._keep == 0:
                path.unlink(missing_ok=True)
            else:
                for i in range(self._keep - 1, 0, -1):
                    older = _numbered(path, i)
                    if older.exists():
                        os.replace(older, _numbered(path, i + 1))
                if path.exists():
                    os.replace(path, _numbered(path, 1))
        except OSError as exc:
            raise self._error("cannot rotate capture file", exc) from exc
        self._open(repeat_info=repeat_info)


def _series_of(header: dict[str, Any]) -> float | None:
    """The `series` a file appended to belongs to: its own, else its `created` when it follows no file
    (it started its parts); None when it follows a file and names no series (written before `series`)."""
    series = header_time(header, "series")
    if series is not None or "follows" in header:
        return series
    return header_time(header, "created")


def being_written(path: Path) -> bool:
    """Whether a running proxy holds the capture file's lock now (it is writing it): its open calls
    may still be running. The lock is tried and let go at once; a filesystem without locks says no."""
    try:
        with path.open("rb") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            except OSError:
                return False
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
    except OSError:
        return False
    return False


def _lock(f: IO[bytes]) -> bool:
    """Take the file's advisory lock for this writer; False when another process holds it.

    Two writers of one path would rotate each other's files away and cut each other's lines where a
    buffered write splits one. A filesystem without locks (some network mounts) cannot tell: it passes.
    """
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True


def _numbered(path: Path, n: int) -> Path:
    return path.with_name(f"{path.name}.{n}")


def _cut_torn_tail(f: IO[bytes], size: int) -> int:
    """Truncate a file after its last newline (a killed writer leaves half a line); return the new size."""
    f.seek(size - 1)
    if f.read(1) == b"\n":
        return size
    pos = size
    chunk = 4096
    while pos > 0:
        start = max(0, pos - chunk)
        f.seek(start)
        data = f.read(pos - start)
        nl = data.rfind(b"\n")
        if nl >= 0:
            end = start + nl + 1
            f.truncate(end)
            return end
        pos = start
    f.truncate(0)  # unreachable for a file whose first line ended with a newline
    return 0


MAX_CORRUPT_SHOWN: Final = 20
"""Corrupt lines a reader describes (all of them are counted)."""

MAX_UNKNOWN_SHOWN: Final = 20
"""Lines of kinds or types a newer minor wrote that a reader names (all of them are counted)."""

MAX_GAPS_SHOWN: Final = 20
"""`capture_gap` lines a reader keeps to describe (all of them are counted)."""


class _CutShort(Exception):
    """The last line was cut short (a killed writer): the end of what can be read."""


class _Unknown(Exception):
    """A line of an event type or observation kind from a newer proxy: skipped, counted and named
    (its message says which type or kind)."""


class CaptureReader:
    """Reads a capture back as FlowEvents, checking its header first so foreign or newer files fail clearly.

    Iterate to get events in file order. A final line without its newline that does not parse (a proxy
    killed mid-write) is skipped and `truncated` becomes True; a bad line anywhere else is skipped too,
    counted in `corrupt_lines` and described in `corrupt` (line number and reason, the first
    `MAX_CORRUPT_SHOWN`), so one damaged line never hides the rest of a capture; `strict=True` raises
    `CaptureFormatError` naming its line number instead. Lines of a `type` or `kind` this version does
    not know are skipped: counted in `skipped_unknown` (the first `MAX_UNKNOWN_SHOWN` named in
    `unknown`) when a newer minor wrote the file, and as
    corrupt lines in a file of this minor or an older one (which has no such type or kind: the line
    is damaged).
    `replayer` lets several files (a capture and its rotated parts) share one observation replayer.
    """

    def __init__(
        self, path: Path, *, strict: bool = False, replayer: ObservationReplayer | None = None
    ) -> None:
        self._path = Path(path)
        try:
            self._file: IO[bytes] = self._path.open("rb")
        except OSError as exc:
            raise CaptureError(
                f"cannot open capture file {self._path}: {exc.strerror or exc}", self._path
            ) from exc
        try:
            self._header = self._read_header()
        except BaseException:
            self._file.close()
            raise
        self.truncated = False
        """True if the last line was cut short and skipped."""
        self.truncated_line: int | None = None
        """The number of that line."""
        self.unfinished_line: int | None = None
        """The number of a last line a running proxy is still writing (it holds the file's lock):
        left out as not yet written, not counted as cut short."""
        self.skipped_unknown = 0
        """Lines skipped because their event `type` or observation `kind` is unknown to this version."""
        self.unknown: list[tuple[int, str]] = []
        """Line number and what it was (`kind 'x'`, `type 'x'`) of the first `MAX_UNKNOWN_SHOWN` of them."""
        self.corrupt_lines = 0
        """Lines skipped because they could not be read (see `corrupt`)."""
        self.corrupt: list[tuple[int, str]] = []
        """Line number and reason of the first `MAX_CORRUPT_SHOWN` corrupt lines."""
        self.gap_lines = 0
        """`capture_gap` lines read: stretches of the run the writer did not record."""
        self.gaps: list[tuple[int, CaptureGap]] = []
        """Line number and content of the first `MAX_GAPS_SHOWN` of them."""
        self._strict = strict
        self._iterating = False
        self.line_start = 0
        """Where the line being read starts in the file (an index keeps where each record's line is)."""
        self._replayer: ObservationReplayer | None = replayer
        self._newer = newer_minor(self._header)
        """Whether a newer minor wrote the file: its unknown kinds and types are skipped and counted
        apart; in a file of this minor or an older one they are corrupt lines."""
        self._latin1_headers = stores_latin1(minor_version(self._header))
        """Whether the file stores header values as latin-1 readings (before 1.10): read as text."""

    @property
    def replayer(self) -> ObservationReplayer | None:
        """The replayer of its observation lines (shared by rotated parts), once one was needed."""
        return self._replayer

    @property
    def path(self) -> Path:
        """The file being read."""
        return self._path

    @property
    def position(self) -> int:
        """Bytes of the file read so far (how far an index pass has come)."""
        return self._file.tell()

    @property
    def header(self) -> dict[str, Any]:
        """The decoded header line (format, version, created, proxy_version, and any newer fields)."""
        return self._header

    def _read_header(self) -> dict[str, Any]:
        first = self._file.readline(_MAX_HEADER_LINE)
        if not first:
            raise CaptureFormatError("capture is empty (no header line)", self._path, 1)
        try:
            obj = orjson.loads(first)
        except orjson.JSONDecodeError as exc:
            if not first.endswith(b"\n") and first.startswith(HEADER_PREFIX[: len(first)]):
                raise CaptureFormatError("capture header was cut short", self._path, 1) from exc
            raise CaptureFormatError(
                f"not a {FORMAT_NAME} file (first line is not JSON)", self._path, 1
            ) from exc
        return check_header(obj, self._path)

    def __iter__(self) -> Iterator[FlowEvent]:
        if self._iterating:
            raise RuntimeError("a CaptureReader can be iterated once")
        self._iterating = True
        return self._events()

    def _events(self) -> Iterator[FlowEvent]:
        if self._replayer is not None:
            self._replayer.start_file()
        lineno = 1
        start = self._file.tell()
        for raw in self._file:
            self.line_start = start
            start += len(raw)
            lineno += 1
            if not raw.strip():
                continue
            try:
                if raw.startswith(OBS_PREFIX):
                    events = self._replay(raw, lineno)
                    if events is None:
                        self._cut_short(lineno)
                        return
                    yield from events
                    continue
                if raw.startswith(GAP_PREFIX):
                    self._gap(raw, lineno)
                    continue
                event = self._event(raw, lineno)
                if type(event) is ProxyInfo:  # names the endpoint; another run's ends what the last left open
                    yield from self._run_began(event)
                yield event
            except CaptureFormatError as exc:
                if self._strict:
                    raise
                self._skip(exc)
            except _CutShort:
                self._cut_short(lineno)
                return
            except _Unknown as exc:
                self.skipped_unknown += 1
                if len(self.unknown) < MAX_UNKNOWN_SHOWN:
                    self.unknown.append((lineno, str(exc)))

    def _cut_short(self, lineno: int) -> None:
        """The last line has no newline and does not parse: a line a running proxy is writing now
        (it holds the file's lock) is left out as not yet written; otherwise its writer stopped."""
        if being_written(self._path):
            self.unfinished_line = lineno
        else:
            self.truncated, self.truncated_line = True, lineno

    def _run_began(self, info: ProxyInfo) -> list[FlowEvent]:
        """The events a `proxy_info` line makes before it (another run's ends the calls the earlier
        run left open)."""
        if self._replayer is None:
            self._replayer = ObservationReplayer()
        return self._replayer.proxy_info(info)

    def _skip(self, exc: CaptureFormatError) -> None:
        self.corrupt_lines += 1
        if len(self.corrupt) < MAX_CORRUPT_SHOWN:
            self.corrupt.append((exc.line or 0, exc.reason))
        if self._replayer is None:
            self._replayer = ObservationReplayer()
        self._replayer.line_skipped(f"{self._path}:{exc.line or 0}")

    def _gap(self, raw: bytes, lineno: int) -> None:
        """A `capture_gap` line: kept for the report, never built into events."""
        try:
            gap = parse_gap(orjson.loads(raw))
        except orjson.JSONDecodeError:
            if not raw.endswith(b"\n"):
                raise _CutShort from None
            raise CaptureFormatError("corrupt capture_gap line (not JSON)", self._path, lineno) from None
        except ValueError as exc:
            raise CaptureFormatError(f"corrupt capture_gap line: {exc}", self._path, lineno) from None
        self.gap_lines += 1
        if len(self.gaps) < MAX_GAPS_SHOWN:
            self.gaps.append((lineno, gap))

    def _event(self, raw: bytes, lineno: int) -> FlowEvent:
        try:
            return event_from_json(raw)
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
            if not raw.endswith(b"\n") and any(e["type"] == "json_invalid" for e in errors):
                raise _CutShort from None
            if all(e["type"] == "union_tag_invalid" for e in errors) and _has_unknown_type(raw):
                if self._newer:
                    raise _Unknown(f"type {_type_text(raw)}") from None
                raise CaptureFormatError(
                    f"corrupt event line: unknown type {_type_text(raw)} (capture format "
                    f"{self._header['version']} has no such type)",
                    self._path,
                    lineno,
                ) from None
            detail = errors[0]["msg"] if errors else str(exc)
            if any(e["type"] == "json_invalid" for e in errors):  # which kind of line it was is unknown
                self._lose_opening(_opened_exchange(raw), lineno)  # unless its text still says
                raise CaptureFormatError(f"corrupt line (not JSON): {detail}", self._path, lineno) from None
            loc = ".".join(str(p) for p in errors[0]["loc"]) if errors and errors[0]["loc"] else ""
            raise CaptureFormatError(
                f"corrupt event line: {detail}" + (f" (at {loc})" if loc else ""), self._path, lineno
            ) from None

    def _replay(self, raw: bytes, lineno: int) -> list[FlowEvent] | None:
        """The events an observation line builds; None for a last line cut short."""
        if self._replayer is None:
            self._replayer = ObservationReplayer()
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            if not raw.endswith(b"\n"):
                return None
            self._lose_opening(_opened_exchange(raw), lineno)
            raise CaptureFormatError("corrupt observation line (not JSON)", self._path, lineno) from None
        if self._latin1_headers:
            headers_as_text(line)
        try:
            return self._replayer.replay(line)
        except UnknownKind:
            kind = str(line.get("kind"))[:64]
            if self._newer:
                raise _Unknown(f"kind {kind!r}") from None
            if isinstance(line.get("exchange"), str) and "http_method" in line:  # only an opening has both
                self._lose_opening(line["exchange"], lineno)
            raise CaptureFormatError(
                f"corrupt observation line: unknown kind {kind!r} (capture format "
                f"{self._header['version']} has no such kind)",
                self._path,
                lineno,
            ) from None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            exchange = line.get("exchange") if isinstance(line, dict) else None
            if isinstance(line, dict) and line.get("kind") == "exchange_opened" and isinstance(exchange, str):
                self._lose_opening(exchange, lineno)
            reason = f"corrupt observation line: {_problem(exc)}"[:300]
            raise CaptureFormatError(reason, self._path, lineno) from None

    def _lose_opening(self, exchange: str | None, lineno: int) -> None:
        """A skipped line opened `exchange`: the replayer leaves the exchange's later lines out and
        counts them, so the report says what went with it."""
        if not exchange or self._strict:
            return
        if self._replayer is None:
            self._replayer = ObservationReplayer()
        self._replayer.opening_lost(exchange[:128], f"{self._path}:{lineno}")

    def close(self) -> None:
        """Close the file."""
        self._file.close()

    def __enter__(self) -> CaptureReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


_OPENING_KIND: Final = re.compile(rb'"kind"\s*:\s*"exchange_opened"')
_EXCHANGE_ID: Final = re.compile(rb'"exchange"\s*:\s*"([^"\\]{1,128})"')


def _opened_exchange(raw: bytes) -> str | None:
    """The exchange a line that does not parse opened, as far as its text still says (its members in
    any order and spacing); None when it is no `exchange_opened` line, or its id is gone."""
    if _OPENING_KIND.search(raw) is None:
        return None
    found = _EXCHANGE_ID.search(raw)
    return found.group(1).decode("utf-8", "replace") if found is not None else None


def _problem(exc: Exception) -> str:
    """What is wrong with an observation line, in words (never an exception's repr, `KeyError('msg')`)."""
    if isinstance(exc, KeyError):
        return f"no {exc.args[0]!r} field" if exc.args else "a field is missing"
    if isinstance(exc, AttributeError):
        return "a field holds a value of the wrong type"
    text = str(exc)
    return (
        f"a field holds a value of the wrong type ({text})"
        if isinstance(exc, TypeError)
        else text or "bad value"
    )


def _has_unknown_type(raw: bytes) -> bool:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return False
    return isinstance(obj, dict) and isinstance(obj.get("type"), str) and obj["type"] not in KNOWN_EVENT_TYPES


def _type_text(raw: bytes) -> str:
    """An event line's `type`, quoted and bounded (the line is known to be a JSON object with one)."""
    return repr(str(orjson.loads(raw).get("type"))[:64])


def read_capture(path: Path) -> Iterator[FlowEvent]:
    """Yield every event of a capture file, for exports; corrupt lines are skipped (see `CaptureReader`).

    Raises `CaptureFormatError` for a file that is not a readable capture (header).
    """
    with CaptureReader(path) as reader:
        yield from reader
