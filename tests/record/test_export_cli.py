"""`mcp-proxy export` refusing what it cannot export: exit 2, one line naming why, no output file."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.cli import main


def test_a_file_that_is_not_a_capture_exports_nothing_and_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "notes.txt"
    source.write_text("hello\n")
    out = tmp_path / "out.har"
    assert main(["export", "--har", str(out), str(source)]) == 2
    assert f"{source}:1: not a mcp-debug-proxy-capture file" in capsys.readouterr().err
    assert not out.exists()


def test_an_unknown_status_filter_exits_2_naming_what_it_accepts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.json"
    assert main(["export", "--json", str(out), "--status", "fine", str(tmp_path / "any.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "status must be one of error, incomplete, ok, parked, pending, waiting_client, got fine" in err
    assert not out.exists()


@pytest.mark.parametrize("fmt", ["--har", "--json", "--ndjson"])
def test_an_output_that_is_one_of_the_captures_is_refused_and_left_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    capture = tmp_path / "run.jsonl"
    capture.write_bytes(b'{"kind":"header"}\n{"kind":"anything"}\n')
    alias = tmp_path / "alias.jsonl"
    alias.symlink_to(capture)
    for target in (capture, alias):
        assert main(["export", fmt, str(target), str(tmp_path / "other.jsonl"), str(capture)]) == 2
        assert "is one of the captures read" in capsys.readouterr().err
        assert capture.read_bytes() == b'{"kind":"header"}\n{"kind":"anything"}\n'


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://user:pa55word@127.0.0.1:4318", "carries credentials"),
        ("notaurl", "not an http(s) URL"),
    ],
)
def test_an_otlp_url_is_checked_as_the_proxys_setting_is_and_never_echoes_a_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str, said: str
) -> None:
    assert main(["export", "--otlp", url, str(tmp_path / "any.jsonl")]) == 2
    err = capsys.readouterr().err
    assert said in err
    assert "pa55word" not in err
