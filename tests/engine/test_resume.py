"""SSE leg resumption as the engines decide it: a cut stream in (LegCut), ResumeLeg or the client's error out.

A legacy server may close a request's SSE stream after an event id and expect a GET with
`Last-Event-ID` (polling); the MRTR->legacy bridge resumes such a stream while its request is
unanswered, after the server's `retry` (capped), a bounded number of times. The legacy->MRTR
bridge faces a 2026-07-28 server, whose streams are not resumed: a cut there is a fault at once.
"""

from __future__ import annotations

from unittest.mock import ANY

from proxy.engine.commands import EndClientResponse, Log, ReplyJson, ResumeLeg, SendSse, StartSse
from proxy.engine.events import LegCut
from proxy.engine.resume import MAX_RESUME_WAIT_S, MAX_RESUMES
from proxy.wire.jsonrpc import error_response as err
from proxy.wire.jsonrpc import notification as note
from proxy.wire.jsonrpc import result_response as ok
from tests.engine import test_legacy_to_mrtr as legacy_bridge
from tests.engine.builders import CUT_HINT, up
from tests.engine.playbook import Playbook
from tests.engine.test_mrtr_to_legacy import (
    DONE,
    call,
    complete,
    drained,
    head,
    legacy_headers,
    ready_engine,
)

PROGRESS = note("notifications/progress", {"progressToken": 1, "progress": 1})


def resume_order(leg: str, delay: float, last_id: str) -> ResumeLeg:
    """The GET that resumes `leg`: the call's headers without its body headers, plus Last-Event-ID."""
    kept = tuple((k, v) for k, v in legacy_headers() if k != "Content-Type")
    return ResumeLeg(leg, delay, last_id, (*kept, ("Last-Event-ID", last_id)))


def gateway_fault(exchange: str, ident: int, why: str, outcome: str | None = None) -> ReplyJson:
    """The 502 a 2026 client gets when its call's upstream leg is lost before the answer; `outcome`:
    the fault that lost it, as the exchange's outcome names it (`upstream_cut`)."""
    return ReplyJson(
        exchange,
        502,
        err(ident, -32000, f"upstream MCP server failed during tools/call: {why}"),
        outcome=outcome,
    )


def lost(why: str) -> Log:
    return Log(
        "bridge_leg_lost", "warning", {"call": "call-1", "leg": "leg-3", "phase": "running", "why": why}
    )


def resumed(attempt: int, last_id: str) -> Log:
    return Log("leg_resumed", "info", {"leg": "leg-3", "last_event_id": last_id, "attempt": attempt})


def test_a_call_stream_closed_after_an_event_id_is_resumed_after_the_servers_retry_delay() -> None:
    engine = ready_engine()

    assert (
        Playbook(engine)
        >> call("x1", 1, own={"progressToken": 1})
        << ANY
        >> head("leg-3")
        >> up("leg-3", PROGRESS)
        << StartSse("x1")
        << SendSse("x1", PROGRESS)
        >> LegCut("leg-3", "ev-1", 250, None)  # the polling pattern: closed cleanly, retry 250 ms
        << resumed(1, "ev-1")
        << resume_order("leg-3", 0.25, "ev-1")
        >> up("leg-3", ok("leg-3", DONE))
        << Log("bridge_round", "info", ANY)
        << SendSse("x1", complete(1, DONE))
        << EndClientResponse("x1")
        >> LegCut("leg-3", "ev-2", None, None)  # the answered stream's end: nothing to resume
    )
    assert drained(engine)


def test_a_broken_stream_with_an_event_id_is_resumed_at_once_without_a_retry_field() -> None:
    engine = ready_engine()

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> head("leg-3")
        >> LegCut("leg-3", "7", None, "connection reset")
        << resumed(1, "7")
        << resume_order("leg-3", 0.0, "7")
    )


def test_the_servers_retry_delay_is_capped() -> None:
    engine = ready_engine()

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> head("leg-3")
        >> LegCut("leg-3", "7", 3_600_000, None)
        << resumed(1, "7")
        << resume_order("leg-3", MAX_RESUME_WAIT_S, "7")
    )


def test_a_cut_without_an_event_id_is_the_clients_gateway_fault_named_upstream_cut() -> None:
    engine = ready_engine()
    why = "the upstream MCP server cut the response stream: reset" + CUT_HINT + " (HTTP 200)"

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> head("leg-3")
        >> LegCut("leg-3", None, 1000, "reset")
        << Log(
            "bridge_leg_lost", "warning", {"call": "call-1", "leg": "leg-3", "phase": "running", "why": why}
        )
        << gateway_fault("x1", 1, why, "upstream_cut")
    )
    assert drained(engine)


def test_a_stream_still_cut_after_the_last_resume_gives_up_with_the_clients_error() -> None:
    engine = ready_engine()
    book = Playbook(engine) >> call("x1", 1) << ANY >> head("leg-3")
    for attempt in range(1, MAX_RESUMES + 1):
        last = f"ev-{attempt}"
        book = (
            book
            >> LegCut("leg-3", last, None, None)
            << resumed(attempt, last)
            << resume_order("leg-3", 0.0, last)
        )
    why = "the response ended without a JSON-RPC answer (HTTP 200)"

    assert (
        book
        >> LegCut("leg-3", "ev-last", None, None)
        << Log(
            "bridge_leg_lost", "warning", {"call": "call-1", "leg": "leg-3", "phase": "running", "why": why}
        )
        << gateway_fault("x1", 1, why)
    )
    assert drained(engine)


def test_a_stream_the_proxy_closed_is_not_resumed() -> None:
    engine = ready_engine()
    engine.handle(call("x1", 1))
    engine.handle(head("leg-3"))
    engine.handle(up("leg-3", ok("leg-3", DONE)))

    assert Playbook(engine) >> LegCut("leg-3", "ev-9", None, "reset")  # answered and forgotten: nothing
    assert drained(engine)


def test_the_legacy_to_mrtr_bridge_takes_a_cut_as_a_fault_at_once() -> None:
    engine = legacy_bridge.session_engine()
    text = (
        "upstream MCP server failed during tools/call: the upstream MCP server cut the response stream: "
        "connection reset (the MCP server's own log says why it stopped) (HTTP 200) (round 1)"
    )

    assert (
        Playbook(engine)
        >> legacy_bridge.call("x1", 1)
        << ANY
        >> legacy_bridge.head("leg-2", 200, "text/event-stream")
        >> LegCut("leg-2", "ev-1", 100, "connection reset")
        << Log("bridge_leg_lost", "warning", {"exchange": "x1", "leg": "leg-2", "round": 1, "why": ANY})
        << ReplyJson("x1", 200, err(1, -32603, text))
    )
    assert legacy_bridge.drained(engine, sessions=1)
