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

from proxy.record import chain_pass
from proxy.record.chain_pass import ChainPassError, ChainsFromPass
from proxy.record.export import CHAIN_PASS_FROM, Format, export_capture
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
