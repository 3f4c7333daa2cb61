"""The observation sink: observations queued while nobody watches, built into chains when asked.

Each test plays the pass-through relay's (or a bridge's) observations twice, once into a sink with a
watcher (built at once) and once into a sink nobody watches, and compares what each builds. A
hand-moved clock gives both runs the same times.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from proxy.flows.bus import EventBus
from proxy.flows.chains import ChainBuilder
from proxy.flows.endpoint import Endpoint
from proxy.flows.events import (
    ChainStatus,
    Channel,
    ContinuationChanged,
    Direction,
    FlowEvent,
    SessionChanged,
    Side,
    event_to_json,
)
from proxy.flows.leg_handlers import CLIENT_NEVER_RETRIED, STOPPED_WHILE_PARKED
from proxy.flows.log_lines import ExchangeSummary
from proxy.flows.observations import (
    ExchangeClosed,
    ExchangeOpened,
    FaultInjected,
    InterceptReleased,
    MessageSeen,
    ResponseHeadSeen,
)
from proxy.flows.redact import Redactor
from proxy.flows.retries import AMBIGUOUS_RETRY, NEVER_RETRIED, NO_FIT, RETRY_WINDOW
from proxy.flows.sink import ObservationSink
from proxy.flows.store import ChainStore
from proxy.record.observations import ObservationEncoder
from proxy.wire.jsonrpc import classify_value, error_response, notification, request, result_response
from tests.flows.bridge_play import (
    LEG_STATUSES,
    UPSTREAM_SESSION,
    asked_bridge_call,
    parked_bridge_call,
    refused_leg_call,
    stopped_while_parked,
)
from tests.flows.calls import Calls
from tests.flows.late_cancel_play import aborted_cancel_too_late, aborted_then_cancelled
from tests.flows.refused_play import refused_bridge_answer, refused_bridge_retry, refused_passthrough_retry
from tests.flows.resume_play import (
    cancelled_while_cut,
    closed_after_cancel,
    closed_after_delete_answered,
    closed_by_delete,
    cut_and_id_reused,
    cut_and_resumed,
    cut_by_fault_and_resumed,
    cut_never_resumed,
    cut_then_session_gone,
    dropped_then_delete_refused,
)
from tests.flows.stream_play import declined_and_refused_streams, listens, streams_and_delete

SESSION = "sess-4b1d-secret-session-value"
HEADERS = {
    "Content-Type": "application/json",
    "Authorization": "Bearer tok-do-not-show",
    "Mcp-Session-Id": SESSION,
}


class Clock:
    """The wall clock of these tests: moved by hand."""

    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Rig:
    """A builder with its store, bus and events, behind an observation sink."""

    backlog: int = 10_000
    max_bytes: int = 1 << 30
    keep: bool = True
    unwatched_rate: int = 0
    clock: Clock = field(default_factory=Clock)
    bus: EventBus = field(default_factory=EventBus)
    store: ChainStore = field(default_factory=ChainStore)
    events: list[FlowEvent] = field(default_factory=list)
    endpoint: Endpoint = field(default_factory=Endpoint)
    """The MCP endpoint's paths (unknown by default: every path is the endpoint)."""

    def __post_init__(self) -> None:
        redactor = Redactor(key=b"test-key")

        def publish(event: FlowEvent) -> None:
            self.events.append(event)
            self.bus.publish(event)

        self.builder = ChainBuilder(self.store, publish, redactor, clock=self.clock, endpoint=self.endpoint)
        self.sink = ObservationSink(
            self.builder,
            redactor,
            bus=self.bus,
            clock=self.clock,
            backlog=self.backlog,
            max_bytes=self.max_bytes,
            keep=self.keep,
            unwatched_rate=self.unwatched_rate,
        )
        self.facts = Calls(self.sink)

    def chains(self) -> list[Any]:
        """The built chains, after building whatever waits."""
        self.sink.build()
        return list(self.store)


Play = Callable[[Any, Clock], list[Any]]


def _json_call(obs: Any, clock: Clock, exchange: str = "x1", ident: int = 1) -> list[Any]:
    """A tools/call answered with a JSON body; returns what close_exchange returned."""
    call = classify_value(request(ident, "tools/call", {"name": "add", "arguments": {"a": 1}}))
    obs.open_exchange(
        exchange,
        http_method="POST",
        path="/mcp",
        headers=HEADERS,
        session=SESSION,
        client_era="legacy",
        upstream_era="legacy",
        body_size=80,
    )
    obs.message(exchange, call, size=80, direction=Direction.TO_SERVER, channel=Channel.POST)
    clock.now += 0.25
    obs.response_head(exchange, status=200, content_type="application/json", headers={"Content-Length": "60"})
    answer = classify_value(result_response(ident, {"content": [{"type": "text", "text": "2"}]}))
    obs.message(exchange, answer, size=60, direction=Direction.TO_CLIENT, channel=Channel.JSON)
    clock.now += 0.125
    return [obs.close_exchange(exchange, None)]


def _nested_elicitation(obs: Any, clock: Clock) -> list[Any]:
    """A call whose SSE stream carries a nested request, answered by a second POST (another exchange)."""
    call = classify_value(request(7, "tools/call", {"name": "ask", "arguments": {}}))
    obs.open_exchange("x1", http_method="POST", path="/mcp", headers=HEADERS, session=SESSION, body_size=70)
    obs.message("x1", call, size=70, direction=Direction.TO_SERVER, channel=Channel.POST)
    obs.response_head("x1", status=200, content_type="text/event-stream", headers={})
    clock.now += 0.5
    nested = classify_value(request(0, "elicitation/create", {"message": "name?", "requestedSchema": {}}))
    obs.message("x1", nested, size=90, direction=Direction.TO_CLIENT, channel=Channel.SSE, sse_id="e1")
    obs.note_event_id("x1", "e1")
    clock.now += 2.0
    answer = classify_value(result_response(0, {"action": "accept", "content": {"name": "Ada"}}))
    obs.open_exchange("x2", http_method="POST", path="/mcp", headers=HEADERS, session=SESSION, body_size=60)
    obs.message("x2", answer, size=60, direction=Direction.TO_SERVER, channel=Channel.POST)
    obs.response_head("x2", status=202, content_type=None, headers={})
    closed = [obs.close_exchange("x2", None)]
    clock.now += 0.25
    progress = classify_value(notification("notifications/progress", {"progressToken": 1, "progress": 1}))
    obs.message("x1", progress, size=40, direction=Direction.TO_CLIENT, channel=Channel.SSE)
    obs.add_bytes_out("x1", 12)
    done = classify_value(result_response(7, {"content": []}))
    obs.message("x1", done, size=50, direction=Direction.TO_CLIENT, channel=Channel.SSE, sse_id="e2")
    return [*closed, obs.close_exchange("x1", None)]


