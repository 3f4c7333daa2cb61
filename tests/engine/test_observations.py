"""What the MRTR->legacy engine tells the observer, and when: each change as it happens.

Parked calls (`parked`, `resumed`, `expired`, `lost`, `ended`) and upstream sessions (`opened`,
`reinitialized`, `ended`, `expired`) come out as ObserveContinuation / ObserveSession orders at the
end of the event that changed them; nothing is found by comparing views after the fact. These
Playbooks show observations (`hide=()`); the other engine tests leave them out.
"""

from __future__ import annotations

from unittest.mock import ANY

from proxy.engine.commands import (
    CancelTimer,
    CloseLeg,
    Log,
    ObserveContinuation,
    ObserveSession,
    RecheckUpstreamEra,
    ReplyJson,
    StartTimer,
)
from proxy.engine.events import LegEnded, LegFailed, LegResponded, Stopping, TimerFired
from proxy.engine.modern_client.engine import MrtrToLegacyEngine
from tests.engine.builders import up
from tests.engine.playbook import Playbook
from tests.engine.test_mrtr_to_legacy import (
    ACCEPT,
    DONE,
    FORM,
    KEY,
    RESUMED,
    ROUND_LOG,
    UPSTREAM,
    Counter,
    answer_leg,
    call,
    complete,
    drained,
    entry,
    head,
    input_required,
    ok,
    open_session,
    park,
    ready_engine,
    req,
    send,
    state,
    tool_leg,
)
from tests.engine.test_upstream_sessions import principal

ME = principal(("Authorization", "Bearer t0k"))
ASKED = {"elicitation-1": entry("elicitation/create", FORM)}
ALL = "elicitation.form elicitation.url sampling sampling.tools roots"


def parked(pending: tuple[str, ...] = ("elicitation-1",), exchange: str = "x1") -> ObserveContinuation:
    return ObserveContinuation(exchange, "continuation-1", "parked", ME, pending, 0.0)


def ending(state: str) -> ObserveContinuation:
    return ObserveContinuation("x1", "continuation-1", state, None, (), 0.0)


def test_a_call_is_observed_parked_resumed_and_ended_each_at_the_event_that_did_it() -> None:
    engine = ready_engine()
    token = state(at=1000.0)

    assert (
        Playbook(engine, hide=())
        >> call("x1", 1, at=1000.0)
        << tool_leg("leg-3", "x1")
        >> head("leg-3")
        >> up("leg-3", req("e1", "elicitation/create", FORM))
        << StartTimer("round:call-1", 0.02)
        >> TimerFired("round:call-1")
        << ROUND_LOG
        << ReplyJson(
            "x1", 200, input_required(1, {"elicitation-1": entry("elicitation/create", FORM)}, token)
        )
        << StartTimer("ttl:call-1", 300.0)
        << parked()
        >> call("x2", 2, at=1002.5, requestState=token, inputResponses={"elicitation-1": ACCEPT})
        << CancelTimer("ttl:call-1")
        << RESUMED
        << answer_leg("leg-4", "x2", "e1", ACCEPT)
        << ObserveContinuation("x1", "continuation-1", "resumed", ME, (), 2500.0)
        >> LegResponded("leg-4", 202, ())
        >> up("leg-3", ok("leg-3", DONE))
        << ROUND_LOG
        << ReplyJson("x2", 200, complete(2, DONE))
        << ending("ended")
        >> LegEnded("leg-3")
    )
    assert drained(engine)


def test_a_call_nobody_came_back_for_is_observed_expired() -> None:
    engine = ready_engine()
    park(engine)

    assert (
        Playbook(engine, hide=())
        >> TimerFired("ttl:call-1")
        << Log("bridge_continuation_expired", "info", ANY)
        << ANY
        << CloseLeg("leg-3", "cancelled")
        << ending("expired")
    )


def test_a_call_nobody_came_back_for_is_observed_expired_with_how_long_it_waited() -> None:
    engine = ready_engine()
    park(engine, at=1000.0)

    assert (
        Playbook(engine, hide=())
        >> TimerFired("ttl:call-1", 1300.5)
        << Log("bridge_continuation_expired", "info", ANY)
        << ANY
        << CloseLeg("leg-3", "cancelled")
        << ObserveContinuation("x1", "continuation-1", "expired", None, (), 300500.0)
    )


def test_a_parked_call_whose_stream_dies_is_observed_lost_once() -> None:
    engine = ready_engine()
    park(engine)

    assert (
        Playbook(engine, hide=())
        >> LegFailed("leg-3", "cut", "reset")
        << Log("bridge_continuation_dead", "warning", ANY)
        << CancelTimer("ttl:call-1")
        << ending("lost")  # its upstream went before the client came back
        >> call("x2", 2, requestState=state(), inputResponses={"elicitation-1": ACCEPT})
        << ANY
        << ANY
    )


def test_a_parked_call_whose_stream_dies_is_observed_lost_with_how_long_it_waited() -> None:
    engine = ready_engine()
    park(engine, at=1000.0)

    assert (
        Playbook(engine, hide=())
        >> LegFailed("leg-3", "cut", "reset", 1042.5)
        << Log("bridge_continuation_dead", "warning", ANY)
        << CancelTimer("ttl:call-1")
        << ObserveContinuation("x1", "continuation-1", "lost", None, (), 42_500.0)
    )


