"""A call whose stream closed after an event id, unanswered, ends as the client's next move says.

The client resumes it and gets the answer (ok), cancels it (cancelled), or never comes back (failed,
as its stream ended, with a note saying so), and the metrics count what the chain says. The plays are
in `tests.flows.resume_play`; `test_sink` and `test_metric_ops` run them too. An export of their
capture says what the live chains said.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from proxy.cli import main
from proxy.flows.cut_streams import NotResumed
from proxy.flows.events import ChainStatus, ChainSummary
from proxy.flows.log_lines import ExchangeSummary
from proxy.flows.resumes import ID_REUSED, NEVER_RESUMED, RESUME_WINDOW, SESSION_ENDED
from tests.flows.resume_play import (
    cancelled_while_cut,
    closed_after_cancel,
    closed_after_delete_answered,
    closed_by_delete,
    cut_and_id_reused,
    cut_and_resume_refused,
    cut_and_resume_refused_again,
    cut_and_resumed,
    cut_by_fault_and_resumed,
    cut_never_resumed,
    cut_then_session_gone,
    dropped_then_delete_refused,
    resumed_without_answer,
)
from tests.flows.test_sink import Play, Rig, lines_of
from tests.record.captures import record_play
from tests.transport.test_admin import bare_metrics

RESUMED_NOTE = "stream resumed with Last-Event-ID x1-1"


def _calls(play: Play) -> tuple[dict[int, ChainSummary], dict[tuple[str, str], int]]:
    """The play's `tools/call` chains by JSON-RPC id, and the errors the metrics counted."""
    rig, metrics = Rig(), bare_metrics()
    rig.sink.listeners.append(metrics.counting.observe_all)
    play(rig.facts, rig.clock)
    calls = {c.summary.jsonrpc_id: c.summary for c in rig.chains() if c.summary.method == "tools/call"}
    return calls, dict(metrics.counts.errors)  # type: ignore[arg-type]


@pytest.mark.parametrize("play", [cut_and_resumed, cut_by_fault_and_resumed])
def test_the_lines_of_a_cut_call_and_its_resume_say_resumable_and_name_its_id_with_no_trouble(
    play: Play,
) -> None:
    lines = {line["carried"]: line for line in lines_of(Rig(), play)}  # a hang-up's is held, so last
    cut, resumed = lines["tools/call slow"], lines["GET stream"]

    assert (cut["trouble"], cut["end"]) == (None, "resumable")
    assert (resumed["ids"], resumed["trouble"]) == ([1], None)


NO_RESPONSE = "response stream ended without a response"


@pytest.mark.parametrize(
    ("play", "trouble"),
    [
        (cut_and_resumed, None),
        (closed_by_delete, NO_RESPONSE),
        (closed_after_delete_answered, NO_RESPONSE),
        (cut_then_session_gone, "client_disconnected"),
        (dropped_then_delete_refused, None),
        (closed_after_cancel, None),
        (cancelled_while_cut, None),
    ],
)
def test_a_cut_calls_line_its_chain_and_the_counters_agree_whether_it_failed(
    play: Play, trouble: str | None
) -> None:
    rig, metrics = Rig(), bare_metrics()
    rig.sink.listeners.append(metrics.counting.observe_all)
    released: list[ExchangeSummary] = []
    rig.sink.on_released = lambda line, _mode: released.append(line)
    closed = [s for s in play(rig.facts, rig.clock) if s is not None]
    rig.sink.release_held()
    (line,) = [s for s in (*closed, *released) if s.exchange == "x1"]
    (call,) = [c.summary for c in rig.chains() if c.summary.method == "tools/call"]
    errors = dict(metrics.counts.errors).get(("tools/call", "passthrough"), 0)  # type: ignore[call-overload]

    failed = call.status is ChainStatus.ERROR
    assert line.trouble == trouble
    assert line.trouble == (call.error if failed else None)
    assert (line.level, errors) == (("warning", 1) if failed else ("info", 0))
    assert line.end != "resumable" or not failed


@pytest.mark.parametrize(
    ("play", "notes"),
    [
        (cut_and_resumed, []),
        (cut_by_fault_and_resumed, []),
        (cancelled_while_cut, []),
        (closed_by_delete, []),  # its line has its trouble: it never said resumable
        (cut_then_session_gone, []),  # its line, held for a cancel, is written once the 404 ended it
        (cut_never_resumed, [SESSION_ENDED]),  # the one cut by the fault; the other's line is as above
        (cut_and_resume_refused, [NEVER_RESUMED]),
        (dropped_then_delete_refused, [NEVER_RESUMED]),
        (cut_and_id_reused, [ID_REUSED, NEVER_RESUMED]),
    ],
)
def test_a_line_that_said_resumable_is_followed_by_a_warning_when_no_resume_can_come(
    play: Play, notes: list[str]
) -> None:
    rig = Rig()
    lines: list[ExchangeSummary] = []
    followed: list[NotResumed] = []
    rig.sink.on_released = lambda line, _mode: lines.append(line)
    rig.sink.on_not_resumed = followed.append
    lines += [s for s in play(rig.facts, rig.clock) if s is not None]
    rig.sink.release_held()
    rig.sink.sweep(rig.clock() + 2 * RESUME_WINDOW)
    promised = {line.exchange: line for line in lines if line.end == "resumable"}

    assert [one.note for one in followed] == notes
    for one in followed:
        assert (one.carried, one.mode) == (promised[one.exchange].carried, "passthrough")
        assert one.ids == tuple(promised[one.exchange].jsonrpc_ids)


def test_a_resume_the_server_refuses_is_said_refused_not_resumed() -> None:
    calls, _ = _calls(cut_and_resume_refused)

    notes = calls[1].notes
    assert RESUMED_NOTE not in notes
    assert "stream not resumed with Last-Event-ID x1-1: the resume was answered HTTP 400" in notes


