"""Newline-delimited JSON framing (the stdio transport): bytes in, bounded lines out.

MCP's stdio transport carries one JSON-RPC message per line, UTF-8, with no embedded newline. The
decoder splits a byte stream into lines without ever holding more than `limit` bytes of one: a line
that grows past it is dropped as it arrives and reported once it ends (`Oversized`), with a few
bytes of its start and end kept so the reader can still tell which request it answered. A CR before
the LF is dropped too (a Windows peer), and blank lines are skipped. No I/O and no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

EDGE_BYTES = 512
"""Bytes kept of an oversized line's start and of its end (where a JSON-RPC `id` usually sits)."""


@dataclass(frozen=True, slots=True)
class Oversized:
    """A line longer than the limit ended; only its edges were kept."""

    size: int
    """The line's length in bytes, newline excluded."""
    head: bytes
    tail: bytes


class LineDecoder:
    """Splits a byte stream into lines of at most `limit` bytes each (see the module docstring)."""

    __slots__ = ("_buf", "_head", "_held", "_skipped", "_tail", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._buf: list[bytes] = []
        self._held = 0
        """Bytes in `_buf` (a line's start, waiting for its newline)."""
        self._skipped = -1
        """Bytes of an oversized line dropped so far; -1 while no line is being dropped."""
        self._head = b""
        self._tail = b""

    @property
    def held(self) -> int:
        """Bytes of an unfinished line held now (never more than `limit`)."""
        return self._held

    def feed(self, data: bytes) -> list[bytes | Oversized]:
        """The lines (and oversized lines) that `data` completes, in order."""
        out: list[bytes | Oversized] = []
        start = 0
        if self._skipped >= 0:
            newline = data.find(b"\n")
            if newline < 0:
                self._skip(data)
                return out
            self._skip(data[:newline])
            out.append(self._end_skip())
            start = newline + 1
        limit = self.limit
        while True:
            newline = data.find(b"\n", start)
            if newline < 0:
                break
            if self._buf:
                self._buf.append(data[start:newline])
                line = b"".join(self._buf)
                self._buf.clear()
                self._held = 0
            else:
                line = data[start:newline]
            start = newline + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            if len(line) > limit:
                out.append(Oversized(len(line), line[:EDGE_BYTES], line[-EDGE_BYTES:]))
            elif line.strip():
                out.append(line)
        if start < len(data):
            self._hold(data[start:] if start else data)
        return out

    def end(self) -> list[bytes | Oversized]:
        """The stream ended: a last line without its newline, if any."""
        if self._skipped >= 0:
            return [self._end_skip()]
        if not self._buf:
            return []
        line = b"".join(self._buf).rstrip(b"\r")
        self._buf.clear()
        self._held = 0
        return [line] if line.strip() else []

    def _hold(self, part: bytes) -> None:
        self._buf.append(part)
        self._held += len(part)
        if self._held > self.limit:  # past the bound: keep the edges, drop the rest as it comes
            held = b"".join(self._buf)
            self._buf.clear()
            self._held = 0
            self._skipped = 0
            self._head = b""
            self._skip(held)

    def _skip(self, part: bytes) -> None:
        self._skipped += len(part)
        if len(self._head) < EDGE_BYTES:
            self._head += part[: EDGE_BYTES - len(self._head)]
        self._tail = (self._tail + part[-EDGE_BYTES:])[-EDGE_BYTES:]

    def _end_skip(self) -> Oversized:
        size, self._skipped = self._skipped, -1
        tail, self._tail = self._tail, b""
        head, self._head = self._head, b""
        if tail.endswith(b"\r"):
            tail, size = tail[:-1], size - 1
            head = head[:size]
        return Oversized(size, head, tail)


def encode_line(data: bytes) -> bytes:
    """One message's JSON as a line on the wire (the caller's JSON holds no raw newline)."""
    return data + b"\n"
