"""Capture completeness: every expected message is found once in the capture, whatever rotation did."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from proxy.flows.events import (
    ChainChanged,
    ChainOpened,
    ChainStatus,
    ChainSummary,
    Channel,
    Direction,
    MessageRecord,
    MessageRecorded,
    Side,
)
from proxy.record.capture import CaptureWriter
from proxy.record.completeness import Expected, capture_files, check_capture, main


def _record(chain: str, seq: int, direction: Direction, side: Side, body: object) -> MessageRecorded:
    return MessageRecorded(
        chain_id=chain,
        message=MessageRecord(
            seq=seq,
            ts=1.0,
            side=side,
            direction=direction,
            channel=Channel.POST,
            exchange="x1",
            kind="request",
            body=body,
        ),
    )


def _chain(chain: str, status: ChainStatus = ChainStatus.PENDING) -> ChainSummary:
    return ChainSummary(id=chain, started=1.0, method="tools/call", jsonrpc_id=1, status=status)


def _write(path: Path, *, max_bytes: int = 0) -> None:
    with CaptureWriter(path, max_bytes=max_bytes, keep=10) as w:
        w.write(ChainOpened(chain=_chain("c1")))
        w.write(_record("c1", 1, Direction.TO_SERVER, Side.BOTH, {"arguments": {"m": "call-1#"}}))
        w.write(_record("c1", 2, Direction.TO_CLIENT, Side.BOTH, {"progress": "call-1-p1"}))
        w.write(_record("c1", 3, Direction.TO_CLIENT, Side.BOTH, {"result": "call-1-r"}))
        w.write(ChainChanged(chain=_chain("c1", ChainStatus.OK)))
        w.write(ChainOpened(chain=_chain("c2")))
        # a bridged call: the client's view counts, the upstream's copy does not
        w.write(_record("c2", 1, Direction.TO_CLIENT, Side.CLIENT, {"result": "call-2-r"}))
        w.write(_record("c2", 2, Direction.TO_CLIENT, Side.UPSTREAM, {"result": "call-2-r"}))


def test_every_expected_message_found_once_is_complete(tmp_path: Path) -> None:
    path = tmp_path / "cap.jsonl"
    _write(path)
    report = check_capture(
        path,
        [
            Expected("call-1#", "to_server"),
            Expected("call-1-p1", "to_client"),
            Expected("call-1-r", "to_client"),
            Expected("call-2-r", "to_client"),
        ],
    )
    assert report.ok
    assert report.completeness == 100.0
    assert report.unfinished_chains == ["c2"]
    assert report.records == 4


def test_a_missing_message_and_a_marker_inside_a_longer_token_are_not_found(tmp_path: Path) -> None:
    path = tmp_path / "cap.jsonl"
    _write(path)
    report = check_capture(path, [Expected("call-1-r", "to_client"), Expected("call-1-p", "to_client")])
    assert not report.ok
    assert report.completeness == 50.0
    assert [e.marker for e in report.missing] == ["call-1-p"]
    assert report.to_dict()["missing"] == 1


def test_a_record_written_twice_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "cap.jsonl"
    _write(path)
    with CaptureWriter(path) as w:
        w.write(_record("c1", 3, Direction.TO_CLIENT, Side.BOTH, {"result": "call-1-r"}))
    report = check_capture(path, [Expected("call-1-r", "to_client")])
    assert report.repeated_records == 1
    assert [(e.marker, n) for e, n in report.duplicated] == [("call-1-r", 2)]
    assert not report.ok


def test_rotated_files_are_read_oldest_first_as_one_capture(tmp_path: Path) -> None:
    path = tmp_path / "cap.jsonl"
    _write(path, max_bytes=600)
    files = capture_files(path)
    assert len(files) > 2
    assert files[-1] == path
    report = check_capture(path, [Expected("call-1#", "to_server"), Expected("call-2-r", "to_client")])
    assert report.ok


def test_the_command_line_exits_nonzero_when_something_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cap.jsonl"
    _write(path)
    expected = tmp_path / "expected.jsonl"
    expected.write_bytes(orjson.dumps({"marker": "call-1-r", "direction": "to_client"}) + b"\n")
    assert main([str(path), str(expected)]) == 0
    expected.write_bytes(orjson.dumps({"marker": "nope", "direction": "to_client"}) + b"\n")
    assert main([str(path), str(expected)]) == 1
    assert '"completeness_pct": 0.0' in capsys.readouterr().out
