"""`recorded` and `field_lines`: a head kept as one member per name loses no repeated field's value."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.wire.joined_headers import field_lines, joined, recorded


def test_a_head_without_repeats_is_recorded_as_it_came() -> None:
    pairs = [("Host", "h"), ("Accept", "application/json, text/event-stream"), ("X-Tenant", "alpha")]
    assert list(recorded(pairs).items()) == pairs


def test_repeated_fields_are_joined_in_arrival_order_under_the_first_spelling() -> None:
    pairs = [
        ("Accept", "application/json"),
        ("X-Tenant", "alpha"),
        ("accept", "text/event-stream"),
        ("X-TENANT", "beta"),
        ("X-Tenant", "gamma"),
    ]
    assert recorded(pairs) == {
        "Accept": "application/json, text/event-stream",
        "X-Tenant": "alpha, beta, gamma",
    }
    assert list(recorded(pairs)) == ["Accept", "X-Tenant"]


def test_set_cookie_values_are_joined_by_a_line_feed_and_cookie_values_as_one_cookie_list() -> None:
    pairs = [
        ("Set-Cookie", "a=1; Path=/, x"),
        ("Set-Cookie", "b=2; Path=/"),
        ("Cookie", "a=1"),
        ("cookie", "b=2"),
    ]
    assert recorded(pairs) == {"Set-Cookie": "a=1; Path=/, x\nb=2; Path=/", "Cookie": "a=1; b=2"}
    assert joined([("SET-COOKIE", "a"), ("set-cookie", "b"), ("Vary", "x"), ("vary", "y")]) == {
        "SET-COOKIE": "a\nb",
        "Vary": "x, y",
    }


def test_field_lines_write_one_line_per_cookie_and_every_other_member_as_it_is() -> None:
    head = {"Set-Cookie": "a=1; Path=/\nb=2; Path=/", "X-Trace": "a, b", "set-cookie": "c=3"}
    assert list(field_lines(head)) == [
        ("Set-Cookie", "a=1; Path=/"),
        ("Set-Cookie", "b=2; Path=/"),
        ("X-Trace", "a, b"),
        ("set-cookie", "c=3"),
    ]


_NAMES = st.sampled_from(["Accept", "accept", "X-Trace", "Set-Cookie", "set-cookie", "Cookie", "Host"])
_VALUES = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=8)


@given(st.lists(st.tuples(_NAMES, _VALUES), max_size=8))
def test_the_cheap_path_agrees_with_the_field_by_field_join_and_loses_no_cookie(
    pairs: list[tuple[str, str]],
) -> None:
    out = recorded(pairs)
    assert joined(out) == joined(pairs)  # as every redacted view joins a name repeated in another case
    cookies = [v for n, v in pairs if n.lower() == "set-cookie"]
    assert [v for n, v in field_lines(out) if n.lower() == "set-cookie"] == cookies
