"""A body's `Content-Encoding`, undone for observation: the bytes on the wire stay as they are.

Clients that send `Accept-Encoding` (browsers, Node's fetch, httpx, aiohttp) get compressed answers
from servers behind compression middleware. The proxy relays those bytes unchanged and decodes a
copy for what it shows. Decoding is incremental and bounded: each step yields pieces of at most
`PIECE` bytes, so a small body that inflates hugely (a zip bomb) never sits in memory whole, and the
caller stops pulling pieces once it has seen enough. Codings the standard library cannot undo
(`br`, `zstd`, `compress`) are named by `undecodable`, never guessed at.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Iterator
from typing import Final

PIECE: Final = 64 * 1024
"""Most decoded bytes one step yields: what a decoder holds at once, however much the input inflates."""

DECODED: Final = frozenset({"gzip", "x-gzip", "deflate"})
"""The codings the proxy undoes for observation (zlib's, in the standard library)."""

_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS
_RAW_DEFLATE_WBITS: Final = -zlib.MAX_WBITS


class CodingError(ValueError):
    """The bytes are not what their declared coding produces."""


def content_codings(content_encoding: str | None) -> tuple[str, ...]:
    """The codings a `Content-Encoding` value names, lower-cased, in the order applied (no `identity`)."""
    if not content_encoding:
        return ()
    named = (token.strip().lower() for token in content_encoding.split(","))
    return tuple(token for token in named if token and token != "identity")


def undecodable(codings: Iterable[str]) -> str | None:
    """The first of `codings` the proxy cannot undo, or None when it can undo them all."""
    return next((coding for coding in codings if coding not in DECODED), None)


class _Inflater:
    """Undoes one zlib-based coding: gzip (several members in a row too) or deflate."""

    __slots__ = ("_gzip", "_obj", "_started")

    def __init__(self, coding: str) -> None:
        self._gzip = coding != "deflate"
        self._obj = zlib.decompressobj(_GZIP_WBITS if self._gzip else zlib.MAX_WBITS)
        self._started = False
        """Output came already: a deflate body is no longer retried as raw deflate."""

    def feed(self, data: bytes) -> Iterator[bytes]:
        """The decoded pieces of `data`, each at most `PIECE` bytes, made as they are pulled."""
        while True:
            out = self._decompress(data)
            obj = self._obj
            data = obj.unconsumed_tail
            if out:
                self._started = True
                yield out
            if obj.eof:
                # gzip allows members in a row; anything after a deflate stream is not part of it.
                data = obj.unused_data if self._gzip else b""
                if data:
                    self._obj = zlib.decompressobj(_GZIP_WBITS)
            if not data and len(out) < PIECE:  # a full piece may leave output inside zlib
                return

    def _decompress(self, data: bytes) -> bytes:
        try:
            return self._obj.decompress(data, PIECE)
        except zlib.error as exc:
            if self._gzip or self._started:
                raise CodingError(str(exc)) from None
        # `deflate` means the zlib format, but some servers send raw deflate: retry it as that.
        self._obj = zlib.decompressobj(_RAW_DEFLATE_WBITS)
        self._started = True
        try:
            return self._obj.decompress(data, PIECE)
        except zlib.error as exc:
            raise CodingError(str(exc)) from None


class ContentDecoder:
    """Undoes a body's codings chunk by chunk, the last applied first; each is one of `DECODED`."""

    __slots__ = ("_stages",)

    def __init__(self, codings: tuple[str, ...]) -> None:
        self._stages = tuple(_Inflater(coding) for coding in reversed(codings))

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        """The decoded pieces of one relayed chunk, made as they are pulled (CodingError: not decodable).

        A caller that stops pulling stops the decoding there; the rest of the chunk is not decoded.
        """
        pieces: Iterable[bytes] = (chunk,)
        for stage in self._stages:
            pieces = _through(stage, pieces)
        return iter(pieces)


def _through(stage: _Inflater, pieces: Iterable[bytes]) -> Iterator[bytes]:
    for piece in pieces:
        yield from stage.feed(piece)
