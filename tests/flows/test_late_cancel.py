"""A legacy client's call whose stream it closed before the answer, with no event id to resume from:
the chain, the log line, the error counter and the span give it one verdict, by one window."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.flows.events import ChainStatus
from proxy.flows.log_lines import ExchangeSummary
from proxy.flows.redact import Redactor
from proxy.flows.span_records import SpanRecord
from proxy.flows.spans import SpanFollower
from tests.flows.late_cancel_play import aborted_cancel_too_late, aborted_then_cancelled, hung_up_after_unread
from tests.flows.test_sink import Play, Rig
from tests.transport.test_admin import bare_metrics


def _verdicts(play: Play) -> dict[str, Any]:
    """What each output says of the call `play` makes, once every wait has run out."""
    rig, metrics = Rig(), bare_metrics()
    spans: list[SpanRecord] = []
    follower = SpanFollower(spans.append, Redactor(key=b"k"))
    rig.sink.listeners += [metrics.counting.observe_all, follower.observe_all]
    rig.sink.sweepers += [metrics.counting.sweep, follower.sweep]
    released: list[ExchangeSummary] = []
    rig.sink.on_released = lambda line, _mode: released.append(line)
    closed = [line for line in play(rig.facts, rig.clock) if line is not None]
    rig.clock.now += 10.0
    rig.sink.sweep()
    (chain,) = [c.summary for c in rig.chains() if c.summary.method == "tools/call"]
    (line,) = [line for line in (*closed, *released) if line.method == "tools/call"]
    (span,) = [s for s in spans if s.name.startswith("tools/call")]
    return {
        "chain": (chain.status, "cancelled by the client" in chain.notes),
        "line": (line.end, line.trouble),
        "errors": metrics.counts.errors.get(("tools/call", "passthrough"), 0),
        "span": (span.attributes.get("mcp_proxy.outcome"), span.attributes.get("error.type"), span.failed),
        "waiting": follower.open_spans,
    }


@pytest.mark.parametrize(
    ("play", "verdicts"),
    [
        (
            aborted_then_cancelled,
            {
                "chain": (ChainStatus.CANCELLED, True),
                "line": ("cancelled", None),
                "errors": 0,
                "span": ("cancelled", None, False),
                "waiting": 0,
            },
        ),
        (
            aborted_cancel_too_late,
            {
                "chain": (ChainStatus.ERROR, False),
                "line": (None, "client_disconnected"),
                "errors": 1,
                "span": (None, "client_disconnected", True),
                "waiting": 0,
            },
        ),
    ],
    ids=["cancel-inside-the-window", "cancel-outside-the-window"],
)
def test_an_aborted_legacy_call_gets_one_verdict_in_every_output(
    play: Play, verdicts: dict[str, Any]
) -> None:
    assert _verdicts(play) == verdicts


def test_a_legacy_call_whose_client_hangs_up_on_a_stream_gone_by_unread_is_no_failure_anywhere() -> None:
    """Its answer may have been in what went by unread: the chain ends `incomplete` at the hang-up
    (no wait for a cancel), the line names no trouble, nothing is counted as an error, the span fails
    not."""
    verdicts = _verdicts(hung_up_after_unread)
    assert verdicts == {
        "chain": (ChainStatus.INCOMPLETE, False),
        "line": (None, None),
        "errors": 0,
        "span": ("not_inspected", None, False),
        "waiting": 0,
    }
