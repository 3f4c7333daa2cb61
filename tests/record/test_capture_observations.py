"""Observations in the capture: written redacted and bounded, read back as the chains a live watcher saw."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import orjson
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
from proxy.flows.leg_handlers import CLIENT_NEVER_RETRIED, STOPPED_WHILE_PARKED
from proxy.flows.observations import (
    ExchangeOpened,
    InterceptHeld,
    InterceptReleased,
    LegClosed,
    LegMessageSeen,
)
from proxy.flows.redact import Redactor
from proxy.flows.sink import ObservationSink
from proxy.flows.store import ChainStore
from proxy.record import capture as capture_module
from proxy.record import observations
from proxy.record.capture import (
    FORMAT_VERSION,
    CaptureFormatError,
    CaptureReader,
    CaptureWriter,
    read_capture,
)
from proxy.record.export import Format, export_capture
from proxy.record.observations import ObservationEncoder, decode
from proxy.wire.jsonrpc import classify_value, request, result_response
from tests.flows.bridge_play import (
    LEG_STATUSES,
    PARK_HEADERS,
    UPSTREAM_SESSION,
    parked_bridge_call,
    refused_leg_call,
    stopped_while_parked,
)
from tests.flows.calls import Calls
from tests.flows.refused_play import refused_bridge_retry, refused_passthrough_retry
from tests.record.captures import record_play

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


def test_a_call_the_proxy_let_go_as_it_stopped_is_written_expired_with_its_outcome_and_reads_back_so(
    tmp_path: Path,
) -> None:
    path = tmp_path / "stopped.jsonl"
    store, _ = record_play(stopped_while_parked, path)
    lines = [orjson.loads(line) for line in path.read_bytes().splitlines()[1:]]
    moves = [line for line in lines if line.get("kind") == "continuation"]
    assert [(m["state"], m.get("outcome")) for m in moves] == [
        ("parked", None),
        ("expired", "proxy_stopping"),
    ]
    assert "outcome" not in moves[0]  # written only when there is one

    read = [e.chain for e in read_capture(path) if isinstance(e, ChainChanged)][-1]
    (chain,) = list(store)
    assert read.model_dump(exclude={"id"}) == chain.summary.model_dump(exclude={"id"})
    assert (read.status.value, read.error, read.notes) == ("incomplete", None, [STOPPED_WHILE_PARKED])


def test_a_reader_that_does_not_know_a_continuations_outcome_still_ends_the_call_incomplete(
    tmp_path: Path,
) -> None:
    """A reader of 1.9 or older ignores `outcome` (as any field it does not know): the call the proxy
    let go as it stopped still reads as one whose client never came back, never as an error."""
    path = tmp_path / "stopped.jsonl"
    record_play(stopped_while_parked, path)
    text = path.read_bytes().replace(b',"outcome":"proxy_stopping"', b"")
    assert b"proxy_stopping" not in text
    path.write_bytes(text)
    read = [e.chain for e in read_capture(path) if isinstance(e, ChainChanged)][-1]
    assert (read.status.value, read.error, read.notes) == ("incomplete", None, [CLIENT_NEVER_RETRIED])


def test_a_continuations_outcome_of_another_type_is_read_as_unknown_not_half_applied_and_corrupt(
    tmp_path: Path,
) -> None:
    """An `outcome` that is not a string (damage, or a newer minor giving it structure) is read as an
    outcome this reader does not know: the call still ends incomplete, and the line is not corrupt."""
    path = tmp_path / "stopped.jsonl"
    record_play(stopped_while_parked, path)
    text = path.read_bytes().replace(b',"outcome":"proxy_stopping"', b',"outcome":5')
    assert b'"outcome":5' in text
    path.write_bytes(text)
    with CaptureReader(path) as reader:
        read = [e.chain for e in reader if isinstance(e, ChainChanged)][-1]
        assert reader.corrupt_lines == 0, reader.corrupt
    assert (read.status.value, read.error, read.notes) == ("incomplete", None, [CLIENT_NEVER_RETRIED])


def test_a_legs_outcome_is_written_only_when_known_and_one_of_another_type_reads_as_none() -> None:
    """A leg that ended as meant writes no `outcome` (readers assume none); one that was refused
    writes its cause; a non-string `outcome` (damage, a newer minor's structure) still ends the leg."""
    encoder = ObservationEncoder(Redactor(key=b"test-key"), 65536)
    clean, refused = LegClosed(1.0, "leg-1"), LegClosed(2.0, "leg-2", "upstream_unreachable")
    lines = [orjson.loads(encoder.encode(obs)) for obs in (clean, refused)]
    assert "outcome" not in lines[0]
    assert lines[1]["outcome"] == "upstream_unreachable"
    assert [decode(line) for line in lines] == [clean, refused]
    assert decode({**lines[1], "outcome": 5}) == LegClosed(2.0, "leg-2")


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
    lines[0] = lines[0].replace(f'"version":"{FORMAT_VERSION}"'.encode(), b'"version":"1.99"')
    lines.insert(2, b'{"type":"obs","kind":"tls_handshake","t":1.0,"exchange":"x1","cipher":"x"}\n')
    lines[1] = lines[1].replace(b'"kind":"exchange_opened",', b'"kind":"exchange_opened","color":"red",')
    assert b'"color":"red"' in lines[1]
    path.write_bytes(b"".join(lines))
    with CaptureReader(path) as reader:
        assert list(reader) == whole
        assert (reader.skipped_unknown, reader.corrupt_lines) == (1, 0)


def test_a_damaged_kind_in_a_file_of_this_version_is_a_corrupt_line_and_its_exchange_is_left_out(
    tmp_path: Path,
) -> None:
    path = tmp_path / "damaged.jsonl"
    _record(path)
    lines = path.read_bytes().splitlines(keepends=True)
    assert b'"kind":"exchange_opened"' in lines[1]
    later = sum(1 for line in lines[2:] if b'"exchange":"x1"' in line)
    lines[1] = lines[1].replace(b'"kind":"exchange_opened"', b'"kind":"exchange_opend"')
    path.write_bytes(b"".join(lines))

    with CaptureReader(path) as reader:
        events = list(reader)
        assert (reader.skipped_unknown, reader.corrupt_lines) == (0, 1)
        assert reader.corrupt == [
            (
                2,
                "corrupt observation line: unknown kind 'exchange_opend' "
                f"(capture format {FORMAT_VERSION} has no such kind)",
            )
        ]
        assert reader.replayer is not None
        assert reader.replayer.lost_lines == later > 0
    assert not _records(events)


def test_each_sides_transport_is_kept_and_a_capture_before_it_reads_as_streamable_http() -> None:
    encoder = ObservationEncoder(Redactor(key=b"test-key"), 65536)
    opened = ExchangeOpened(
        1.0, "s1", "POST", "/mcp", {}, None, client_transport="stdio", upstream_transport="sse"
    )
    line = orjson.loads(encoder.encode(opened))
    assert (line["client_transport"], line["upstream_transport"]) == ("stdio", "sse")
    assert decode(line) == opened
    del line["client_transport"], line["upstream_transport"]  # as a writer before 1.3 wrote it
    older = decode(line)
    assert isinstance(older, ExchangeOpened)
    assert (older.client_transport, older.upstream_transport) == ("http", "http")
    usual = orjson.loads(encoder.encode(older))  # Streamable HTTP both sides: nothing more is written
    assert "client_transport" not in usual
    assert "upstream_transport" not in usual


def test_a_leg_message_that_joins_another_legs_chain_says_so_and_only_then() -> None:
    encoder = ObservationEncoder(Redactor(key=b"test-key"), 65536)
    asked = classify_value(request("s-1", "roots/list", {}))
    placed = LegMessageSeen(1.0, "leg-5", "x3", asked, 40, Direction.TO_CLIENT, Channel.SSE, joins="leg-9")
    line = orjson.loads(encoder.encode(placed))
    assert line["joins"] == "leg-9"
    assert decode(line) == placed
    del line["joins"]  # as a writer before 1.6 wrote it: the message is its own leg's
    older = decode(line)
    assert isinstance(older, LegMessageSeen)
    assert older.joins is None
    assert "joins" not in orjson.loads(encoder.encode(older))


def test_a_bridges_call_made_from_an_edit_keeps_its_note_in_the_capture_and_only_then() -> None:
    encoder = ObservationEncoder(Redactor(key=b"test-key"), 65536)
    call = classify_value(request("b-1", "tools/call", {"name": "add", "arguments": {"a": 100}}))
    note = "edited by the proxy's intercept (i1), sent in place of the client's"
    edited = LegMessageSeen(1.0, "leg-2", "x1", call, 60, Direction.TO_SERVER, Channel.POST, note=note)
    line = orjson.loads(encoder.encode(edited))
    assert line["note"] == note
    assert decode(line) == edited
    del line["note"]  # as a writer before 1.12 wrote it, or a call the bridge made as it was asked
    plain = decode(line)
    assert isinstance(plain, LegMessageSeen)
    assert plain.note is None
    assert "note" not in orjson.loads(encoder.encode(plain))


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


def _records(events: list[FlowEvent]) -> list[dict[str, Any]]:
    return [e.message.model_dump() for e in events if isinstance(e, MessageRecorded)]


def _leg_statuses(capture: Path) -> dict[str, tuple[int, str]]:
    """Each leg entry's status and comment in the capture's HAR."""
    out = io.BytesIO()
    export_capture([capture], Format.HAR, out)
    entries = orjson.loads(out.getvalue())["log"]["entries"]
    return {
        e["_mcp"]["exchange"]: (e["response"]["status"], e.get("comment", ""))
        for e in entries
        if e["_mcp"]["side"] == "upstream"
    }


def test_a_legs_head_is_written_redacted_and_reads_back_as_the_live_chains_hold_it(tmp_path: Path) -> None:
    capture = tmp_path / "refused.jsonl"
    _, live = record_play(refused_leg_call, capture)

    text = capture.read_text()
    heads = [json.loads(line) for line in text.splitlines() if '"kind":"leg_head"' in line]
    assert {h["leg"]: h["status"] for h in heads} == LEG_STATUSES
    assert UPSTREAM_SESSION not in text
    (minted,) = [h for h in heads if h["leg"] == "leg-3"]
    assert minted["headers"]["Mcp-Session-Id"].startswith("<redacted len=")
    assert json.loads(text.splitlines()[0])["version"] == FORMAT_VERSION
    assert _records(list(read_capture(capture))) == _records(live)
    assert {leg: status for leg, (status, _) in _leg_statuses(capture).items()} == LEG_STATUSES


def test_a_reader_that_does_not_know_leg_heads_skips_and_counts_them_and_reads_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture = tmp_path / "refused.jsonl"
    record_play(refused_leg_call, capture)
    monkeypatch.delitem(observations._CLASSES, "leg_head")  # a 1.4 reader: the kind is unknown to it
    monkeypatch.setattr(capture_module, "FORMAT_MINOR", 4)

    with CaptureReader(capture) as reader:
        events = list(reader)
        assert (reader.skipped_unknown, reader.corrupt_lines) == (len(LEG_STATUSES), 0)
    legs = [m for m in _records(events) if m["side"] == "upstream"]
    assert len(legs) == 8  # every leg message, none of them carrying a head
    assert all(m["http"] is None for m in legs)


def test_a_1_4_capture_reads_whole_with_its_legs_status_said_unknown(tmp_path: Path) -> None:
    capture = tmp_path / "refused.jsonl"
    record_play(refused_leg_call, capture)
    lines = capture.read_bytes().splitlines(keepends=True)
    older = [lines[0].replace(f'"version":"{FORMAT_VERSION}"'.encode(), b'"version":"1.4"')]
    older += [line for line in lines[1:] if b'"kind":"leg_head"' not in line]
    assert len(older) == len(lines) - len(LEG_STATUSES)
    capture.write_bytes(b"".join(older))

    with CaptureReader(capture) as reader:
        events = list(reader)
        assert (reader.skipped_unknown, reader.corrupt_lines) == (0, 0)
    assert all(m["http"] is None for m in _records(events) if m["side"] == "upstream")
    statuses = _leg_statuses(capture)
    assert set(statuses) == {"leg-1", "leg-2", "leg-3", "leg-4", "leg-5"}
    for status, comment in statuses.values():
        assert status == 0
        assert comment == (
            "a bridge's upstream leg: its response head is unknown: a capture of format 1.4 records none "
            "(1.5 and later do)"
        )


REFUSED = {"mrtr_to_legacy": refused_bridge_retry, "2026-07-28 pass-through": refused_passthrough_retry}


@pytest.mark.parametrize("play", REFUSED.values(), ids=REFUSED.keys())
def test_a_capture_of_a_refused_retry_reads_back_as_the_one_ok_chain_the_proxy_built(
    play: Any, tmp_path: Path
) -> None:
    path = tmp_path / "refused.jsonl"
    _, live = record_play(play, path)
    read = list(read_capture(path))

    def headlines(events: list[Any]) -> dict[str, Any]:
        final = {e.chain.id: e.chain for e in events if isinstance(e, ChainChanged)}
        return {k: v.model_dump(exclude={"id"}) for k, v in final.items()}

    [read_chain] = headlines(read).values()
    assert read_chain == next(iter(headlines(live).values()))
    assert (read_chain["status"], read_chain["rounds"]) == ("ok", 2)
