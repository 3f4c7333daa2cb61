"""Parked calls: the bounded table, and everything that may and may not resume or end one.

Engine tests reuse the builders of `test_mrtr_to_legacy`: `park()` leaves `call-1` parked under
`continuation-1` with one form elicitation (`elicitation-1`, upstream id `e1`) on leg `leg-3`.
Every bad retry must get -32602 and leave the parked call exactly as it was, which each test
proves by resuming it properly afterwards.
"""

from __future__ import annotations

from typing import Any
from unittest.mock import ANY

import pytest

from proxy.engine.commands import CancelTimer, CloseLeg, Log, ReplyJson, StartTimer
from proxy.engine.events import ClientDisconnected, LegEnded, LegFailed, LegResponded, TimerFired
from proxy.engine.modern_client.continuations import ContinuationTable, EndedContinuations, Ending, Refusal
from proxy.engine.modern_client.engine import MrtrToLegacyEngine
from proxy.engine.modern_client.sessions import LOST_THEN, lost_why
from proxy.engine.modern_client.tokens import Claims, StateSealer, binding_for
from tests.engine.builders import CUT_HINT
from tests.engine.playbook import Playbook
from tests.engine.test_mrtr_to_legacy import (
    ACCEPT,
    ARGS,
    AUTH,
    DONE,
    FORM,
    KEY,
    LEGACY_CAPS_ALL,
    RESUMED,
    ROUND_LOG,
    UPSTREAM,
    Counter,
    answer_leg,
    call,
    cancel_leg,
    complete,
    drained,
    entry,
    err,
    idle_timer,
    initialize,
    input_required,
    ok,
    open_session,
    park,
    ready_engine,
    req,
    state,
    tool_leg,
    up,
)

ANSWER = {"elicitation-1": ACCEPT}
INVALID = {
    "code": -32602,
    "message": "Invalid or expired requestState",
    "data": {"reason": "invalid_request_state"},
}

LOST_SESSION = {"session": "upstream-1", "generation": 1, "why": lost_why("404"), "then": LOST_THEN}


def rejected(exchange: str, ident: Any) -> ReplyJson:
    return ReplyJson(exchange, 400, {"jsonrpc": "2.0", "id": ident, "error": INVALID})


def rejection_log(exchange: str, ident: Any, reason: str) -> Log:
    return Log(
        "bridge_state_rejected",
        "warning",
        {"exchange": exchange, "client_id": ident, "reason": reason, "request_state": ANY},
    )


def resumes(engine: MrtrToLegacyEngine, exchange: str = "x9", ident: Any = 9, leg: str = "leg-4") -> bool:
    """The parked call is intact: a proper retry resumes it and gets the result."""
    return bool(
        Playbook(engine)
        >> call(exchange, ident, requestState=state(), inputResponses=ANSWER)
        << CancelTimer("ttl:call-1")
        << RESUMED
        << answer_leg(leg, exchange, "e1", ACCEPT)
        >> up("leg-3", ok("leg-3", DONE))
        << ROUND_LOG
        << ReplyJson(exchange, 200, complete(ident, DONE))
    )


# -- the table ------------------------------------------------------------------------------------


def test_the_table_bounds_slots_in_total_and_per_principal_and_frees_them_on_release() -> None:
    table = ContinuationTable(max_total=3, max_per_principal=2)
    table.take("c1", "call-1", "alice")
    table.take("c2", "call-2", "alice")

    assert table.refusal("alice") == Refusal(
        "this caller already holds max_continuations_per_principal=2 parked calls", ("call-1", "call-2")
    )
    assert table.refusal("bob") is None
    table.take("c3", "call-3", "bob")
    assert table.refusal("carol") == Refusal(
        "the proxy already holds max_continuations=3 parked calls", ("call-1", "call-2", "call-3")
    )
    assert table.call_of("c2") == "call-2"
    assert (len(table), table.principals(), "c1" in table) == (3, 2, True)

    table.release("c1")
    table.release("c1")
    table.release(None)
    table.release("c3")
    assert table.refusal("alice") is None
    assert (table.ids(), table.principals(), table.call_of("c1")) == (["c2"], 1, None)
    assert repr(table) == "ContinuationTable(1/3, principals=1)"