def _invalid_and_stream(obs: Any, clock: Clock) -> list[Any]:
    """A body that is not JSON-RPC, then a GET stream the client drops."""
    obs.open_exchange("x1", http_method="POST", path="/mcp", headers=HEADERS, session=SESSION, body_size=5)
    obs.mark_invalid("x1", "not JSON", size=5, body=b"nope!")
    obs.response_head("x1", status=400, content_type="application/json", headers={})
    closed = [obs.close_exchange("x1", None)]
    clock.now += 1.0
    obs.open_exchange("x2", http_method="GET", path="/mcp", headers=HEADERS, session=SESSION)
    obs.response_head("x2", status=200, content_type="text/event-stream", headers={})
    obs.add_bytes_out("x2", 3)
    clock.now += 3.0
    return [*closed, obs.close_exchange("x2", "client_disconnected")]


def _cancelled_calls(obs: Any, clock: Clock) -> list[Any]:
    """Two calls the client cancels: one while its stream is open, one after its stream dropped
    past an event id (the client could have resumed it)."""
    closed = []
    for ident, exchange in ((3, "x1"), (4, "x3")):
        call = classify_value(request(ident, "tools/call", {"name": "slow", "arguments": {}}))
        obs.open_exchange(exchange, http_method="POST", path="/mcp", headers=HEADERS, session=SESSION)
        obs.message(exchange, call, size=70, direction=Direction.TO_SERVER, channel=Channel.POST)
        obs.response_head(exchange, status=200, content_type="text/event-stream", headers={})
        progress = classify_value(notification("notifications/progress", {"progressToken": 1, "progress": 1}))
        obs.message(
            exchange, progress, size=40, direction=Direction.TO_CLIENT, channel=Channel.SSE, sse_id="e1"
        )
        clock.now += 0.5
        if exchange == "x3":
            closed.append(obs.close_exchange(exchange, None))  # dropped after an event id
        cancel = classify_value(notification("notifications/cancelled", {"requestId": ident}))
        side = f"{exchange}c"
        obs.open_exchange(side, http_method="POST", path="/mcp", headers=HEADERS, session=SESSION)
        obs.message(side, cancel, size=50, direction=Direction.TO_SERVER, channel=Channel.POST)
        obs.response_head(side, status=202, content_type=None, headers={})
        closed.append(obs.close_exchange(side, None))
        clock.now += 0.25
        if exchange == "x1":
            closed.append(obs.close_exchange(exchange, "client_disconnected"))
    return closed


def _answered_calls_still_open(obs: Any, clock: Clock) -> list[Any]:
    """Three calls open at once over SSE: one answered with a tool error, one with a JSON-RPC error, one
    cancelled from another exchange while the first two have their answers but not their ends (what
    the metrics' quick path must hand over whole to the slow one)."""
    answers = {
        "x1": result_response(1, {"content": [], "isError": True}),
        "x2": error_response(2, -32602, "unknown tool"),
    }
    for ident, exchange in enumerate(("x1", "x2", "x3"), start=1):
        call = classify_value(request(ident, "tools/call", {"name": "slow", "arguments": {}}))
        obs.open_exchange(exchange, http_method="POST", path="/mcp", headers=HEADERS, session=SESSION)
        obs.message(exchange, call, size=70, direction=Direction.TO_SERVER, channel=Channel.POST)
        obs.response_head(exchange, status=200, content_type="text/event-stream", headers={})
        clock.now += 0.125
        if exchange in answers:
            answer = classify_value(answers[exchange])
            obs.message(exchange, answer, size=60, direction=Direction.TO_CLIENT, channel=Channel.SSE)
    cancel = classify_value(notification("notifications/cancelled", {"requestId": 3}))
    obs.open_exchange("x4", http_method="POST", path="/mcp", headers=HEADERS, session=SESSION)
    obs.message("x4", cancel, size=50, direction=Direction.TO_SERVER, channel=Channel.POST)
    obs.response_head("x4", status=202, content_type=None, headers={})
    closed = [obs.close_exchange("x4", None)]
    clock.now += 0.25
    closed.append(obs.close_exchange("x1", "client_disconnected"))
    closed.append(obs.close_exchange("x2", None))
    closed.append(obs.close_exchange("x3", "client_disconnected"))
    return closed


def _mrtr_rounds(obs: Any, clock: Clock) -> list[Any]:
    """A 2026-07-28 call through pass-through whose server asks one question (`input_required`), then
    the client's retry carrying the answer and the request state."""
    modern = {"client_era": "modern", "upstream_era": "modern"}
    headers = {"Content-Type": "application/json", "Authorization": "Bearer tok-do-not-show"}
    closed = []
    ask = {"method": "elicitation/create", "params": {"message": "Your name?", "requestedSchema": {}}}
    rounds: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
        ("x1", {}, {"resultType": "input_required", "inputRequests": {"name": ask}, "requestState": "st-1"}),
        ("x2", {"inputResponses": {"name": {"action": "accept"}}, "requestState": "st-1"}, {"content": []}),
    ]
    for ident, (exchange, extra, answer) in enumerate(rounds, start=1):
        call = classify_value(request(ident, "tools/call", {"name": "ask_name", "arguments": {}, **extra}))
        obs.open_exchange(exchange, http_method="POST", path="/mcp", headers=headers, session=None, **modern)
        obs.message(exchange, call, size=90, direction=Direction.TO_SERVER, channel=Channel.POST)
        obs.response_head(exchange, status=200, content_type="application/json", headers={})
        clock.now += 0.25
        reply = classify_value(result_response(ident, answer))
        obs.message(exchange, reply, size=120, direction=Direction.TO_CLIENT, channel=Channel.JSON)
        closed.append(obs.close_exchange(exchange, None))
        clock.now += 2.0
    return closed


