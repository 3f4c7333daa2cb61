"""An intercept's answer to a server's request, in the client's place, is known by `answered_by`.

The note beside it is for people: replay and mock decide by the typed field, so a reworded note
changes neither. A capture line an earlier 1.12 proxy wrote has no field, only today's note: a reader
takes the rule from that note's fixed wording.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

import proxy.flows.proxy_notes as proxy_notes
from proxy.flows.events import Channel, Direction, FlowEvent, MessageRecorded, Side
from proxy.flows.observations import (
    ExchangeClosed,
    ExchangeOpened,
    MessageSeen,
    Observation,
    ResponseHeadSeen,
)
from proxy.flows.proxy_notes import answered_for_client, by_intercept
from proxy.flows.redact import Redactor
from proxy.flows.store import ChainStore
from proxy.record.mock_table import build_table
from proxy.record.observations import ObservationEncoder, ObservationReplayer, decode
from proxy.record.replay_plan import plan_chain
from proxy.wire.jsonrpc import classify_value

DESK = {"action": "accept", "content": {"name": "the desk"}}
ASK = {"jsonrpc": "2.0", "id": 1, "method": "elicitation/create", "params": {"message": "Name?"}}
CALL = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "ask_name", "arguments": {}}}
EARLY_1_12_NOTE = "typed at the proxy's intercept (i1), sent in the client's place"
"""The note an earlier 1.12 proxy wrote on such an answer, with no `answered_by` beside it."""


def _observations() -> list[Observation]:
    """A pass-through call whose server's question the intercept `i1` answered for the client."""
    by = by_intercept("i1")

    def seen(body: dict[str, Any], to: Direction, side: Side = Side.BOTH, **kw: Any) -> MessageSeen:
        return MessageSeen(1.0, "x1", classify_value(body), 50, to, Channel.POST, side, **kw)

    return [
        ExchangeOpened(1.0, "x1", "POST", "/mcp", {}, None, "legacy", "legacy"),
        seen(CALL, Direction.TO_SERVER),
        ResponseHeadSeen(1.0, "x1", 200, "text/event-stream", {}),
        seen(ASK, Direction.TO_CLIENT, Side.UPSTREAM, note="not forwarded to the client"),
        seen(
            {"jsonrpc": "2.0", "id": 1, "result": DESK},
            Direction.TO_SERVER,
            Side.UPSTREAM,
            note=answered_for_client(by, False),
            answered_by=by,
        ),
        seen({"jsonrpc": "2.0", "id": 7, "result": {"content": []}}, Direction.TO_CLIENT),
        ExchangeClosed(1.0, "x1"),
    ]


def _lines() -> list[dict[str, Any]]:
    encoder = ObservationEncoder(Redactor(key=b"k"), 65536)
    return [orjson.loads(encoder.encode(obs)) for obs in _observations()]


def _read(lines: list[dict[str, Any]]) -> tuple[list[Any], list[FlowEvent], Any]:
    """The records of the one chain the lines build, every event, and the chain's plan."""
    store = ChainStore()
    replayer = ObservationReplayer(store=store)
    events = [event for line in lines for event in replayer.replay(line)]
    records = [e.message for e in events if isinstance(e, MessageRecorded)]
    (chain,) = list(store)
    return records, events, plan_chain(chain.summary, records)


def _replay_and_mock_take_the_desks_answer(lines: list[dict[str, Any]]) -> None:
    records, events, plan = _read(lines)
    assert [r.answered_by for r in records if r.side is Side.UPSTREAM] == [None, "intercept:i1"]
    assert [ask.answer for ask in plan.answers.by_proxy] == [DESK]
    ((op,),) = build_table(events).operations.values()
    assert [[a.answer for a in r.asks] for r in op.rounds] == [[DESK]]


@pytest.mark.parametrize("wording", [None, ", handed to the server for the client"])
def test_replay_and_mock_take_the_intercepts_answer_whatever_its_note_says(
    wording: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if wording is not None:
        monkeypatch.setattr(proxy_notes, "IN_CLIENTS_PLACE", wording)
    lines = _lines()
    (answer,) = [line for line in lines if line.get("answered_by")]
    assert answer["answered_by"] == "intercept:i1"
    assert answer["note"].endswith(wording or ", sent in the client's place")
    assert [line for line in lines if "answered_by" in line] == [answer]  # written only when set

    _replay_and_mock_take_the_desks_answer(lines)


def test_a_line_an_earlier_1_12_proxy_wrote_is_read_by_its_note() -> None:
    lines = _lines()
    for line in lines:
        if line.pop("answered_by", None) is not None:
            line["note"] = EARLY_1_12_NOTE

    _replay_and_mock_take_the_desks_answer(lines)


@pytest.mark.parametrize(
    ("side", "note"),
    [
        (Side.UPSTREAM.value, "typed at the desk"),
        (Side.BOTH.value, EARLY_1_12_NOTE),
        (Side.UPSTREAM.value, None),
    ],
)
def test_a_line_without_the_field_or_that_note_on_the_servers_leg_was_made_by_nobody(
    side: str, note: str | None
) -> None:
    (line,) = [line for line in _lines() if line.get("answered_by")]
    del line["answered_by"]
    line["side"], line["note"] = side, note

    made = decode(line)

    assert isinstance(made, MessageSeen)
    assert made.answered_by is None
