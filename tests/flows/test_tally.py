"""The round-trip line's naming and its `trouble`: what went wrong, and nothing when nothing did."""

from __future__ import annotations

import orjson
import pytest

from proxy.flows.events import Channel, Direction, Mode
from proxy.flows.log_lines import ExchangeSummary, ServerAsked
from proxy.flows.observations import (
    LATE_CANCEL_S,
    ExchangeClosed,
    ExchangeOpened,
    MessageSeen,
    ResponseHeadSeen,
)
from proxy.flows.redact import Redactor
from proxy.flows.tally import RoundTripTally
from proxy.wire.jsonrpc import classify_value


def exchange(
    tally: RoundTripTally,
    ex: str,
    http_method: str,
    sent: list[dict[str, object]],
    got: list[dict[str, object]],
    outcome: str | None,
    *,
    path: str = "/mcp",
    status: int = 200,
    content_type: str = "text/event-stream",
) -> ExchangeSummary:
    """One client exchange: `sent` by the client, `got` back on its response, ended with `outcome`."""
    tally.observe(ExchangeOpened(1.0, ex, http_method=http_method, path=path, headers={}, session="s1"))
    for value in sent:
        tally.observe(MessageSeen(1.0, ex, classify_value(value), 10, Direction.TO_SERVER, Channel.POST))
    tally.observe(ResponseHeadSeen(1.0, ex, status=status, content_type=content_type, headers={}))
    for value in got:
        tally.observe(MessageSeen(1.0, ex, classify_value(value), 10, Direction.TO_CLIENT, Channel.SSE))
    line = tally.observe(ExchangeClosed(1.5, ex, outcome))
    if line is None:  # held for a cancel that does not come: logged as it stands once the hold runs out
        tally.expire(1.5 + LATE_CANCEL_S + 0.1)
        ((line, _mode),) = tally.released
        tally.released.clear()
    return line


CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "add", "arguments": {}}}
ASK = {"jsonrpc": "2.0", "id": 7, "method": "elicitation/create", "params": {"message": "name?"}}
DONE = {"jsonrpc": "2.0", "id": 1, "result": {"content": []}}


def test_a_client_leaving_before_its_answer_is_trouble_and_after_it_is_not() -> None:
    tally = RoundTripTally(Redactor(key=b"k"))
    cut = exchange(tally, "x1", "POST", [CALL], [ASK], "client_disconnected")
    assert (cut.carried, cut.trouble) == ("tools/call add", "client_disconnected")
    answered = exchange(tally, "x2", "POST", [CALL], [DONE], "client_disconnected")
    assert (answered.trouble, answered.outcome) == (None, None)  # as the HAR's `_mcp.outcome` says
    assert answered.end == "client_disconnected"  # still told in full to machines, as no trouble
    fields = answered.log_fields("passthrough")
    assert (fields["outcome"], fields["end"]) == (None, "client_disconnected")
    assert "end" not in cut.log_fields("passthrough")


def test_a_call_its_client_cancelled_ends_as_cancelled_with_no_trouble() -> None:
    # The client asked for it: a failure filter (`.trouble`) must not list it.
    tally = RoundTripTally(Redactor(key=b"k"))
    cancelled = exchange(tally, "x1", "POST", [CALL], [ASK], "cancelled")
    assert (cancelled.trouble, cancelled.outcome, cancelled.end) == (None, None, "cancelled")


CANCEL = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}


def post(tally: RoundTripTally, ex: str, value: dict[str, object], t: float, era: str = "legacy") -> None:
    """The client POSTs one message in session s1 (the exchange left open)."""
    tally.observe(
        ExchangeOpened(t, ex, http_method="POST", path="/mcp", headers={}, session="s1", client_era=era)
    )
    tally.observe(MessageSeen(t, ex, classify_value(value), 10, Direction.TO_SERVER, Channel.POST))


