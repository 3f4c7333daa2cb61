"""The round window as the MRTR->legacy engine states it (`modern_client.rounds`).

A round opens with the first servable question on a running call and closes at its timer
(TimerFired, `round_window` after it opened) or at an input that makes waiting moot (the call's
answer): every question given before then is in the round, one given after waits for the next. The
engine counts no loop turns and reads no clock; the window is its timer, started once per round.
"""

from __future__ import annotations

from unittest.mock import ANY

from proxy.engine.commands import CancelTimer, ReplyJson, StartTimer
from proxy.engine.events import TimerFired
from tests.engine.builders import up
from tests.engine.playbook import Playbook
from tests.engine.test_mrtr_to_legacy import (
    DONE,
    FORM,
    ROUND_LOG,
    SAMPLE,
    call,
    complete,
    entry,
    input_required,
    ok,
    ready_engine,
    req,
    state,
)

BOTH = {
    "elicitation-1": entry("elicitation/create", FORM),
    "sampling-1": entry("sampling/createMessage", SAMPLE),
}


def test_questions_given_before_the_timer_are_one_round_and_the_timer_starts_once() -> None:
    engine = ready_engine(round_window=0.001)

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> up("leg-3", req("e1", "elicitation/create", FORM))
        << StartTimer("round:call-1", 0.001)
        >> up("leg-3", req("s1", "sampling/createMessage", SAMPLE))  # joins: no second timer
        >> TimerFired("round:call-1")
        << ROUND_LOG
        << ReplyJson("x1", 200, input_required(1, BOTH, state()))
        << StartTimer("ttl:call-1", 300.0)
    )


def test_a_window_of_zero_still_closes_at_its_timer_not_at_the_first_question() -> None:
    engine = ready_engine(round_window=0.0)

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> up("leg-3", req("e1", "elicitation/create", FORM))
        << StartTimer("round:call-1", 0.0)
        >> up("leg-3", req("s1", "sampling/createMessage", SAMPLE))  # read with the first: same round
        >> TimerFired("round:call-1")
        << ROUND_LOG
        << ReplyJson("x1", 200, input_required(1, BOTH, state()))
        << StartTimer("ttl:call-1", 300.0)
    )


def test_a_question_given_after_the_timer_waits_for_the_next_round() -> None:
    engine = ready_engine()
    first = {"elicitation-1": entry("elicitation/create", FORM)}

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> up("leg-3", req("e1", "elicitation/create", FORM))
        << StartTimer("round:call-1", 0.02)
        >> TimerFired("round:call-1")
        << ROUND_LOG
        << ReplyJson("x1", 200, input_required(1, first, state()))
        << StartTimer("ttl:call-1", 300.0)
        >> up("leg-3", req("s1", "sampling/createMessage", SAMPLE))  # parked: kept for the retry
    )
    assert engine.table_sizes()["collecting"] == 1


def test_the_calls_answer_closes_the_window_and_nothing_is_asked() -> None:
    engine = ready_engine()

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> up("leg-3", req("e1", "elicitation/create", FORM))
        << StartTimer("round:call-1", 0.02)
        >> up("leg-3", ok("leg-3", DONE))
        << ROUND_LOG
        << ReplyJson("x1", 200, complete(1, DONE))
        << CancelTimer("round:call-1")
        >> TimerFired("round:call-1")  # a timer the transport had already queued changes nothing
    )
