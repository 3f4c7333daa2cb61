"""What a capture read for replaying says of where it was recorded: its first `proxy_info`."""

from __future__ import annotations

from pathlib import Path

import orjson

from proxy.flows.events import ProxyInfo
from proxy.record.capture import CaptureWriter
from proxy.record.replay_source import open_capture

INFO = ProxyInfo(ts=1.0, version="0.1.0", listen="http://127.0.0.1:8080", upstream="http://s:8000/mcp")


def test_a_forced_upstream_era_is_read_from_the_first_proxy_info(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with CaptureWriter(path) as writer:
        writer.write(INFO.model_copy(update={"upstream_era": "legacy", "upstream_era_forced": True}))
        writer.write(INFO.model_copy(update={"upstream_era": "dual"}))

    source = open_capture([path])

    assert (source.upstream, source.upstream_era, source.upstream_era_forced) == (
        "http://s:8000/mcp",
        "legacy",
        True,
    )


def test_a_proxy_info_written_before_the_forced_flag_reads_as_probed(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with CaptureWriter(path) as writer:
        writer.write(INFO)
    older = orjson.loads(path.read_bytes().splitlines()[1])
    del older["upstream_era_forced"]
    older["upstream_era"] = "legacy"
    lines = path.read_bytes().splitlines()
    path.write_bytes(lines[0] + b"\n" + orjson.dumps(older) + b"\n")

    source = open_capture([path])

    assert (source.upstream_era, source.upstream_era_forced) == ("legacy", False)


def test_an_era_the_recording_proxy_learned_after_its_start_is_the_recorded_one(tmp_path: Path) -> None:
    """A proxy started before its server (or in front of one wanting a token) probes `unknown` and
    writes the era it learns from the first forwarded request in a later line, in a later part too."""
    first, second = tmp_path / "run.jsonl", tmp_path / "run.jsonl.1"
    with CaptureWriter(first) as writer:
        writer.write(INFO)
    with CaptureWriter(second) as writer:
        writer.write(INFO.model_copy(update={"upstream": "http://other:1/mcp", "upstream_era": "legacy"}))
        writer.write(INFO.model_copy(update={"upstream_era": "dual"}))

    source = open_capture([first, second])

    assert (source.upstream, source.upstream_era, source.upstream_era_forced) == (
        "http://s:8000/mcp",
        "legacy",
        False,
    )
