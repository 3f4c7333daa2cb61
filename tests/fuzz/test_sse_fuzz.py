"""The SSE decoder on arbitrary bytes: never anything but events or `SseTooLarge`, whatever the chunking.

An upstream chooses the bytes of its event streams and the network chooses where they are cut, so
the decoder must give the same items, the same overflow verdict and the same pending count for any
chunking of the same bytes, and must never raise anything else. Inputs are built from the pieces that
matter to the parser (field names, colons, every line ending, BOMs, NUL, invalid UTF-8) and mutated.
"""

from __future__ import annotations

from itertools import pairwise

from hypothesis import example, given
from hypothesis import strategies as st

from proxy.framing.sse import SseDecoder, SseItem, SseTooLarge
from tests.fuzz.profile import examples

PIECES = [
    b"data:", b"data: ", b"data", b"event:", b"event: x", b"id:", b"id: 7", b"retry:", b"retry: 10",
    b":", b": c", b"\n", b"\r", b"\r\n", b"\n\n", b"\r\r", b" ", b"x", b"yz", b"\x00", b"\xef\xbb\xbf",
    b"\xef", b"\xff", "é".encode(), "😀".encode()[:3], b"123", b"\t",
]  # fmt: skip

sse_bytes = st.lists(st.sampled_from(PIECES) | st.binary(max_size=6), max_size=40).map(b"".join)

Outcome = tuple[list[SseItem], bool, int | None, str | None]


def run(chunks: list[bytes], limit: int) -> Outcome:
    """Items the chunks complete, whether the bound was hit, and the decoder's pending state at close."""
    decoder = SseDecoder(limit)
    items: list[SseItem] = []
    try:
        for chunk in chunks:
            items += decoder.feed(chunk)
        items += decoder.close()
    except SseTooLarge as exc:
        return [*items, *exc.items], True, None, None
    return items, False, decoder.pending_bytes, decoder.last_event_id


def chunked(stream: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(c % (len(stream) + 1) for c in cuts), len(stream)]
    return [stream[a:b] for a, b in pairwise(bounds)]


@examples(600)
@given(
    stream=sse_bytes,
    cuts=st.lists(st.integers(0, 10_000), max_size=12),
    limit=st.integers(1, 80) | st.just(1 << 24),
)
@example(stream=b"data:1234567\n: abcde\n\n", cuts=[19], limit=12)  # a comment after data near the bound
@example(stream=b"data:12345\ndata: abcd\n\n", cuts=[19], limit=12)
@example(stream=b"\xef\xbb\xbfdata: a\r\n\r\n", cuts=[1, 2, 10], limit=64)
@example(stream=b"data: a\r\ndata: b\r\r\n", cuts=[8, 17], limit=64)
@example(stream=b"id: 1\x002\ndata: a\n\n", cuts=[3], limit=64)
@example(stream=b"retry: " + b"9" * 5000 + b"\n\n", cuts=[100], limit=1 << 24)
def test_any_chunking_of_any_bytes_decodes_alike(stream: bytes, cuts: list[int], limit: int) -> None:
    whole = run([stream], limit)

    assert run(chunked(stream, cuts), limit) == whole
    assert run([stream[i : i + 1] for i in range(len(stream))], limit) == whole


@examples(200)
@given(stream=sse_bytes, limit=st.integers(1, 64))
def test_a_decoder_past_its_bound_keeps_refusing_and_never_buffers_past_twice_the_limit(
    stream: bytes, limit: int
) -> None:
    decoder = SseDecoder(limit)
    for i in range(len(stream)):
        try:
            decoder.feed(stream[i : i + 1])
        except SseTooLarge:
            try:
                decoder.feed(b"\n\n")
            except SseTooLarge:
                return
            raise AssertionError("a spent decoder accepted more bytes") from None
        assert decoder.pending_bytes <= 2 * limit + 3, "the decoder holds more than its bound"
