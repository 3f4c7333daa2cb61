"""JSON and NDJSON of chains, for scripts: one object per chain, its headline and its messages in order.

Each chain object has the shape of the admin API's `GET /api/chains/{id}`: `{"chain": ChainSummary,
"messages": [MessageRecord, ...], "dropped_messages": N}`, bodies already redacted and bounded. A
capture's chains are written as the reader's bounded chain store lets them go (`ChainStore(on_gone=
...)`): by then nothing can join them, and the store, not the export, bounds what is held. They come
out oldest first, except that a chain still open when newer ones pushed it out of the ring comes out
when it ends. `docs/export.md` describes both files.

JSON is one document, `{"format": "mcp-debug-proxy-chains", "version": "1.5", "chains": [...],
"skipped": {...}}`, streamed chain by chain with what the reader skipped at its end; NDJSON is one
chain object per line and nothing else (what was skipped goes to stderr and the exit status).
Plain data and bytes: no I/O of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, Any, Final

import orjson

from proxy import __version__
from proxy.flows.filters import ChainFilter
from proxy.flows.store import Chain

FORMAT_NAME: Final = "mcp-debug-proxy-chains"
"""The `format` of a JSON export."""

FORMAT_VERSION: Final = "1.5"
"""The `version` of a JSON export (major.minor, the capture's rule: a newer minor only adds)."""


def chain_object(chain: Chain) -> dict[str, Any]:
    """One chain as scripts read it (the shape of `GET /api/chains/{id}`)."""
    return {
        "chain": chain.summary.model_dump(mode="json", exclude_none=True),
        "messages": [m.model_dump(mode="json", exclude_none=True) for m in chain.messages],
        "dropped_messages": chain.dropped_messages,
    }


class ChainsOut:
    """Writes each chain the filter keeps, as the store lets it go."""

    def __init__(self, write: Callable[[dict[str, Any]], None], keep: ChainFilter | None = None) -> None:
        self._write = write
        self._keep = keep or ChainFilter()
        self.written = 0

    def gone(self, chain: Chain) -> None:
        """A chain nothing can join any more: write it if it is wanted."""
        if self._keep.keeps(chain):
            self._write(chain_object(chain))
            self.written += 1


class JsonWriter:
    """Streams one JSON document of chains: head at once, each chain as given, the tail on `close`."""

    def __init__(self, out: IO[bytes], sources: list[str]) -> None:
        self._out = out
        self._count = 0
        self._sources = sources
        self._started = False

    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        head = {
            "format": FORMAT_NAME,
            "version": FORMAT_VERSION,
            "proxy_version": __version__,
            "sources": self._sources,
        }
        self._out.write(orjson.dumps(head)[:-1] + b',"chains":[')

    def write(self, obj: dict[str, Any]) -> None:
        """Append one chain object."""
        self._start()
        self._out.write(b"\n" if not self._count else b",\n")
        self._out.write(orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS))
        self._count += 1

    def close(self, skipped: dict[str, Any] | None, parts: dict[str, Any] | None = None) -> None:
        """End the document, with what the reader skipped and the parts given twice or missing (if
        anything)."""
        self._start()
        tail = b',"skipped":' + orjson.dumps(skipped) if skipped else b""
        tail += b',"parts":' + orjson.dumps(parts) if parts else b""
        self._out.write(b"\n]" + tail + b"}\n")


class NdjsonWriter:
    """Writes one chain object per line."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out

    def write(self, obj: dict[str, Any]) -> None:
        """Append one chain object as a line."""
        self._out.write(orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE))