# -- bad retries never touch the parked call ------------------------------------------------------


def test_a_tampered_state_is_refused_and_the_parked_call_is_untouched() -> None:
    engine = ready_engine()
    park(engine)

    assert (
        Playbook(engine)
        >> call("x2", 2, requestState=state() + "-TAMPERED", inputResponses=ANSWER)
        << rejection_log("x2", 2, "bad_signature")
        << rejected("x2", 2)
        >> call("x3", 3, requestState=12, inputResponses=ANSWER)
        << rejection_log("x3", 3, "not_a_string")
        << rejected("x3", 3)
        >> call("x4", 4, requestState="", inputResponses=ANSWER)
        << rejection_log("x4", 4, "malformed")
        << rejected("x4", 4)
    )
    assert resumes(engine)


def test_a_state_from_another_principal_or_for_another_request_is_refused() -> None:
    engine = ready_engine()
    park(engine)

    assert (
        Playbook(engine)
        >> call(
            "x2", 2, requestState=state(), inputResponses=ANSWER, auth=("Authorization", "Bearer mallory")
        )
        << rejection_log("x2", 2, "foreign_principal")
        << rejected("x2", 2)
        >> call("x3", 3, requestState=state(), inputResponses=ANSWER, auth=None)
        << rejection_log("x3", 3, "foreign_principal")
        << rejected("x3", 3)
        >> call("x4", 4, requestState=state(), inputResponses=ANSWER, arguments={"env": "dev"})
        << rejection_log("x4", 4, "arguments_mismatch")
        << rejected("x4", 4)
        >> call("x5", 5, requestState=state(), inputResponses=ANSWER, name="undeploy")
        << rejection_log("x5", 5, "name_mismatch")
        << rejected("x5", 5)
    )
    assert resumes(engine)


def test_an_expired_state_is_refused_even_while_its_call_is_still_parked() -> None:
    engine = ready_engine(continuation_ttl=60.0)
    park(engine, at=1000.0)
    token = state(at=1000.0, ttl=60.0)

    assert (
        Playbook(engine)
        >> call("x2", 2, requestState=token, inputResponses=ANSWER, at=1060.5)
        << rejection_log("x2", 2, "expired")
        << rejected("x2", 2)
        >> call("x3", 3, requestState=token, inputResponses=ANSWER, at=1059.0)
        << CancelTimer("ttl:call-1")
        << RESUMED
        << answer_leg("leg-4", "x3", "e1", ACCEPT)
    )


def test_a_state_sealed_by_another_instance_or_key_is_refused() -> None:
    engine = ready_engine()
    park(engine)
    binding = binding_for("tools/call", {"name": "deploy", "arguments": ARGS}, (AUTH,))
    elsewhere = StateSealer(KEY, "proxy-b").seal(Claims("proxy-b", "continuation-1", 1, 300.0, binding))
    other_key = StateSealer(b"another-key", "").seal(Claims("", "continuation-1", 1, 300.0, binding))

    assert (
        Playbook(engine)
        >> call("x2", 2, requestState=elsewhere, inputResponses=ANSWER)
        << rejection_log("x2", 2, "foreign_instance")
        << rejected("x2", 2)
        >> call("x3", 3, requestState=other_key, inputResponses=ANSWER)
        << rejection_log("x3", 3, "bad_signature")
        << rejected("x3", 3)
        >> call("x4", 4, requestState=state(continuation="continuation-9"), inputResponses=ANSWER)
        << rejection_log("x4", 4, "unknown_continuation")
        << rejected("x4", 4)
    )
    assert resumes(engine)


