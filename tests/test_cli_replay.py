"""`mcp-proxy replay`'s command line without a server: usage errors exit 2 and say what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.cli_replay import main, parse_headers


def test_headers_are_name_colon_value_and_a_malformed_one_is_refused_by_name() -> None:
    assert parse_headers(["Authorization: Bearer x:y", "X-Tenant:acme"]) == {
        "Authorization": "Bearer x:y",
        "X-Tenant": "acme",
    }
    with pytest.raises(ValueError, match="'Authorization'") as refused:
        parse_headers(["Authorization Bearer s3cret"])
    assert "s3cret" not in str(refused.value)


def test_headers_from_a_file_are_one_per_line_and_an_unreadable_file_is_named(tmp_path: Path) -> None:
    headers = tmp_path / "headers.txt"
    headers.write_text("Authorization: Bearer s3cret\r\n\nX-Tenant: acme\n")

    assert parse_headers([f"@{headers}", "X-Extra: 1"]) == {
        "Authorization": "Bearer s3cret",
        "X-Tenant": "acme",
        "X-Extra": "1",
    }
    with pytest.raises(ValueError, match=r"--header @.*missing\.txt: cannot read it: No such file"):
        parse_headers([f"@{tmp_path / 'missing.txt'}"])
    headers.write_text("Authorization Bearer s3cret\n")
    with pytest.raises(ValueError, match="'Authorization'") as refused:
        parse_headers([f"@{headers}"])
    assert "s3cret" not in str(refused.value)


def test_a_file_that_is_not_a_capture_exits_2_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bogus = tmp_path / "notes.jsonl"
    bogus.write_text('{"hello": 1}\n')

    assert main([str(bogus), "--all", "--upstream", "http://127.0.0.1:9/mcp"]) == 2
    assert "notes.jsonl" in capsys.readouterr().err


def test_a_bad_header_or_an_empty_ignore_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capture = tmp_path / "c.jsonl"
    capture.write_text(
        '{"format": "mcp-debug-proxy-capture", "version": "1.1", "created": 1.0, "proxy_version": "0"}\n'
    )

    assert main([str(capture), "--all", "--header", "nocolon"]) == 2
    assert "expected 'NAME: VALUE'" in capsys.readouterr().err
    assert main([str(capture), "--all", "--ignore", " "]) == 2
    assert "--ignore: an empty path" in capsys.readouterr().err
    assert main([str(capture), "--all"]) == 2
    assert "the capture names no upstream: give the server with --upstream URL" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "soon"])
def test_a_timeout_that_is_not_seconds_above_0_is_a_usage_error_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    capture = tmp_path / "c.jsonl"
    capture.write_text(
        '{"format": "mcp-debug-proxy-capture", "version": "1.1", "created": 1.0, "proxy_version": "0"}\n'
    )

    with pytest.raises(SystemExit) as exited:
        main([str(capture), "--all", "--upstream", "http://127.0.0.1:9/mcp", "--timeout", value])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--timeout" in err
    assert "seconds above 0" in err


def test_an_edit_of_the_request_state_exits_2_saying_it_is_the_replays_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capture = tmp_path / "c.jsonl"
    capture.write_text(
        '{"format": "mcp-debug-proxy-capture", "version": "1.1", "created": 1.0, "proxy_version": "0"}\n'
    )

    done = main(
        [
            str(capture),
            "--chain",
            "r1",
            "--upstream",
            "http://127.0.0.1:9/mcp",
            "--set",
            "params.requestState.x=1",
        ]
    )

    assert done == 2
    assert "params.requestState is the replay's own" in capsys.readouterr().err
