"""The rate bound on unwatched history: while nobody watches chains live, the sink keeps at most
`unwatched_rate` calls a second (averaged over `BURST_SECONDS`) and leaves the rest out when they are
plain from their opening to their end, with a `(dropped)` chain standing for each run of them. A call
held to be left out that turns out to be anything else (an error, a question from the server, an
answer asking for input, a cut, a long stream, a cancel) is kept after all, queued before whatever can
refer to it: the chains hold every failure and every operation of more than one exchange.

The observations arrive as the pass-through relay hands them over: an opening batch (the exchange and
its request) and a closing one (the head, the answer, the close), each named with its exchange.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.flows.events import Channel, Direction, Mode
from proxy.flows.ledger import DROPPED_METHOD
from proxy.flows.observations import (
    EventIdSeen,
    ExchangeClosed,
    ExchangeOpened,
    InterceptHeld,
    InterceptReleased,
    MessageSeen,
    ResponseHeadSeen,
)
from proxy.flows.unwatched import BURST_SECONDS, HOLD_BYTES, HOLD_MAX, RUN_SECONDS
from proxy.wire.jsonrpc import Message, classify_value, error_response, notification, request, result_response
from tests.flows.test_sink import SESSION, Rig

HEADERS = {"Content-Type": "application/json", "Mcp-Session-Id": SESSION}


def _open(rig: Rig, exchange: str, msg: Message, era: str = "legacy") -> None:
    now = rig.clock()
    session = SESSION if era == "legacy" else None
    opened = ExchangeOpened(now, exchange, "POST", "/mcp", HEADERS, session, era, era, Mode.PASSTHROUGH)
    seen = MessageSeen(now, exchange, msg, 80, Direction.TO_SERVER, Channel.POST)
    rig.sink.emit_all([opened, seen], exchange)


def _close(rig: Rig, exchange: str, answer: dict[str, Any], status: int = 200) -> None:
    now = rig.clock()
    head = ResponseHeadSeen(now, exchange, status, "application/json", {})
    back = MessageSeen(now, exchange, classify_value(answer), 60, Direction.TO_CLIENT, Channel.JSON)
    rig.sink.close(ExchangeClosed(now, exchange, None), [head, back], whole=True)


def _call(rig: Rig, n: int, params: dict[str, Any] | None = None, method: str = "tools/call") -> None:
    """One plain call answered with JSON, a millisecond long."""
    exchange = f"x{n}"
    _open(rig, exchange, classify_value(request(n, method, params or {"name": "add", "arguments": {}})))
    rig.clock.now += 0.001
    _close(rig, exchange, result_response(n, {"content": []}))


def _kept_ids(rig: Rig) -> list[Any]:
    return [c.summary.jsonrpc_id for c in rig.chains() if c.summary.method != DROPPED_METHOD]


def _chain(rig: Rig, ident: Any) -> Any:
    (chain,) = [
        c for c in rig.chains() if c.summary.jsonrpc_id == ident and c.summary.method != DROPPED_METHOD
    ]
    return chain


def _misfiled(rig: Rig) -> list[Any]:
    """Chains that stand for something the proxy did not see whole."""
    return [
        c
        for c in rig.chains()
        if c.summary.method in ("(response)", "notifications/cancelled")
        or any(
            "did not see" in note or "no waiting call" in note or "no chain is waiting" in note
            for note in c.summary.notes
        )
    ]


def _gaps(rig: Rig) -> list[Any]:
    return [c for c in rig.store if c.summary.method == DROPPED_METHOD]


def test_past_the_rate_plain_calls_are_left_out_counted_and_a_dropped_chain_names_the_setting() -> None:
    rig = Rig(unwatched_rate=2)
    burst = int(2 * BURST_SECONDS)
    for n in range(1, burst + 31):
        _call(rig, n)

    assert rig.sink.unwatched.left_out == 30
    assert _kept_ids(rig) == list(range(1, burst + 1))  # the burst, whole and in order
    (gap,) = _gaps(rig)
    assert "30 observations" not in gap.summary.notes[0]
    assert "150 observations of about 30 client exchanges" in gap.summary.notes[0]
    assert "unwatched_history_rate" in gap.summary.notes[0]
    assert rig.sink.pending == 0
    assert rig.builder.open_exchanges == 0


def test_the_rate_refills_with_time_and_each_run_stands_where_it_began() -> None:
    rig = Rig(unwatched_rate=1)
    n = 0
    for _ in range(int(BURST_SECONDS) + 5):  # the burst, then five left out
        n += 1
        _call(rig, n)
    rig.clock.now += 2.0  # two calls' worth refilled; past RUN_SECONDS, so the next run is a new one
    assert RUN_SECONDS < 2.0
    for _ in range(6):  # two kept, four left out
        n += 1
        _call(rig, n)

    chains = rig.chains()
    shown = [c.summary.method if c.summary.method == DROPPED_METHOD else c.summary.jsonrpc_id for c in chains]
    burst = list(range(1, int(BURST_SECONDS) + 1))
    after = int(BURST_SECONDS) + 5
    assert shown == [*burst, DROPPED_METHOD, after + 1, after + 2, DROPPED_METHOD]
    assert rig.sink.unwatched.left_out == 9
    assert [int(g.summary.notes[0].split(" observations")[0]) for g in _gaps(rig)] == [25, 20]


def test_while_someone_watches_and_with_no_rate_every_call_is_kept() -> None:
    watched = Rig(unwatched_rate=1)
    watcher = watched.bus.subscribe("tui")
    unbounded = Rig(unwatched_rate=0)
    for rig in (watched, unbounded):
        for n in range(1, 41):
            _call(rig, n)
        assert rig.sink.unwatched.left_out == 0
        assert _kept_ids(rig) == list(range(1, 41))
        assert not _gaps(rig)
    watcher.close()


def test_initialize_and_retries_are_kept_past_the_rate() -> None:
    rig = Rig(unwatched_rate=1)
    for n in range(1, int(BURST_SECONDS) + 1):
        _call(rig, n)
    _call(
        rig, 100, {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {}}, method="initialize"
    )
    _call(rig, 101, {"name": "ask", "arguments": {}, "requestState": "st", "inputResponses": {}})
    _call(rig, 102)

    assert rig.sink.unwatched.left_out == 1
    assert _kept_ids(rig)[-2:] == [100, 101]


def test_a_call_whose_answer_asks_for_input_is_kept_and_its_retry_continues_it() -> None:
    rig = Rig(unwatched_rate=1)
    for n in range(1, int(BURST_SECONDS) + 1):
        _call(rig, n)
    ask = {"name": "ask", "arguments": {}}
    _open(rig, "x50", classify_value(request(50, "tools/call", ask)), era="modern")
    asks = {"resultType": "input_required", "inputRequests": {}, "requestState": "st-9"}
    _close(rig, "x50", result_response(50, asks))
    retry = {**ask, "inputResponses": {}, "requestState": "st-9"}
    _open(rig, "x51", classify_value(request(51, "tools/call", retry)), era="modern")
    _close(rig, "x51", result_response(51, {"content": [], "resultType": "complete"}))

    assert rig.sink.unwatched.left_out == 0
    assert not _gaps(rig)
    assert not _misfiled(rig)
    assert _kept_ids(rig)[-1] == 51
    assert _chain(rig, 51).summary.rounds == 2  # the retry continued the first round's chain


def test_calls_that_fail_are_kept_past_the_rate() -> None:
    rig = Rig(unwatched_rate=1)
    for n in range(1, int(BURST_SECONDS) + 1):
        _call(rig, n)
    call = {"name": "add", "arguments": {}}
    _open(rig, "x40", classify_value(request(40, "tools/call", call)))
    _close(rig, "x40", error_response(40, -32602, "unknown tool"))
    _open(rig, "x41", classify_value(request(41, "tools/call", call)))
    _close(rig, "x41", result_response(41, {"content": [], "isError": True}))
    _open(rig, "x42", classify_value(request(42, "tools/call", call)))
    _close(rig, "x42", result_response(42, {"content": []}), status=500)
    _call(rig, 43)  # a plain one: left out

    assert rig.sink.unwatched.left_out == 1
    assert _kept_ids(rig)[-3:] == [40, 41, 42]  # a JSON-RPC error, a tool's error, an HTTP 500
    assert {_chain(rig, n).summary.status.value for n in (40, 41)} == {"error"}


def test_the_answer_to_a_question_asked_on_a_held_call_joins_the_call_kept_for_it() -> None:
    rig = Rig(unwatched_rate=1)
    for n in range(1, int(BURST_SECONDS) + 1):
        _call(rig, n)
    _open(rig, "x60", classify_value(request(60, "tools/call", {"name": "ask", "arguments": {}})))
    now = rig.clock()
    head = ResponseHeadSeen(now, "x60", 200, "text/event-stream", {})
    question = classify_value(request(0, "elicitation/create", {"message": "name?", "requestedSchema": {}}))
    asked = MessageSeen(now, "x60", question, 90, Direction.TO_CLIENT, Channel.SSE, sse_id="e1")
    rig.sink.emit_all([head, asked, EventIdSeen(now, "x60", "e1")], "x60")
    rig.clock.now += 0.5
    answer = classify_value(result_response(0, {"action": "accept", "content": {"name": "Ada"}}))
    _open(rig, "x61", answer)  # the client's answer: never held (not a request)
    rig.sink.close(
        ExchangeClosed(rig.clock(), "x61", None),
        [ResponseHeadSeen(rig.clock(), "x61", 202, None, {})],
        whole=True,
    )
    done = classify_value(result_response(60, {"content": []}))
    rig.sink.close(
        ExchangeClosed(rig.clock(), "x60", None),
        [MessageSeen(rig.clock(), "x60", done, 50, Direction.TO_CLIENT, Channel.SSE)],
        whole=True,
    )

    assert rig.sink.unwatched.left_out == 0
    assert not _misfiled(rig)
    chain = _chain(rig, 60)
    assert chain.summary.nested == 1
    assert chain.summary.status.value == "ok"
    assert rig.builder.open_exchanges == 0
    assert rig.sink.pending == 0


def test_runs_past_the_backlog_are_dropped_each_named_for_its_own_bound_and_counted_once() -> None:
    rig = Rig(unwatched_rate=1, backlog=40)
    n = 0
    for _ in range(8):  # rounds of calls a second and more apart: some kept, the rest left out in runs
        rig.clock.now += RUN_SECONDS + 1.0
        for _ in range(6):
            n += 1
            _call(rig, n)
    left_out = rig.sink.unwatched.left_out
    assert left_out > 0
    assert rig.sink.dropped > 0  # the kept calls outgrew the backlog: the oldest, and runs, were dropped
    chains = rig.chains()
    gaps = [c for c in chains if c.summary.method == DROPPED_METHOD]
    by_rate = [g for g in gaps if "unwatched_history_rate" in g.summary.notes[0]]
    by_backlog = [
        g for g in gaps if "queue of observations waiting to be built was full" in g.summary.notes[0]
    ]
    assert sum(_exchanges_in(g) for g in by_rate) == left_out  # every call left out is counted once
    assert by_backlog
    kept = [c for c in chains if c.summary.method != DROPPED_METHOD]
    assert sum(_exchanges_in(g) for g in gaps) + len(kept) == n  # a chain or counted in a gap, once
    assert rig.sink.pending == 0


def _exchanges_in(gap: Any) -> int:
    return int(gap.summary.notes[0].split(" observations of about ")[1].split()[0])


def _sse_call(rig: Rig, n: int, events: list[Any], outcome: str | None = None) -> None:
    """A plain call answered over an SSE stream carrying `events` (messages to the client), each its
    own batch as the relay hands them over, then the close."""
    exchange = f"x{n}"
    _open(rig, exchange, classify_value(request(n, "tools/call", {"name": "slow", "arguments": {}})))
    rig.sink.emit_all([ResponseHeadSeen(rig.clock(), exchange, 200, "text/event-stream", {})], exchange)
    for i, event in enumerate(events):
        rig.clock.now += 0.001
        msg = classify_value(event)
        size = len(orjson.dumps(event))
        seen = MessageSeen(
            rig.clock(), exchange, msg, size, Direction.TO_CLIENT, Channel.SSE, sse_id=f"{n}-{i}"
        )
        rig.sink.emit_all([seen], exchange)
    rig.sink.close(ExchangeClosed(rig.clock(), exchange, outcome), [], whole=True)


def _progress(step: int) -> dict[str, Any]:
    return notification("notifications/progress", {"progressToken": 1, "progress": step})


def _spend_the_burst(rig: Rig) -> None:
    for n in range(1, int(BURST_SECONDS) + 1):
        _call(rig, n)


def test_a_call_left_out_whose_stream_carried_progress_and_its_answer_is_counted_and_holds_nothing() -> None:
    rig = Rig(unwatched_rate=1)
    _spend_the_burst(rig)
    kept = rig.sink.pending
    _sse_call(rig, 70, [_progress(1), _progress(2), result_response(70, {"content": []})])

    assert rig.sink.unwatched.left_out == 1
    assert not rig.sink.unwatched.open
    assert rig.sink.pending == kept  # nothing of it waits: only its count, in the run
    (gap,) = [c for c in rig.chains() if c.summary.method == DROPPED_METHOD]
    assert "7 observations of about 1 client exchanges" in gap.summary.notes[0]


def test_a_call_whose_stream_was_cut_before_its_answer_is_kept_whole() -> None:
    rig = Rig(unwatched_rate=1)
    _spend_the_burst(rig)
    kept = rig.sink.pending
    _sse_call(rig, 71, [_progress(1)], outcome="upstream_closed")

    assert rig.sink.pending == kept + 5  # opening, head, progress, close: queued as any kept call's
    assert rig.sink.unwatched.left_out == 0
    assert _chain(rig, 71).summary.status.value != "ok"
    assert not _gaps(rig)


def test_a_long_stream_is_held_only_up_to_a_bound_then_kept() -> None:
    rig = Rig(unwatched_rate=1)
    _spend_the_burst(rig)
    steps = HOLD_MAX + 10
    _sse_call(rig, 72, [*(_progress(i) for i in range(steps)), result_response(72, {"content": []})])

    assert rig.sink.unwatched.left_out == 0
    assert not rig.sink.unwatched.open
    assert _chain(rig, 72).summary.status.value == "ok"
    assert not _gaps(rig)


def test_a_cancel_while_calls_are_held_keeps_them_first_so_it_joins_its_call() -> None:
    """Even when the call it names is answered all the same (a plain end: it would be counted and
    forgotten, and the cancel filed as one of a request the proxy never saw)."""
    rig = Rig(unwatched_rate=1)
    _spend_the_burst(rig)
    _open(rig, "x80", classify_value(request(80, "tools/call", {"name": "slow", "arguments": {}})))
    rig.sink.emit_all([ResponseHeadSeen(rig.clock(), "x80", 200, "text/event-stream", {})], "x80")
    cancel = classify_value(notification("notifications/cancelled", {"requestId": 80}))
    now = rig.clock()
    opened = ExchangeOpened(
        now, "x81", "POST", "/mcp", HEADERS, SESSION, "legacy", "legacy", Mode.PASSTHROUGH
    )
    rig.sink.emit_all([opened, MessageSeen(now, "x81", cancel, 50, Direction.TO_SERVER, Channel.POST)], "x81")
    rig.sink.close(
        ExchangeClosed(now, "x81", None), [ResponseHeadSeen(now, "x81", 202, None, {})], whole=True
    )
    answered = classify_value(result_response(80, {"content": []}))  # the server answered all the same
    seen = MessageSeen(rig.clock(), "x80", answered, 40, Direction.TO_CLIENT, Channel.SSE)
    rig.sink.close(ExchangeClosed(rig.clock(), "x80", None), [seen], whole=True)

    assert rig.sink.unwatched.left_out == 0
    assert not _misfiled(rig)
    assert _chain(rig, 80).summary.name == "slow"
    assert not _gaps(rig)


def test_a_call_held_while_a_read_builds_its_run_is_counted_once_where_it_ends() -> None:
    rig = Rig(unwatched_rate=1)
    _spend_the_burst(rig)
    _call(rig, 90)  # left out: its run is queued
    _open(rig, "x91", classify_value(request(91, "tools/call", {"name": "add", "arguments": {}})))
    rig.chains()  # a reader builds the run while x91 is held
    rig.clock.now += 0.001
    _close(rig, "x91", result_response(91, {"content": []}))

    assert rig.sink.unwatched.left_out == 2
    rig.chains()
    notes = [g.summary.notes[0] for g in _gaps(rig)]
    assert sum(int(n.split(" observations of about ")[1].split()[0]) for n in notes) == 2, notes


def test_calls_held_when_a_watcher_arrives_are_kept_for_it() -> None:
    rig = Rig(unwatched_rate=1)
    _spend_the_burst(rig)
    _open(rig, "x95", classify_value(request(95, "tools/call", {"name": "add", "arguments": {}})))
    watcher = rig.bus.subscribe("tui")
    rig.clock.now += 0.001
    _close(rig, "x95", result_response(95, {"content": []}))

    assert rig.sink.unwatched.left_out == 0
    assert _chain(rig, 95).summary.status.value == "ok"
    assert not _gaps(rig)
    watcher.close()


def test_an_observation_of_a_held_call_that_comes_another_way_keeps_it_first() -> None:
    """A breakpoint's hold and release name their exchange but come through the sink alone."""
    rig = Rig(unwatched_rate=1)
    _spend_the_burst(rig)
    _open(rig, "x96", classify_value(request(96, "tools/call", {"name": "add", "arguments": {}})))
    rig.sink.emit(InterceptHeld(rig.clock(), "x96", "h1", "i1: tool:add", "client", 96, "tools/call"))
    rig.clock.now += 2.0
    released = InterceptReleased(
        rig.clock(), "x96", "h1", "i1: tool:add", "client", 96, "tools/call", "forward", "api", 2000.0
    )
    rig.sink.emit(released)
    _close(rig, "x96", result_response(96, {"content": []}))

    assert rig.sink.unwatched.left_out == 0
    chain = _chain(rig, 96)
    assert any("held by intercept i1" in note for note in chain.summary.notes), chain.summary.notes