def test_a_concurrent_resume_and_a_replayed_state_are_refused() -> None:
    engine = ready_engine()
    park(engine)
    second = {"elicitation-2": entry("elicitation/create", FORM)}

    assert (
        Playbook(engine)
        >> call("x2", 2, requestState=state(), inputResponses=ANSWER)
        << CancelTimer("ttl:call-1")
        << RESUMED
        << answer_leg("leg-4", "x2", "e1", ACCEPT)
        >> call("x3", 3, requestState=state(), inputResponses=ANSWER)
        << rejection_log("x3", 3, "concurrent_resume")
        << rejected("x3", 3)
        >> up("leg-3", req("e2", "elicitation/create", FORM))
        << StartTimer("round:call-1", 0.02)
        >> TimerFired("round:call-1")
        << ROUND_LOG
        << ReplyJson("x2", 200, input_required(2, second, state(2)))
        << StartTimer("ttl:call-1", 300.0)
        >> call("x4", 4, requestState=state(), inputResponses=ANSWER)
        << rejection_log("x4", 4, "replayed")
        << rejected("x4", 4)
        >> call("x5", 5, requestState=state(2), inputResponses={"elicitation-2": ACCEPT})
        << CancelTimer("ttl:call-1")
        << RESUMED
        << answer_leg("leg-5", "x5", "e2", ACCEPT)
        >> up("leg-3", ok("leg-3", DONE))
        << ROUND_LOG
        << ReplyJson("x5", 200, complete(5, DONE))
        >> call("x6", 6, requestState=state(2), inputResponses={"elicitation-2": ACCEPT})
        << rejection_log("x6", 6, "unknown_continuation")
        << rejected("x6", 6)
    )
    assert drained(engine, legs=2)


# -- time, capacity, disconnects, faults ---------------------------------------------------------


def test_an_unanswered_continuation_expires_cancels_upstream_and_leaves_nothing() -> None:
    engine = ready_engine()
    park(engine)

    assert (
        Playbook(engine)
        >> TimerFired("ttl:call-1")
        << Log(
            "bridge_continuation_expired",
            "info",
            {"call": "call-1", "continuation": "continuation-1", "round": 1},
        )
        << cancel_leg("leg-4", "x1", "leg-3", "the client did not retry within continuation_ttl")
        << CloseLeg("leg-3", "cancelled")
        >> LegResponded("leg-4", 202, ())
        >> LegEnded("leg-4")
        >> TimerFired("ttl:call-1")
        >> call("x2", 2, requestState=state(), inputResponses=ANSWER)
        << rejection_log("x2", 2, "unknown_continuation")
        << rejected("x2", 2)
    )
    assert drained(engine)


def test_the_ttl_is_rearmed_every_round() -> None:
    engine = ready_engine(continuation_ttl=30.0)
    park(engine)

    assert (
        Playbook(engine)
        >> call("x2", 2, requestState=state(ttl=30.0), inputResponses=ANSWER)
        << CancelTimer("ttl:call-1")
        << RESUMED
        << answer_leg("leg-4", "x2", "e1", ACCEPT)
        >> up("leg-3", req("e2", "elicitation/create", FORM))
        << StartTimer("round:call-1", 0.02)
        >> TimerFired("round:call-1")
        << ROUND_LOG
        << ReplyJson("x2", 200, ANY)
        << StartTimer("ttl:call-1", 30.0)
    )


