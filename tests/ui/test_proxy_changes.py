"""What the proxy changed is shown as the proxy's: notes above a chain's messages, a mark in the chain
list, each leg of a changed message as it went, and the proxy's holds apart from the server's time."""

from __future__ import annotations

from proxy.flows.events import Direction, Side
from tests.ui.helpers import finished, message, opened, summary
from tests.ui.test_app import running
from ui.model import ViewModel
from ui.render import chain_headline, message_header, message_label, node_label, note_labels, status_cell
from ui.timeline import build_timeline

FAULT = "fault injected by the proxy: error -32050 on the client's tools/call [f1: tool:echo => error=-32050]"
EDIT = "the client's tools/call held by intercept i1 for 2.0 s, forwarded edited by tui"
ASIDE = "stream resumed with Last-Event-ID 7"


def test_a_chain_the_proxy_changed_is_marked_in_the_list_and_one_it_did_not_is_not() -> None:
    assert status_cell(summary("c1", notes=[FAULT])).plain == "pending ✎"
    assert status_cell(summary("c2", notes=[EDIT])).plain == "pending ✎"
    assert status_cell(summary("c3", notes=[ASIDE])).plain == "pending"
    unchanged = EDIT.replace("forwarded edited", "forwarded unchanged")
    assert status_cell(summary("c4", notes=[unchanged])).plain == "pending"


def test_every_note_becomes_a_tree_line_and_the_proxys_changes_stand_out() -> None:
    lines = note_labels(summary("c1", notes=[ASIDE, FAULT]))
    assert [line.plain for line in lines] == [f"• {ASIDE}", f"✎ {FAULT}"]
    assert "magenta" in str(lines[1].spans[0].style)
    assert "magenta" not in str(lines[0].style)


def test_the_proxys_hold_is_told_apart_from_the_upstreams_time() -> None:
    held = summary("c1", duration_ms=612.0, upstream_ms=12.0, held_ms=600.0, ended=1.0)
    assert chain_headline(held).plain.endswith("612ms  (upstream 12ms, held by the proxy 600ms)")
    asked = summary("c2", duration_ms=40.0, upstream_ms=12.0, client_wait_ms=28.0, ended=1.0)
    assert chain_headline(asked).plain.endswith("40ms  (upstream 12ms, client 28ms)")
    plain = summary("c3", duration_ms=12.0, upstream_ms=12.0, ended=1.0)
    assert chain_headline(plain).plain.endswith("12ms  (upstream 12ms)")  # no part that took nothing


def test_a_request_sent_upstream_in_place_of_the_clients_leaves_the_clients_record_one_leg() -> None:
    model = ViewModel()
    model.apply_all([opened("c1"), message("c1", 1, exchange="x1")])
    edited = message(
        "c1", 2, exchange="x1", jsonrpc_id=1, side=Side.UPSTREAM, note="edited by the proxy's intercept (i1)"
    )
    model.apply(edited)
    (entry,) = model.chains.values()
    client, upstream = entry.messages
    assert (client.seq, client.side) == (1, Side.CLIENT)  # it reached the proxy, never the server
    assert message_label(client).plain.startswith("▶ [client→proxy] request tools/call #1")
    assert ("side", "client (client ⇄ proxy)") in message_header(client, entry.summary)
    assert message_label(upstream).plain.startswith("▶ [proxy→server] request tools/call #1")
    assert "edited by the proxy's intercept (i1)" in message_label(upstream).plain


def test_an_answer_in_another_exchange_or_direction_is_left_as_it_was() -> None:
    model = ViewModel()
    model.apply_all([opened("c1"), message("c1", 1, exchange="x1"), message("c1", 2, exchange="x2")])
    upstream_answer = message(
        "c1", 3, exchange="x1", jsonrpc_id=1, side=Side.UPSTREAM, direction=Direction.TO_CLIENT, kind="result"
    )
    other_exchange = message("c1", 4, exchange="x9", jsonrpc_id=2, side=Side.UPSTREAM)
    model.apply_all([upstream_answer, other_exchange])
    (entry,) = model.chains.values()
    assert [m.side for m in entry.messages] == [Side.BOTH, Side.BOTH, Side.UPSTREAM, Side.UPSTREAM]


async def test_the_chain_tree_shows_the_notes_above_the_messages() -> None:
    async with running(opened("c1"), message("c1", 1), finished("c1", notes=[FAULT])) as h:
        await h.pilot.press("enter")
        lines = [str(node.label) for node in h.tree.root.children]
        assert lines[0] == f"✎ {FAULT}"
        assert "tools/call" in lines[1]
        assert "✎" in str(h.table.get_row_at(0))


def test_a_changed_relayed_call_reads_request_the_edit_answer_in_the_tree() -> None:
    model = ViewModel()
    edited = message(
        "c1", 2, exchange="x1", jsonrpc_id=1, side=Side.UPSTREAM, note="edited by the proxy's intercept (i1)"
    )
    answer = message(
        "c1", 3, exchange="x1", jsonrpc_id=1, direction=Direction.TO_CLIENT, kind="result", method=None,
        body={"jsonrpc": "2.0", "id": 1, "result": {"content": []}},
    )  # fmt: skip
    model.apply_all([opened("c1"), message("c1", 1, exchange="x1"), edited, answer])
    (entry,) = model.chains.values()

    lines = [node_label(node).plain for node in build_timeline(entry.summary, entry.messages)]

    assert [line.split("  ")[0] for line in lines] == [
        "▶ [client→proxy] request tools/call #1",
        "▶ [proxy→server] request tools/call #1",  # the edit, alone: not an upstream call left unanswered
        "◀ [server→client] result ok #1",
    ]
