"""Behaviour of the incremental Content-Encoding decoder (proxy.framing.content_coding)."""

from __future__ import annotations

import gzip
import zlib
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.framing.content_coding import (
    PIECE,
    CodingError,
    ContentDecoder,
    content_codings,
    undecodable,
)

TEXT = b'{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"' + b"hello " * 5000 + b'"}]}}'


def raw_deflate(data: bytes) -> bytes:
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return packer.compress(data) + packer.flush()


def decode(codings: tuple[str, ...], *chunks: bytes) -> bytes:
    decoder = ContentDecoder(codings)
    return b"".join(piece for chunk in chunks for piece in decoder.feed(chunk))


@pytest.mark.parametrize(
    ("value", "codings"),
    [
        (None, ()),
        ("", ()),
        ("identity", ()),
        ("GZIP", ("gzip",)),
        ("gzip, br", ("gzip", "br")),
        (" deflate ,identity", ("deflate",)),
    ],
)
def test_a_header_names_its_codings_in_the_order_applied(value: str | None, codings: tuple[str, ...]) -> None:
    assert content_codings(value) == codings


def test_only_gzip_and_deflate_are_undone_and_the_first_other_is_named() -> None:
    assert undecodable(("gzip", "x-gzip", "deflate")) is None
    assert undecodable(("gzip", "br", "zstd")) == "br"


@pytest.mark.parametrize(
    ("codings", "encoded"),
    [
        (("gzip",), gzip.compress(TEXT)),
        (("x-gzip",), gzip.compress(TEXT)),
        (("deflate",), zlib.compress(TEXT)),
        (("deflate",), raw_deflate(TEXT)),  # what some servers send for `deflate`
        (("gzip",), gzip.compress(TEXT[:100]) + gzip.compress(TEXT[100:])),  # two members in a row
        (("deflate", "gzip"), gzip.compress(zlib.compress(TEXT))),  # the last applied is undone first
    ],
    ids=["gzip", "x-gzip", "zlib-deflate", "raw-deflate", "gzip-members", "deflate-then-gzip"],
)
def test_each_coding_decodes_back_to_the_body(codings: tuple[str, ...], encoded: bytes) -> None:
    assert decode(codings, encoded) == TEXT


@settings(deadline=None, max_examples=100)
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(gzip.compress(TEXT))), max_size=12))
def test_any_chunking_of_the_same_bytes_decodes_the_same(cuts: list[int]) -> None:
    encoded = gzip.compress(TEXT)
    edges = [0, *sorted(cuts), len(encoded)]
    chunks = [encoded[a:b] for a, b in pairwise(edges)]
    assert decode(("gzip",), *chunks) == TEXT


def test_a_stream_flushed_event_by_event_decodes_each_event_as_it_comes() -> None:
    packer = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    decoder = ContentDecoder(("gzip",))
    for n in range(3):
        event = b'event: message\ndata: {"n":%d}\n\n' % n
        flushed = packer.compress(event) + packer.flush(zlib.Z_SYNC_FLUSH)
        assert b"".join(decoder.feed(flushed)) == event


def test_a_body_that_inflates_hugely_comes_in_bounded_pieces_only_as_pulled() -> None:
    bomb = gzip.compress(bytes(64 * PIECE), compresslevel=9)  # 4 MiB of zeros in a few KiB
    pieces = ContentDecoder(("gzip",)).feed(bomb)
    first = [next(pieces) for _ in range(3)]
    assert all(len(piece) <= PIECE for piece in first)
    assert sum(len(piece) for piece in pieces) + sum(map(len, first)) == 64 * PIECE


@pytest.mark.parametrize("codings", [("gzip",), ("deflate",)])
def test_bytes_that_are_not_the_coding_raise_coding_error(codings: tuple[str, ...]) -> None:
    with pytest.raises(CodingError):
        decode(codings, b'{"jsonrpc":"2.0"} not compressed at all, \xff\xfe')