@pytest.mark.parametrize(
    ("options", "why"),
    [
        ({"max_continuations": 1}, "the proxy already holds max_continuations=1 parked calls"),
        (
            {"max_per_principal": 1},
            "this caller already holds max_continuations_per_principal=1 parked calls",
        ),
    ],
)
def test_parking_past_the_table_bounds_is_refused_and_cancelled_upstream(
    options: dict[str, Any], why: str
) -> None:
    engine = ready_engine(**options)
    park(engine)
    text = f"The proxy cannot hold this call for a retry: {why}."

    assert (
        Playbook(engine)
        >> call("x2", 2, name="second")
        << tool_leg("leg-4", "x2", name="second")
        >> up("leg-4", req("e9", "elicitation/create", FORM))
        << StartTimer("round:call-2", 0.02)
        >> TimerFired("round:call-2")
        << Log("bridge_continuations_full", "warning", {"call": "call-2", "why": why, "retry_after": 300})
        << cancel_leg("leg-5", "x2", "leg-4", why)
        << CloseLeg("leg-4", "cancelled")
        << ReplyJson("x2", 503, err(2, -32000, text), (("Retry-After", "300"),))
    )
    assert drained(engine, calls=1, legs=2, timers=1, continuations=1, principals=1, asked=1)
    assert resumes(engine, leg="leg-6")


def refuse(engine: MrtrToLegacyEngine, n: int, at: float) -> list[Any]:
    """Call `second` as call n at `at`, get a question on its leg and close its round: refused a slot."""
    sent = engine.handle(call(f"x{n}", n, name="second", at=at))
    (leg,) = [command.leg for command in sent if getattr(command, "leg", None)]
    engine.handle(up(leg, req(f"e{n}", "elicitation/create", FORM)))
    return engine.handle(TimerFired(f"round:call-{n}", at + 0.02))


def test_a_full_table_tells_when_its_oldest_slot_frees_and_logs_once_a_second_counting_the_rest() -> None:
    engine = ready_engine(max_per_principal=1, continuation_ttl=30.0)
    park(engine, at=1000.0)

    refusals = [refuse(engine, n, at) for n, at in ((2, 1010.0), (3, 1010.4), (4, 1010.9), (5, 1011.1))]

    replies = [c for commands in refusals for c in commands if isinstance(c, ReplyJson)]
    assert [(r.status, r.headers) for r in replies] == [
        (503, (("Retry-After", "20"),)),  # the call parked at 1000 lets its slot go at 1030
        (503, (("Retry-After", "20"),)),
        (503, (("Retry-After", "20"),)),
        (503, (("Retry-After", "19"),)),
    ]
    logs = [[c.fields for c in commands if isinstance(c, Log)] for commands in refusals]
    why = "this caller already holds max_continuations_per_principal=1 parked calls"
    assert logs == [
        [{"call": "call-2", "why": why, "retry_after": 20}],
        [],
        [],
        [{"call": "call-5", "why": why, "retry_after": 19, "also_unlogged": 2}],
    ]


def test_the_full_table_warning_is_never_silenced_by_unknown_arrival_times_or_a_clock_stepped_back() -> None:
    engine = ready_engine(max_per_principal=1, continuation_ttl=30.0)
    park(engine, at=1000.0)

    def warned(n: int, at: float) -> list[dict[str, Any]]:
        return [c.fields for c in refuse(engine, n, at) if isinstance(c, Log)]

    assert [len(warned(n, 0.0)) for n in (2, 3, 4)] == [1, 1, 1]  # 0.0: no time given, no throttle
    assert len(warned(5, 1010.0)) == 1
    assert warned(6, 1010.5) == []
    assert warned(7, 1009.8) == []  # a concurrent request refused after a later one: held back too
    assert len(warned(8, 900.0)) == 1  # the wall clock stepped back (NTP): said at once
    assert warned(9, 900.5) == []
    assert warned(10, 901.0)[0]["also_unlogged"] == 1