def test_a_legacy_call_cut_before_its_answer_waits_for_the_cancel_that_follows_and_is_logged_cancelled() -> (
    None
):
    """The TypeScript SDK aborts the call's stream first and POSTs `notifications/cancelled` after: the
    call's line is held until the cancel names it, then says `cancelled`, not trouble."""
    tally = RoundTripTally(Redactor(key=b"k"))
    post(tally, "x1", CALL, 1.0)
    assert tally.observe(ExchangeClosed(1.2, "x1", "client_disconnected")) is None
    assert tally.released == []
    post(tally, "x2", CANCEL, 1.3)
    ((line, mode),) = tally.released
    assert (line.exchange, mode) == ("x1", "passthrough")
    assert (line.trouble, line.outcome, line.end) == (None, None, "cancelled")


def test_a_legacy_call_cut_with_no_cancel_is_logged_as_trouble_once_the_hold_runs_out() -> None:
    tally = RoundTripTally(Redactor(key=b"k"))
    post(tally, "x1", CALL, 1.0)
    assert tally.observe(ExchangeClosed(1.2, "x1", "client_disconnected")) is None
    tally.expire(1.2 + LATE_CANCEL_S)
    assert tally.released == []
    tally.expire(1.2 + LATE_CANCEL_S + 0.1)
    ((line, _mode),) = tally.released
    assert (line.trouble, line.outcome) == ("client_disconnected", "client_disconnected")


def test_a_call_cancelled_first_then_ended_unanswered_by_the_server_is_logged_cancelled() -> None:
    """The Python SDK POSTs `notifications/cancelled` first; the server then ends the call's stream
    without an answer: no `no response` trouble."""
    tally = RoundTripTally(Redactor(key=b"k"))
    post(tally, "x1", CALL, 1.0)
    post(tally, "x2", CANCEL, 1.1)
    assert tally.observe(ExchangeClosed(1.1, "x2")) is not None
    line = tally.observe(ExchangeClosed(1.2, "x1"))
    assert line is not None
    assert (line.trouble, line.outcome, line.end) == (None, None, "cancelled")


def test_a_cancel_from_another_session_leaves_the_line_alone() -> None:
    tally = RoundTripTally(Redactor(key=b"k"))
    post(tally, "x1", CALL, 1.0)
    tally.observe(ExchangeOpened(1.1, "x2", http_method="POST", path="/mcp", headers={}, session="s2"))
    tally.observe(MessageSeen(1.1, "x2", classify_value(CANCEL), 10, Direction.TO_SERVER, Channel.POST))
    line = tally.observe(ExchangeClosed(1.2, "x1"))
    assert line is not None
    assert line.trouble == "no response"


def test_an_answer_to_a_server_request_is_named_for_it_and_a_stream_end_is_no_trouble() -> None:
    tally = RoundTripTally(Redactor(key=b"k"))
    exchange(tally, "x1", "POST", [CALL], [ASK], None)
    reply = {"jsonrpc": "2.0", "id": 7, "result": {"action": "accept", "content": {"name": "o"}}}
    answer = exchange(tally, "x2", "POST", [reply], [], None)
    assert answer.carried == "result of elicitation/create (accept)"
    exchange(tally, "x4", "POST", [CALL | {"id": 2}], [ASK | {"id": 8}], None)
    declined = exchange(
        tally, "x5", "POST", [{"jsonrpc": "2.0", "id": 8, "result": {"action": "decline"}}], [], None
    )
    assert declined.carried == "result of elicitation/create (decline)"
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}}
    assert exchange(tally, "x6", "POST", [cancel], [], None).carried == "notifications/cancelled of #2"
    unknown = exchange(tally, "x3", "POST", [{"jsonrpc": "2.0", "id": 99, "error": {"code": 1}}], [], None)
    assert unknown.carried == "error for id 99"
    for ending in ("client_disconnected", "session_deleted"):
        stream = exchange(tally, f"g-{ending}", "GET", [], [], ending)
        assert (stream.carried, stream.trouble) == ("GET stream", None)
    cut = exchange(tally, "g-cut", "GET", [], [], "upstream_cut")
    assert cut.trouble == "upstream_cut"


