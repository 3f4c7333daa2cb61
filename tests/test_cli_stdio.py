"""`mcp-proxy stdio`: what it refuses before it starts, and that stdout stays the protocol's even then."""

from __future__ import annotations

import pytest

from proxy.cli import main
from proxy.cli_stdio import split_command


def run(capsys: pytest.CaptureFixture[str], *words: str) -> tuple[int, str, str]:
    code = main(["stdio", *words])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_server_command_is_what_follows_the_first_double_dash() -> None:
    assert split_command(["--capture", "f", "--", "node", "s.js", "--", "x"]) == (
        ["--capture", "f"],
        ["node", "s.js", "--", "x"],
    )
    assert split_command(["--upstream", "http://h/mcp"]) == (["--upstream", "http://h/mcp"], [])


def test_without_an_upstream_it_exits_2_naming_the_three_ways_to_give_one(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MCP_PROXY_UPSTREAM", raising=False)
    monkeypatch.delenv("MCP_PROXY_UPSTREAM_CMD", raising=False)
    code, out, err = run(capsys)
    assert code == 2
    assert out == ""
    assert "--upstream URL" in err
    assert "-- CMD ARGS" in err


def test_the_tui_is_refused_since_stdout_carries_the_protocol(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(SystemExit) as exited:  # no such flag here: the error says why
        main(["stdio", "--upstream", "http://127.0.0.1:9/mcp", "--tui"])
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "tui --attach" in err
    monkeypatch.setenv("MCP_PROXY_TUI", "true")  # nor as a setting from the environment
    code, out, err = run(capsys, "--upstream", "http://127.0.0.1:9/mcp")
    assert code == 2
    assert out == ""
    assert "tui --attach" in err


def test_print_config_goes_to_stderr_with_the_command_as_upstream_cmd(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run(capsys, "--print-config", "--", "node", "server.js", "stdio")
    assert code == 0
    assert out == ""
    assert "upstream_cmd" in err
    assert "node server.js stdio" in err


def test_an_upstream_url_and_a_command_together_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["stdio", "--upstream", "http://127.0.0.1:9/mcp", "--", "node", "s.js"])
    assert exited.value.code == 2
    assert "not two" in capsys.readouterr().err


def test_print_config_masks_a_credential_in_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--print-config", "--", "env", "API_TOKEN=s3cret", "node", "server.js")
    assert code == 0
    assert "s3cret" not in out + err
    assert "API_TOKEN=<redacted>" in err


def test_help_lists_no_setting_of_the_http_listener_and_typing_one_says_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["stdio", "--help"])
    shown = capsys.readouterr().out
    for flag in ("--upstream ", "--capture ", "--admin "):
        assert flag in shown, flag
    for flag in ("--listen ", "--keepalive-timeout", "--max-client-connections", "--sse-path", "--tui"):
        assert flag not in shown, flag
    with pytest.raises(SystemExit) as exited:
        main(["stdio", "--upstream", "http://127.0.0.1:9/mcp", "--listen", "127.0.0.1:8080"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--listen sets the listener HTTP clients reach" in err
    assert "did you mean" not in err