def modern_round(
    obs: Any,
    clock: Clock,
    exchange: str,
    sent: dict[str, Any],
    answer: dict[str, Any],
    *,
    connection: str,
    headers: dict[str, str] | None = None,
) -> Any:
    """One 2026-07-28 request through pass-through and its JSON answer; returns what its close returned."""
    modern = {"client_era": "modern", "upstream_era": "modern"}
    head = {"Content-Type": "application/json", **(headers or {})}
    obs.open_exchange(exchange, http_method="POST", path="/mcp", headers=head, session=None,
                      connection=connection, **modern)  # fmt: skip
    obs.message(exchange, classify_value(sent), size=90, direction=Direction.TO_SERVER, channel=Channel.POST)
    obs.response_head(exchange, status=200, content_type="application/json", headers={})
    clock.now += 0.25
    reply = classify_value(result_response(sent["id"], answer))
    obs.message(exchange, reply, size=120, direction=Direction.TO_CLIENT, channel=Channel.JSON)
    return obs.close_exchange(exchange, None)


ASK_NAME = {
    "resultType": "input_required",
    "inputRequests": {"name": {"method": "elicitation/create", "params": {"message": "Your name?"}}},
}
"""A 2026-07-28 server's `input_required` answer without `requestState` (the SDK's `ask_name`)."""


def ask_name(ident: int, answer: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "ask_name", "arguments": {}}
    if answer is not None:
        params["inputResponses"] = {"name": {"action": "accept", "content": {"name": answer}}}
    return request(ident, "tools/call", params)


def _lookalike_retries(obs: Any, clock: Clock) -> list[Any]:
    """Clients making the same call at once, each answered `input_required` without `requestState`
    before any retries: two on connections of their own, two with their own `Authorization` on one
    connection, and two that nothing tells apart (one connection, no credentials)."""
    bearer = [{"Authorization": "Bearer tok-alice"}, {"Authorization": "Bearer tok-bob"}]
    apart = (("k1", None), ("k2", None))
    pairs = [apart, (("k3", bearer[0]), ("k3", bearer[1])), (("k4", None), ("k4", None))]
    closed, n = [], 0
    for pair in pairs:
        for connection, headers in pair:
            n += 1
            closed.append(modern_round(obs, clock, f"x{n}", ask_name(1), ASK_NAME, connection=connection,
                                        headers=headers))  # fmt: skip
        for who, (connection, headers) in reversed(list(enumerate(pair))):
            n += 1
            done = {"content": [{"type": "text", "text": f"Hello, {who}!"}]}
            closed.append(modern_round(obs, clock, f"x{n}", ask_name(2, str(who)), done,
                                        connection=connection, headers=headers))  # fmt: skip
            clock.now += 0.5
    return closed


def _never_retried(obs: Any, clock: Clock) -> list[Any]:
    """Two 2026-07-28 calls answered `input_required` (one without `requestState`, one with) whose
    clients never retry: the next observation after the retry window ends both, and a retry that
    comes after that is a call of its own."""
    stated = {**ASK_NAME, "requestState": "st-9"}
    closed = [
        modern_round(obs, clock, "x1", ask_name(1), ASK_NAME, connection="k1"),
        modern_round(obs, clock, "x2", ask_name(1), stated, connection="k2"),
    ]
    clock.now += RETRY_WINDOW + 1.0
    closed.extend(_json_call(obs, clock, exchange="x3", ident=7))
    late = ask_name(2, "late")
    done = {"content": [{"type": "text", "text": "Hello, late!"}]}
    closed.append(modern_round(obs, clock, "x4", late, done, connection="k1"))
    return closed


def _session_forgotten(obs: Any, clock: Clock) -> list[Any]:
    """A legacy session the server forgets (it restarted): its calls and its GET stream are answered
    404 "Session not found", then the client's DELETE of it is too."""
    init = request(1, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {}})
    head = {"Content-Type": "application/json"}
    obs.open_exchange("x1", http_method="POST", path="/mcp", headers=head, session=None)
    obs.message("x1", classify_value(init), size=90, direction=Direction.TO_SERVER, channel=Channel.POST)
    obs.response_head("x1", status=200, content_type="application/json", headers={"Mcp-Session-Id": SESSION})
    opened = result_response(1, {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {}})
    obs.message("x1", classify_value(opened), size=90, direction=Direction.TO_CLIENT, channel=Channel.JSON)
    closed = [obs.close_exchange("x1", None)]
    clock.now += 1.0
    gone = classify_value(error_response(None, -32001, "Session not found"))
    for ident, exchange in ((2, "x2"), (3, "x3")):
        call = classify_value(request(ident, "tools/call", {"name": "add", "arguments": {"a": 1}}))
        obs.open_exchange(exchange, http_method="POST", path="/mcp", headers=HEADERS, session=SESSION)
        obs.message(exchange, call, size=80, direction=Direction.TO_SERVER, channel=Channel.POST)
        obs.response_head(exchange, status=404, content_type="application/json", headers={})
        obs.message(exchange, gone, size=70, direction=Direction.TO_CLIENT, channel=Channel.JSON)
        closed.append(obs.close_exchange(exchange, None))
        clock.now += 0.25
    for exchange, method in (("g1", "GET"), ("d1", "DELETE")):
        obs.open_exchange(exchange, http_method=method, path="/mcp", headers=HEADERS, session=SESSION)
        obs.response_head(exchange, status=404, content_type="application/json", headers={})
        closed.append(obs.close_exchange(exchange, None))
    return closed


