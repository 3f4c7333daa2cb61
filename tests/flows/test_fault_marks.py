"""An injected fault leaves its mark: a note on its chain, a `fault` field on the log line, and a
capture line that reads back into the same note."""

from __future__ import annotations

from pathlib import Path

from proxy.flows.bus import EventBus
from proxy.flows.chains import ChainBuilder
from proxy.flows.events import ChainChanged, Channel, Direction, FlowEvent
from proxy.flows.observations import FaultInjected, InterceptReleased
from proxy.flows.proxy_notes import fault_note, intercept_note, proxy_changes
from proxy.flows.redact import Redactor
from proxy.flows.sink import ObservationSink
from proxy.flows.store import ChainStore
from proxy.logs import exchange_text
from proxy.record.capture import CaptureReader, CaptureWriter
from proxy.record.observations import ObservationEncoder
from proxy.wire.jsonrpc import classify_value, error_response, request
from tests.flows.calls import Calls


def play(path: Path | None = None) -> tuple[list[FlowEvent], list[dict[str, object]]]:
    """One tools/call answered by an `error=` fault; returns the chain events and the log lines."""
    redactor = Redactor(key=b"test-key")
    events: list[FlowEvent] = []
    builder = ChainBuilder(ChainStore(), events.append, redactor, clock=lambda: 100.0)
    sink = ObservationSink(builder, redactor, bus=EventBus(), clock=lambda: 100.0)
    facts = Calls(sink)
    lines: list[dict[str, object]] = []
    writer = CaptureWriter(path) if path is not None else None
    if writer is not None:
        encoder = ObservationEncoder(redactor, 65536)
        sink.listeners.append(lambda batch: writer.write_lines([encoder.encode(obs) for obs in batch]))
    call = classify_value(request(3, "tools/call", {"name": "echo", "arguments": {}}))
    facts.open_exchange("x1", http_method="POST", path="/mcp", headers={}, session=None, body_size=9)
    facts.message("x1", call, size=9, direction=Direction.TO_SERVER, channel=Channel.POST)
    sink.emit(
        FaultInjected(100.0, "x1", "error -32050", "f1: tool:echo => error=-32050", "client", 3, "tools/call")
    )
    facts.response_head("x1", status=200, content_type="application/json", headers={})
    answer = classify_value(error_response(3, -32050, "no"))
    facts.message("x1", answer, size=9, direction=Direction.TO_CLIENT, channel=Channel.JSON)
    summary = facts.close_exchange("x1", None)
    if summary is not None:
        lines.append(summary.log_fields("passthrough"))
    if writer is not None:
        writer.close()
    sink.build()
    return events, lines


def last_chain_notes(events: list[FlowEvent]) -> list[str]:
    return [e.chain for e in events if isinstance(e, ChainChanged)][-1].notes


def test_the_chain_notes_the_fault_and_its_rule() -> None:
    events, _ = play()
    (note,) = last_chain_notes(events)
    assert note == (
        "fault injected by the proxy: error -32050 on the client's tools/call [f1: tool:echo => error=-32050]"
    )


def test_the_log_line_carries_the_fault_and_a_terminal_shows_it_apart_from_trouble() -> None:
    _, lines = play()
    (line,) = lines
    assert line["fault"] == "error -32050"
    text = exchange_text({**line, "timestamp": "2026-12-02T03:00:00.000000Z"})
    assert text.endswith("!! error -32050 !! fault: error -32050"), text


def test_a_line_of_an_exchange_without_a_fault_has_no_fault_field() -> None:
    from proxy.flows.observations import ExchangeClosed, ExchangeOpened
    from proxy.flows.tally import RoundTripTally

    tally = RoundTripTally(Redactor(key=b"k"))
    tally.observe(ExchangeOpened(1.0, "x1", http_method="POST", path="/mcp", headers={}, session=None))
    line = tally.observe(ExchangeClosed(1.0, "x1"))
    assert line is not None
    assert "fault" not in line.log_fields("passthrough")


def test_a_capture_reads_a_fault_back_into_the_same_note(tmp_path: Path) -> None:
    path = tmp_path / "faults.jsonl"
    live, _ = play(path)
    assert b'"kind":"fault"' in path.read_bytes()
    with CaptureReader(path) as reader:
        read = list(reader)
        assert reader.skipped_unknown == 0
    assert last_chain_notes(read) == last_chain_notes(live)


def test_the_notes_of_what_the_proxy_changed_are_told_from_the_rest() -> None:
    # A replay marks a chain whose recording the proxy changed: an injected fault, or a held message
    # edited, dropped or answered; a message forwarded unchanged, or a fault not injected, changed nothing.
    def released(decision: str) -> str:
        obs = InterceptReleased(
            0.0, "x1", "h1", "i1: tool:echo", "client", 1, "tools/call", decision, "api", 1200.0
        )
        note = intercept_note(obs)
        assert note is not None
        return note

    injected = fault_note(
        FaultInjected(0.0, "x1", "error -32603", "f1: tool:echo => error", "client", 1, "tools/call")
    )
    not_injected = fault_note(
        FaultInjected(
            0.0, "x1", "cut", "f2: tool:echo => cut", "server", 1, "tools/call", applied=False, detail="JSON"
        )
    )
    changed = [released("forward_edited"), released("drop"), released("answer"), injected]
    unchanged = [released("forward"), not_injected, "ended with its session (deleted)"]
    assert proxy_changes([*unchanged, *changed]) == changed
