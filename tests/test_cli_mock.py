"""`mcp-proxy mock`'s refusals: each bad start is one line naming what to do, exit status 2."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from proxy.cli import main
from proxy.record.capture import make_header


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No MCP_PROXY_* variable from the developer's shell leaks into a test."""
    for name in list(os.environ):
        if name.startswith("MCP_PROXY_"):
            monkeypatch.delenv(name)


def run_mock(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["mock", *argv])
    return code, capsys.readouterr().err


def test_a_file_that_is_not_a_capture_is_refused_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")

    code, err = run_mock(capsys, str(notes), "--listen", "127.0.0.1:0")

    assert code == 2
    assert err.startswith("mcp-proxy mock: ")
    assert str(notes) in err


def test_a_capture_with_no_answered_request_is_refused_pointing_at_its_chains(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text(json.dumps(make_header(0.0)) + "\n")

    code, err = run_mock(capsys, str(empty), "--listen", "127.0.0.1:0")

    assert code == 2
    assert "holds no answered request" in err
    assert "mcp-proxy export --json - CAPTURE" in err


def test_recording_the_mock_into_the_capture_it_serves_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    capture = tmp_path / "run.jsonl"
    capture.write_text(json.dumps(make_header(0.0)) + "\n")

    code, err = run_mock(capsys, str(capture), "--capture", str(capture))

    assert code == 2
    assert "--capture names a capture being served" in err
    assert capture.read_text().count("\n") == 1


def test_the_proxys_settings_are_flags_of_mock_too_but_the_upstream_is_not() -> None:
    from proxy.cli_mock import build_mock_parser

    parser = build_mock_parser()
    args = parser.parse_args(["--admin", "127.0.0.1:0", "--log-format", "json", "run.jsonl"])
    assert (args.admin, args.log_format) == ("127.0.0.1:0", "json")
    with pytest.raises(SystemExit):
        parser.parse_args(["--upstream", "http://127.0.0.1:9/mcp", "run.jsonl"])


@pytest.mark.parametrize("flag", ["--upstream", "--upstream-cmd", "--upstream-era", "--upstream-transport"])
def test_an_upstream_flag_is_refused_saying_the_mock_has_no_upstream(
    capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["mock", "run.jsonl", "--listen", "127.0.0.1:0", flag, "http://x/mcp"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2
    assert f"{flag}: the mock has no upstream: it answers from the CAPTURE files" in err
    assert "ambiguous option" not in err
