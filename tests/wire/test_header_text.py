"""`readable`: a header value read off the wire is shown as UTF-8 when its bytes are, else as they are."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.wire.header_text import readable


def on_the_wire(raw: bytes) -> str:
    """What the HTTP core keeps for a header value: the latin-1 reading of its bytes."""
    return raw.decode("latin-1")


def test_a_utf8_value_is_shown_in_its_utf8_reading_not_as_mojibake() -> None:
    assert readable(on_the_wire("it's café 名前 🙂".encode())) == "it's café 名前 🙂"


def test_a_value_whose_bytes_are_not_utf8_keeps_its_latin1_reading() -> None:
    assert readable(on_the_wire(b"caf\xe9 \xff")) == "caf\xe9 \xff"


def test_ascii_and_text_beyond_latin1_are_returned_as_they_are() -> None:
    for text in ("Bearer abc", "", "名前"):
        assert readable(text) is text


@given(st.text())
def test_any_text_sent_as_utf8_reads_back_as_that_text(text: str) -> None:
    assert readable(on_the_wire(text.encode())) == text