def test_retry_after_counts_only_slots_whose_ttl_runs_not_a_resumed_call_still_running() -> None:
    engine = ready_engine(max_per_principal=2, continuation_ttl=30.0)
    park(engine, at=1000.0)
    retry = call("x9", 9, requestState=state(at=1000.0, ttl=30.0), inputResponses=ANSWER, at=1005.0)
    assert any(c == RESUMED for c in engine.handle(retry))  # call-1 runs again, keeping its slot
    sent = engine.handle(call("x2", 2, name="second", at=1010.0))
    (leg,) = [command.leg for command in sent if getattr(command, "leg", None)]
    engine.handle(up(leg, req("e2", "elicitation/create", FORM)))
    assert StartTimer("ttl:call-2", 30.0) in engine.handle(TimerFired("round:call-2", 1010.02))

    refused = [c for c in refuse(engine, 3, 1020.0) if isinstance(c, ReplyJson)]

    # call-1 (parked at 1000, running now) has no TTL running; call-2's slot frees at 1040 at the latest
    assert [(r.status, r.headers) for r in refused] == [(503, (("Retry-After", "20"),))]


def test_another_principal_still_fits_when_one_caller_is_at_its_limit() -> None:
    engine = ready_engine(max_per_principal=1)
    park(engine)
    other = ("Authorization", "Bearer bob")

    assert (
        Playbook(engine)
        >> call("x2", 2, auth=other)
        << idle_timer(2)
        << initialize("leg-4", "x2", LEGACY_CAPS_ALL, auth=other)
    )
    open_session(engine, "x2", init="leg-4", notify="leg-5", session="up-session-bob")
    assert (
        Playbook(engine)
        >> up("leg-6", req("e9", "elicitation/create", FORM))
        << ANY
        >> TimerFired("round:call-2")
        << ROUND_LOG
        << ReplyJson(
            "x2",
            200,
            input_required(
                2,
                {"elicitation-1": entry("elicitation/create", FORM)},
                state(continuation="continuation-2", auth=other),
            ),
        )
        << StartTimer("ttl:call-2", 300.0)
    )
    assert drained(
        engine, upstream_sessions=2, calls=2, legs=2, timers=2, continuations=2, principals=2, asked=2
    )


def test_a_client_leaving_during_a_resume_round_cancels_the_upstream_call() -> None:
    engine = ready_engine()
    park(engine)

    assert (
        Playbook(engine)
        >> call("x2", 2, requestState=state(), inputResponses=ANSWER)
        << ANY
        << ANY
        << ANY
        >> ClientDisconnected("x2")
        << Log("bridge_client_left", "info", {"call": "call-1", "exchange": "x2", "phase": "running"})
        << cancel_leg("leg-5", "x2", "leg-3", "the client closed its request")
        << CloseLeg("leg-3", "cancelled")
        << ANY
    )
    assert drained(engine, legs=2)


def lost_reply(exchange: str, ident: Any, why: str) -> ReplyJson:
    text = (
        "upstream MCP server failed during tools/call: the upstream call was lost while it waited for "
        f"your answers ({why}); it did not complete, start it again"
    )
    return ReplyJson(exchange, 502, err(ident, -32000, text))


def ended_log(exchange: str, ident: Any) -> Log:
    fields = {"exchange": exchange, "client_id": ident, "continuation": "continuation-1"}
    return Log("bridge_retry_of_ended_call", "info", fields)


def test_an_upstream_stream_that_dies_while_parked_tells_the_retry_the_call_was_lost_once() -> None:
    engine = ready_engine()
    park(engine)
    why = "the upstream MCP server cut the response stream: reset" + CUT_HINT + " (HTTP 200)"

    assert (
        Playbook(engine)
        >> LegFailed("leg-3", "cut", "reset")
        << Log(
            "bridge_continuation_dead",
            "warning",
            {
                "call": "call-1",
                "leg": "leg-3",
                "phase": "parked",
                "why": why,
                "continuation": "continuation-1",
            },
        )
        << CancelTimer("ttl:call-1")
        >> call("x2", 2, requestState=state(), inputResponses=ANSWER)
        << ended_log("x2", 2)
        << lost_reply("x2", 2, why)
        >> call("x3", 3, requestState=state(), inputResponses=ANSWER)
        << rejection_log("x3", 3, "unknown_continuation")
        << rejected("x3", 3)
    )
    assert drained(engine)