def test_a_parked_call_whose_upstream_session_is_lost_is_observed_lost_with_how_long_it_waited() -> None:
    engine = ready_engine()
    park(engine, at=1000.0)
    engine.handle(call("x2", 2, name="other", at=1007.0))

    assert (
        Playbook(engine, hide=())
        >> LegResponded("leg-4", 404, (), 1007.25)
        << CloseLeg("leg-4")
        << Log("upstream_session_lost", "warning", ANY)
        << RecheckUpstreamEra(ANY)  # the router probes the era again
        << Log("bridge_continuation_dead", "warning", ANY)
        << CancelTimer("ttl:call-1")
        << CloseLeg("leg-3")
        << ANY  # the new session's initialize
        << ObserveContinuation("x1", "continuation-1", "lost", None, (), 7_250.0)
    )


def test_a_call_answered_before_it_parks_is_never_observed() -> None:
    engine = ready_engine()

    assert (
        Playbook(engine, hide=())
        >> call("x1", 1)
        << ANY
        >> up("leg-3", req("e1", "elicitation/create", FORM))
        << StartTimer("round:call-1", 0.02)
        >> up("leg-3", ok("leg-3", DONE))  # the round window closes on the answer: nothing parked
        << ROUND_LOG
        << ReplyJson("x1", 200, complete(1, DONE))
        << CancelTimer("round:call-1")
    )


def test_a_session_is_observed_opened_reinitialized_and_expired_once_each() -> None:
    engine = MrtrToLegacyEngine(UPSTREAM, Counter(), state_key=KEY, session_ttl=30.0)
    opened = ObserveSession("upstream-1", "opened", ME, "sampling", "2025-11-25")
    engine.handle(send("x0", 0, "server/discover", caps={"sampling": {}}))

    assert (
        Playbook(engine, hide=())
        >> LegResponded("leg-1", 200, (("Content-Type", "application/json"), ("Mcp-Session-Id", "s1")))
        >> up("leg-1", ok("leg-1", {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {}}))
        << Log("upstream_initialized", "info", ANY)
        << ANY
        >> LegResponded("leg-2", 202, ())
        << ReplyJson("x0", 200, ANY)
        << opened
        >> call("x1", 1, caps={"sampling": {}})
        << ANY
        >> LegResponded("leg-3", 404, ())  # the upstream forgot the session: nothing observed yet
        << CloseLeg("leg-3")
        << Log("upstream_session_lost", "warning", ANY)
        << RecheckUpstreamEra(ANY)  # the router probes the era again
        << ANY
    )
    open_session(engine, "x1", init="leg-4", notify="leg-5", session="s2")  # observed reinitialized
    assert (
        Playbook(engine, hide=())
        >> up("leg-6", ok("leg-6", DONE))
        << ROUND_LOG
        << ReplyJson("x1", 200, ANY)
        >> TimerFired("session-idle:upstream-1")  # used in this period: it waits another
        << StartTimer("session-idle:upstream-1", 30.0)
        >> TimerFired("session-idle:upstream-1")
        << Log("upstream_session_closed", "info", ANY)
        << ANY
        << ObserveSession("upstream-1", "expired", ME, "sampling", "2025-11-25")
    )


def test_a_session_the_proxy_ends_as_it_stops_is_observed_ended_once() -> None:
    engine = ready_engine()

    assert (
        Playbook(engine, hide=())
        >> Stopping(1000.0)
        << Log("upstream_session_ended", "info", ANY)
        << ANY  # the session's DELETE
        << ObserveSession("upstream-1", "ended", ME, ALL, "2025-11-25")
        >> LegResponded("leg-3", 200, ())
        >> LegEnded("leg-3")
        >> Stopping(1001.0)  # asked again: nothing more to end, nothing observed twice
    )


def test_reinitializing_a_lost_session_is_observed_as_such() -> None:
    engine = MrtrToLegacyEngine(UPSTREAM, Counter(), state_key=KEY)
    engine.handle(send("x0", 0, "server/discover"))
    open_session(engine)
    engine.handle(call("x1", 1))
    engine.handle(LegResponded("leg-3", 404, ()))
    engine.handle(
        LegResponded("leg-4", 200, (("Content-Type", "application/json"), ("Mcp-Session-Id", "s2")))
    )
    engine.handle(up("leg-4", ok("leg-4", {"protocolVersion": "2025-11-25", "capabilities": {}})))

    commands = engine.handle(LegResponded("leg-5", 202, ()))

    assert commands[-1] == ObserveSession("upstream-1", "reinitialized", ME, ALL, "2025-11-25")
    assert [c for c in commands if isinstance(c, ObserveSession)] == [commands[-1]]


def test_a_call_still_parked_when_the_proxy_stops_expires_by_the_stop_with_how_long_it_waited() -> None:
    engine = ready_engine()
    park(engine, at=1000.0)

    assert (
        Playbook(engine, hide=())
        >> Stopping(1110.5)
        << Log(
            "bridge_continuation_dead",
            "warning",
            {"call": "call-1", "continuation": "continuation-1", "why": "the proxy is stopping"},
        )
        << CancelTimer("ttl:call-1")
        << CloseLeg("leg-3", "proxy_stopping")
        << Log("upstream_session_ended", "info", ANY)
        << ANY  # the session's DELETE
        # Its client had not come back and its upstream was fine: it expired by the stop, not lost.
        << ObserveContinuation("x1", "continuation-1", "expired", None, (), 110_500.0, stopped=True)
        << ObserveSession("upstream-1", "ended", ME, ALL, "2025-11-25")
        >> LegEnded("leg-3")  # the leg's end, after: nothing more is said of the call
        >> Stopping(1111.0)
    )
