"""A HAR export beside a chain pass: the second process changes where chains are built, never the HAR.

The capture is real traffic (the demo's SDK clients of both eras through real proxies: pass-through,
both bridges, SSE streams, nested requests, MRTR rounds, upstream legs), copied a few times so chains
open and end across the pass's output buffer. Every export here is held to the full build's HAR.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from proxy.flows.events import Channel, Direction, Mode, ProxyInfo, Side
from proxy.flows.observations import (
    ExchangeClosed,
    ExchangeOpened,
    LegClosed,
    LegMessageSeen,
    MessageSeen,
)
from proxy.flows.redact import Redactor
from proxy.record import chain_pass
from proxy.record.capture import CaptureWriter
from proxy.record.chain_pass import ChainPassError, ChainsFromPass
from proxy.record.export import CHAIN_PASS_FROM, Format, export_capture
from proxy.record.observations import ObservationEncoder
from proxy.wire.jsonrpc import classify_value
from tests.record.captures import full_har, record_demo, replicate


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pass")
    return replicate(record_demo(directory), directory / "copies.jsonl", 12)


def har(paths: list[Path], *, chain_pass: bool) -> tuple[bytes, list[str]]:
    out = io.BytesIO()
    report = export_capture(paths, Format.HAR, out, chain_pass=chain_pass)
    return out.getvalue(), report.lines()


def test_an_export_beside_the_chain_pass_writes_the_full_builds_har(capture: Path) -> None:
    beside, skipped = har([capture], chain_pass=True)

    assert beside == full_har([capture])
    assert skipped == []
    entries = orjson.loads(beside)["log"]["entries"]
    legs = [e for e in entries if e["_mcp"]["side"] == "upstream"]
    assert legs
    assert all(e["_mcp"]["mode"] != "passthrough" for e in legs)  # the eras and mode came from the pass
    assert len({c for e in entries for c in e["_mcp"]["chains"]}) > 100


def test_a_corrupt_line_is_skipped_by_both_processes_and_named_once(capture: Path, tmp_path: Path) -> None:
    lines = capture.read_bytes().splitlines(keepends=True)
    middle = len(lines) // 2
    while b'"kind":"message"' not in lines[middle]:
        middle += 1
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_bytes(
        b"".join([*lines[:middle], b'{"type":"obs","kind":"message","t":\n', *lines[middle:]])
    )

    beside, skipped = har([damaged], chain_pass=True)
    alone, skipped_alone = har([damaged], chain_pass=False)

    assert beside == alone
    assert (
        skipped == skipped_alone == [f"skipped {damaged}:{middle + 1}: corrupt observation line (not JSON)"]
    )


def test_a_pass_that_dies_fails_the_export_with_what_it_said(
    capture: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass's records stop short of its `E`: the export fails rather than write chains it never got."""
    real_popen = subprocess.Popen

    def dying(args: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        script = (
            "import sys; sys.stdout.write('C 0 0 r1\\n'); sys.stderr.write('the pass broke'); sys.exit(3)"
        )
        return real_popen([sys.executable, "-c", script], **kwargs)  # type: ignore[call-overload, no-any-return]

    monkeypatch.setattr(chain_pass.subprocess, "Popen", dying)

    with pytest.raises(ChainPassError, match="the pass broke"):
        har([capture], chain_pass=True)


def test_closing_early_stops_the_pass(capture: Path) -> None:
    chains = ChainsFromPass([capture])
    pid = chains.pid
    chains.close()

    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_the_command_exports_a_big_capture_beside_its_chain_pass(capture: Path, tmp_path: Path) -> None:
    """`mcp-proxy export --har` as users run it, on a capture big enough that it starts the pass."""
    copies = -(-CHAIN_PASS_FROM // capture.stat().st_size)
    big = tmp_path / "big.jsonl"
    with big.open("wb") as out:
        lines = capture.read_bytes().splitlines(keepends=True)
        out.writelines(lines)
        for copy in range(copies):  # the same copies again: chains of their own, ids and all renamed
            out.writelines(line.replace(b'":"x', b'":"y%dx' % copy) for line in lines[2:])
    assert big.stat().st_size >= CHAIN_PASS_FROM
    command = Path(sys.executable).parent / "mcp-proxy"

    done = subprocess.run(
        [str(command), "export", "--har", str(tmp_path / "big.har"), str(big)],
        capture_output=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert (tmp_path / "big.har").read_bytes() == full_har([big])


def test_an_era_with_spaces_and_a_line_break_reaches_the_leg_entry_whole(tmp_path: Path) -> None:
    """A capture's eras are its own text: the pass's records carry them without breaking their framing."""
    path = tmp_path / "odd.jsonl"
    encode = ObservationEncoder(Redactor(), 65536).encode
    call = classify_value({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "ask"}})
    leg_call = classify_value({"jsonrpc": "2.0", "id": "leg-1", "method": "tools/call", "params": {}})
    odd = "legacy \nE\n era"
    observations = [
        ExchangeOpened(1.0, "x1", "POST", "/mcp", {}, None, odd, "modern", Mode.LEGACY_TO_MRTR, 60),
        MessageSeen(1.1, "x1", call, 60, Direction.TO_SERVER, Channel.POST, Side.CLIENT, None, None),
        LegMessageSeen(1.2, "leg-1", "x1", leg_call, 50, Direction.TO_SERVER, Channel.POST),
        LegClosed(1.3, "leg-1"),
        ExchangeOpened(2.0, "x2", "POST", "/mcp", {}, None, "modern", "modern", Mode.PASSTHROUGH, 60),
        MessageSeen(2.1, "x2", call, 60, Direction.TO_SERVER, Channel.POST, Side.BOTH, None, None),
        ExchangeClosed(2.2, "x2", None),
        ExchangeClosed(2.3, "x1", None),
    ]
    with CaptureWriter(path) as writer:
        writer.write(ProxyInfo(ts=1.0, version="t", listen="http://127.0.0.1:1", upstream="http://h:2/mcp"))
        writer.write_lines([encode(obs) for obs in observations])

    beside, _ = har([path], chain_pass=True)

    assert beside == full_har([path])
    entries = orjson.loads(beside)["log"]["entries"]
    leg = next(e for e in entries if e["_mcp"]["side"] == "upstream")
    assert leg["_mcp"]["era"] == {"client": odd, "upstream": "modern"}
    assert [e["_mcp"]["chains"] for e in entries] == [["r1"], ["r2"], ["r1"]]  # the call after the leg too