def test_what_went_wrong_is_told_from_the_answer_and_the_status_when_the_exchange_ended_cleanly() -> None:
    tally = RoundTripTally(Redactor(key=b"k"))
    unknown = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "Method not found"}}
    assert exchange(tally, "x1", "POST", [CALL], [unknown], None).trouble == "error -32601"
    failed = {"jsonrpc": "2.0", "id": 1, "result": {"content": [], "isError": True}}
    assert exchange(tally, "x2", "POST", [CALL], [failed], None).trouble == "tool error"
    gone = exchange(tally, "x3", "POST", [CALL], [], None, status=404, content_type="text/plain")
    assert gone.trouble == "HTTP 404"
    assert exchange(tally, "x4", "POST", [CALL], [DONE], None).trouble is None


def test_a_request_whose_exchange_ended_cleanly_without_its_answer_is_trouble() -> None:
    tally = RoundTripTally(Redactor(key=b"k"))
    empty = exchange(tally, "x1", "POST", [CALL], [], None, content_type="application/json")
    said = "the server's 200 answer has an empty body, no response to a request"
    assert (empty.trouble, empty.outcome) == (said, None)
    assert empty.log_fields("passthrough")["trouble"] == said
    ended_first = exchange(tally, "x2", "POST", [CALL], [ASK], None)
    assert ended_first.trouble == "response stream ended without a response"
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert exchange(tally, "x3", "POST", [note], [], None, status=202).trouble is None


def test_a_get_the_server_answers_405_offering_no_stream_is_no_trouble_and_logged_at_info() -> None:
    tally = RoundTripTally(Redactor(key=b"k"))
    declined = exchange(tally, "g1", "GET", [], [], None, status=405, content_type="text/plain")
    assert (declined.trouble, declined.level) == (None, "info")
    refused = exchange(tally, "x1", "POST", [CALL], [], None, status=405, content_type="text/plain")
    assert (refused.trouble, refused.level) == ("HTTP 405", "warning")  # a POST refused so failed


def test_a_get_that_gets_no_event_stream_is_named_by_its_path_with_secrets_masked() -> None:
    tally = RoundTripTally(Redactor(key=b"k"))
    page = exchange(
        tally, "g1", "GET", [], [], None, path="/nothing?token=s3cr3t", status=404, content_type="text/plain"
    )
    assert page.carried.startswith("GET /nothing?token=<redacted")
    assert "s3cr3t" not in page.carried
    assert page.trouble == "HTTP 404"


def test_a_request_sent_to_the_client_is_told_at_once_with_what_waits_on_it() -> None:
    redactor = Redactor(key=b"k")
    tally = RoundTripTally(redactor)
    tally.observe(ExchangeOpened(1.0, "x1", http_method="POST", path="/mcp", headers={}, session="s1"))
    tally.observe(MessageSeen(1.0, "x1", classify_value(CALL), 10, Direction.TO_SERVER, Channel.POST))
    assert tally.asking == []
    tally.observe(MessageSeen(1.2, "x1", classify_value(ASK), 10, Direction.TO_CLIENT, Channel.SSE))
    assert "x1" in tally.open_ids  # told while the exchange still waits, not when it closes
    assert tally.asking == [
        ServerAsked(
            "x1", redactor.token("s1"), "tools/call add", (1,), "elicitation/create", 7, Mode.PASSTHROUGH
        )
    ]
    assert tally.asking[0].log_fields()["session"] != "s1"
    tally.asking.clear()
    progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}
    for value in (progress, DONE):  # a notification or an answer to the client asks nothing
        tally.observe(MessageSeen(1.3, "x1", classify_value(value), 10, Direction.TO_CLIENT, Channel.SSE))
    assert tally.asking == []
    tally.observe(ExchangeOpened(2.0, "g1", http_method="GET", path="/mcp", headers={}, session="s1"))
    roots = {"jsonrpc": "2.0", "id": 3, "method": "roots/list"}
    tally.observe(MessageSeen(2.1, "g1", classify_value(roots), 10, Direction.TO_CLIENT, Channel.SSE))
    assert [(a.carried, a.method, a.asked) for a in tally.asking] == [("GET stream", "roots/list", 3)]