def test_the_record_of_a_lost_call_ends_with_its_token() -> None:
    engine = ready_engine()
    park(engine, at=1000.0)

    engine.handle(LegFailed("leg-3", "cut", "reset", 1010.0))

    assert engine.table_sizes()["ended_continuations"] == 1
    assert (
        Playbook(engine)
        >> call("x2", 2, at=1301.0, requestState=state(at=1000.0), inputResponses=ANSWER)
        << rejection_log("x2", 2, "expired")
        << rejected("x2", 2)
    )


def test_ended_records_are_bounded_in_number_and_dropped_when_their_token_expires() -> None:
    ended = EndedContinuations(limit=2)
    for n in range(3):
        ended.record(f"c{n}", Ending(1, 100.0 + n, -32000, "lost", 502), now=10.0)

    assert (len(ended), ended.take("c0", 10.0)) == (2, None)  # the oldest went first
    ended.prune(101.5)
    assert ended.take("c1", 101.5) is None
    assert ended.take("c2", 101.5) == Ending(1, 102.0, -32000, "lost", 502)
    assert ended.take("c2", 101.5) is None  # told once


def test_a_lost_upstream_session_kills_every_parked_continuation_on_it_and_tells_its_retry() -> None:
    engine = ready_engine()
    park(engine)

    assert (
        Playbook(engine)
        >> call("x2", 2, name="other")
        << tool_leg("leg-4", "x2", name="other")
        >> LegResponded("leg-4", 404, ())
        << CloseLeg("leg-4")
        << Log(
            "upstream_session_lost",
            "warning",
            {"session": "upstream-1", "generation": 1, "why": lost_why("404"), "then": LOST_THEN},
        )
        << Log(
            "bridge_continuation_dead",
            "warning",
            {"call": "call-1", "continuation": "continuation-1", "why": "upstream session lost"},
        )
        << CancelTimer("ttl:call-1")
        << CloseLeg("leg-3")
        << ANY
        >> call("x3", 3, requestState=state(), inputResponses=ANSWER)
        << ended_log("x3", 3)
        << lost_reply("x3", 3, "the upstream session was lost: " + lost_why("404"))
    )


def test_the_admin_view_shows_parked_calls_without_tokens_or_credentials() -> None:
    engine = ready_engine()
    park(engine, at=1000.0)
    token = state(at=1000.0)

    view = engine.continuations_view(now=1012.5)

    assert view == [
        {
            "continuation": "continuation-1",
            "state": "parked",
            "token": {"length": len(token), "sha256": ANY},
            "parked_at": 1000.0,
            "principal": ANY,
            "session": "upstream-1",
            "method": "tools/call",
            "name": "deploy",
            "pending_keys": ["elicitation-1"],
            "round": 1,
            "exchange": "x1",
            "client_id": 1,
            "upstream_id": "leg-3",
            "buffered": 0,
            "dropped": 0,
            "age_ms": 12500.0,
        }
    ]
    assert len(view[0]["principal"]) == 16
    assert token not in str(view)
    assert "age_ms" not in engine.continuations_view()[0]
    assert MrtrToLegacyEngine(UPSTREAM, Counter(), state_key=KEY).continuations_view() == []


def test_the_table_bounds_slots_per_client_address_whatever_principal_they_claim() -> None:
    table = ContinuationTable(max_total=10, max_per_principal=10, max_per_client=2)
    table.take("c1", "call-1", "p1", "10.0.0.1")
    table.take("c2", "call-2", "p2", "10.0.0.1")

    assert table.refusal("p3", "10.0.0.1") == Refusal(
        "this client address already holds max_continuations_per_client=2 parked calls", ("call-1", "call-2")
    )
    assert table.refusal("p3", "10.0.0.2") is None
    assert table.refusal("p3") is None, "an unknown address is counted against none"
    assert (table.clients(), table.principals()) == (1, 2)
    table.release("c1")
    assert table.refusal("p3", "10.0.0.1") is None
    table.release("c2")
    assert table.clients() == 0
