"""Indexing a big capture for the TUI: the index pass in a child process, and what it hands back.

The pass (`python -m proxy.record.index`) builds every chain of the file with a core to itself, so the
screen stays live while it runs; this side reads its lines as they come (progress, each chain's final
headline and where its messages are, the other events) and, when it ends, holds the spill file open
and unlinked (it goes away with this process, whatever happens) to read a chain's messages back when
it is shown. The child is stopped if the reader is cancelled (the TUI quits mid-pass).

May import only `proxy.flows` and `proxy.record` (the UI's import contract).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import tempfile
import threading
import weakref
from array import array
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import orjson
from pydantic import ValidationError

from proxy.flows.events import ChainSummary, FlowEvent, MessageRecord, event_from_json
from proxy.record.index import read_records
from proxy.record.record_refs import RecordBuilder

LINE_LIMIT: Final = 16 * 1024 * 1024
"""Longest line the index pass writes (a chain's headline and its record offsets)."""

READ_CHUNK: Final = 256 * 1024
"""Bytes of the pass's output read at a time."""

_SHARED_TEXT: Final = (
    "session",
    "client_name",
    "client_era",
    "upstream_era",
    "client_transport",
    "upstream_transport",
    "method",
    "name",
)
"""Headline fields whose few distinct values repeat across thousands of chains: held once each."""

_ALL_FIELDS: Final = set(ChainSummary.model_fields)
"""Every headline field: the `fields_set` all indexed headlines share (see `Headlines`)."""


class Headlines:
    """Turns the index pass's headlines into `ChainSummary` objects that cost as little memory as can be.

    The TUI holds one headline per chain of the file, tens of thousands of them. Two things would
    make each several times bigger than its fields: pydantic's per-object set of the fields given
    (a hash table of some twenty names), and a copy of each repeated string (a session, a method, a
    client's name). Every headline here shares one set naming every field (pydantic only adds to it
    when a field is assigned, and each name is in it already), and each repeated value is held once.
    """

    def __init__(self) -> None:
        self._texts: dict[str, str] = {}

    def __call__(self, data: dict[str, Any]) -> ChainSummary:
        """The headline of one `indexed` line's `chain` object."""
        texts = self._texts
        for name in _SHARED_TEXT:
            value = data.get(name)
            if isinstance(value, str):
                data[name] = texts.setdefault(value, value)
        summary = ChainSummary.model_validate(data)
        object.__setattr__(summary, "__pydantic_fields_set__", _ALL_FIELDS)
        return summary


class IndexFailed(Exception):
    """The index pass stopped before its end; the message says why (its last error line)."""


@dataclass(frozen=True, slots=True)
class IndexReady:
    """Every chain of an indexed capture, to show instead of its newest part."""

    chains: list[tuple[ChainSummary, Sequence[int], int]]
    """Each chain's final headline, where its messages are in the spill file, how many were not kept."""
    events: list[FlowEvent]
    """The capture's other events (proxy info, sessions, continuations), in order."""
    load: Callable[[Sequence[int]], list[MessageRecord]]
    """Reads a chain's messages back from the spill file."""
    end: dict[str, Any] = field(default_factory=dict)
    """The pass's `index_end` line: lines it skipped and why, files cut short, chains."""


class Spill:
    """The index's spill file, open and already unlinked, and the capture it indexed (opened before the
    pass began): a chain's messages are built from them on demand (the spill says where in the capture
    each one's lines are)."""

    def __init__(self, path: Path, builder: RecordBuilder) -> None:
        self._lock = threading.Lock()
        """Held while the files are read: the screen reads a chain back while a body search, in a
        thread, reads others, and each read seeks the same files."""
        self._file: IO[bytes] = path.open("rb")
        path.unlink()
        self._builder = builder
        # Closed when nothing can read them any more (the model let go of its loader) or at exit.
        self._closer = weakref.finalize(self, _close, self._file, self._builder)

    def load(self, offsets: Sequence[int]) -> list[MessageRecord]:
        """The records at these offsets; one whose capture lines changed since the pass is left out."""
        records: list[MessageRecord] = []
        with self._lock:
            for offset in offsets:
                try:
                    records.extend(read_records(self._file, (offset,), self._builder))
                except (ValueError, KeyError, TypeError):  # the capture was rewritten (or closed at exit)
                    continue
        return records

    def close(self) -> None:
        """Close the file (its space is freed then)."""
        with self._lock:
            self._closer()


def _close(spill: IO[bytes], builder: RecordBuilder) -> None:
    spill.close()
    builder.close()


Progress = Callable[[int, int], Awaitable[None]]


async def index_capture(paths: Sequence[Path], progress: Progress) -> IndexReady:
    """Run the index pass over the capture files (oldest first); `progress(read, total)` hears how far.

    Raises IndexFailed when the pass fails.
    """
    try:
        builder = RecordBuilder(paths)  # the files the pass reads, held however they are renamed later
    except OSError as exc:
        raise IndexFailed(f"cannot open the capture: {exc.strerror or exc}") from exc
    workdir = Path(tempfile.mkdtemp(prefix="mcp-proxy-index-"))
    spill_path = workdir / "records.jsonl"
    spill: Spill | None = None
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "proxy.record.index",
            "--spill",
            str(spill_path),
            *(str(p) for p in paths),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            chains, events, end = await _gather(proc, progress)
            errors = await proc.stderr.read() if proc.stderr is not None else b""
            if await proc.wait() != 0 or end is None:
                last = errors.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no reason given"]
                raise IndexFailed(f"indexing stopped: {last[0]}")
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        spill = Spill(spill_path, builder)
        return IndexReady(chains, events, spill.load, end)
    finally:
        if spill is None:
            builder.close()
        shutil.rmtree(workdir, ignore_errors=True)


async def _gather(
    proc: asyncio.subprocess.Process, progress: Progress
) -> tuple[list[tuple[ChainSummary, Sequence[int], int]], list[FlowEvent], dict[str, Any] | None]:
    chains: list[tuple[ChainSummary, Sequence[int], int]] = []
    events: list[FlowEvent] = []
    end: dict[str, Any] | None = None
    headline = Headlines()
    assert proc.stdout is not None
    async for lines in output_lines(proc.stdout):
        for line in lines:
            if line.startswith(b'{"type":"index_progress"'):
                obj = orjson.loads(line)
                await progress(obj["read"], obj["total"])
            else:
                end = _take(line, headline, chains, events) or end
    return chains, events, end


def _take(
    line: bytes,
    headline: Headlines,
    chains: list[tuple[ChainSummary, Sequence[int], int]],
    events: list[FlowEvent],
) -> dict[str, Any] | None:
    """Keep one line of the pass (a chain, or another event); the `index_end` object when it is that."""
    if line.startswith(b'{"type":"indexed"'):
        obj = orjson.loads(line)
        chains.append((headline(obj["chain"]), array("q", obj["records"]), obj["dropped"]))
    elif line.startswith(b'{"type":"index_end"'):
        end: dict[str, Any] = orjson.loads(line)
        return end
    elif line.strip():
        with contextlib.suppress(ValidationError):  # an event type from a newer proxy: skipped
            events.append(event_from_json(line))
    return None


async def output_lines(stream: asyncio.StreamReader) -> AsyncIterator[list[bytes]]:
    """The pass's lines, as many at a time as have arrived (one wait per chunk read, not per line)."""
    held: list[bytes] = []
    held_size = 0
    while chunk := await stream.read(READ_CHUNK):
        cut = chunk.rfind(b"\n")
        if cut < 0:
            held.append(chunk)
            held_size += len(chunk)
            if held_size > LINE_LIMIT:
                raise IndexFailed(f"the index pass wrote a line of more than {LINE_LIMIT} bytes")
            continue
        held.append(chunk[:cut])
        yield b"".join(held).split(b"\n")
        held = [chunk[cut + 1 :]]
        held_size = len(held[0])
    if held_size:
        yield [b"".join(held)]