def test_an_input_required_answer_in_passthrough_tells_each_input_it_waits_for() -> None:
    tally = RoundTripTally(Redactor(key=b"k"))
    asks = {
        "name": {"method": "elicitation/create", "params": {"message": "name?"}},
        "llm": {"method": "sampling/createMessage", "params": {}},
    }
    answer = {"jsonrpc": "2.0", "id": 1, "result": {"resultType": "input_required", "inputRequests": asks}}
    line = exchange(tally, "x1", "POST", [CALL], [answer], None, content_type="application/json")
    told = [(a.exchange, a.ids, a.method, a.asked, a.how) for a in tally.asking]
    assert told == [
        ("x1", (1,), "elicitation/create", "name", "input_required"),
        ("x1", (1,), "sampling/createMessage", "llm", "input_required"),
    ]
    assert line.trouble is None
    tally.asking.clear()
    exchange(tally, "x2", "POST", [CALL], [DONE], None, content_type="application/json")
    assert tally.asking == []  # a complete answer asks nothing


def test_a_name_the_line_shows_is_masked_a_learned_secret_and_a_resource_uris_credential_alike() -> None:
    redactor = Redactor(key=b"k")
    redactor.remember("sk-LEAK-bearer-abc123def456")  # a client's bearer, learned from its header
    tally = RoundTripTally(redactor)
    tool = dict(CALL, params={"name": "echo-sk-LEAK-bearer-abc123def456", "arguments": {}})
    uri = "https://files.example/doc?access_token=uriLEAK-access-31337&x=1"
    read = {"jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": {"uri": uri}}

    lines = [exchange(tally, f"x{n}", "POST", [sent], [], None) for n, sent in enumerate((tool, read))]

    for line in lines:
        shown = f"{line.log_fields('passthrough')}"
        assert "LEAK" not in shown, shown
    assert lines[0].name is not None
    assert lines[0].name.startswith("echo-<redacted len=27 ")
    assert lines[1].carried.startswith("resources/read https://files.example/doc?access_token=<redacted")
    assert lines[1].carried.endswith("&x=1")
    # the credential is learned: wherever it shows up later (an echo in a result), it is masked
    assert "uriLEAK" not in redactor.scrub("the token was uriLEAK-access-31337")


def _cancel(tally: RoundTripTally, ex: str, ident: int, t: float) -> None:
    """The client POSTs `notifications/cancelled` of request `ident` in session s1, answered 202."""
    post(tally, ex, {**CANCEL, "params": {"requestId": ident}}, t)
    assert tally.observe(ExchangeClosed(t, ex)) is not None


def test_a_held_line_whose_id_a_later_call_reuses_is_logged_as_it_stands_not_lost() -> None:
    """A client retrying with the same id hangs up on both calls inside the window: each is logged."""
    tally = RoundTripTally(Redactor(key=b"k"))
    post(tally, "x1", CALL, 1.0)
    assert tally.observe(ExchangeClosed(1.2, "x1", "client_disconnected")) is None
    post(tally, "x2", CALL, 1.3)
    assert tally.observe(ExchangeClosed(1.5, "x2", "client_disconnected")) is None
    ((first, _mode),) = tally.released  # the earlier call can no longer be named by a cancel
    assert (first.exchange, first.trouble) == ("x1", "client_disconnected")
    tally.released.clear()
    _cancel(tally, "x3", 1, 1.6)
    ((second, _mode),) = tally.released
    assert (second.exchange, second.end) == ("x2", "cancelled")
    tally.release_all()
    assert tally.released == [(second, "passthrough")]  # nothing else was held


def test_a_cancel_of_a_call_already_logged_does_not_mark_a_later_call_with_its_id() -> None:
    tally = RoundTripTally(Redactor(key=b"k"))
    done = exchange(tally, "x1", "POST", [CALL], [DONE], None)
    assert done.trouble is None
    _cancel(tally, "x2", 1, 2.0)  # too late: the call was answered and logged
    post(tally, "x3", CALL, 3.0)
    line = tally.observe(ExchangeClosed(3.2, "x3"))
    assert line is not None
    assert (line.trouble, line.end) == ("no response", None)


