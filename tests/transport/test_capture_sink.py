"""The capture sink: facts and events reach the file in the order they happened, within its bounds."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest

from proxy.flows.events import ProxyInfo
from proxy.flows.facts import Fact
from proxy.flows.redact import Redactor
from proxy.record.capture import CaptureWriter
from proxy.record.facts import FactEncoder
from proxy.transport import capture_sink
from proxy.transport.capture_sink import CaptureSink
from tests.transport.helpers import wait_until


def _fact(n: int) -> Fact:
    return Fact(float(n), "close_exchange", f"x{n}", {"outcome": None})


def _lines(path: Path) -> list[dict[str, object]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()[1:]]  # after the file header


def _kinds(path: Path) -> list[str]:
    return [str(line.get("exchange") or line["type"]) for line in _lines(path)]


async def test_facts_reach_the_file_within_a_flush_interval_in_the_order_they_were_taken(
    tmp_path: Path,
) -> None:
    path = tmp_path / "capture.jsonl"
    with CaptureWriter(path) as writer:
        sink = CaptureSink(writer, FactEncoder(Redactor(), 65536))
        for n in range(5):
            sink.fact(_fact(n))
        await wait_until(lambda: len(_lines(path)) == 5, what="the facts to be flushed")
        assert _kinds(path) == ["x0", "x1", "x2", "x3", "x4"]


async def test_facts_taken_before_an_event_are_written_before_it(tmp_path: Path) -> None:
    path = tmp_path / "capture.jsonl"
    with CaptureWriter(path) as writer:
        sink = CaptureSink(writer, FactEncoder(Redactor(), 65536))
        sink.fact(_fact(1))
        sink.fact(_fact(2))
        sink.event(ProxyInfo(ts=time.time(), version="t", listen="l", upstream="u"))
        await wait_until(lambda: len(_lines(path)) == 3, what="the facts and the event to be written")
        sink.close()
        sink.fact(_fact(3))  # after close: ignored, never a write into a closing file
        writer.flush()
    assert _kinds(path) == ["x1", "x2", "proxy_info"]


async def test_a_full_batch_is_written_at_once_without_waiting_for_the_timer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "capture.jsonl"
    monkeypatch.setattr(capture_sink, "MAX_PENDING_FACTS", 3)  # the bound, made small
    with CaptureWriter(path) as writer:
        sink = CaptureSink(writer, FactEncoder(Redactor(), 65536))
        for n in range(3):
            sink.fact(_fact(n))
        writer.flush()
        assert _kinds(path) == ["x0", "x1", "x2"]  # no await: written when the bound was reached