def _changed_by_the_proxy(obs: Any, clock: Clock) -> list[Any]:
    """A call an intercept edited on its way up, and an answer a fault replaced on its way back: each
    changed message on both legs, as the relay records it."""
    call = classify_value(request(5, "tools/call", {"name": "echo", "arguments": {"text": "hi"}}))
    edited = classify_value(request(5, "tools/call", {"name": "echo", "arguments": {"text": "edited"}}))
    obs.open_exchange("x1", http_method="POST", path="/mcp", headers=HEADERS, session=SESSION, body_size=80)
    obs.message("x1", call, size=80, direction=Direction.TO_SERVER, channel=Channel.POST)
    obs.sink.emit(FaultInjected(clock.now, "x1", "delay 500 ms", "f2: tool:echo => delay=500ms", "client", 5,
                                "tools/call", True, "held before it went upstream", 500.0))  # fmt: skip
    clock.now += 0.5
    obs.sink.emit(InterceptReleased(clock.now + 1.0, "x1", "h1", "i1: tool:echo", "client", 5, "tools/call",
                                    "forward_edited", "api", 1000.0))  # fmt: skip
    clock.now += 1.0  # held at the desk
    note = "edited by the proxy's intercept (i1), sent in place of the client's"
    upstream = Side.UPSTREAM
    up = Direction.TO_SERVER
    obs.message("x1", edited, size=84, direction=up, channel=Channel.POST, side=upstream, note=note)
    obs.response_head("x1", status=200, content_type="text/event-stream", headers={})
    clock.now += 0.25
    server = classify_value(result_response(5, {"content": [{"type": "text", "text": "edited"}]}))
    made = classify_value(error_response(5, -32050, "fault injected by the proxy"))
    obs.message("x1", server, size=70, direction=Direction.TO_CLIENT, channel=Channel.SSE, side=upstream)
    obs.message("x1", made, size=75, direction=Direction.TO_CLIENT, channel=Channel.SSE, side=Side.CLIENT,
                note="fault injected by the proxy: error -32050 [f1]", sse_id="e1")  # fmt: skip
    return [obs.close_exchange("x1", None)]


SCENARIOS: dict[str, Play] = {
    "json-call": _json_call,
    "changed-by-the-proxy": _changed_by_the_proxy,
    "cancelled-calls": _cancelled_calls,
    "answered-calls-still-open": _answered_calls_still_open,
    "nested-elicitation": _nested_elicitation,
    "invalid-and-stream": _invalid_and_stream,
    "parked-bridge-call": parked_bridge_call,
    "stopped-while-parked": stopped_while_parked,
    "asked-bridge-call": asked_bridge_call,
    "refused-leg-call": refused_leg_call,
    "mrtr-rounds": _mrtr_rounds,
    "lookalike-retries": _lookalike_retries,
    "never-retried": _never_retried,
    "session-forgotten": _session_forgotten,
    "streams-and-delete": streams_and_delete,
    "declined-and-refused-streams": declined_and_refused_streams,
    "listens": listens,
    "refused-bridge-retry": refused_bridge_retry,
    "refused-bridge-answer": refused_bridge_answer,
    "refused-passthrough-retry": refused_passthrough_retry,
    "cut-and-resumed": cut_and_resumed,
    "cut-by-fault-and-resumed": cut_by_fault_and_resumed,
    "cut-never-resumed": cut_never_resumed,
    "closed-after-cancel": closed_after_cancel,
    "cancelled-while-cut": cancelled_while_cut,
    "cut-then-session-gone": cut_then_session_gone,
    "cut-and-id-reused": cut_and_id_reused,
    "closed-by-delete": closed_by_delete,
    "closed-after-delete-answered": closed_after_delete_answered,
    "dropped-then-delete-refused": dropped_then_delete_refused,
    "aborted-then-cancelled": aborted_then_cancelled,
    "aborted-cancel-too-late": aborted_cancel_too_late,
}

ONE_QUESTION: dict[str, Play] = {
    "legacy pass-through": _nested_elicitation,
    "2026-07-28 pass-through": _mrtr_rounds,
    "mrtr_to_legacy": parked_bridge_call,
    "legacy_to_mrtr": asked_bridge_call,
}
"""Plays of one tool call whose server asks the client one question, in each mode."""


def _chains(store: ChainStore) -> list[dict[str, Any]]:
    return [
        {"summary": c.summary.model_dump(), "messages": [m.model_dump() for m in c.messages]} for c in store
    ]


