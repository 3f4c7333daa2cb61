"""SSE events as the bytes they came in: a stream cut into whole events, and one event's message.

The gate (`proxy.transport.faults`) judges an SSE response event by event before writing it, and
writes each event's bytes as they came unless a fault changes that event. The incremental decoder
(`proxy.framing.sse`) gives parsed events; this keeps the raw bytes of each.
"""

from __future__ import annotations

from proxy.framing.sse import SseDecoder, SseEvent
from proxy.wire.jsonrpc import Message, parse_text


class EventSplitter:
    """Cuts an SSE byte stream into whole events (each with its blank line), bytes kept as they came."""

    def __init__(self) -> None:
        self.rest = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        data = self.rest + chunk
        events: list[bytes] = []
        start = 0
        while True:
            end = _event_end(data, start)
            if end < 0:
                break
            events.append(data[start:end])
            start = end
        self.rest = data[start:]
        return events


def _event_end(data: bytes, start: int) -> int:
    """Where the event beginning at `start` ends (after its blank line), or -1 if it has not yet."""
    best = -1
    for sep in (b"\n\n", b"\r\n\r\n", b"\r\r"):
        at = data.find(sep, start)
        if at >= 0 and (best < 0 or at + len(sep) < best):
            best = at + len(sep)
    return best


def event_message(raw: bytes) -> Message | None:
    """The JSON-RPC message an event carries, if any."""
    for item in SseDecoder().feed(raw + b"\n\n"):
        if isinstance(item, SseEvent) and item.carries_message:
            return parse_text(item.data)
    return None


def event_with_data(raw: bytes, data: str) -> bytes:
    """The event with its data replaced, its other fields (id, event) kept."""
    kept = [
        line
        for line in raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        if line and not line.startswith(b"data")
    ]
    return b"\n".join([*kept, b"data: " + data.encode()]) + b"\n\n"
