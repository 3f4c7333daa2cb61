"""The one builder of the `Mcp-*` headers: encoded where the spec allows, refused naming the header."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.wire.headers import (
    HeaderRefused,
    decode_param_value,
    is_param_suffix,
    mcp_headers,
    method_problem,
)

_HEAD_SAFE = set(map(chr, range(0x20, 0x7F))) | {"\t"}


def test_the_method_goes_out_as_it_is_and_names_and_params_in_their_encoding() -> None:
    headers = mcp_headers("tools/call", "caf\u00e9", [("Region", " eu "), ("Count", 3), ("On", True)])
    assert headers == [
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "=?base64?Y2Fmw6k=?="),
        ("Mcp-Param-Region", "=?base64?IGV1IA==?="),
        ("Mcp-Param-Count", "3"),
        ("Mcp-Param-On", "true"),
    ]


@pytest.mark.parametrize("method", ["a\r\nb", "a\nb", "\x00", "caf\u00e9", "\u2603", "a b", ""])
def test_a_method_no_header_can_carry_is_refused_naming_mcp_method(method: str) -> None:
    with pytest.raises(HeaderRefused) as caught:
        mcp_headers(method)
    assert caught.value.field == "Mcp-Method"
    assert "Mcp-Method" in str(caught.value)


def test_a_lone_surrogate_in_a_name_is_refused_naming_mcp_name() -> None:
    with pytest.raises(HeaderRefused) as caught:
        mcp_headers("tools/call", "\ud800")
    assert caught.value.field == "Mcp-Name"


def test_a_lone_surrogate_in_a_param_is_refused_naming_that_param() -> None:
    with pytest.raises(HeaderRefused) as caught:
        mcp_headers("tools/call", "t", [("Region", "\udfff")])
    assert caught.value.field == "Mcp-Param-Region"


@pytest.mark.parametrize("suffix", ["A B", "A\r\nX-Injected", "", "caf\u00e9", "A:B"])
def test_a_param_suffix_that_is_no_header_name_is_refused(suffix: str) -> None:
    assert not is_param_suffix(suffix)
    with pytest.raises(HeaderRefused) as caught:
        mcp_headers("tools/call", "t", [(suffix, "v")])
    assert caught.value.field.startswith("Mcp-Param-")


def test_method_length_is_bounded_only_where_asked() -> None:
    assert method_problem("x" * 256) is None
    assert "max_method_length" in (method_problem("x" * 257) or "")
    assert method_problem("x" * 5000, None) is None


@given(name=st.text(), value=st.one_of(st.text(), st.integers(), st.booleans()))
def test_whatever_the_name_and_value_the_headers_are_head_safe_or_refused(
    name: str, value: str | int | bool
) -> None:
    refused: HeaderRefused | None = None
    try:
        headers = mcp_headers("tools/call", name, [("V", value)])
    except HeaderRefused as exc:
        refused = exc
    if refused is not None:
        assert refused.field in ("Mcp-Name", "Mcp-Param-V")
        return
    for field, text in headers:
        assert set(field) <= _HEAD_SAFE
        assert set(text) <= _HEAD_SAFE - {"\t"}
        assert text == text.strip()
    assert decode_param_value(headers[1][1]) == name