@pytest.mark.parametrize("play", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_observations_built_later_make_the_chains_and_events_a_live_build_makes(play: Play) -> None:
    live, deferred = Rig(), Rig()
    live.bus.subscribe("tui")  # a live watcher: every observation builds at once
    play(live.facts, live.clock)
    play(deferred.facts, deferred.clock)
    assert deferred.events == []
    assert deferred.sink.pending > 0
    deferred.clock.now += 60.0  # built long after: the chains keep the times of the observations
    deferred.sink.build()

    assert _chains(deferred.store) == _chains(live.store)
    assert [event_to_json(e) for e in deferred.events] == [event_to_json(e) for e in live.events]
    assert deferred.sink.pending == 0


def lines_of(rig: Rig, play: Play) -> list[dict[str, Any]]:
    """The round-trip lines `play` makes: those its closes return, then those held for a cancel that
    never comes (let go as they stand)."""
    released: list[ExchangeSummary] = []
    rig.sink.on_released = lambda line, _mode: released.append(line)
    closed = [s for s in play(rig.facts, rig.clock) if s is not None]
    rig.sink.release_held()
    return [s.log_fields("passthrough") for s in (*closed, *released)]


@pytest.mark.parametrize("play", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_the_round_trip_lines_are_the_same_whether_or_not_anyone_watches(play: Play) -> None:
    live, deferred = Rig(), Rig()
    live.bus.subscribe("tui")
    live_lines = lines_of(live, play)
    deferred_lines = lines_of(deferred, play)
    assert live.sink.pending == 0
    assert deferred.sink.pending > 0
    assert deferred_lines == live_lines
    assert all(line is not None for line in live_lines)


def test_modern_listeners_hear_nothing_until_a_2026_07_28_call_passes_through_then_everything() -> None:
    """What only 2026-07-28 pass-through calls concern (the drain's retry waits) costs an older-era
    proxy nothing: it starts listening with the first such call, that call's opening included."""
    rig = Rig()
    heard: list[Any] = []
    rig.sink.modern_listeners.append(heard.extend)
    _json_call(rig.facts, rig.clock, "x1", 1)
    assert heard == []

    refused_passthrough_retry(rig.facts, rig.clock)
    assert type(heard[0]) is ExchangeOpened
    assert heard[0].client_era == "modern"
    _json_call(rig.facts, rig.clock, "x9", 9)
    assert [obs.exchange for obs in heard[-5:]] == ["x9"] * 5


@pytest.mark.parametrize("play", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_a_sink_that_keeps_nothing_holds_and_builds_nothing_but_lines_and_listeners_are_the_same(
    play: Play,
) -> None:
    kept, unkept = Rig(), Rig(keep=False)
    heard: list[Any] = []
    unkept.sink.listeners.append(heard.extend)
    kept_lines = lines_of(kept, play)
    unkept_lines = lines_of(unkept, play)

    assert kept.sink.pending > 0
    assert unkept.sink.pending == 0
    assert unkept.sink.pending_bytes == 0
    assert unkept_lines == kept_lines
    assert heard  # the capture and the metrics still hear everything
    unkept.sink.build()  # nothing waits: nothing is built
    assert list(unkept.store) == []
    assert unkept.events == []


@pytest.mark.parametrize("play", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_observations_built_a_few_at_a_time_make_the_chains_and_events_a_whole_build_makes(
    play: Play,
) -> None:
    whole, pieces = Rig(), Rig()
    play(whole.facts, whole.clock)
    play(pieces.facts, pieces.clock)
    waiting = pieces.sink.pending
    whole.sink.build()

    calls = 1
    while pieces.sink.build_some(2):
        assert pieces.sink.pending < waiting  # each call builds some, and says more wait
        waiting = pieces.sink.pending
        calls += 1

    assert calls > 1
    assert pieces.sink.pending == 0
    assert _chains(pieces.store) == _chains(whole.store)
    assert [event_to_json(e) for e in pieces.events] == [event_to_json(e) for e in whole.events]


def test_reading_the_store_builds_nothing_and_build_builds_what_waits() -> None:
    rig = Rig()
    _json_call(rig.facts, rig.clock)
    assert len(rig.store) == 0
    assert rig.store.get("c1") is None
    assert list(rig.store) == []
    assert rig.events == []
    rig.sink.build()
    assert rig.store.peek("c1") is not None
    assert len(rig.events) > 0


def test_a_watcher_that_arrives_gets_what_waited_built_first_then_live_and_leaving_queues_again() -> None:
    rig = Rig()
    _json_call(rig.facts, rig.clock)
    assert rig.sink.pending > 0
    watcher = rig.bus.subscribe("tui")
    _json_call(rig.facts, rig.clock, exchange="x2", ident=2)  # the watcher arrived: built at once
    assert rig.sink.pending == 0
    assert len(watcher) == len(rig.events)  # it saw what waited, then the live build
    assert [c.summary.jsonrpc_id for c in rig.store] == [1, 2]
    watcher.close()
    _json_call(rig.facts, rig.clock, exchange="x3", ident=3)
    assert rig.sink.pending > 0  # nobody watches again


def test_listeners_hear_every_observation_whether_or_not_anyone_watches() -> None:
    rig = Rig()
    heard: list[Any] = []
    rig.sink.listeners.append(heard.extend)
    _json_call(rig.facts, rig.clock)
    rig.bus.subscribe("tui")
    _json_call(rig.facts, rig.clock, exchange="x2", ident=2)
    assert [type(o).__name__ for o in heard] == [
        *["ExchangeOpened", "MessageSeen", "ResponseHeadSeen", "MessageSeen", "ExchangeClosed"] * 2
    ]


def test_open_exchanges_count_deferred_ones_once() -> None:
    rig = Rig()
    rig.facts.open_exchange("x1", http_method="POST", path="/mcp", headers={}, session=None)
    rig.facts.open_exchange("x2", http_method="GET", path="/mcp", headers={}, session=None)
    assert rig.sink.open_exchanges == 2
    rig.sink.build()
    assert rig.sink.open_exchanges == 2
    rig.facts.close_exchange("x1", None)
    assert rig.sink.open_exchanges == 1


def test_past_the_backlog_finished_exchanges_are_dropped_and_open_ones_kept_whole() -> None:
    rig = Rig(backlog=12)
    stream = classify_value(request(99, "tools/call", {"name": "slow", "arguments": {}}))
    rig.facts.open_exchange("long", http_method="POST", path="/mcp", headers={}, session=None, body_size=1)
    rig.facts.message("long", stream, size=1, direction=Direction.TO_SERVER, channel=Channel.POST)
    rig.facts.response_head("long", status=200, content_type="text/event-stream", headers={})
    for n in range(1, 21):
        _json_call(rig.facts, rig.clock, exchange=f"x{n}", ident=n)
    assert rig.sink.dropped > 0
    assert rig.sink.pending <= 12 + 3  # the backlog, plus the open exchange's held facts
    assert rig.sink.pending > 12  # held ones are bounded apart: they crowd no finished exchange out

    done = classify_value(result_response(99, {"content": []}))
    rig.facts.message("long", done, size=1, direction=Direction.TO_CLIENT, channel=Channel.SSE)
    rig.facts.close_exchange("long", None)
    chains = {c.summary.method: c for c in rig.chains()}
    long_chain = next(c for c in rig.store if c.summary.name == "slow")
    assert long_chain.summary.status.value == "ok"  # built whole: opened, answered, closed
    assert len(chains) >= 1
    assert rig.builder.open_exchanges == 0
    kept = {c.summary.jsonrpc_id for c in rig.store}
    assert 20 in kept
    assert 1 not in kept


def test_open_exchanges_outgrowing_the_backlog_are_built_rather_than_held_without_bound() -> None:
    rig = Rig(backlog=8)
    for n in range(1, 7):  # six calls left open: three observations each, all held while open
        call = classify_value(request(n, "tools/call", {"name": "slow", "arguments": {}}))
        rig.facts.open_exchange(f"o{n}", http_method="POST", path="/mcp", headers={}, session=None)
        rig.facts.message(f"o{n}", call, size=1, direction=Direction.TO_SERVER, channel=Channel.POST)
        rig.facts.response_head(f"o{n}", status=200, content_type="text/event-stream", headers={})
        _json_call(rig.facts, rig.clock, exchange=f"x{n}", ident=100 + n)
    assert rig.sink.pending <= 2 * 8  # what is held never passes its own bound: it was built instead
    assert rig.builder.open_exchanges > 0  # built while still open


def test_large_bodies_count_against_the_byte_bound_not_just_the_fact_count() -> None:
    rig = Rig(max_bytes=3 * 1024 * 1024)
    big = "y" * (1024 * 1024)
    for n in range(1, 11):
        answer = classify_value(result_response(n, {"content": [{"type": "text", "text": big}]}))
        call = classify_value(request(n, "tools/call", {"name": "big", "arguments": {}}))
        rig.facts.open_exchange(f"x{n}", http_method="POST", path="/mcp", headers={}, session=None)
        rig.facts.message(f"x{n}", call, size=60, direction=Direction.TO_SERVER, channel=Channel.POST)
        rig.facts.message(f"x{n}", answer, size=len(big), direction=Direction.TO_CLIENT, channel=Channel.JSON)
        rig.facts.close_exchange(f"x{n}", None)
        assert rig.sink.pending_bytes <= 3 * 1024 * 1024
    assert rig.sink.dropped > 0
    assert {c.summary.jsonrpc_id for c in rig.chains()} >= {10}


def test_the_byte_bound_weighs_a_body_as_the_objects_it_decoded_to_not_its_wire_length() -> None:
    rig = Rig(max_bytes=4 * 1024 * 1024)
    rows = [{"a": 1} for _ in range(4000)]  # 32 KiB of JSON, about 0.75 MiB of dicts decoded
    wire = len(orjson.dumps(rows))
    for n in range(1, 21):
        call = classify_value(request(n, "tools/call", {"name": "rows", "arguments": {"rows": rows}}))
        rig.facts.open_exchange(f"x{n}", http_method="POST", path="/mcp", headers={}, session=None)
        rig.facts.message(f"x{n}", call, size=wire, direction=Direction.TO_SERVER, channel=Channel.POST)
        rig.facts.close_exchange(f"x{n}", None)
        assert rig.sink.pending_bytes <= 4 * 1024 * 1024

    assert 20 * wire < 1024 * 1024  # by wire length all twenty fit four times over
    assert rig.sink.dropped > 0
    kept = {c.summary.jsonrpc_id for c in rig.chains()}
    assert 20 in kept
    assert 1 not in kept


def test_a_batch_handed_over_with_its_exchange_is_weighed_queued_and_built_as_one_the_sink_looks_into() -> (
    None
):
    """The relay names the exchange of its batches so the queue need not look for it: the bounds
    count the same, and the same chains are built, for small bodies, a large one and a non-object."""
    bodies = [{"text": "hi"}, {"text": "y" * 4096}, "not an object"]
    rigs = {vouched: Rig() for vouched in (False, True)}
    for vouched, rig in rigs.items():
        sink, now = rig.sink, rig.clock
        for n, body in enumerate(bodies, 1):
            exchange = f"x{n}"
            call = classify_value(request(n, "tools/call", {"name": "echo", "arguments": {}}))
            content = {"content": [{"type": "text", "text": str(body)}]}
            answer = classify_value(body if isinstance(body, str) else result_response(n, content))
            wire = len(orjson.dumps(body))
            opened = ExchangeOpened(now(), exchange, "POST", "/mcp", {}, None)
            seen = MessageSeen(now(), exchange, call, 60, Direction.TO_SERVER, Channel.POST)
            sink.emit_all([opened, seen], exchange=exchange if vouched else None)
            head = ResponseHeadSeen(now(), exchange, 200, "application/json", {})
            back = MessageSeen(now(), exchange, answer, wire, Direction.TO_CLIENT, Channel.JSON)
            sink.close(ExchangeClosed(now(), exchange, None), [head, back], whole=vouched)

    looked, vouched = rigs[False], rigs[True]
    assert (vouched.sink.pending, vouched.sink.pending_bytes) == (
        looked.sink.pending,
        looked.sink.pending_bytes,
    )
    assert vouched.sink.pending_bytes > 0
    assert [c.summary for c in vouched.chains()] == [c.summary for c in looked.chains()]


def test_a_bridged_call_built_later_has_its_legs_and_its_continuation_story() -> None:
    rig = Rig()
    parked_bridge_call(rig.facts, rig.clock)
    assert rig.events == []  # legs and continuations were deferred like the exchanges
    (chain,) = rig.chains()
    assert chain.summary.status is ChainStatus.OK
    upstream = [(m.direction, m.method or m.kind) for m in chain.messages if m.side.value == "upstream"]
    assert upstream == [
        (Direction.TO_SERVER, "tools/call"),
        (Direction.TO_CLIENT, "elicitation/create"),
        (Direction.TO_SERVER, "result"),  # the answer, on the leg linked to the call's leg
        (Direction.TO_CLIENT, "result"),
    ]
    changes = [e for e in rig.events if isinstance(e, ContinuationChanged)]
    assert [(e.state, e.chain_id) for e in changes] == [
        ("parked", chain.summary.id),
        ("resumed", chain.summary.id),
        ("completed", chain.summary.id),  # "ended" on a chain that succeeded
    ]


@pytest.mark.parametrize(
    ("state", "status", "note"),
    [
        ("expired", ChainStatus.INCOMPLETE, CLIENT_NEVER_RETRIED),  # a client may stop asking
        ("lost", ChainStatus.ERROR, "parked upstream call lost"),  # its upstream went first
    ],
)
def test_a_continuation_that_expires_leaves_its_chain_incomplete_and_one_lost_fails_it(
    state: str, status: ChainStatus, note: str
) -> None:
    rig = Rig()
    rig.bus.subscribe("tui")
    call = classify_value(request(1, "tools/call", {"name": "ask", "arguments": {}}))
    rig.facts.open_exchange("x1", http_method="POST", path="/mcp", headers={}, session=None)
    rig.facts.message("x1", call, size=1, direction=Direction.TO_SERVER, channel=Channel.POST)
    parked = {"principal": "p", "pending_keys": ["elicitation-1"], "age_ms": 0.0}
    rig.facts.continuation_changed("x1", continuation="continuation-1", state="parked", **parked)
    asked = result_response(1, {"resultType": "input_required", "inputRequests": {}, "requestState": "s"})
    rig.facts.message(
        "x1", classify_value(asked), size=1, direction=Direction.TO_CLIENT, channel=Channel.JSON
    )
    rig.facts.close_exchange("x1", None)
    rig.facts.continuation_changed("x1", continuation="continuation-1", state=state, **parked)
    (chain,) = list(rig.store)
    assert chain.summary.status is status
    assert note in chain.summary.notes
    states = [e.state for e in rig.events if isinstance(e, ContinuationChanged)]
    assert states == ["parked", state]


def test_a_call_still_parked_when_the_proxy_stops_ends_incomplete_noted_so_not_as_an_upstream_error() -> None:
    rig = Rig()
    rig.bus.subscribe("tui")
    stopped_while_parked(rig.facts, rig.clock)
    (chain,) = list(rig.store)
    assert chain.summary.status is ChainStatus.INCOMPLETE
    assert chain.summary.error is None
    assert chain.summary.notes == [STOPPED_WHILE_PARKED]  # the proxy stopped: not "never retried"
    moves = [(e.state, e.outcome, e.age_ms) for e in rig.events if isinstance(e, ContinuationChanged)]
    assert moves == [("parked", None, 0.0), ("expired", "proxy_stopping", 3000.0)]
    shown = [orjson.loads(event_to_json(e)) for e in rig.events if isinstance(e, ContinuationChanged)]
    assert "outcome" not in shown[0]  # said only when there is one


def test_an_upstream_session_of_a_bridge_is_announced_when_built_or_at_once_when_watched() -> None:
    rig = Rig()
    seen = {"principal": "0123456789abcdef", "capabilities": "sampling", "version": "2025-11-25"}
    rig.facts.upstream_session("upstream-1", state="opened", **seen)
    assert rig.events == []  # nobody watches: it waits
    rig.sink.build()  # someone asks for chains
    rig.bus.subscribe("tui")
    rig.clock.now += 1
    rig.facts.upstream_session("upstream-1", state="expired", **seen)

    sessions = [e for e in rig.events if isinstance(e, SessionChanged)]
    assert [(e.session, e.state, e.ts) for e in sessions] == [
        ("upstream-1", "opened", 5000.0),
        ("upstream-1", "expired", 5001.0),
    ]
    assert all(e.side is Side.UPSTREAM for e in sessions)
    assert (sessions[0].principal, sessions[0].capabilities, sessions[0].protocol_version) == (
        Redactor(key=b"test-key").fingerprint("0123456789abcdef"),  # keyed: never the engine's digest
        "sampling",
        "2025-11-25",
    )


def test_an_open_leg_keeps_its_observations_past_the_backlog_after_its_exchange_closed() -> None:
    rig = Rig(backlog=12)

    class Halted(Exception):
        pass

    class StopAfterPark:
        """Plays the bridged call up to the retry, then lets other traffic push the backlog."""

        def __getattr__(self, name: str) -> Any:
            def forward(*args: Any, **kwargs: Any) -> Any:
                if name == "open_exchange" and args[0] == "x2":
                    raise Halted
                return getattr(rig.facts, name)(*args, **kwargs)

            return forward

    with pytest.raises(Halted):
        parked_bridge_call(StopAfterPark(), rig.clock)
    for n in range(1, 21):  # x1 closed, leg-1 still open: other exchanges overflow the backlog
        _json_call(rig.facts, rig.clock, exchange=f"y{n}", ident=100 + n)
    assert rig.sink.dropped > 0
    final = result_response("mrtr-1", {"content": [{"type": "text", "text": "late"}]})
    rig.facts.leg_message("leg-1", "x1", final, size=5, direction=Direction.TO_CLIENT, channel=Channel.SSE)
    chain = next(c for c in rig.chains() if c.summary.name == "ask_name")
    upstream = [m.method or m.kind for m in chain.messages if m.side.value == "upstream"]
    assert upstream == ["tools/call", "elicitation/create", "result"], "the leg's chain was kept whole"


def test_a_notification_on_an_exchange_of_its_own_carries_that_exchanges_request_head() -> None:
    rig = Rig()
    init = classify_value(request(1, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}}))
    rig.facts.open_exchange("x1", http_method="POST", path="/mcp", headers={"Host": "p"}, session=None)
    rig.facts.message("x1", init, size=1, direction=Direction.TO_SERVER, channel=Channel.POST)
    rig.facts.response_head(
        "x1", status=200, content_type="application/json", headers={"Mcp-Session-Id": "s9"}
    )
    done = classify_value(result_response(1, {"protocolVersion": "2025-11-25"}))
    rig.facts.message("x1", done, size=1, direction=Direction.TO_CLIENT, channel=Channel.JSON)
    rig.facts.close_exchange("x1")
    rig.facts.open_exchange(
        "x2", http_method="POST", path="/mcp", headers={"Host": "p", "Mcp-Session-Id": "s9"}, session="s9"
    )
    ready = classify_value(notification("notifications/initialized", {}))
    rig.facts.message("x2", ready, size=1, direction=Direction.TO_SERVER, channel=Channel.POST)
    rig.facts.close_exchange("x2")

    (chain,) = rig.chains()
    sent = [m for m in chain.messages if m.exchange == "x2"]
    assert sent[0].http is not None  # its own head, with the session the first exchange had not
    assert "Mcp-Session-Id" in sent[0].http.headers


def test_a_request_to_the_client_is_told_as_it_goes_whether_or_not_anyone_listens() -> None:
    told, rig = [], Rig()
    rig.sink.on_asked = told.append
    _nested_elicitation(rig.facts, rig.clock)
    assert [(a.exchange, a.carried, a.method, a.asked) for a in told] == [
        ("x1", "tools/call ask", "elicitation/create", 0)
    ]
    quiet = Rig()  # nobody to tell: nothing is kept either
    _nested_elicitation(quiet.facts, quiet.clock)
    assert quiet.sink.tally.asking == []


@pytest.mark.parametrize("play", ONE_QUESTION.values(), ids=ONE_QUESTION.keys())
def test_a_call_whose_server_asks_one_question_counts_one_nested_request_in_every_mode(play: Play) -> None:
    rig = Rig()
    play(rig.facts, rig.clock)

    (call,) = [c.summary for c in rig.chains() if c.summary.method == "tools/call"]
    assert (call.nested, call.status) == (1, ChainStatus.OK)


def test_a_legs_response_head_rides_its_first_message_back_or_is_an_http_record_of_its_own() -> None:
    rig = Rig()
    refused_leg_call(rig.facts, rig.clock)

    (chain,) = rig.chains()
    legs = [m for m in chain.messages if m.side is Side.UPSTREAM]
    headed = {m.exchange: m for m in legs if m.http is not None}
    assert {leg: m.http.status for leg, m in headed.items() if m.http} == LEG_STATUSES
    assert all(m.direction is Direction.TO_CLIENT for m in headed.values())
    assert headed["leg-2"].kind == "error"  # the refusal's own message carries the 404
    assert (headed["leg-4"].kind, headed["leg-4"].channel) == ("http", Channel.HTTP)  # a 202, no message
    assert headed["leg-1"].channel is Channel.GET_SSE  # its head came before any event on it
    minted = headed["leg-3"].http
    assert minted is not None
    assert minted.headers["Mcp-Session-Id"].startswith("<redacted len=")
    assert UPSTREAM_SESSION not in str(chain.messages)
    assert chain.summary.http_status == 200  # the chain's own status stays the client's exchange's


def test_a_resource_uris_credential_is_learned_before_any_listener_sees_the_request() -> None:
    rig = Rig()
    heard: list[str] = []
    rig.sink.listeners.append(
        lambda batch: heard.extend(
            rig.sink.redactor.body(obs.msg.raw)["params"]["uri"]
            for obs in batch
            if isinstance(obs, MessageSeen) and obs.msg.method == "resources/read"
        )
    )
    uri = "https://files.example/doc?access_token=uriLEAK-access-31337"
    read = classify_value(request(1, "resources/read", {"uri": uri}))
    rig.facts.open_exchange("x1", http_method="POST", path="/mcp", headers={}, session=None)
    rig.facts.message("x1", read, size=90, direction=Direction.TO_SERVER, channel=Channel.POST)
    rig.facts.close_exchange("x1", None)

    assert heard
    assert all("uriLEAK" not in uri for uri in heard)
    (chain,) = rig.chains()
    assert "uriLEAK" not in f"{chain.summary.name} {chain.messages[0].body}"


def test_a_known_secret_in_an_sse_event_id_is_masked_in_the_record_and_the_capture_line() -> None:
    rig = Rig()
    rig.sink.redactor.remember("sk-LEAK-bearer-abc123def456")
    lines: list[bytes] = []
    encoder = ObservationEncoder(rig.sink.redactor, 65536)
    rig.sink.listeners.append(lambda batch: lines.extend(encoder.encode(obs) for obs in batch))
    call = classify_value(request(1, "tools/call", {"name": "add", "arguments": {}}))
    done = classify_value(result_response(1, {"content": []}))
    rig.facts.open_exchange("x1", http_method="POST", path="/mcp", headers={}, session=None)
    rig.facts.message("x1", call, size=60, direction=Direction.TO_SERVER, channel=Channel.POST)
    rig.facts.response_head("x1", status=200, content_type="text/event-stream", headers={})
    rig.facts.message(
        "x1",
        done,
        size=40,
        direction=Direction.TO_CLIENT,
        channel=Channel.SSE,
        sse_id="ev-sk-LEAK-bearer-abc123def456",
    )
    rig.facts.close_exchange("x1", None)

    (chain,) = rig.chains()
    ids = [m.sse_id for m in chain.messages if m.sse_id]
    assert ids == [ids[0]]
    assert ids[0].startswith("ev-<redacted len=27 ")
    assert b"LEAK" not in b"".join(lines)
    assert b'"sse_id":"ev-<redacted len=27 ' in b"".join(lines)


def test_lookalike_retries_continue_each_clients_own_call_or_the_oldest_with_a_note() -> None:
    rig = Rig()
    _lookalike_retries(rig.facts, rig.clock)
    calls = [c for c in rig.chains() if c.summary.method == "tools/call"]

    assert [(c.summary.status, c.summary.rounds) for c in calls] == [(ChainStatus.OK, 2)] * 6
    greeted = [c.messages[-1].body["result"]["content"][0]["text"] for c in calls]
    assert greeted[:4] == ["Hello, 0!", "Hello, 1!", "Hello, 0!", "Hello, 1!"]  # each client's own
    ambiguous = AMBIGUOUS_RETRY.format(ident=2, count=2)
    assert [c.summary.notes for c in calls] == [[], [], [], [], [ambiguous], []]


def test_calls_never_retried_end_incomplete_after_the_window_and_a_late_retry_is_a_call_of_its_own() -> None:
    rig = Rig()
    _never_retried(rig.facts, rig.clock)
    first, stated, _, late = rig.chains()

    for chain in (first, stated):
        summary = chain.summary
        assert (summary.status, summary.rounds) == (ChainStatus.INCOMPLETE, 1)
        assert summary.notes == [NEVER_RETRIED.format(window=RETRY_WINDOW)]
        assert summary.ended == summary.started + 0.25 + RETRY_WINDOW  # as of when the wait ran out
    assert (late.summary.status, late.summary.notes) == (ChainStatus.OK, [NO_FIT])


def test_a_listens_time_after_its_acknowledgement_is_stream_time_not_upstream_time() -> None:
    """A `subscriptions/listen` is answered by its acknowledgement; its stream then stays open for as
    long as the client listens, which is no wait on the upstream (the bridge's listen never reaches
    it at all)."""
    rig = Rig()
    listens(rig.facts, rig.clock)
    headlines = [c.summary for c in rig.chains()]
    times = {s.jsonrpc_id: (s.status, s.upstream_ms, s.stream_ms, s.duration_ms) for s in headlines}
    assert times == {
        "listen-1": (ChainStatus.CANCELLED, 250.0, 2000.0, 2250.0),
        "listen-2": (ChainStatus.OK, 250.0, 1000.0, 1250.0),
        "listen-3": (ChainStatus.CANCELLED, 0.0, 3000.0, 3000.0),
    }


def test_a_resource_uris_userinfo_is_learned_before_any_listener_sees_the_request() -> None:
    """`https://user:password@host/doc` in a `resources/subscribe` is masked where the capture writes
    the request, in the chain's name and in its record, as the round-trip line masks it."""
    rig = Rig()
    heard: list[str] = []
    rig.sink.listeners.append(
        lambda batch: heard.extend(
            orjson.dumps(rig.sink.redactor.body(obs.msg.raw)).decode()
            for obs in batch
            if isinstance(obs, MessageSeen) and obs.msg.method == "resources/subscribe"
        )
    )
    uri = "https://user:uriPASS-31337@files.example/doc"
    subscribe = classify_value(request(1, "resources/subscribe", {"uri": uri}))
    rig.facts.open_exchange("x1", http_method="POST", path="/mcp", headers={}, session=None)
    rig.facts.message("x1", subscribe, size=90, direction=Direction.TO_SERVER, channel=Channel.POST)
    rig.facts.close_exchange("x1", None)

    assert heard
    assert all("uriPASS" not in body for body in heard)
    (chain,) = rig.chains()
    assert "uriPASS" not in f"{chain.summary.name} {chain.messages[0].body}"
    assert "uriPASS" not in rig.sink.redactor.scrub("a server saying: bad password uriPASS-31337")
