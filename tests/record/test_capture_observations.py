"""Observations in the capture: written redacted and bounded, read back as the chains a live watcher saw."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.flows.bus import EventBus
from proxy.flows.chains import ChainBuilder
from proxy.flows.events import (
    ChainChanged,
    Channel,
    ContinuationChanged,
    Direction,
    FlowEvent,
    MessageRecorded,
    SessionChanged,
    Side,
)
from proxy.flows.observations import InterceptHeld, InterceptReleased
from proxy.flows.redact import Redactor
from proxy.flows.sink import ObservationSink
from proxy.flows.store import ChainStore
from proxy.record.capture import CaptureFormatError, CaptureReader, CaptureWriter, read_capture
from proxy.record.observations import ObservationEncoder
from proxy.wire.jsonrpc import classify_value, request, result_response
from tests.flows.bridge_play import PARK_HEADERS, parked_bridge_call
from tests.flows.calls import Calls

TOKEN = "tok-77-never-in-a-capture"
SESSION = "sess-77-never-in-a-capture"
STATE = "sealed-state-never-in-a-capture"


def _record(path: Path, *, body_limit: int = 65536, big: bool = False) -> list[FlowEvent]:
    """Play one call into a sink whose observations go to a capture; returns the later build's events."""
    redactor = Redactor(key=b"test-key")
    live_events: list[FlowEvent] = []
    store = ChainStore()
    builder = ChainBuilder(store, live_events.append, redactor, clock=lambda: 100.0, body_limit=body_limit)
    sink = ObservationSink(builder, redactor, bus=EventBus(), clock=lambda: 100.0)
    facts = Calls(sink)
    encoder = ObservationEncoder(redactor, body_limit)
    with CaptureWriter(path) as writer:
        sink.listeners.append(lambda batch: writer.write_lines([encoder.encode(obs) for obs in batch]))
        headers = {"Authorization": f"Bearer {TOKEN}", "Mcp-Session-Id": SESSION}
        text = "x" * 5000 if big else "short"
        call = classify_value(
            request(3, "tools/call", {"name": "echo", "arguments": {"text": text}, "requestState": STATE})
        )
        facts.open_exchange(
            "x1", http_method="POST", path="/mcp", headers=headers, session=SESSION, body_size=9
        )
        facts.message("x1", call, size=9, direction=Direction.TO_SERVER, channel=Channel.POST)
        facts.response_head("x1", status=200, content_type="application/json", headers={"Set-Cookie": "a=b"})
        answer = classify_value(result_response(3, {"content": [{"type": "text", "text": text}]}))
        facts.message("x1", answer, size=9, direction=Direction.TO_CLIENT, channel=Channel.JSON)
        facts.close_exchange("x1", None)
    sink.build()
    return live_events


def test_a_capture_of_observations_reads_back_as_the_chain_the_proxy_built(tmp_path: Path) -> None:
    path = tmp_path / "facts.jsonl"
    live = _record(path)
    read = list(read_capture(path))
    assert [type(e).__name__ for e in read] == [type(e).__name__ for e in live]
    live_chain = [e.chain for e in live if isinstance(e, ChainChanged)][-1]
    read_chain = [e.chain for e in read if isinstance(e, ChainChanged)][-1]
    assert read_chain.id.startswith("r")  # never the id of a chain the proxy built live
    assert read_chain.model_dump(exclude={"id"}) == live_chain.model_dump(exclude={"id"})
    live_messages = [e.message.model_dump() for e in live if isinstance(e, MessageRecorded)]
    assert [e.message.model_dump() for e in read if isinstance(e, MessageRecorded)] == live_messages


def test_observation_lines_hold_no_secret(tmp_path: Path) -> None:
    path = tmp_path / "facts.jsonl"
    _record(path)
    text = path.read_text(encoding="utf-8")
    assert '"type":"obs"' in text
    for secret in (TOKEN, SESSION, STATE, "a=b"):
        assert secret not in text


def test_a_body_over_the_capture_limit_keeps_what_correlation_needs(tmp_path: Path) -> None:
    path = tmp_path / "facts.jsonl"
    _record(path, body_limit=1024, big=True)
    read = list(read_capture(path))
    chain = [e.chain for e in read if isinstance(e, ChainChanged)][-1]
    assert chain.status.value == "ok"  # the answer still found its request by id
    messages = [e.message for e in read if isinstance(e, MessageRecorded)]
    assert [m.jsonrpc_id for m in messages] == [3, 3]
    assert all(m.note == "body truncated in the capture" for m in messages)


def test_an_observation_line_the_reader_cannot_build_is_reported_by_line(tmp_path: Path) -> None:
    path = tmp_path / "facts.jsonl"
    _record(path)
    whole = list(read_capture(path))
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(2, b'{"type":"obs","kind":"message","t":1.0,"exchange":"x9"}\n')
    path.write_bytes(b"".join(lines))
    with CaptureReader(path) as reader:
        assert list(reader) == whole
        assert reader.corrupt_lines == 1
        assert reader.corrupt[0][0] == 3
    with CaptureReader(path, strict=True) as reader, pytest.raises(CaptureFormatError) as raised:
        list(reader)
    assert raised.value.line == 3


def test_an_observation_line_cut_short_at_the_end_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "facts.jsonl"
    _record(path)
    with path.open("ab") as f:
        f.write(b'{"type":"obs","kind":"exchange_op')
    with CaptureReader(path) as reader:
        events = list(reader)
        assert reader.truncated
    assert any(isinstance(e, ChainChanged) for e in events)


class _Ticks:
    now = 100.0