def test_a_held_call_whose_stream_carries_what_is_not_json_rpc_is_kept() -> None:
    rig = Rig(unwatched_rate=1)
    _spend_the_burst(rig)
    _sse_call(rig, 97, ["not a JSON-RPC message", result_response(97, {"content": []})])

    assert rig.sink.unwatched.left_out == 0
    assert 97 in _kept_ids(rig)


def test_what_held_calls_hold_is_bounded_by_its_wire_bytes() -> None:
    rig = Rig(unwatched_rate=1)
    _spend_the_burst(rig)
    big = {"progressToken": 1, "progress": 1, "message": "x" * HOLD_BYTES}
    _sse_call(rig, 98, [notification("notifications/progress", big), result_response(98, {"content": []})])

    assert rig.sink.unwatched.left_out == 0  # past the bound: kept rather than held
    assert 98 in _kept_ids(rig)


def test_an_empty_batch_is_nothing_whatever_is_held() -> None:
    rig = Rig(unwatched_rate=1)
    _spend_the_burst(rig)
    _open(rig, "x99", classify_value(request(99, "tools/call", {"name": "add", "arguments": {}})))
    before = rig.sink.pending
    rig.sink.emit_all([], "x99")
    rig.sink.emit_all([], "x-other")
    assert rig.sink.pending == before
    _close(rig, "x99", result_response(99, {"content": []}))
    assert rig.sink.unwatched.left_out == 1
