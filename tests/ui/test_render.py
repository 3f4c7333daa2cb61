"""The words and badges the TUI shows, decided by pure functions."""

from __future__ import annotations

import json

import pytest

from proxy.flows.events import ChainStatus, HttpInfo, Mode, ProxyInfo
from tests.flows.stream_play import listens
from tests.flows.test_sink import Rig
from tests.ui.helpers import BASE, message, summary
from ui.body_search import ListFilter
from ui.feeds import FeedStatus
from ui.held_edit import editable_text
from ui.model import SessionEntry, ViewModel
from ui.render import (
    chain_headline,
    duration,
    eras_cell,
    message_header,
    note_label,
    outcome,
    pretty_json,
    session_cells,
    size,
    status_cell,
    tail_cell,
)
from ui.widgets.status_bar import ViewFlags, status_text


@pytest.mark.parametrize(
    ("ms", "text"),
    [(None, "—"), (0.25, "250µs"), (12.4, "12ms"), (1250, "1.25s"), (123000, "2m03s")],
)
def test_durations_read_short(ms: float | None, text: str) -> None:
    assert duration(ms) == text


def test_sizes_read_short() -> None:
    assert [size(n) for n in (512, 2048, 3 * 1024 * 1024)] == ["512B", "2.0K", "3.0M"]


def test_a_bridged_chain_shows_both_eras_and_the_bridge_badge() -> None:
    bridged = summary("c1", client_era="legacy", upstream_era="modern", mode=Mode.LEGACY_TO_MRTR)

    assert eras_cell(bridged).plain == "L→M ⇄"
    assert eras_cell(summary("c2", client_era="modern", upstream_era="modern")).plain == "M→M"


def test_a_plain_http_request_beside_the_endpoint_shows_http_for_its_eras_and_its_path_as_its_name() -> None:
    token = summary("c3", method="POST", name="/token")

    assert eras_cell(token).plain == "http"
    assert chain_headline(token).plain.startswith("POST /token  http  passthrough")
    assert eras_cell(summary("c4", method="GET stream")).plain == "?→?"


def test_a_chain_that_came_over_stdio_or_sse_says_so_in_its_headline_and_message_view() -> None:
    stdio = summary("c1", client_transport="stdio", upstream_transport="http")
    assert "stdio → http" in chain_headline(stdio).plain
    record = message("c1", 1).message
    assert ("transport", "stdio → http") in message_header(record, stdio)
    shim = summary("c2", client_transport="sse", upstream_transport="stdio")
    assert ("transport", "sse → stdio") in message_header(record, shim)
    plain = summary("c3")  # Streamable HTTP on both sides, as most chains: nothing more to say
    assert "→ http" not in chain_headline(plain).plain
    assert "transport" not in dict(message_header(record, plain))


def test_a_parked_continuation_shows_as_parked_until_the_chain_ends() -> None:
    waiting = summary("c1", status=ChainStatus.WAITING_CLIENT)

    assert status_cell(waiting).plain == "waiting"
    assert status_cell(waiting, "parked").plain == "parked"
    assert status_cell(summary("c1", status=ChainStatus.OK), "parked").plain == "ok"


@pytest.mark.parametrize(
    ("body", "kind", "text"),
    [
        (
            {"result": {"resultType": "input_required", "inputRequests": {"name": {}, "llm": {}}}},
            "result",
            "input_required [name, llm]",
        ),
        ({"result": {"action": "accept"}}, "result", "accept"),
        ({"result": {"isError": True}}, "result", "tool error (isError)"),
        ({"result": {"content": []}}, "result", "ok"),
        ({"error": {"code": -32602, "message": "bad"}}, "error", "error -32602 bad"),
    ],
)
def test_a_response_is_summed_up_in_a_few_words(body: dict[str, object], kind: str, text: str) -> None:
    record = message("c1", 2, kind=kind, body=body).message

    assert outcome(record) == text


def test_long_bodies_are_cut_with_a_count_of_what_is_hidden() -> None:
    body = {"items": list(range(100))}

    cut = pretty_json(body, max_lines=10)
    whole = pretty_json(body, max_lines=None)

    assert cut.text.count("\n") == 9
    assert cut.hidden_lines == whole.total_lines - 10
    assert whole.hidden_lines == 0


def test_an_ended_capture_says_what_reading_skipped_and_a_clean_one_says_nothing_more() -> None:
    detail = "9 events from a.jsonl; 1 corrupt line skipped"
    skipped = FeedStatus("ended", detail, warning="1 corrupt line skipped")

    shown = status_text(ViewModel(), skipped, ViewFlags()).plain
    clean = status_text(ViewModel(), FeedStatus("ended", "9 events from a.jsonl"), ViewFlags()).plain

    assert shown.startswith("■ ended 1 corrupt line skipped")
    assert "9 events" not in clean
    assert clean.startswith("■ ended  │")


def test_the_status_line_puts_state_lag_and_pause_first() -> None:
    model = ViewModel()
    model.lagged_total = 42
    flags = ViewFlags(paused=True, held=7)

    text = status_text(model, FeedStatus("reconnecting", "cannot connect", retry_in=2.0), flags).plain

    assert text.startswith("○ disconnected (cannot connect) retry in 2s")
    assert text.index("lagged 42") < text.index("PAUSED +7") < text.index("0 chains")