def test_a_bridged_call_in_a_capture_reads_back_with_its_legs_and_continuation(tmp_path: Path) -> None:
    path = tmp_path / "bridged.jsonl"
    ticks = _Ticks()
    redactor = Redactor(key=b"test-key")
    live: list[FlowEvent] = []
    builder = ChainBuilder(ChainStore(), live.append, redactor, clock=lambda: ticks.now)
    sink = ObservationSink(builder, redactor, bus=EventBus(), clock=lambda: ticks.now)
    encoder = ObservationEncoder(redactor, 65536)
    with CaptureWriter(path) as writer:
        sink.listeners.append(lambda batch: writer.write_lines([encoder.encode(obs) for obs in batch]))
        parked_bridge_call(Calls(sink), ticks, state=STATE)
    sink.build()
    text = path.read_text(encoding="utf-8")
    assert '"kind":"leg_message"' in text
    assert '"kind":"continuation"' in text
    assert STATE not in text
    assert PARK_HEADERS["Authorization"].split()[1] not in text

    read = list(read_capture(path))
    live_chain = [e.chain for e in live if isinstance(e, ChainChanged)][-1]
    read_chain = [e.chain for e in read if isinstance(e, ChainChanged)][-1]
    assert read_chain.model_dump(exclude={"id"}) == live_chain.model_dump(exclude={"id"})
    assert read_chain.mode.value == "mrtr_to_legacy"
    assert read_chain.status.value == "ok"
    live_messages = [
        e.message.model_dump(exclude={"chain_id"}) for e in live if isinstance(e, MessageRecorded)
    ]
    read_messages = [
        e.message.model_dump(exclude={"chain_id"}) for e in read if isinstance(e, MessageRecorded)
    ]
    assert read_messages == live_messages
    assert sum(m["side"] == "upstream" for m in read_messages) == 4
    states = [e.state for e in read if isinstance(e, ContinuationChanged)]
    assert states == ["parked", "resumed", "completed"]


def test_an_upstream_session_observation_reads_back_as_the_session_event(tmp_path: Path) -> None:
    path = tmp_path / "sessions.jsonl"
    redactor = Redactor(key=b"test-key")
    builder = ChainBuilder(ChainStore(), [].append, redactor, clock=lambda: 100.0)
    sink = ObservationSink(builder, redactor, bus=EventBus(), clock=lambda: 100.0)
    encoder = ObservationEncoder(redactor, 65536)
    with CaptureWriter(path) as writer:
        sink.listeners.append(lambda batch: writer.write_lines([encoder.encode(obs) for obs in batch]))
        Calls(sink).upstream_session(
            "upstream-3", state="opened", principal="0123456789abcdef", capabilities="roots", version=None
        )

    (event,) = [e for e in read_capture(path) if isinstance(e, SessionChanged)]
    assert (event.session, event.state, event.side, event.principal, event.capabilities) == (
        "upstream-3",
        "opened",
        Side.UPSTREAM,
        redactor.fingerprint("0123456789abcdef"),  # keyed in the capture: never the engine's digest
        "roots",
    )


def test_an_observation_of_a_kind_or_with_fields_this_version_does_not_know_is_read_past(
    tmp_path: Path,
) -> None:
    path = tmp_path / "newer.jsonl"
    _record(path)
    whole = list(read_capture(path))
    lines = path.read_bytes().splitlines(keepends=True)
    # A newer minor version: one kind more, and a field more on a line this version knows.
    lines.insert(2, b'{"type":"obs","kind":"tls_handshake","t":1.0,"exchange":"x1","cipher":"x"}\n')
    lines[1] = lines[1].replace(b'"kind":"exchange_opened",', b'"kind":"exchange_opened","color":"red",')
    assert b'"color":"red"' in lines[1]
    path.write_bytes(b"".join(lines))
    with CaptureReader(path) as reader:
        assert list(reader) == whole
        assert (reader.skipped_unknown, reader.corrupt_lines) == (1, 0)


def test_an_intercept_reads_back_as_its_chain_note_and_the_edit_sent_is_redacted(tmp_path: Path) -> None:
    path = tmp_path / "intercept.jsonl"
    redactor = Redactor(key=b"test-key")
    builder = ChainBuilder(ChainStore(), [].append, redactor, clock=lambda: 100.0)
    sink = ObservationSink(builder, redactor, bus=EventBus(), clock=lambda: 100.0)
    encoder = ObservationEncoder(redactor, 65536)
    edit = request(3, "tools/call", {"name": "echo", "arguments": {}, "requestState": STATE})
    with CaptureWriter(path) as writer:
        sink.listeners.append(lambda batch: writer.write_lines([encoder.encode(obs) for obs in batch]))
        facts = Calls(sink)
        facts.open_exchange("x1", http_method="POST", path="/mcp", headers={}, session=None, body_size=9)
        facts.message("x1", classify_value(edit), size=9, direction=Direction.TO_SERVER, channel=Channel.POST)
        sink.emit(InterceptHeld(100.0, "x1", "h1", "i1: tool:echo", "client", 3, "tools/call"))
        sink.emit(
            InterceptReleased(
                101.5,
                "x1",
                "h1",
                "i1: tool:echo",
                "client",
                3,
                "tools/call",
                "forward_edited",
                "api",
                1500.0,
                edit,
            )
        )
        facts.close_exchange("x1", None)
    text = path.read_text()
    assert STATE not in text
    (released,) = [json.loads(line) for line in text.splitlines() if '"intercept_released"' in line]
    assert released["message"]["params"]["requestState"].startswith("<requestState len=")
    notes = [n for e in read_capture(path) if isinstance(e, ChainChanged) for n in e.chain.notes]
    assert "the client's tools/call held by intercept i1 for 1.5 s, forwarded edited by api" in notes
