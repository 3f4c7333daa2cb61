"""The MRTR->legacy bridge's session GET stream (`keep_streams`), Playbook style.

A legacy server may ask outside any request's stream (the Python SDK's `list_roots()`, and
`create_message()` / `elicit()` without a related request, go on the session's GET stream). The
bridge keeps that stream open while the session lives and gives such a request to the session's call
whose client waits for its answer: the one call, else none (several: each could own it; none:
nobody can answer), refused upstream at once. A call parked for a retry never takes one, but counts
among the calls that could own it.
`ready_engine(keep_streams=True)` opens the session on `leg-1`/`leg-2` and its GET stream on `leg-3`,
so a test's first call runs on `leg-4`.
"""

from __future__ import annotations

from typing import Any
from unittest.mock import ANY

from proxy.engine.commands import (
    CloseLeg,
    Log,
    OpenLegStream,
    RecheckUpstreamEra,
    ReplyJson,
    ResumeLeg,
    SendLeg,
    StartTimer,
)
from proxy.engine.events import LegCut, LegEnded, LegResponded, Stopping, TimerFired
from proxy.engine.modern_client.engine import MrtrToLegacyEngine
from proxy.engine.modern_client.stream_asks import MAX_CALL_NOTES
from proxy.engine.resume import resume_headers
from proxy.wire.jsonrpc import classify_value
from proxy.wire.jsonrpc import error_response as err
from proxy.wire.jsonrpc import notification as note
from proxy.wire.jsonrpc import request as req
from proxy.wire.jsonrpc import result_response as ok
from tests.engine.builders import up
from tests.engine.playbook import Playbook, protocol
from tests.engine.test_mrtr_to_legacy import (
    FORM,
    MY_ROOTS,
    RESUMED,
    ROUND_LOG,
    STREAM_HEADERS,
    Counter,
    answer_leg,
    call,
    drained,
    entry,
    head,
    input_required,
    open_session,
    ready_engine,
    send,
    state,
    tool_leg,
)
from tests.engine.test_mrtr_to_legacy import KEY as STATE_KEY
from tests.engine.test_mrtr_to_legacy import UPSTREAM as UPSTREAM_URL

STREAM = "leg-3"
"""The session's GET stream in every test here (opened right after the handshake)."""


def engine() -> MrtrToLegacyEngine:
    return ready_engine(keep_streams=True)


def placed(method: str, ident: Any, call_key: str) -> Log:
    fields = {"leg": STREAM, "method": method, "id": ident, "in_flight": 1, "call": call_key}
    return Log("bridge_stream_request_placed", "info", fields)


def unassociated(ident: str) -> Log:
    """The listen emulator's refusal of a stream request no call can take."""
    return Log("bridge_unassociated_request", "warning", {"leg": STREAM, "method": "roots/list", "id": ident})


def test_an_opened_session_opens_its_get_stream_and_keeps_it_while_the_session_lives() -> None:
    bridge = MrtrToLegacyEngine(UPSTREAM_URL, Counter(), state_key=STATE_KEY, keep_streams=True)
    bridge.handle(send("x0", 0, "server/discover"))
    done = open_session(bridge)
    assert done[0] == OpenLegStream(STREAM, "x0", STREAM_HEADERS, True), done
    assert isinstance(done[1], ReplyJson)
    assert done[1].status == 200
    assert (
        Playbook(bridge)
        >> head(STREAM)
        >> call("x1", 1)
        << tool_leg("leg-4", "x1")
        >> up("leg-4", ok("leg-4", {"content": []}))
        << ROUND_LOG
        << ANY
    )
    assert drained(bridge, session_streams=1)  # the call is over, the stream stays


def test_a_request_on_the_get_stream_joins_the_only_call_in_flight_and_its_answer_is_posted() -> None:
    bridge = engine()
    token = state()
    assert (
        Playbook(bridge)
        >> head(STREAM)
        >> call("x1", 1)
        << tool_leg("leg-4", "x1")
        >> head("leg-4")
        >> up(STREAM, req(7, "roots/list"))
        << placed("roots/list", 7, "leg-4")
        << StartTimer("round:call-1", ANY)
        >> TimerFired("round:call-1")
        << ROUND_LOG
        << ReplyJson("x1", 200, input_required(1, {"roots-1": entry("roots/list", {})}, token))
        << StartTimer("ttl:call-1", ANY)
        >> call("x2", 2, requestState=token, inputResponses={"roots-1": MY_ROOTS})
        << ANY  # the ttl timer cancelled
        << RESUMED
        << answer_leg("leg-5", "x2", 7, MY_ROOTS, call_leg="leg-4")
    )