def test_an_upstream_the_probe_got_no_answer_from_is_named_before_the_counts_while_live() -> None:
    model = ViewModel()
    down = ProxyInfo(ts=1.0, version="0", listen="http://127.0.0.1:1", upstream="http://127.0.0.1:2/mcp")
    model.apply(down.model_copy(update={"upstream_unreachable": "Connection refused"}))

    live = status_text(model, FeedStatus("live"), ViewFlags()).plain
    recorded = status_text(model, FeedStatus("ended"), ViewFlags()).plain

    assert live.index("upstream not answering") < live.index("0 chains")
    assert "not answering" not in recorded  # a capture's last word on its upstream is history


def test_a_live_chain_id_keeps_its_end_in_a_narrow_column_so_rows_stay_apart() -> None:
    cells = {tail_cell(f"cb00287-{n}", 5) for n in (9, 10, 11)}

    assert cells == {"…87-9", "…7-10", "…7-11"}
    assert tail_cell("r12", 5) == "r12"


def test_header_lines_session_cells_and_notes_show_what_a_peer_chose_escaped() -> None:
    hostile = "v\x1b]0;T\x07\u202e"
    escaped = "v\\x1b]0;T\\x07\\u202e"
    head = HttpInfo(method="POST", path="/mcp", headers={"X-Peer": hostile})
    record = message("c1", 1, http=head, note=hostile).message
    rows = dict(message_header(record, summary("c1", name=hostile)))
    assert rows["  X-Peer"] == escaped
    assert rows["note"] == escaped
    assert rows["chain"].endswith(f"tools/call {escaped}")
    session = SessionEntry(
        session=hostile, client_name=hostile, protocol_version=None, state="opened", opened=BASE, changed=BASE
    )
    assert {str(cell) for cell in session_cells(session).values()} >= {escaped}
    assert note_label(hostile, changed=True).plain.endswith(escaped)
    assert tail_cell(hostile, 40) == escaped


def test_a_joined_set_cookie_shows_one_header_row_per_cookie() -> None:
    cookies = "<redacted len=11 hmac:0000aaaa>\n<redacted len=11 hmac:0000bbbb>"
    head = HttpInfo(
        status=200, content_type="application/json", headers={"Set-Cookie": cookies, "X-Trace": "a, b"}
    )
    rows = message_header(message("c1", 1, http=head).message, summary("c1"))
    assert [row for row in rows if row[0].strip() in ("Set-Cookie", "X-Trace")] == [
        ("  Set-Cookie", "<redacted len=11 hmac:0000aaaa>"),
        ("  Set-Cookie", "<redacted len=11 hmac:0000bbbb>"),
        ("  X-Trace", "a, b"),
    ]


def test_a_captures_upstream_and_run_tag_are_shown_escaped_in_the_status_line() -> None:
    model = ViewModel()
    crafted = ProxyInfo(
        ts=1.0, version="0", listen="http://127.0.0.1:1", upstream="http://up\x1b]0;T\x07/mcp", run="r\u202e1"
    )
    model.apply(crafted)

    text = status_text(model, FeedStatus("ended"), ViewFlags()).plain

    assert "up\\x1b]0;T\\x07/mcp" in text
    assert not any(char in text for char in "\x1b\x07\u202e"), text


def test_a_held_message_opens_in_the_editor_with_its_controls_as_json_escapes_of_the_same_value() -> None:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "x\u202e\x9b\x7f名\n"}}

    text = editable_text(message)

    assert '"name": "x\\u202e\\u009b\\u007f名\\n"' in text
    assert json.loads(text) == message


def test_the_status_line_says_how_far_the_filter_s_body_search_is_and_when_it_is_done() -> None:
    search = ListFilter(to_search=10, searched=3)
    ended = FeedStatus("ended", "9 chains from a.jsonl")

    running = status_text(ViewModel(), ended, ViewFlags(filter=search)).plain
    search.searched = 10
    done = status_text(ViewModel(), ended, ViewFlags(filter=search)).plain
    search.failed = "cannot read the spill file"
    failed = status_text(ViewModel(), ended, ViewFlags(filter=search)).plain

    assert running.index("searching bodies 3 of 10 chains") < running.index("0 chains")
    assert "bodies of every chain searched" in done
    assert "body search stopped: cannot read the spill file; the chains not read are not shown" in failed
    assert "bodies" not in status_text(ViewModel(), ended, ViewFlags(filter=ListFilter())).plain


def test_a_listens_headline_counts_its_open_stream_apart_from_the_upstreams_time() -> None:
    rig = Rig()
    listens(rig.facts, rig.clock)
    headlines = {c.summary.jsonrpc_id: chain_headline(c.summary).plain for c in rig.chains()}

    assert headlines["listen-1"].endswith("2.25s  (upstream 250ms, stream open 2.00s)  client_disconnected")
    assert "(upstream 0µs, stream open 3.00s)" in headlines["listen-3"]
