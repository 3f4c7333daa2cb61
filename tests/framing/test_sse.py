"""Behaviour of the sans-IO SSE codec (proxy.framing.sse)."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.framing.sse import (
    DEFAULT_MAX_EVENT_BYTES,
    SseComment,
    SseDecoder,
    SseEvent,
    SseItem,
    SseTooLarge,
    encode_comment,
    encode_event,
)


def decode(*chunks: bytes, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> list[SseItem]:
    decoder = SseDecoder(max_event_bytes)
    items: list[SseItem] = []
    for chunk in chunks:
        items += decoder.feed(chunk)
    items += decoder.close()
    return items


def bytewise(stream: bytes) -> list[bytes]:
    return [stream[i : i + 1] for i in range(len(stream))]


# --- line endings -------------------------------------------------------------------------


@pytest.mark.parametrize("eol", [b"\n", b"\r", b"\r\n"], ids=["LF", "CR", "CRLF"])
def test_lf_cr_and_crlf_each_end_lines(eol: bytes) -> None:
    stream = b"event: ping" + eol + b"data: a" + eol + b"data: b" + eol + eol
    assert decode(stream) == [SseEvent(data="a\nb", event="ping")]


def test_mixed_line_endings_in_one_stream_all_count() -> None:
    assert decode(b"data: a\rdata: b\r\ndata: c\n\r\n") == [SseEvent(data="a\nb\nc")]


def test_cr_ending_one_chunk_and_lf_starting_the_next_is_one_line_break() -> None:
    assert decode(b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n") == [SseEvent(data="a\nb")]


def test_cr_ending_a_chunk_followed_by_other_text_is_a_line_break() -> None:
    assert decode(b"data: a\r", b"data: b\r", b"\r") == [SseEvent(data="a\nb")]


def test_an_event_is_dispatched_as_soon_as_its_final_cr_arrives() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"data: a\r\r") == [SseEvent(data="a")]
    assert decoder.feed(b"\n") == []  # the LF completing that CRLF is not another blank line


def test_only_cr_and_lf_break_lines_not_other_unicode_separators() -> None:
    data = "a\u2028b\u2029c\x85d\x0be\x0cf\x1cg"
    assert decode(f"data: {data}\n\n".encode()) == [SseEvent(data=data)]


# --- BOM and UTF-8 ------------------------------------------------------------------------


def test_a_utf8_bom_at_stream_start_is_skipped() -> None:
    assert decode(b"\xef\xbb\xbfdata: x\n\n") == [SseEvent(data="x")]


def test_a_bom_split_across_chunks_is_still_skipped() -> None:
    assert decode(b"\xef", b"\xbb", b"\xbfdata: x\n\n") == [SseEvent(data="x")]


def test_only_the_first_bom_is_skipped_so_a_second_spoils_the_field_name() -> None:
    assert decode(b"\xef\xbb\xbf\xef\xbb\xbfdata: x\n\ndata: y\n\n") == [SseEvent(data="y")]


def test_a_stream_shorter_than_a_bom_that_looks_like_one_is_pending() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"\xef\xbb") == []
    assert decoder.close() == []
    assert decoder.pending_bytes == 2


def test_multibyte_characters_split_across_chunks_decode_whole() -> None:
    stream = "data: é€😀\n\n".encode()
    assert decode(*bytewise(stream)) == [SseEvent(data="é€😀")]


def test_invalid_utf8_becomes_replacement_characters() -> None:
    assert decode(b"data: a\xffb\n\n") == [SseEvent(data="a\ufffdb")]


# --- fields -------------------------------------------------------------------------------


def test_data_with_and_without_the_leading_space_read_the_same() -> None:
    assert decode(b"data: x\n\ndata:x\n\n") == [SseEvent(data="x"), SseEvent(data="x")]


def test_only_one_leading_space_is_removed_from_a_value() -> None:
    assert decode(b"data:  x \n\n") == [SseEvent(data=" x ")]


def test_a_field_with_no_colon_has_an_empty_value() -> None:
    assert decode(b"data\ndata\n\n") == [SseEvent(data="\n")]


def test_an_empty_data_line_is_still_data() -> None:
    assert decode(b"data:\n\n") == [SseEvent(data="", has_data=True)]


def test_unknown_fields_are_ignored_and_alone_dispatch_nothing() -> None:
    assert decode(b"foo: bar\nDATA: no\n\nfoo: bar\ndata: yes\n\n") == [SseEvent(data="yes")]


def test_event_type_defaults_to_message_and_an_empty_one_also_means_message() -> None:
    assert decode(b"data: a\n\nevent: tick\ndata: b\n\nevent:\ndata: c\n\n") == [
        SseEvent(data="a", event="message"),
        SseEvent(data="b", event="tick"),
        SseEvent(data="c", event="message"),
    ]


def test_the_last_of_repeated_fields_wins() -> None:
    assert decode(b"event: a\nevent: b\nid: 1\nid: 2\nretry: 5\nretry: 6\ndata: x\n\n") == [
        SseEvent(data="x", event="b", id="2", retry=6)
    ]


def test_an_id_containing_nul_is_ignored() -> None:
    decoder = SseDecoder()
    items = decoder.feed(b"id: 1\ndata: a\n\nid: 2\x003\ndata: b\n\n")
    assert items == [SseEvent(data="a", id="1"), SseEvent(data="b", id=None)]
    assert decoder.last_event_id == "1"


@pytest.mark.parametrize("value", [b"1.5", b"-1", b"+5", b" 5", b"5s", b"", "\u0663".encode()])
def test_a_retry_that_is_not_all_ascii_digits_is_ignored(value: bytes) -> None:
    assert decode(b"retry: " + value + b"\ndata: x\n\n") == [SseEvent(data="x", retry=None)]


def test_a_retry_of_ascii_digits_is_reported_as_an_integer() -> None:
    assert decode(b"retry: 3000\ndata: x\n\n") == [SseEvent(data="x", retry=3000)]


def test_a_retry_too_long_for_int_is_ignored_rather_than_crashing() -> None:
    assert decode(b"retry: " + b"9" * 10_000 + b"\ndata: x\n\n") == [SseEvent(data="x")]


# --- dispatch and ids ---------------------------------------------------------------------


def test_an_id_only_priming_event_is_reported_without_data() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"id: prime-1\n\n") == [SseEvent(data="", id="prime-1", has_data=False)]
    assert decoder.last_event_id == "prime-1"


def test_a_retry_only_event_is_reported_without_data() -> None:
    assert decode(b"retry: 100\n\n") == [SseEvent(data="", retry=100, has_data=False)]


def test_blank_lines_with_no_fields_dispatch_nothing() -> None:
    assert decode(b"\n\n\r\n\r") == []


def test_last_event_id_persists_across_events_without_an_id() -> None:
    decoder = SseDecoder()
    items = decoder.feed(b"id: 7\ndata: a\n\ndata: b\n\n")
    assert items == [SseEvent(data="a", id="7"), SseEvent(data="b", id=None)]
    assert decoder.last_event_id == "7"


def test_an_empty_id_resets_last_event_id() -> None:
    decoder = SseDecoder()
    decoder.feed(b"id: 7\ndata: a\n\n")
    assert decoder.feed(b"id\ndata: b\n\n") == [SseEvent(data="b", id="")]
    assert decoder.last_event_id == ""


def test_last_event_id_changes_only_when_the_event_completes() -> None:
    decoder = SseDecoder()
    decoder.feed(b"id: 1\ndata: a\n\nid: 2\ndata: b\n")
    assert decoder.last_event_id == "1"
    decoder.feed(b"\n")
    assert decoder.last_event_id == "2"


def test_comments_are_items_in_stream_order_without_their_leading_space() -> None:
    assert decode(b": hello\ndata: a\n:no-space\n:\n\n:  two\n") == [
        SseComment("hello"),
        SseComment("no-space"),
        SseComment(""),
        SseEvent(data="a"),
        SseComment(" two"),
    ]


def test_an_incomplete_last_event_is_not_dispatched_and_its_size_is_pending() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"data: a\n\nid: 9\ndata: cut") == [SseEvent(data="a")]
    assert decoder.close() == []
    assert decoder.pending_bytes == len(b"id: 9") + len(b"data: cut")
    assert decoder.last_event_id == ""


def test_a_cleanly_ended_stream_has_nothing_pending() -> None:
    decoder = SseDecoder()
    decoder.feed(b"data: a\n\n: bye\n")
    decoder.close()
    assert decoder.pending_bytes == 0


def test_feeding_after_close_is_an_error() -> None:
    decoder = SseDecoder()
    decoder.close()
    with pytest.raises(RuntimeError, match="after close"):
        decoder.feed(b"data: a\n\n")


def test_an_empty_chunk_changes_nothing() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"") == []
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"") == []
    assert decoder.feed(b"\n\n") == [SseEvent(data="a")]


# --- bound --------------------------------------------------------------------------------


def test_a_line_growing_past_the_limit_in_small_chunks_raises_too_large() -> None:
    decoder = SseDecoder(max_event_bytes=1024)
    decoder.feed(b"data: ")
    for _ in range(15):
        decoder.feed(b"x" * 64)
    with pytest.raises(SseTooLarge, match="max_event_bytes=1024") as caught:
        decoder.feed(b"x" * 64)
    assert caught.value.limit == 1024
    assert isinstance(caught.value, ValueError)


def test_an_event_of_many_small_data_lines_past_the_limit_raises_too_large() -> None:
    with pytest.raises(SseTooLarge):
        decode(b"data: xxxxxxxxxx\n" * 200, max_event_bytes=1024)


def test_a_long_line_arriving_in_one_chunk_raises_too_large() -> None:
    with pytest.raises(SseTooLarge):
        decode(b": " + b"x" * 2000 + b"\n", max_event_bytes=1024)


def test_events_completed_before_the_overflow_travel_on_the_error() -> None:
    decoder = SseDecoder(max_event_bytes=64)
    with pytest.raises(SseTooLarge) as caught:
        decoder.feed(b"data: ok\n\n: note\ndata: " + b"x" * 100)
    assert caught.value.items == (SseEvent(data="ok"), SseComment("note"))


def test_a_decoder_that_overflowed_keeps_refusing() -> None:
    decoder = SseDecoder(max_event_bytes=16)
    with pytest.raises(SseTooLarge):
        decoder.feed(b"data: " + b"x" * 32)
    with pytest.raises(SseTooLarge):
        decoder.feed(b"\n\n")


def test_events_under_the_limit_in_total_across_a_stream_are_fine() -> None:
    stream = b"data: xxxxxxxxxx\n\n: keep-alive\n" * 1000
    assert len(decode(stream, max_event_bytes=64)) == 2000


def test_the_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        SseDecoder(max_event_bytes=0)


# --- encoder ------------------------------------------------------------------------------


def test_encode_event_writes_fields_then_one_data_line_per_line_and_a_blank_line() -> None:
    assert encode_event("a\nb", event="tick", id="7", retry=10) == (
        b"event: tick\nid: 7\nretry: 10\ndata: a\ndata: b\n\n"
    )


def test_encode_event_treats_cr_and_crlf_in_data_as_line_breaks() -> None:
    encoded = encode_event("a\r\nb\rc")
    assert encoded == b"data: a\ndata: b\ndata: c\n\n"
    assert decode(encoded) == [SseEvent(data="a\nb\nc")]


def test_encode_event_keeps_a_leading_space_and_empty_lines_in_data() -> None:
    assert decode(encode_event(" x\n\n")) == [SseEvent(data=" x\n\n")]


def test_encode_event_without_data_makes_a_priming_event() -> None:
    encoded = encode_event(None, id="p1")
    assert encoded == b"id: p1\n\n"
    assert decode(encoded) == [SseEvent(data="", id="p1", has_data=False)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"event": "a\nb"}, "CR or LF"),
        ({"id": "a\rb"}, "CR or LF"),
        ({"id": "a\x00b"}, "NUL"),
        ({"retry": -1}, "non-negative"),
    ],
)
def test_encode_event_refuses_values_that_would_change_the_framing(
    kwargs: dict[str, str | int], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        encode_event("x", **kwargs)  # type: ignore[arg-type]


def test_encode_event_refuses_an_event_with_no_fields() -> None:
    with pytest.raises(ValueError, match="needs data"):
        encode_event(None)


def test_encode_comment_round_trips_and_refuses_line_breaks() -> None:
    assert encode_comment("ping") == b": ping\n"
    assert encode_comment("") == b":\n"
    assert decode(encode_comment(" x")) == [SseComment(" x")]
    with pytest.raises(ValueError, match="CR or LF"):
        encode_comment("a\nb")


# --- property: chunking and line endings never change what is decoded ---------------------

_one_line = st.text().filter(lambda s: "\r" not in s and "\n" not in s)

_events = st.builds(
    lambda data, event, id_, retry: (data, event, id_, retry),
    st.none() | st.text(),
    st.none() | _one_line,
    st.none() | _one_line.filter(lambda s: "\x00" not in s),
    st.none() | st.integers(min_value=0, max_value=2**53),
).filter(lambda e: any(part is not None for part in e))

_items = st.lists(st.one_of(_events, _one_line), max_size=12)


def _encode_and_expect(
    items: list[tuple[str | None, str | None, str | None, int | None] | str],
) -> tuple[bytes, list[SseItem]]:
    chunks: list[bytes] = []
    expected: list[SseItem] = []
    for item in items:
        if isinstance(item, str):
            chunks.append(encode_comment(item))
            expected.append(SseComment(item))
            continue
        data, event, id_, retry = item
        chunks.append(encode_event(data, event=event, id=id_, retry=retry))
        text = "" if data is None else data.replace("\r\n", "\n").replace("\r", "\n")
        expected.append(SseEvent(text, event or "message", id_, retry, has_data=data is not None))
    return b"".join(chunks), expected


@settings(deadline=None, max_examples=300)
@given(
    items=_items,
    eol=st.sampled_from([b"\n", b"\r", b"\r\n"]),
    bom=st.booleans(),
    draw=st.data(),
)
def test_any_chunking_and_line_ending_decodes_to_the_encoded_items(
    items: list[tuple[str | None, str | None, str | None, int | None] | str],
    eol: bytes,
    bom: bool,
    draw: st.DataObject,
) -> None:
    stream, expected = _encode_and_expect(items)
    stream = (b"\xef\xbb\xbf" if bom else b"") + stream.replace(b"\n", eol)
    cuts = sorted(draw.draw(st.lists(st.integers(0, len(stream)), max_size=20), label="cuts"))
    bounds = [0, *cuts, len(stream)]
    chunked = [stream[a:b] for a, b in pairwise(bounds)]

    whole = decode(stream)
    assert whole == expected
    assert decode(*chunked) == whole
    assert decode(*bytewise(stream)) == whole


def test_a_priming_event_with_empty_data_carries_no_message() -> None:
    (priming,) = SseDecoder().feed(b"id: 3\r\ndata: \r\nretry: 50\r\n\r\n")
    assert isinstance(priming, SseEvent)
    assert priming.id == "3"
    assert priming.retry == 50
    assert not priming.carries_message
    (event,) = SseDecoder().feed(b'data: {"jsonrpc":"2.0"}\n\n')
    assert isinstance(event, SseEvent)
    assert event.carries_message
