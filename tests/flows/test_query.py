"""The filter language: parsing, errors that never empty the screen, and matching."""

from __future__ import annotations

import pytest

from proxy.flows.events import ChainStatus, Mode
from proxy.flows.query import Term, body_found, parse_query
from tests.ui.helpers import BASE, summary

CALL = summary(
    "c7",
    method="tools/call",
    name="ask_twice",
    status=ChainStatus.ERROR,
    client_era="legacy",
    upstream_era="modern",
    mode=Mode.LEGACY_TO_MRTR,
    client_name="claude-code",
    duration_ms=750.0,
    error="-32602: bad params",
)
LIST = summary("c8", method="tools/list", name=None, status=ChainStatus.OK, duration_ms=20.0)


@pytest.mark.parametrize(
    ("text", "call", "listing"),
    [
        ("", True, True),
        ("method:tools/call", True, False),
        ("method:tools/*", True, True),
        ("tool:ask_twice", True, False),
        ("tool:ask_*", True, False),
        ("name:ask_twice", True, False),
        ("status:error", True, False),
        ("status:ok", False, True),
        ("era:legacy", True, False),
        ("era:modern", True, False),
        ("era:unknown", False, True),
        ("mode:legacy_to_mrtr", True, False),
        ("mode:bridge", True, False),
        ("bridged", True, False),
        ("-bridged", False, True),
        ("!bridged", False, True),
        ("duration:>500ms", True, False),
        ("duration:<1s", True, True),
        ("duration:>=0.75s", True, False),
        ("client:claude", True, False),
        ("id:c8", False, True),
        ("bad params", True, False),
        ("ASK", True, False),
        ("tools status:ok", False, True),
        ('"-32602: bad"', True, False),
    ],
)
def test_a_query_selects_the_chains_it_names(text: str, call: bool, listing: bool) -> None:
    query = parse_query(text)

    assert query.error is None
    assert (query.matches(CALL), query.matches(LIST)) == (call, listing)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("colour:red", "unknown field 'colour'"),
        ("status:", "status: needs a value"),
        ("duration:soon", "duration: expected"),
        ('"unclosed', "a quote is not closed"),
        ("status:nope", "status: no such value 'nope' (known: pending, waiting_client, parked, ok, error"),
        ("mode:sideways", "mode: no such value 'sideways'"),
        ("era:old", "era: no such value 'old' (known: legacy, modern, unknown)"),
    ],
)
def test_a_bad_query_reports_why_and_hides_nothing(text: str, error: str) -> None:
    query = parse_query(text)

    assert query.error is not None
    assert error in query.error
    assert query.matches(CALL)
    assert query.matches(LIST)


def test_a_pending_chain_is_timed_against_now() -> None:
    pending = summary("c9", started=BASE)
    query = parse_query("duration:>1s")

    assert not query.matches(pending)
    assert query.matches(pending, now=BASE + 2)
    assert not query.matches(pending, now=BASE + 0.5)


def test_a_quoted_value_matches_the_method_column_as_shown() -> None:
    stream = summary("c9", method="GET stream", name=None, status=ChainStatus.OK)

    assert parse_query('method:"GET stream"').matches(stream)
    assert not parse_query('method:"GET stream"').matches(CALL)
    assert not parse_query('-method:"GET stream"').matches(stream)
    assert parse_query('-method:"GET stream"').matches(CALL)


@pytest.mark.parametrize(
    ("text", "verdict"),
    [
        ("status:error", True),
        ("status:ok", False),
        ("body:paris", None),
        ("-body:paris", None),
        ("ask_twice", True),  # the headline holds it: no body can change that
        ("-ask_twice", False),
        ("paris", None),
        ("status:ok body:paris", False),  # the headline alone rules it out
        ("body:paris -body:rome", None),
        ("", True),
    ],
)
def test_a_verdict_without_bodies_is_given_only_where_no_body_could_change_it(
    text: str, verdict: bool | None
) -> None:
    assert parse_query(text).verdict(CALL) is verdict


def test_what_a_search_found_decides_the_body_terms_as_the_bodies_themselves_would() -> None:
    query = parse_query("body:paris -rome")
    bodies = '{"text": "the capital is paris"}'

    def found(term: Term) -> bool:
        return body_found(term, bodies)

    assert query.body_terms == (Term("body", "paris"), Term("text", "rome", negate=True))
    assert query.matches_found(LIST, None, found) == query.matches(LIST, None, lambda: bodies) is True
    assert not query.matches_found(LIST, None, lambda term: True)
