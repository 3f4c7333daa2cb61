"""The index pass of a capture: every chain a full read builds, with its records, and a tail read alone."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest

from proxy.flows.events import (
    ChainOpened,
    ChainSummary,
    Channel,
    Direction,
    MessageRecord,
    MessageRecorded,
)
from proxy.flows.store import ChainStore
from proxy.record.capture import CaptureReader
from proxy.record.index import TAIL_PREFIX, read_records, read_tail, run_index
from proxy.record.observations import ObservationReplayer
from proxy.record.record_refs import RecordBuilder
from proxy.wire.jsonrpc import classify_value, request, result_response
from tests.flows.bridge_play import LEG_STATUSES, refused_leg_call
from tests.flows.calls import Calls
from tests.flows.stream_play import streams_and_delete
from tests.record.captures import as_written_by_1_9, record_demo, record_play, replicate


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real traffic of both eras (pass-through and both bridges), three times over with fresh names."""
    directory = tmp_path_factory.mktemp("index")
    return replicate(record_demo(directory), directory / "three.jsonl", 3)


def full_read(path: Path) -> tuple[dict[str, ChainSummary], dict[str, list[MessageRecord]]]:
    """Each chain's final headline and its records, as a reader holding the whole capture builds them."""
    store = ChainStore(max_chains=1_000_000)
    records: dict[str, list[MessageRecord]] = {}
    with CaptureReader(path, replayer=ObservationReplayer(store=store)) as reader:
        for event in reader:
            if isinstance(event, MessageRecorded):
                records.setdefault(event.chain_id, []).append(event.message)
    return {chain.summary.id: chain.summary for chain in store.drain()}, records


def index_agrees(capture: Path) -> tuple[list[bytes], dict[str, list[MessageRecord]]]:
    """Index the capture and check each chain against a full read: its headline and its records
    (built back from their references) the same. Returns the index's lines and the records."""
    spill, lines = io.BytesIO(), list[bytes]()
    end = run_index([capture], spill, lines.append)
    summaries, records = full_read(capture)

    indexed = [orjson.loads(line) for line in lines if line.startswith(b'{"type":"indexed"')]
    assert end["chains"] == len(indexed) == len(summaries)
    assert end["corrupt_lines"] == 0
    with RecordBuilder([capture]) as builder:
        for item in indexed:
            summary = ChainSummary.model_validate(item["chain"])
            assert summary == summaries[summary.id]
            assert read_records(spill, item["records"], builder) == records.get(summary.id, [])
    return lines, records


def test_the_index_holds_every_chain_a_full_read_builds_with_its_records(capture: Path) -> None:
    lines, records = index_agrees(capture)

    assert len(records) > 30
    kinds = {orjson.loads(line)["type"] for line in lines}
    assert {"proxy_info", "session", "continuation", "index_progress"} <= kinds


def test_the_request_heads_of_get_streams_and_a_delete_are_indexed_as_a_full_read_builds_them(
    tmp_path: Path,
) -> None:
    capture = tmp_path / "streams.jsonl"
    record_play(streams_and_delete, capture)

    _, records = index_agrees(capture)

    heads = [r for chain in records.values() for r in chain if r.direction is Direction.TO_SERVER]
    assert sorted((r.exchange, r.kind, r.side.value) for r in heads) == [
        ("d1", "http", "both"),
        ("g1", "http", "both"),
        ("g2", "http", "both"),
        ("g3", "http", "client"),
    ]
    assert all(r.http is not None and r.http.method in ("GET", "DELETE") for r in heads)


def test_the_upstream_heads_of_a_bridges_legs_are_indexed_as_a_full_read_builds_them(tmp_path: Path) -> None:
    capture = tmp_path / "refused.jsonl"
    record_play(refused_leg_call, capture)

    _, records = index_agrees(capture)

    (chain,) = records.values()
    heads = {
        r.exchange: (r.kind, r.http.status)
        for r in chain
        if r.http is not None and r.exchange.startswith("leg-")
    }
    assert {leg: status for leg, (_, status) in heads.items()} == LEG_STATUSES
    assert heads["leg-4"] == ("http", 202)  # a head no message carried: filed when the leg closed


