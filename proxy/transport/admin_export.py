"""The admin API's exports (`/api/export.har`, `.json`, `.ndjson`), built and sent piece by piece.

The admin API shares its event loop with the MCP traffic, and a full store (thousands of chains)
takes hundreds of milliseconds to draft and encode: done in one go, every call in flight would wait
that long. So the observations queued while nobody watched are built a piece at a time, and an
export is a generator of pieces, each a few milliseconds of work (`PIECE` chains
drafted or encoded), and the response yields to the loop between two of them; the bytes are the
same as if it were built whole.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterable, Iterator

from aiohttp import web

from proxy.flows.sink import ObservationSink
from proxy.flows.store import Chain
from proxy.record.chains_json import JsonWriter, NdjsonWriter, chain_object
from proxy.record.har import HarWriter
from proxy.record.har_live import LiveDrafts

PIECE = 25
"""Chains drafted or encoded (or HAR entries rendered) between two yields to the loop: a few ms."""

BUILD_PIECE = 100
"""Queued observations built into chains between two yields to the loop: a few ms."""


async def build_queued(sink: ObservationSink) -> None:
    """Build what waits to be built (after a quiet spell, thousands of observations) in pieces,
    letting the loop serve other work between two."""
    left = sink.build_some(BUILD_PIECE)
    while left:
        await asyncio.sleep(0)
        left = sink.build_some(BUILD_PIECE)
    sink.sweep()


async def stream_export(
    request: web.Request, content_type: str, pieces: Iterator[bytes]
) -> web.StreamResponse:
    """Send an export's pieces as they are made, letting the loop serve other work between two."""
    response = web.StreamResponse(headers={"Content-Type": content_type})
    await response.prepare(request)
    for piece in pieces:
        if piece:  # an empty write would end a chunked body
            await response.write(piece)
        await asyncio.sleep(0)
    await response.write_eof()
    return response


def har_pieces(chains: list[Chain], *, host: str, upstream: str, run: str | None = None) -> Iterator[bytes]:
    """A HAR 1.2 log of the chains' exchanges: nothing while the entries are drafted, then the log."""
    drafts = LiveDrafts(host=host, upstream=upstream, run=run)
    for n, chain in enumerate(chains, 1):
        drafts.add(chain)
        if n % PIECE == 0:
            yield b""
    buffer = io.BytesIO()
    writer = HarWriter(buffer)
    for n, entry in enumerate(drafts.entries(), 1):
        writer.write(entry)
        if n % PIECE == 0:
            yield _taken(buffer)
    writer.close()
    yield _taken(buffer)


def json_pieces(chains: Iterable[Chain], sources: list[str]) -> Iterator[bytes]:
    """One JSON document of the chains, each with its messages (`proxy.record.chains_json`)."""
    buffer = io.BytesIO()
    writer = JsonWriter(buffer, sources)
    for n, chain in enumerate(chains, 1):
        writer.write(chain_object(chain))
        if n % PIECE == 0:
            yield _taken(buffer)
    writer.close(None)
    yield _taken(buffer)


def ndjson_pieces(chains: Iterable[Chain]) -> Iterator[bytes]:
    """The chains, one JSON object per line."""
    buffer = io.BytesIO()
    writer = NdjsonWriter(buffer)
    for n, chain in enumerate(chains, 1):
        writer.write(chain_object(chain))
        if n % PIECE == 0:
            yield _taken(buffer)
    yield _taken(buffer)


def _taken(buffer: io.BytesIO) -> bytes:
    """What the buffer holds, leaving it empty for the next piece."""
    data = buffer.getvalue()
    buffer.seek(0)
    buffer.truncate()
    return data