def test_with_several_calls_in_flight_a_get_stream_request_is_refused_since_it_could_be_anyones() -> None:
    """Clients with the same credentials share an upstream session: a question that names no request,
    while two calls are in flight, could be either client's, and is given to neither. The refusal is
    an internal error, not -32601: a server that fails its tool with it must not make the call look
    like a method that does not exist."""
    bridge = engine()
    text = (
        "elicitation/create came on the session's GET stream, naming no client request, while 2 calls "
        "are in flight on this session: the proxy cannot tell whose it is (behind an HTTP+SSE or stdio "
        "server every question comes on one stream; anonymous_upstream_sessions = per_connection, "
        "distinct Authorization, or one call at a time avoid this)"
    )
    fields = {"leg": STREAM, "method": "elicitation/create", "id": 9, "in_flight": 2}
    ambiguous = Log(
        "bridge_stream_request_ambiguous", "warning", {**fields, "calls": ["leg-4", "leg-5"], "hint": ANY}
    )
    assert (
        Playbook(bridge)
        >> head(STREAM)
        >> call("x1", 1)
        << tool_leg("leg-4", "x1")
        >> call("x2", 2)
        << tool_leg("leg-5", "x2")
    )
    said = protocol(bridge.handle(up(STREAM, req(9, "elicitation/create", FORM))))
    assert said[0] == ambiguous
    assert [c.message for c in said[1:]] == [err(9, -32603, text)]  # the refusal, posted upstream
    assert not [c for c in said if isinstance(c, (StartTimer, ReplyJson))]  # neither call is asked


def parked_on_leg_4(bridge: MrtrToLegacyEngine) -> None:
    """`deploy` on x1 (call-1, leg-4) asks a form in flight and parks: its client has the round."""
    assert (
        Playbook(bridge)
        >> head(STREAM)
        >> call("x1", 1)
        << tool_leg("leg-4", "x1")
        >> head("leg-4")
        >> up("leg-4", req("e1", "elicitation/create", FORM))
        << StartTimer("round:call-1", ANY)
        >> TimerFired("round:call-1")
        << ROUND_LOG
        << ReplyJson("x1", 200, ANY)
        << StartTimer("ttl:call-1", ANY)
    )


def test_a_question_that_a_parked_call_or_the_running_call_could_own_is_refused_and_neither_is_asked() -> (
    None
):
    """A parked call's upstream request still runs: a tool asking two questions side by side asks the
    second while its call waits for the retry. With another call running (another client's, on the
    shared anonymous session) the question is either's, so it is refused, never shown to the running
    call's client nor answered into the parked call's result."""
    bridge = engine()
    parked_on_leg_4(bridge)
    assert (
        Playbook(bridge) >> call("x2", 2, name="other") << tool_leg("leg-5", "x2", "other") >> head("leg-5")
    )
    question = classify_value(req(7, "sampling/createMessage", {"messages": []}))
    assert bridge.joins(STREAM, question) is None  # its observation joins no call's chain
    said = protocol(bridge.handle(up(STREAM, req(7, "sampling/createMessage", {"messages": []}))))
    fields = {
        "leg": STREAM,
        "method": "sampling/createMessage",
        "id": 7,
        "in_flight": 1,
        "parked": ["leg-4"],
    }
    assert said[0] == Log(
        "bridge_stream_request_ambiguous", "warning", {**fields, "calls": ["leg-5", "leg-4"], "hint": ANY}
    )
    refusal = said[1].message
    assert refusal["id"] == 7
    assert "while 2 calls are in flight on this session" in refusal["error"]["message"]
    assert not [c for c in said if isinstance(c, (StartTimer, ReplyJson))]  # the running call is not asked
    assert bridge.table_sizes()["asked"] == 1  # the parked call holds only its own question
    answer = protocol(bridge.handle(up("leg-5", ok("leg-5", {"content": []}))))[1]
    assert isinstance(answer, ReplyJson)
    assert isinstance(answer.note, str)
    assert "sampling/createMessage on its session's GET stream while 2 calls" in answer.note