def test_a_corrupt_line_is_skipped_and_named_by_the_index(capture: Path, tmp_path: Path) -> None:
    lines = capture.read_bytes().splitlines(keepends=True)
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_bytes(b"".join([*lines[:10], b'{"type":"obs","kind":"message"\n', *lines[10:]]))

    end = run_index([damaged], io.BytesIO(), lambda _line: None)

    assert end["corrupt_lines"] == 1
    assert end["corrupt"][0][:2] == [str(damaged), 11]
    assert end["chains"] == len(full_read(capture)[0])


def test_the_tail_builds_the_newest_chains_on_its_own(capture: Path) -> None:
    summaries, _ = full_read(capture)
    newest = max(summaries.values(), key=lambda s: s.started)

    tail = [e.chain for e in read_tail(capture, 20_000) if isinstance(e, ChainOpened)]

    assert tail
    assert all(chain.id.startswith(TAIL_PREFIX) for chain in tail)
    assert len(tail) < len(summaries)  # only the newest part
    assert (newest.method, newest.started) in {(chain.method, chain.started) for chain in tail}


WEIRD = "it's café 名前"


def _utf8_heads(calls: Calls, _clock: object) -> None:
    """One call whose request and response heads carry a value sent as UTF-8 (the transport hands
    over its latin-1 reading, one character per byte)."""
    wire = WEIRD.encode().decode("latin-1")
    call = classify_value(request(1, "tools/call", {"name": "echo", "arguments": {}}))
    calls.open_exchange("x1", http_method="POST", path="/mcp", headers={"X-Weird": wire}, session=None)
    calls.message("x1", call, size=9, direction=Direction.TO_SERVER, channel=Channel.POST)
    calls.response_head("x1", status=200, content_type="application/json", headers={"X-Reply": wire})
    answer = classify_value(result_response(1, {"content": []}))
    calls.message("x1", answer, size=9, direction=Direction.TO_CLIENT, channel=Channel.JSON)
    calls.close_exchange("x1")


def test_a_capture_written_before_1_10_shows_a_utf8_header_as_its_text_indexed_and_in_its_tail(
    tmp_path: Path,
) -> None:
    """A 1.9 capture made by hand (`as_written_by_1_9`) holds `cafÃ©`; the records the index builds
    back, and those of the tail read first, show `café`, as a full read does."""
    made = tmp_path / "made.jsonl"
    record_play(_utf8_heads, made)
    old = tmp_path / "old.jsonl"
    old.write_bytes(as_written_by_1_9(made.read_bytes()))
    assert WEIRD.encode().decode("latin-1").encode() in old.read_bytes()

    _lines, records = index_agrees(old)
    tail = [e.message for e in read_tail(old, 1_000_000) if isinstance(e, MessageRecorded)]

    for shown in ([r for chain in records.values() for r in chain], tail):
        heads = [r.http.headers for r in shown if r.http is not None]
        assert {"X-Weird": WEIRD} in heads
        assert {"X-Reply": WEIRD} in heads


def test_a_capture_of_1_10_keeps_its_header_text_as_written(tmp_path: Path) -> None:
    """From 1.10 a header value is the text itself: one that reads like mojibake stays as it is."""
    made = tmp_path / "made.jsonl"
    record_play(_utf8_heads, made)
    mojibake = WEIRD.encode().decode("latin-1")
    made.write_bytes(made.read_bytes().replace(WEIRD.encode(), mojibake.encode()))

    _lines, records = index_agrees(made)

    heads = [r.http.headers for chain in records.values() for r in chain if r.http is not None]
    assert {"X-Weird": mojibake} in heads
