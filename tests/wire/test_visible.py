"""`visible`: what a terminal would act on is shown as an escape; everything else is kept as it is."""

from __future__ import annotations

from proxy.wire.visible import visible


def test_controls_del_c1_and_bidi_characters_are_shown_as_escapes() -> None:
    hostile = "a\x1b]0;T\x07\r\n\t\x7f\x9b\u202e\u2066\u200f\u061c\u2028b"

    assert visible(hostile) == "a\\x1b]0;T\\x07\\r\\n\\t\\x7f\\x9b\\u202e\\u2066\\u200f\\u061c\\u2028b"


def test_printable_text_of_any_script_is_returned_unchanged() -> None:
    for text in ("tools/call add #3", "naïve → 名前 🙂", ""):
        assert visible(text) is text


def test_a_multi_line_view_keeps_its_newlines_and_tabs_and_escapes_the_rest() -> None:
    assert visible('{\n\t"a": "x\x1b[2Jy\u202e"\n}', lines=True) == '{\n\t"a": "x\\x1b[2Jy\\u202e"\n}'