def test_a_get_stream_question_with_only_a_parked_call_is_refused_at_once_naming_it() -> None:
    """The parked call's client has its round and may be gone: the server is refused now rather
    than left waiting until continuation_ttl, and the warning names the call passed over."""
    bridge = engine()
    parked_on_leg_4(bridge)
    fields = {"leg": STREAM, "method": "roots/list", "id": "g1", "in_flight": 0, "parked": ["leg-4"]}
    said = protocol(bridge.handle(up(STREAM, req("g1", "roots/list"))))
    assert said[0] == Log("bridge_unassociated_request", "warning", {**fields, "hint": ANY})
    assert "parked" in said[0].fields["hint"]
    text = (
        "roots/list came on the session's GET stream, naming no client request, while this session's "
        "only calls wait for their clients' retries: the proxy cannot ask those clients now"
    )
    assert [c.message for c in said[1:]] == [err("g1", -32603, text)]
    assert bridge.table_sizes()["asked"] == 1  # the parked call holds only its own question


def test_a_refused_ambiguous_question_is_noted_in_each_waiting_calls_answer() -> None:
    bridge = engine()
    assert (
        Playbook(bridge)
        >> head(STREAM)
        >> call("x1", 1)
        << tool_leg("leg-4", "x1")
        >> call("x2", 2)
        << tool_leg("leg-5", "x2")
        >> up(STREAM, req(9, "roots/list"))
        << ANY  # the warning
        << ANY  # the refusal, posted upstream
    )
    answers = [protocol(bridge.handle(up(leg, ok(leg, {"content": []}))))[1] for leg in ("leg-4", "leg-5")]
    assert [type(a) for a in answers] == [ReplyJson, ReplyJson]
    assert all(isinstance(a, ReplyJson) and a.note is not None for a in answers)
    note = answers[0].note
    assert isinstance(note, str)
    assert note.startswith("the server asked roots/list on its session's GET stream while 2 calls")
    assert "(leg-4, leg-5); the proxy refused it" in note


def test_a_server_asking_on_and_on_leaves_a_bounded_note_on_each_waiting_call() -> None:
    bridge = engine()
    assert (
        Playbook(bridge)
        >> head(STREAM)
        >> call("x1", 1)
        << tool_leg("leg-4", "x1")
        >> call("x2", 2)
        << tool_leg("leg-5", "x2")
    )
    for ident in range(100):
        bridge.handle(up(STREAM, req(f"q{ident}", "roots/list")))
    answer = protocol(bridge.handle(up("leg-4", ok("leg-4", {"content": []}))))[1]
    assert isinstance(answer, ReplyJson)
    assert isinstance(answer.note, str)
    assert answer.note.count("the proxy refused it") == MAX_CALL_NOTES


def test_a_request_on_the_get_stream_with_no_call_in_flight_is_refused_at_once() -> None:
    bridge = engine()
    text = "Method not found: roots/list is not associated with a client request"
    assert (
        Playbook(bridge)
        >> head(STREAM)
        >> call("x1", 1, name="other")
        << tool_leg("leg-4", "x1", "other")
        >> up("leg-4", ok("leg-4", {"content": []}))
        << ROUND_LOG
        << ANY
        >> up(STREAM, req("g1", "roots/list"))  # the only call is over: nobody can answer
        << unassociated("g1")
        << ANY
    )
    sent = protocol(bridge.handle(up(STREAM, req("g2", "sampling/createMessage", {}))))
    assert sent[1].message == err("g2", -32601, text.replace("roots/list", "sampling/createMessage"))


def test_a_call_that_cannot_ask_its_client_is_not_given_a_get_stream_request() -> None:
    bridge = engine()
    assert (
        Playbook(bridge)
        >> head(STREAM)
        >> send("x1", 1, "tools/list")
        << ANY
        >> up(STREAM, req("g1", "roots/list"))
        << unassociated("g1")
        << ANY
    )


