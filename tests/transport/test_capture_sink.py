"""The capture sink: observations and events reach the file in the order they happened, within its bounds."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest

from proxy.flows.bus import EventBus
from proxy.flows.chains import ChainBuilder
from proxy.flows.events import ChainChanged, ChainStatus, Channel, Direction, MessageRecorded, ProxyInfo
from proxy.flows.observations import ExchangeClosed
from proxy.flows.redact import Redactor
from proxy.flows.sink import ObservationSink
from proxy.flows.store import ChainStore
from proxy.record.capture import CaptureWriter, read_capture
from proxy.record.completeness import Expected, capture_files, check_capture
from proxy.record.observations import ObservationEncoder
from proxy.transport import capture_sink
from proxy.transport.capture_sink import CaptureSink
from proxy.wire.jsonrpc import classify_value
from tests.flows.calls import Calls
from tests.transport.helpers import wait_until


def _fact(n: int) -> ExchangeClosed:
    return ExchangeClosed(float(n), f"x{n}")


def _lines(path: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()[1:]]  # after the file header


def _kinds(path: Path) -> list[str]:
    return [str(line.get("exchange") or line["type"]) for line in _lines(path)]


async def test_observations_reach_the_file_within_a_flush_interval_in_the_order_they_were_taken(
    tmp_path: Path,
) -> None:
    path = tmp_path / "capture.jsonl"
    with CaptureWriter(path) as writer:
        sink = CaptureSink(writer, ObservationEncoder(Redactor(), 65536))
        for n in range(5):
            sink.observe(_fact(n))
        await wait_until(lambda: len(_lines(path)) == 5, what="the observations to be flushed")
        assert _kinds(path) == ["x0", "x1", "x2", "x3", "x4"]


async def test_observations_taken_before_an_event_are_written_before_it(tmp_path: Path) -> None:
    path = tmp_path / "capture.jsonl"
    with CaptureWriter(path) as writer:
        sink = CaptureSink(writer, ObservationEncoder(Redactor(), 65536))
        sink.observe(_fact(1))
        sink.observe(_fact(2))
        sink.event(ProxyInfo(ts=time.time(), version="t", listen="l", upstream="u"))
        await wait_until(lambda: len(_lines(path)) == 3, what="the observations and the event to be written")
        sink.close()
        sink.observe(_fact(3))  # after close: ignored, never a write into a closing file
        writer.flush()
    assert _kinds(path) == ["x1", "x2", "proxy_info"]


async def test_a_full_batch_is_written_at_once_without_waiting_for_the_timer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "capture.jsonl"
    monkeypatch.setattr(capture_sink, "MAX_PENDING", 3)  # the bound, made small
    with CaptureWriter(path) as writer:
        sink = CaptureSink(writer, ObservationEncoder(Redactor(), 65536))
        for n in range(3):
            sink.observe(_fact(n))
        writer.flush()
        assert _kinds(path) == ["x0", "x1", "x2"]  # no await: written when the bound was reached


def _traffic(facts: Calls, calls: int) -> None:
    """A long-open GET stream, then `calls` calls, each opened before the previous one ended."""
    facts.open_exchange("g", http_method="GET", path="/mcp", headers={}, session=None)
    for n in range(calls + 1):
        if n < calls:
            facts.open_exchange(f"x{n}", http_method="POST", path="/mcp", headers={}, session=None)
            call = {
                "jsonrpc": "2.0",
                "id": n,
                "method": "tools/call",
                "params": {"name": "add", "tag": f"m-{n}"},
            }
            facts.message(
                f"x{n}", classify_value(call), size=80, direction=Direction.TO_SERVER, channel=Channel.POST
            )
        if n > 0:  # the previous call answers and closes only now: it straddles the rotations
            done = {"jsonrpc": "2.0", "id": n - 1, "result": {"content": [], "pad": "p" * 300}}
            prev = f"x{n - 1}"
            facts.message(
                prev, classify_value(done), size=80, direction=Direction.TO_CLIENT, channel=Channel.JSON
            )
            facts.close_exchange(prev)
    facts.close_exchange("g")


def test_every_rotated_file_stands_alone_and_all_of_them_together_hold_each_record_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "capture.jsonl"
    redactor = Redactor(key=b"test-key")
    builder = ChainBuilder(ChainStore(), lambda event: None, redactor, clock=time.time)
    observations = ObservationSink(builder, redactor, bus=EventBus())
    with CaptureWriter(path, max_bytes=3000, keep=100) as writer:
        sink = CaptureSink(writer, ObservationEncoder(redactor, 65536))
        observations.listeners.append(sink.observe_all)
        _traffic(Calls(observations), 30)
        sink.close()
    files = capture_files(path)
    assert len(files) > 5
    for part in files:
        events = list(read_capture(part))
        lines = [orjson.loads(line) for line in part.read_bytes().splitlines()[1:]]
        closed = {line["exchange"] for line in lines if line.get("kind") == "exchange_closed"} - {"g"}
        ended = [e.chain for e in events if isinstance(e, ChainChanged) and e.chain.status is ChainStatus.OK]
        assert len([c for c in ended if c.name == "add"]) == len(closed), part  # whole chains, alone
        for chain in ended:
            if chain.name == "add":
                mine = [
                    e.message.kind
                    for e in events
                    if isinstance(e, MessageRecorded) and e.chain_id == chain.id
                ]
                assert mine == ["request", "result"], part
    report = check_capture(path, [Expected(f"m-{n}", "to_server") for n in range(30)])
    assert report.ok, report.to_dict()
    assert report.unfinished_chains == []