def test_a_resume_that_brings_no_answer_is_said_so_after_the_note_that_it_resumed() -> None:
    calls, _ = _calls(resumed_without_answer)

    notes = calls[1].notes
    unanswered = "the stream resumed with Last-Event-ID x1-1 was cut (client_disconnected) without the answer"
    assert notes.index(unanswered) == notes.index(RESUMED_NOTE) + 1, notes


def test_resumes_refused_alike_are_one_note_each_with_how_many_times() -> None:
    calls, _ = _calls(cut_and_resume_refused_again)

    refused = "stream not resumed with Last-Event-ID x1-1: the resume was answered HTTP"
    assert [n for n in calls[1].notes if n.startswith("stream ")] == [
        f"{refused} 502 (2 times)",
        f"{refused} 400 (3 times)",
    ]


@pytest.mark.parametrize("play", [cut_and_resumed, cut_by_fault_and_resumed])
def test_a_legacy_call_cut_after_an_event_and_answered_on_the_resumed_stream_ends_ok(play: Play) -> None:
    calls, errors = _calls(play)

    call = calls[1]
    assert (call.status, call.error) == (ChainStatus.OK, None)
    assert RESUMED_NOTE in call.notes
    assert call.duration_ms == 1750.0, "from the call to its answer on the resumed stream"
    assert errors.get(("tools/call", "passthrough"), 0) == 0


def test_a_cut_call_the_client_never_resumes_fails_as_it_was_cut_once_its_wait_or_session_ends() -> None:
    calls, errors = _calls(cut_never_resumed)

    waited, deleted = calls[1], calls[2]
    assert (waited.status, waited.error) == (ChainStatus.ERROR, "client_disconnected")
    assert NEVER_RESUMED in waited.notes
    assert waited.duration_ms == 500.0, "it ended where the client left it"
    assert (deleted.status, deleted.error) == (ChainStatus.ERROR, "cut_by_fault")
    assert SESSION_ENDED in deleted.notes
    assert errors[("tools/call", "passthrough")] == 2


def test_a_cut_call_fails_as_cut_when_the_server_says_its_session_is_gone() -> None:
    calls, _ = _calls(cut_then_session_gone)

    call = calls[1]
    assert (call.status, call.error) == (ChainStatus.ERROR, "client_disconnected")
    assert SESSION_ENDED in call.notes


@pytest.mark.parametrize(
    ("play", "closed_at_ms"),
    [(closed_by_delete, 500.0), (closed_after_delete_answered, 750.0)],
    ids=["before-its-answer", "after-its-answer"],
)
def test_a_call_whose_stream_the_server_closes_because_of_the_delete_fails_once_the_delete_is_answered(
    play: Play, closed_at_ms: float
) -> None:
    calls, errors = _calls(play)

    call = calls[1]
    assert (call.status, call.error) == (ChainStatus.ERROR, "response stream ended without a response")
    assert SESSION_ENDED in call.notes
    assert NEVER_RESUMED not in call.notes
    assert call.duration_ms == closed_at_ms, "it ended where its stream did"
    assert errors[("tools/call", "passthrough")] == 1


def test_a_dropped_call_still_waits_for_its_resume_when_the_server_refuses_the_delete() -> None:
    calls, errors = _calls(dropped_then_delete_refused)

    call = calls[1]
    assert call.status is ChainStatus.PENDING
    assert SESSION_ENDED not in call.notes
    assert errors.get(("tools/call", "passthrough"), 0) == 0


def test_a_cut_call_whose_id_a_later_call_reuses_fails_at_once_and_the_later_one_waits() -> None:
    rig, metrics = Rig(), bare_metrics()
    rig.sink.listeners.append(metrics.counting.observe_all)
    cut_and_id_reused(rig.facts, rig.clock)
    first, later = (c.summary for c in rig.chains() if c.summary.method == "tools/call")

    assert (first.status, first.error) == (ChainStatus.ERROR, "client_disconnected")
    assert ID_REUSED in first.notes
    assert first.duration_ms == 500.0, "it ended where the client left it"
    assert later.status is ChainStatus.PENDING
    assert dict(metrics.counts.errors)[("tools/call", "passthrough")] == 1  # type: ignore[index]


@pytest.mark.parametrize("play", [closed_after_cancel, cancelled_while_cut])
def test_a_call_the_client_cancelled_ends_cancelled_though_its_stream_had_event_ids_and_no_answer(
    play: Play,
) -> None:
    calls, errors = _calls(play)

    call = calls[1]
    assert call.status is ChainStatus.CANCELLED
    assert "cancelled by the client" in call.notes
    assert call.ended is not None
    assert errors.get(("tools/call", "passthrough"), 0) == 0


ALL_PLAYS = [
    cut_and_resumed,
    cut_by_fault_and_resumed,
    cut_never_resumed,
    closed_by_delete,
    closed_after_delete_answered,
    closed_after_cancel,
    cancelled_while_cut,
]


@pytest.mark.parametrize("play", ALL_PLAYS)
def test_an_export_of_the_capture_ends_each_call_as_the_live_chain_did(play: Play, tmp_path: Path) -> None:
    capture, out = tmp_path / "run.jsonl", tmp_path / "run.json"
    store, _ = record_play(play, capture)
    live = [(c.summary.status.value, c.summary.error, c.summary.notes) for c in store]

    assert main(["export", "--json", str(out), str(capture)]) == 0

    exported = [c["chain"] for c in orjson.loads(out.read_bytes())["chains"]]
    assert [(c["status"], c.get("error"), c.get("notes", [])) for c in exported] == live
    assert all(status != "pending" for status, _, _ in live)
