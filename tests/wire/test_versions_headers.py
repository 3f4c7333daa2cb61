"""Protocol eras, the version registry, and the `Mcp-Param-*` header value codec."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from proxy.wire.headers import decode_param_value, encode_param_value
from proxy.wire.mcp import META_PROTOCOL_VERSION, era_of_request
from proxy.wire.versions import Era, era_of_version, is_at_least

MODERN_META = {"_meta": {META_PROTOCOL_VERSION: "2026-07-28"}}


def test_a_request_with_a_modern_meta_protocol_version_is_modern() -> None:
    assert era_of_request("tools/call", {"name": "t", **MODERN_META}, None) is Era.MODERN


def test_the_meta_version_wins_over_a_legacy_header() -> None:
    assert era_of_request("tools/list", dict(MODERN_META), "2025-06-18") is Era.MODERN


def test_initialize_is_legacy_even_without_a_header() -> None:
    assert era_of_request("initialize", {"protocolVersion": "2025-11-25"}, None) is Era.LEGACY


@pytest.mark.parametrize("version", ["2025-03-26", "2025-06-18", "2025-11-25"])
def test_a_legacy_protocol_version_header_makes_a_request_legacy(version: str) -> None:
    assert era_of_request("tools/list", {}, version) is Era.LEGACY


def test_a_request_with_nothing_to_go_on_is_unknown() -> None:
    assert era_of_request("tools/list", {}, None) is Era.UNKNOWN


def test_an_unknown_meta_version_is_not_guessed_modern() -> None:
    params = {"_meta": {META_PROTOCOL_VERSION: "2099-01-01"}}

    assert era_of_request("tools/list", params, None) is Era.UNKNOWN


@pytest.mark.parametrize("method", ["server/discover", "subscriptions/listen"])
def test_a_method_only_the_modern_era_has_is_modern_whatever_version_it_names(method: str) -> None:
    params = {"_meta": {META_PROTOCOL_VERSION: "v999.0.0"}}

    assert era_of_request(method, params, "v999.0.0") is Era.MODERN
    assert era_of_request(method, {}, None) is Era.MODERN


def test_an_unknown_header_version_is_unknown() -> None:
    assert era_of_request("tools/list", {}, "2030-01-01") is Era.UNKNOWN


def test_a_malformed_meta_is_ignored() -> None:
    assert era_of_request("tools/list", {"_meta": "2026-07-28"}, None) is Era.UNKNOWN


@pytest.mark.parametrize(
    ("version", "era"),
    [
        ("2024-11-05", Era.LEGACY),
        ("2025-11-25", Era.LEGACY),
        ("2026-07-28", Era.MODERN),
        ("2026-07-29", Era.UNKNOWN),
        (None, Era.UNKNOWN),
    ],
)
def test_versions_map_to_eras_from_the_registry_never_by_date(version: str | None, era: Era) -> None:
    assert era_of_version(version) is era


def test_is_at_least_follows_registry_order_and_refuses_unknown_versions() -> None:
    assert is_at_least("2025-11-25", "2025-06-18")
    assert is_at_least("2025-06-18", "2025-06-18")
    assert not is_at_least("2025-03-26", "2025-06-18")
    assert not is_at_least("2099-01-01", "2025-06-18")
    with pytest.raises(ValueError, match="minimum must be a known protocol version"):
        is_at_least("2025-06-18", "2099-01-01")


# -- Mcp-Param-* codec ---------------------------------------------------------------------------


def _wrapped(text: str) -> str:
    return "=?base64?" + base64.b64encode(text.encode("utf-8")).decode("ascii") + "?="


@pytest.mark.parametrize("value", ["NYC", "a b", "x=1;y=2", "", "?=", "=?base64?"])
def test_plain_printable_ascii_goes_out_as_is(value: str) -> None:
    assert encode_param_value(value) == value
    assert decode_param_value(value) == value


@pytest.mark.parametrize(
    "value",
    [
        "Zürich",
        "東京",
        " padded",
        "padded ",
        "tab\there",
        "line\nbreak",
        "=?base64?aGk=?=",
        "=?base64?=",
    ],
)
def test_non_ascii_padded_control_and_sentinel_looking_values_are_base64_wrapped(value: str) -> None:
    encoded = encode_param_value(value)

    assert encoded == _wrapped(value)
    assert encoded.isascii()
    assert encoded.isprintable()
    assert decode_param_value(encoded) == value


@pytest.mark.parametrize(("value", "text"), [(True, "true"), (False, "false"), (42, "42"), (-7, "-7")])
def test_booleans_and_integers_use_their_json_spelling(value: Any, text: str) -> None:
    assert encode_param_value(value) == text


def test_a_broken_base64_sentinel_is_refused_rather_than_passed_on() -> None:
    with pytest.raises(ValueError, match=r".+"):
        decode_param_value("=?base64?not base64!?=")


@given(st.text())
@example("=?base64?=")
@example("=?base64?x?=")
@example(" ")
@example("\x7f")
def test_any_string_survives_the_header_round_trip_as_a_printable_ascii_value(value: str) -> None:
    encoded = encode_param_value(value)

    assert encoded.isascii()
    assert encoded.isprintable()
    assert encoded == encoded.strip()
    assert decode_param_value(encoded) == value