def test_a_server_that_offers_no_get_stream_is_noted_once_and_not_asked_again() -> None:
    bridge = engine()
    assert (
        Playbook(bridge)
        >> LegResponded(STREAM, 405, ())
        << Log("upstream_stream_not_offered", "info", {"session": "upstream-1", "status": 405})
        >> LegEnded(STREAM)
    )
    assert drained(bridge)


def test_a_get_stream_cut_after_an_event_id_is_resumed_else_given_up() -> None:
    bridge = engine()
    resumed = Log("leg_resumed", "info", {"leg": STREAM, "last_event_id": "e5", "attempt": 1})
    ended = Log("bridge_listen_stream_ended", "warning", {"leg": STREAM, "why": ANY})
    assert (
        Playbook(bridge)
        >> head(STREAM)
        >> LegCut(STREAM, "e5", None, "reset")
        << resumed
        << ResumeLeg(STREAM, 0.0, "e5", resume_headers(STREAM_HEADERS, "e5"))
        >> LegCut(STREAM, None, None, "reset")
        << ended
    )
    assert drained(bridge)


def test_a_get_stream_the_server_ends_asks_for_an_era_recheck_and_a_refused_one_does_not() -> None:
    # A session's stream ends when its server restarts, and a server started anew may speak another era.
    bridge = engine()
    ended = Log("bridge_listen_stream_ended", "warning", {"leg": STREAM, "why": ANY})
    why = "the bridge's upstream GET stream ended: the response ended without a JSON-RPC answer (HTTP 200)"
    assert (
        Playbook(bridge, hide=())
        >> head(STREAM)
        >> LegCut(STREAM, None, None)
        << ended
        << RecheckUpstreamEra(why)
    )
    refusing = engine()
    noted = Log("upstream_stream_not_offered", "info", {"session": "upstream-1", "status": 405})
    assert Playbook(refusing, hide=()) >> LegResponded(STREAM, 405, ()) << noted >> LegEnded(STREAM)


def test_a_discover_after_the_get_stream_ended_checks_the_session_first_then_answers_at_once() -> None:
    # The server may have restarted: a ping in the session (a 404 would renew it) comes before the
    # discover is answered from the handshake's InitializeResult; once it succeeded, no more pings.
    bridge = engine()
    assert (
        Playbook(bridge)
        >> head(STREAM)
        >> LegCut(STREAM, None, None)
        << ANY
        >> send("x1", 1, "server/discover", {})
        << SendLeg("leg-4", "x1", ANY, req("leg-4", "ping", {}))
        >> LegResponded("leg-4", 200, (("Content-Type", "application/json"),))
        << ReplyJson("x1", 200, ANY)
        >> send("x2", 2, "server/discover", {})
        << ReplyJson("x2", 200, ANY)
    )


def test_a_cancellation_on_the_get_stream_withdraws_the_request_from_its_call() -> None:
    bridge = engine()
    assert (
        Playbook(bridge)
        >> head(STREAM)
        >> call("x1", 1)
        << tool_leg("leg-4", "x1")
        >> up(STREAM, req(7, "roots/list"))
        << placed("roots/list", 7, "leg-4")
        << StartTimer("round:call-1", ANY)
        >> up(STREAM, note("notifications/cancelled", {"requestId": 7}))
        << ANY  # the round timer cancelled: nothing is left to ask
        >> up("leg-4", ok("leg-4", {"content": []}))
        << ROUND_LOG
        << ANY
    )
    assert drained(bridge, session_streams=1)


def test_when_the_proxy_stops_the_get_stream_is_closed_before_its_session_is_deleted() -> None:
    """The server ends the session's GET stream for the DELETE: that end is the proxy's own doing,
    not a stream lost, so nothing warns of it."""
    bridge = engine()
    ended = Log(
        "upstream_session_ended", "info", {"session": "upstream-1", "principal": ANY, "capabilities": ANY}
    )
    assert (
        Playbook(bridge)
        >> head(STREAM)
        >> Stopping()
        << ended
        << CloseLeg(STREAM)
        << ANY  # the DELETE, on leg-4
        >> LegEnded(STREAM)
        >> LegResponded("leg-4", 200, ())
        >> LegEnded("leg-4")
        >> Stopping()
    )
    assert drained(bridge, upstream_sessions=1, session_timers=1)  # the proxy's end takes them
