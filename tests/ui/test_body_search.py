"""The chain list's filter over an indexed capture: chains whose bodies are not held wait for the search.

Indexed chains are made as the index hands them over (a headline and where its messages are), their
messages read back by a loader standing in for the spill file; `tests/ui/test_open.py` runs the real
index pass and search over a recorded capture.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from proxy.flows.events import MessageRecord
from proxy.flows.query import bodies_text, parse_query
from tests.ui.helpers import BASE, message, summary
from ui.body_search import HAND_OVER_EVERY, REDRAW_SHARE, UNSEARCHED, ListFilter, RedrawPace, found_bits
from ui.model import MAX_LOADED, ChainEntry, ViewModel, chain_key

BODIES = {1: "the capital is Paris", 2: "the capital is Rome"}
"""What each indexed chain's one message says (by its record offset)."""


def load(offsets: Sequence[int]) -> list[MessageRecord]:
    records = []
    for offset in offsets:
        record = message("any", 1).message
        record.body = {"text": BODIES[offset]}
        records.append(record)
    return records


def indexed() -> ViewModel:
    model = ViewModel()
    chains = [(summary("r1"), [1], 0), (summary("r2", started=BASE + 1), [2], 0)]
    model.load_index(chains, [], load)
    return model


def key(chain_id: str, started: float = BASE) -> str:
    return chain_key(summary(chain_id, started=started))


def test_an_indexed_chain_shows_for_a_body_term_only_once_a_search_read_its_bodies() -> None:
    model = indexed()
    search = ListFilter(parse_query("-body:paris"))
    todo = search.start(model.chains.values())

    assert [entry.summary.id for entry in todo] == ["r2", "r1"]  # newest first
    assert not any(search.wants(entry) for entry in model.chains.values())  # not shown, then gone
    assert search.searching

    found = [(entry, found_bits(search.terms, bodies_text(load(entry.records or [])))) for entry in todo]
    assert search.took(found)

    assert not search.searching
    assert [e.summary.id for e in model.chains.values() if search.wants(e)] == ["r2"]


def test_a_search_reads_only_the_chains_whose_headline_leaves_the_outcome_open() -> None:
    model = indexed()
    by_headline = ListFilter(parse_query("id:r1 body:paris"))

    todo = by_headline.start(model.chains.values())

    assert [entry.summary.id for entry in todo] == ["r1"]
    assert ListFilter(parse_query("status:ok")).start(model.chains.values()) == []
    assert all(entry.found == UNSEARCHED for entry in model.chains.values())


def test_a_chain_read_back_is_searched_in_what_it_holds_and_lets_its_text_go_with_its_messages() -> None:
    model = indexed()
    search = ListFilter(parse_query("body:paris"))
    search.start(model.chains.values())

    shown = model.get(key("r1"))
    assert shown is not None
    assert search.wants(shown)  # its messages are held: no search needed
    for n in range(MAX_LOADED):  # others shown after it push it out of the chains held
        model.chains[f"x{n}"] = ChainEntry(key=f"x{n}", summary=summary(f"x{n}"), records=[2])
        model.get(f"x{n}")

    assert shown.messages == []
    assert shown.search_text() == ""
    assert not search.wants(shown)  # back to waiting for the search


def test_the_list_is_redrawn_for_the_search_no_more_than_its_share_of_the_time() -> None:
    pace = RedrawPace()
    assert pace.wait(now=100.0) == 0  # the first chains found show at once

    pace.drew(started=100.0, ended=100.04)  # a short list: redrawn every HAND_OVER_EVERY
    assert pace.wait(now=100.04) == pytest.approx(HAND_OVER_EVERY)

    pace.drew(started=101.0, ended=101.6)  # thousands of rows: redrawn at most a REDRAW_SHARE of the time
    gap = pace.wait(now=101.6)
    assert 0.6 / (0.6 + gap) == pytest.approx(REDRAW_SHARE)
