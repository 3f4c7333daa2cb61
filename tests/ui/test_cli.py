"""The TUI's command lines fail clearly before taking the terminal."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.cli import main
from proxy.cli_tui import attach_token, build_tui_parser


def test_opening_a_file_that_is_no_capture_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "notes.jsonl"
    bad.write_text("not a capture\n")

    code = main(["tui", "--open", str(bad)])

    assert code == 2
    assert f"mcp-proxy: capture: {bad}:1: not a mcp-debug-proxy-capture file" in capsys.readouterr().err


def test_opening_a_missing_capture_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["tui", "--open", str(tmp_path / "gone.jsonl")])

    assert code == 2
    assert "cannot open capture file" in capsys.readouterr().err


def test_attach_needs_an_http_url(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["tui", "--attach", "sidecar:9901"])

    assert code == 2
    assert "not an http(s) URL" in capsys.readouterr().err


def test_tui_needs_exactly_one_source(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["tui"])

    assert exit_info.value.code == 2
    assert "one of the arguments --attach --open is required" in capsys.readouterr().err


def test_the_token_option_and_demo_flags_parse() -> None:
    args = build_tui_parser().parse_args(["tui", "--attach", "http://127.0.0.1:9901", "--token", "t"])
    demo = build_tui_parser().parse_args(["demo", "--tui"])

    assert (args.attach, args.token, args.history) == ("http://127.0.0.1:9901", "t", 500)
    assert demo.tui
    assert not demo.json


def test_the_main_help_mentions_the_tui_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])

    assert "mcp-proxy tui --attach URL" in capsys.readouterr().out


def test_the_plain_proxy_command_line_loads_neither_textual_nor_the_demo_sdk() -> None:
    import subprocess
    import sys

    from tests.peers.runner import REPO_ROOT

    code = (
        "import sys, proxy.cli, proxy.cli_tui, proxy.demo; "
        "loaded = [m for m in ('textual', 'ui', 'mcp', 'uvicorn') if m in sys.modules]; "
        "print(','.join(loaded))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )

    assert done.stdout.strip() == ""


def test_attach_reads_the_admin_token_as_the_proxy_does_without_a_secret_files_newline() -> None:
    assert attach_token(None, {"MCP_PROXY_ADMIN_TOKEN": "s3cret\n"}) == "s3cret"
    assert attach_token("typed ", {"MCP_PROXY_ADMIN_TOKEN": "other"}) == "typed"
    assert attach_token(None, {"MCP_PROXY_ADMIN_TOKEN": " \n"}) is None