def test_a_cancel_of_one_of_two_open_calls_is_not_used_up_nor_left_for_a_later_call() -> None:
    """A batch of two calls; the client cancels the second only, then hangs up: the line waits for the
    first's cancel (none comes), and the second's cancel marks no later call with its id."""
    tally = RoundTripTally(Redactor(key=b"k"))
    second = {**CALL, "id": 2}
    tally.observe(ExchangeOpened(1.0, "x1", http_method="POST", path="/mcp", headers={}, session="s1"))
    for value in (CALL, second):
        tally.observe(MessageSeen(1.0, "x1", classify_value(value), 10, Direction.TO_SERVER, Channel.POST))
    _cancel(tally, "x2", 2, 1.1)
    assert tally.observe(ExchangeClosed(1.2, "x1", "client_disconnected")) is None
    tally.expire(1.2 + LATE_CANCEL_S + 0.1)
    ((line, _mode),) = tally.released
    assert line.trouble == "client_disconnected"
    post(tally, "x3", second, 9.0)
    later = tally.observe(ExchangeClosed(9.2, "x3"))
    assert later is not None
    assert later.trouble == "no response"


def test_a_cancel_past_the_window_leaves_a_held_line_as_it_stands() -> None:
    """No sweep ran between the window's end and the cancel: the cancel is still too late."""
    tally = RoundTripTally(Redactor(key=b"k"))
    post(tally, "x1", CALL, 1.0)
    assert tally.observe(ExchangeClosed(1.2, "x1", "client_disconnected")) is None
    _cancel(tally, "x2", 1, 1.2 + LATE_CANCEL_S + 0.5)
    ((line, _mode),) = tally.released
    assert (line.trouble, line.end) == ("client_disconnected", None)


def test_a_batch_opening_with_a_notification_names_each_of_its_messages_once() -> None:
    tally = RoundTripTally(Redactor(key=b"k"))
    changed = {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}
    listed = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    answered = {"jsonrpc": "2.0", "id": 2, "result": {"tools": []}}
    line = exchange(tally, "x1", "POST", [changed, CALL, listed], [DONE, answered], None)
    assert line.batch == ("notifications/roots/list_changed", "tools/call add", "tools/list")
    assert line.carried == "batch of 3: notifications/roots/list_changed, tools/call add, tools/list"
    assert (line.method, line.jsonrpc_ids, line.trouble) == ("tools/call", (1, 2), None)
    many = exchange(tally, "x2", "POST", [changed] * 5, [], None, status=202, content_type="")
    assert many.carried.endswith("notifications/roots/list_changed, +2 more"), many.carried
    assert many.batch == ("notifications/roots/list_changed",) * 5
    assert exchange(tally, "x3", "POST", [CALL], [DONE], None).batch is None


@pytest.mark.parametrize(
    ("name", "ident"),
    [("n" * 1_000, "i" * 400), ("\x01" * 280, "\U0001f600" * 280)],
    ids=["long", "escaped-in-json"],
)
def test_a_256_message_batch_line_stays_a_few_kb_and_counts_what_it_leaves_out(name: str, ident: str) -> None:
    """Each name and id is bounded in characters; JSON may write one as six bytes (`\\u0001`) or four
    (an emoji), and the server's stray answer names the requests left unanswered in `trouble`."""
    tally = RoundTripTally(Redactor(key=b"k"))
    sent = [
        {"jsonrpc": "2.0", "id": f"{n}{ident}", "method": "tools/call", "params": {"name": f"{n}{name}"}}
        for n in range(256)
    ]
    stray = {"jsonrpc": "2.0", "id": "nobody", "result": {}}
    line = exchange(tally, "x1", "POST", sent, [stray], None, content_type="application/json")

    fields = line.log_fields("passthrough")
    assert len(orjson.dumps(fields)) < 12_000, len(orjson.dumps(fields))
    assert fields["batch"][-1] == f"+{256 - len(fields['batch']) + 1} more", fields["batch"]
    assert len(fields["ids"]) + fields["ids_more"] == 256
    assert fields["carried"].startswith("batch of 256: tools/call 0"), fields["carried"]
    assert fields["trouble"].endswith(" and 246 more"), fields["trouble"][-80:]
