"""Newline-delimited JSON framing: bounded lines, whatever the chunking."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.framing.ndjson import LineDecoder, Oversized


def feed_all(decoder: LineDecoder, chunks: list[bytes]) -> list[bytes | Oversized]:
    out: list[bytes | Oversized] = []
    for chunk in chunks:
        out += decoder.feed(chunk)
    return out + decoder.end()


def test_lines_split_on_lf_with_a_cr_dropped_and_blank_lines_skipped() -> None:
    decoder = LineDecoder(100)
    assert decoder.feed(b'{"a":1}\r\n\n  \n{"b"') == [b'{"a":1}']
    assert decoder.feed(b":2}\n") == [b'{"b":2}']
    assert decoder.feed(b'{"c":3}') == []
    assert decoder.end() == [b'{"c":3}']


def test_a_line_over_the_limit_is_never_held_and_is_reported_with_its_edges() -> None:
    decoder = LineDecoder(10)
    assert decoder.feed(b"0123456789abc") == []
    assert decoder.held == 0
    assert decoder.feed(b"x" * 10_000) == []
    assert decoder.held == 0
    [big, after] = decoder.feed(b"END\r\nok\n")
    assert isinstance(big, Oversized)
    assert big.size == 13 + 10_000 + 3
    assert big.head.startswith(b"0123456789abc")
    assert big.tail.endswith(b"xxEND")
    assert after == b"ok"


def test_a_line_over_the_limit_within_one_chunk_is_reported_too() -> None:
    assert LineDecoder(3).feed(b"abcdef\nab\n") == [Oversized(6, b"abcdef", b"abcdef"), b"ab"]


@given(st.lists(st.binary(min_size=0, max_size=40), max_size=8), st.data())
def test_any_chunking_of_the_same_bytes_yields_the_same_lines(
    lines: list[bytes], data: st.DataObject
) -> None:
    stream = b"".join(line.replace(b"\n", b"") + b"\n" for line in lines)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
    assert feed_all(LineDecoder(30), chunks) == feed_all(LineDecoder(30), [stream])
