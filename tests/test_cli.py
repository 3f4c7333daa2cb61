"""The `mcp-proxy` command line: --print-config with sources, one clear line for each bad start, and
the TUI commands of an install without the `tui` extra."""

from __future__ import annotations

import json
import os
import pty
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest

from proxy.cli import build_parser, main, secrets_on_command_line
from proxy.config import Settings
from proxy.config_load import load_settings
from tests.sidecar import headless_command, run_into_a_closed_pipe
from tests.ui.helpers import TOUR

UPSTREAM = "http://127.0.0.1:8000/mcp"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No MCP_PROXY_* variable from the developer's shell leaks into a test."""
    for name in list(os.environ):
        if name.startswith("MCP_PROXY_"):
            monkeypatch.delenv(name)


def setting_line(output: str, name: str) -> str:
    (line,) = [line for line in output.splitlines() if line.startswith(f"{name} = ")]
    return line


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`main` with stderr taken for a terminal, as a person running the command sees its lines (with
    `--log-format auto`, a pipe gets JSON: `..._stderr_piped_a_refused_start_is_json_...`)."""
    with patch.object(sys.stderr, "isatty", return_value=True):
        code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_print_config_shows_each_value_with_the_layer_it_came_from(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_PROXY_LOG_LEVEL", "debug")

    code, out, err = run_main(capsys, "--upstream", UPSTREAM, "--print-config")

    assert (code, err) == (0, "")
    assert setting_line(out, "upstream").split() == ["upstream", "=", f'"{UPSTREAM}"', "#", "flag:--upstream"]
    assert setting_line(out, "log_level").split() == [
        "log_level",
        "=",
        '"debug"',
        "#",
        "env:MCP_PROXY_LOG_LEVEL",
    ]
    assert setting_line(out, "listen").split() == ["listen", "=", '"127.0.0.1:8080"', "#", "default"]


def test_print_config_shows_a_file_value_and_a_flag_overriding_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "proxy.toml"
    config.write_text('upstream = "http://file.example/mcp"\nmax_chains = 7\n', encoding="utf-8")

    code, out, _ = run_main(capsys, "--config", str(config), "--upstream", UPSTREAM, "--print-config")

    assert code == 0
    assert setting_line(out, "max_chains").split() == ["max_chains", "=", "7", "#", f"file:{config}"]
    assert setting_line(out, "upstream").split()[-1] == "flag:--upstream"


def test_redaction_lists_add_up_across_the_file_the_environment_and_repeated_flags(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Naming one more secret anywhere never unmasks one named elsewhere; `unredact_headers` is the
    one list a later source replaces (adding to it would unmask more)."""
    config = tmp_path / "proxy.toml"
    config.write_text('redact_body_keys = ["password"]\nunredact_headers = ["session"]\n', encoding="utf-8")
    monkeypatch.setenv("MCP_PROXY_REDACT_BODY_KEYS", "pin")
    argv = ["--config", str(config), "--upstream", UPSTREAM, "--print-config"]
    argv += ["--redact-body-keys", "api_key", "--redact-headers", "x-jwt", "--redact-headers", "dpop,x-b"]

    code, out, _ = run_main(capsys, *argv, "--unredact-headers", "mcp-session-id")

    assert code == 0
    assert setting_line(out, "redact_body_keys").split() == [
        "redact_body_keys",
        "=",
        '["password",',
        '"pin",',
        '"api_key"]',
        "#",
        f"file:{config}",
        "+",
        "env:MCP_PROXY_REDACT_BODY_KEYS",
        "+",
        "flag:--redact-body-keys",
    ]
    assert setting_line(out, "redact_headers").split()[2:5] == ['["x-jwt",', '"dpop",', '"x-b"]']
    assert setting_line(out, "unredact_headers").split()[2:5] == [
        '["mcp-session-id"]',
        "#",
        "flag:--unredact-headers",
    ]


def test_print_config_never_shows_a_secret(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(capsys, "--admin-token", "tok-very-secret", "--print-config")

    assert code == 0
    assert "tok-very-secret" not in out
    assert setting_line(out, "admin_token").split()[:3] == ["admin_token", "=", '"<set>"']


def test_print_config_masks_the_query_of_the_upstream_and_of_the_otlp_endpoint(
    capsys: pytest.CaptureFixture[str],
) -> None:
    upstream = "http://127.0.0.1:18701/mcp?apikey=UPQUERYSECRET-1&x=2"
    otlp = "http://127.0.0.1:4318/v1/traces?token=OTLPQ-1&x=OTLPPLAIN"
    keys = ["--redact-key", "REDACTKEY-0123456789abcdef", "--state-key", "STATEKEY-0123456789abcdef"]
    code, out, _ = run_main(capsys, "--upstream", upstream, "--otlp-endpoint", otlp, *keys, "--print-config")

    assert code == 0
    for secret in ("UPQUERYSECRET-1", "OTLPQ-1", "OTLPPLAIN", "REDACTKEY", "STATEKEY"):
        assert secret not in out
    assert (
        setting_line(out, "redact_key").split()[2] == setting_line(out, "state_key").split()[2] == '"<set>"'
    )
    assert setting_line(out, "otlp_endpoint").split()[:3] == [
        "otlp_endpoint",
        "=",
        '"http://127.0.0.1:4318/v1/traces?token=<redacted>&x=<redacted>"',
    ]
    assert (
        setting_line(out, "upstream").split()[2]
        == '"http://127.0.0.1:18701/mcp?apikey=<redacted>&x=<redacted>"'
    )


OTEL_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SDK_DISABLED")


def test_print_config_says_when_the_standard_otel_variable_turns_tracing_on(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in OTEL_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318?token=OTELQ-1")

    code, out, _ = run_main(capsys, "--upstream", UPSTREAM, "--print-config")

    assert code == 0
    assert "OTELQ-1" not in out
    assert setting_line(out, "otlp_endpoint").split() == [
        "otlp_endpoint",
        "=",
        "unset",
        "#",
        "default;",
        "tracing",
        "on:",
        "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318?token=<redacted>",
    ]


def test_print_config_says_a_standard_otel_variable_with_a_password_is_refused_and_tracing_is_off(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in OTEL_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:OTELPW-1@127.0.0.1:4318")

    code, out, _ = run_main(capsys, "--upstream", UPSTREAM, "--print-config")

    assert code == 0
    assert "OTELPW-1" not in out
    assert setting_line(out, "otlp_endpoint").split("#", 1)[1] == (
        " default; tracing off: OTEL_EXPORTER_OTLP_ENDPOINT=http://otel:<redacted>@127.0.0.1:4318 "
        "is refused: the URL carries credentials (user:password@); give the collector's credentials "
        "as headers in OTEL_EXPORTER_OTLP_HEADERS instead"
    )


def test_print_config_says_a_standard_otel_variable_asks_for_traces_the_missing_sdk_cannot_send(
    tmp_path: Path,
) -> None:
    code = (
        "import sys; sys.modules['opentelemetry'] = None; "
        "from proxy.cli import main; raise SystemExit(main(sys.argv[1:]))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MCP_PROXY_", "OTEL_"))}
    env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = "http://127.0.0.1:4318/v1/traces"
    done = subprocess.run(
        [sys.executable, "-c", code, "--upstream", UPSTREAM, "--print-config"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert (
        setting_line(done.stdout, "otlp_endpoint")
        .split("#", 1)[1]
        .startswith(
            " default; OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://127.0.0.1:4318/v1/traces asks for traces, "
            "but OpenTelemetry tracing needs the SDK"
        )
    )


def test_print_config_refuses_a_guessed_port_variable_instead_of_showing_the_default_port(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_PROXY_ADMIN_PORT", "9001")

    code, out, err = run_main(capsys, "--upstream", UPSTREAM, "--print-config")

    assert (code, out) == (2, "")
    assert err.startswith(
        "mcp-proxy: unknown environment variable MCP_PROXY_ADMIN_PORT: a port is set with its host, "
        "as MCP_PROXY_ADMIN=HOST:PORT"
    ), err


def test_a_missing_upstream_exits_2_saying_how_to_give_one(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(capsys)

    assert code == 2
    assert out == ""
    assert err == (
        "mcp-proxy: upstream: required (--upstream URL or MCP_PROXY_UPSTREAM, or a stdio server's "
        "command line with --upstream-cmd 'CMD ARGS')\n"
    )


def test_a_bad_listen_address_exits_2_naming_listen_and_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(capsys, "--upstream", UPSTREAM, "--listen", "nowhere")

    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("mcp-proxy: listen (flag --listen): ")
    assert "'nowhere'" in err


@pytest.mark.parametrize("how", ["flag", "env"])
def test_an_empty_admin_token_exits_2_like_a_missing_one_naming_the_setting(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    argv = ["--upstream", UPSTREAM, "--admin", "0.0.0.0:0"]
    if how == "flag":
        argv += ["--admin-token", ""]
    else:
        monkeypatch.setenv("MCP_PROXY_ADMIN_TOKEN", "")
    code, out, err = run_main(capsys, *argv)

    assert code == 2
    assert out == ""
    where = "flag --admin-token" if how == "flag" else "env MCP_PROXY_ADMIN_TOKEN"
    assert err.startswith(f"mcp-proxy: admin_token ({where}): is empty"), err
    assert err.count("\n") == 1


def test_an_upstream_with_userinfo_exits_2_without_echoing_the_credentials(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _out, err = run_main(capsys, "--upstream", "http://bot:hunter2-pass@127.0.0.1:9/mcp")

    assert code == 2
    assert err.startswith("mcp-proxy: upstream (flag --upstream): the URL carries credentials")
    assert "hunter2-pass" not in err
    assert "bot" not in err


def test_an_unknown_key_in_the_config_file_exits_2_naming_it_and_the_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "proxy.toml"
    config.write_text('upstream = "http://u/mcp"\nmax_chain = 5\n', encoding="utf-8")

    code, _, err = run_main(capsys, "--config", str(config))

    assert code == 2
    assert err.count("\n") == 1
    assert "'max_chain'" in err
    assert str(config) in err
    assert "did you mean 'max_chains'?" in err


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A loopback port this test holds bound and listening, so nobody else can take it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def run_cli(*argv: str, cwd: Path, log_format: str = "console") -> subprocess.CompletedProcess[str]:
    """Run the installed `mcp-proxy` console script (the real entry point) outside the repo, its lines
    in `log_format` (console: as a person reads them; its stderr is a pipe, which `auto` gives JSON)."""
    script = Path(sys.executable).parent / "mcp-proxy"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "proxy.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_PROXY_")}
    env["MCP_PROXY_LOG_FORMAT"] = log_format
    return subprocess.run(
        [*command, *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_a_listen_port_already_in_use_exits_2_with_one_line_naming_listen_its_flag_and_what_to_do(
    busy_port: int, tmp_path: Path
) -> None:
    listen = f"127.0.0.1:{busy_port}"

    done = run_cli("--upstream", UPSTREAM, "--listen", listen, "--no-admin-enabled", cwd=tmp_path)

    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == (
        f"mcp-proxy: listen ({listen}, set by flag --listen): Address already in use; another process "
        "serves there, perhaps an mcp-proxy still draining after SIGTERM (it holds the port up to its "
        "drain_grace, 10 s by default): to restart in place, start again once it has exited; else pick "
        "another port with --listen HOST:PORT and point clients at it (--listen 127.0.0.1:0 takes any "
        "free one, logged at start)\n"
    )


@pytest.mark.parametrize(
    ("upstream_host", "listen_host", "era"),
    [("127.0.0.1", "127.0.0.1", "legacy"), ("localhost", "0.0.0.0", "auto")],
)
def test_an_upstream_that_is_the_proxys_own_listener_is_refused_at_start_with_exit_2(
    upstream_host: str, listen_host: str, era: str, tmp_path: Path
) -> None:
    # Served, one request would open thousands of connections to itself (a forced era), or the
    # probe would wait on itself for upstream_timeout (auto).
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    upstream = f"http://{upstream_host}:{port}/mcp"
    listen = f"{listen_host}:{port}"

    done = run_cli(
        "--upstream", upstream, "--listen", listen, "--upstream-era", era, "--no-admin-enabled", cwd=tmp_path
    )

    assert done.returncode == 2
    assert done.stderr == (
        f"mcp-proxy: upstream (http://{upstream_host}:{port}) is this proxy's own listener "
        f"(listen {listen}): every request would come back to the proxy. Point --upstream at the MCP "
        "server's address, or move the proxy with --listen HOST:PORT\n"
    )


def test_a_listen_host_that_is_no_address_of_this_machine_says_which_hosts_work(tmp_path: Path) -> None:
    done = run_cli("--upstream", UPSTREAM, "--listen", "192.0.2.1:0", "--no-admin-enabled", cwd=tmp_path)

    assert done.returncode == 2
    assert done.stderr == (
        "mcp-proxy: listen (192.0.2.1:0, set by flag --listen): Cannot assign requested address; "
        "192.0.2.1 is no address of this machine: use 127.0.0.1, 0.0.0.0 or one of its own (--listen)\n"
    )


def test_print_config_shows_the_health_listener_unset_by_default_and_set_by_its_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = run_main(capsys, "--print-config")
    monkeypatch.setenv("MCP_PROXY_HEALTH", "0.0.0.0:9902")
    code_set, out_set, _ = run_main(capsys, "--print-config")

    assert (code, code_set) == (0, 0)
    assert setting_line(out, "health").split() == ["health", "=", "unset", "#", "default"]
    assert setting_line(out_set, "health").split()[2:] == ['"0.0.0.0:9902"', "#", "env:MCP_PROXY_HEALTH"]


# -- without the `tui` extra ------------------------------------------------------------------------------

TUI_HINT = (
    "mcp-proxy: the TUI needs the tui extra (textual is not installed): "
    "pip install -e '.[tui]' in the mcp-debug-proxy checkout\n"
)


def run_headless(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the CLI with the TUI's packages unimportable, as an install without the `tui` extra has it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_PROXY_")}
    command = [*headless_command(), *argv]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.parametrize(
    "argv",
    [
        ("--upstream", UPSTREAM, "--listen", "127.0.0.1:0", "--no-admin-enabled", "--tui"),
        ("tui", "--attach", "http://127.0.0.1:9901"),
        ("tui", "--open", "capture.jsonl"),
    ],
    ids=["--tui", "tui --attach", "tui --open"],
)
def test_a_tui_command_without_the_tui_extra_exits_2_with_one_line_naming_the_extra(
    argv: tuple[str, ...], tmp_path: Path
) -> None:
    done = run_headless(*argv, cwd=tmp_path)

    assert (done.returncode, done.stdout, done.stderr) == (2, "", TUI_HINT)


def test_the_demo_with_its_tui_but_without_textual_names_the_demo_extra(tmp_path: Path) -> None:
    done = run_headless("demo", "--tui", cwd=tmp_path)

    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "mcp-proxy: the TUI needs the demo extra (textual is not installed): "
        "pip install -e '.[demo]' in the mcp-debug-proxy checkout\n"
    )


def test_print_config_works_without_the_tui_extra(tmp_path: Path) -> None:
    done = run_headless("--upstream", UPSTREAM, "--print-config", cwd=tmp_path)

    assert done.returncode == 0, done.stderr
    assert setting_line(done.stdout, "tui").split()[:3] == ["tui", "=", "false"]


def test_a_capture_file_that_cannot_be_opened_is_blamed_on_capture_not_listen(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    capture = blocker / "capture.jsonl"  # a directory that is a file: cannot be created

    done = run_cli(
        "--upstream",
        UPSTREAM,
        "--listen",
        "127.0.0.1:0",
        "--no-admin-enabled",
        "--capture",
        str(capture),
        cwd=tmp_path,
    )

    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("mcp-proxy: capture (flag --capture): ")
    assert str(capture) in lines[0]


def test_sigusr1_reopens_the_capture_with_the_tui_on_instead_of_killing_the_proxy(tmp_path: Path) -> None:
    """`mcp-proxy --tui` on a terminal (a pty here) treats SIGUSR1 as the plain proxy does: logrotate's
    signal reopens the capture; left to its default action it would kill the proxy mid-screen."""
    capture = tmp_path / "capture.jsonl"
    moved = tmp_path / "capture.1.jsonl"
    primary, secondary = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_PROXY_")} | {"TERM": "xterm"}
    command = [sys.executable, "-c", "from proxy.cli import main; raise SystemExit(main())"]
    flags = ["--tui", "--upstream", UPSTREAM, "--upstream-era", "modern", "--listen", "127.0.0.1:0"]
    flags += ["--no-admin-enabled", "--capture", str(capture), "--log-file", str(tmp_path / "log.jsonl")]
    process = subprocess.Popen(
        command + flags, stdin=secondary, stdout=secondary, stderr=secondary, cwd=tmp_path, env=env
    )
    os.close(secondary)

    def drain() -> None:  # the TUI draws on the pty: keep reading so it never blocks on a full buffer
        with suppress(OSError):
            while os.read(primary, 65536):
                pass

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()

    def wait_for(condition: Callable[[], bool], what: str, seconds: float = 20.0) -> None:
        deadline = time.monotonic() + seconds
        while not condition():
            assert process.poll() is None, f"the proxy exited ({process.returncode}) waiting for {what}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.05)  # polling a file, bounded by the deadline above

    try:
        wait_for(lambda: capture.exists() and capture.stat().st_size > 0, "the capture to be opened")
        capture.rename(moved)
        process.send_signal(signal.SIGUSR1)
        wait_for(capture.exists, "the capture to be reopened at its path")
        assert process.poll() is None, "SIGUSR1 killed the proxy"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        os.close(primary)
        reader.join(timeout=5)


def test_every_setting_flag_has_a_whole_sentence_of_help() -> None:
    """`--help` shows each setting's first sentence whole, not its first wrapped line cut mid-phrase."""
    helps = {action.dest: action.help for action in build_parser()._actions}
    for name in Settings.model_fields:
        text = helps[name] or ""
        assert text.endswith((".", ")")), f"{name}: {text!r}"
        assert text.count("(") == text.count(")"), f"{name}: {text!r}"
    assert helps["max_method_length"] == (
        "Longest JSON-RPC method accepted, in characters; a method must also be visible ASCII "
        "(no spaces or control characters). (default: 256)"
    )


def test_help_shows_each_settings_default_and_the_values_a_choice_takes(tmp_path: Path) -> None:
    done = run_cli("--help", cwd=tmp_path)
    text = " ".join(done.stdout.split())

    assert done.returncode == 0, done.stderr
    for usage in ("[--bridge {auto,off}]", "[--upstream-era {auto,legacy,modern}]", "[--listen HOST:PORT]"):
        assert usage in text
    assert "before answering the client 504. (default: 60.0)" in text
    assert "or modern skips the probe. (default: auto)" in text
    assert "Whether the admin API is served at all. (default: on)" in text


def test_every_default_help_shows_is_the_default_print_config_shows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    helps = {action.dest: action.help or "" for action in build_parser()._actions}
    code, out, _ = run_main(capsys, "--upstream", UPSTREAM, "--print-config")

    assert code == 0
    for name in Settings.model_fields:
        value = setting_line(out, name).split("=", 1)[1].split("#", 1)[0].strip()
        if name == "upstream" or value in ("unset", "[]"):
            assert "(default:" not in helps[name], name
            continue
        shown = {"true": "on", "false": "off"}.get(value, value.strip('"'))
        assert helps[name].endswith(f"(default: {shown})"), (name, helps[name])


@pytest.mark.parametrize(
    "argv",
    [
        ("--upstream", UPSTREAM, "--listen", "127.0.0.1:0", "--no-admin-enabled", "--tui"),
        ("tui", "--open", str(TOUR)),
    ],
    ids=["--tui", "tui --open"],
)
def test_a_tui_without_a_terminal_exits_2_saying_so_instead_of_drawing_into_a_pipe(
    argv: tuple[str, ...], tmp_path: Path
) -> None:
    done = run_cli(*argv, cwd=tmp_path)  # stdout is a pipe here, stdin no terminal

    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith("mcp-proxy: the TUI needs a terminal on stdin and stdout"), done.stderr


def test_a_mistyped_flag_gets_one_line_the_flag_meant_and_where_the_help_is(tmp_path: Path) -> None:
    done = run_cli("--upstrem", UPSTREAM, cwd=tmp_path)

    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"mcp-proxy: error: unrecognized arguments: --upstrem {UPSTREAM} (did you mean --upstream?)",
        "Run `mcp-proxy --help` for the options.",
    ]


@pytest.mark.parametrize(
    ("argv", "first_line"),
    [
        (
            ("--upstream", UPSTREAM, "--max-rounds", "x"),
            "mcp-proxy: error: argument --max-rounds: invalid int value: 'x'",
        ),
        (("--upstream",), "mcp-proxy: error: argument --upstream: expected one argument"),
        (
            ("replay", "run.jsonl", "--chain", "r1", "--all"),
            "mcp-proxy replay: error: argument --all: not allowed with argument --chain",
        ),
    ],
    ids=["bad value", "missing value", "flags that exclude each other"],
)
def test_an_error_about_a_flag_typed_right_suggests_no_other_spelling(
    tmp_path: Path, argv: tuple[str, ...], first_line: str
) -> None:
    done = run_cli(*argv, cwd=tmp_path)

    assert done.returncode == 2
    assert done.stderr.splitlines()[0] == first_line


def test_a_subcommands_mistake_names_the_subcommand_and_its_help(tmp_path: Path) -> None:
    done = run_cli("export", "--jsn", "out.json", "run.jsonl", cwd=tmp_path)

    assert done.returncode == 2
    assert "usage:" not in done.stderr
    assert done.stderr.splitlines()[-1] == "Run `mcp-proxy export --help` for the options."


@pytest.mark.parametrize(
    ("argv", "lines"),
    [
        (
            ("demo", "--tuii"),
            [
                "mcp-proxy demo: error: unrecognized arguments: --tuii (did you mean --tui?)",
                "Run `mcp-proxy demo --help` for the options.",
            ],
        ),
        (
            ("tui", "--open", "run.jsonl", "--histroy", "5"),
            [
                "mcp-proxy tui: error: unrecognized arguments: --histroy 5 (did you mean --history?)",
                "Run `mcp-proxy tui --help` for the options.",
            ],
        ),
    ],
    ids=["demo", "tui"],
)
def test_an_unknown_flag_of_demo_or_tui_is_answered_by_that_subcommand_with_its_near_flag(
    tmp_path: Path, argv: tuple[str, ...], lines: list[str]
) -> None:
    done = run_cli(*argv, cwd=tmp_path)

    assert (done.returncode, done.stderr.splitlines()) == (2, lines)


def test_print_config_to_a_pipe_whose_reader_left_ends_quietly_like_cat() -> None:
    status, err = run_into_a_closed_pipe("--upstream", "http://127.0.0.1:9/mcp", "--print-config")
    assert status == 141
    assert b"Broken pipe" not in err
    assert b"Traceback" not in err


def test_a_secret_typed_as_a_flag_is_named_for_a_warning_and_one_from_the_environment_is_not() -> None:
    typed = load_settings(
        env={"MCP_PROXY_STATE_KEY": "s" * 40},
        flags={"admin_token": "tok-123", "upstream": "http://h:1/mcp?api_key=k-1", "redact_key": None},
    )
    plain = load_settings(env={"MCP_PROXY_ADMIN_TOKEN": "tok-123"}, flags={"upstream": "http://h:1/mcp"})

    assert secrets_on_command_line(typed) == ["--admin-token", "--upstream"]
    assert secrets_on_command_line(plain) == []
    in_path = load_settings(flags={"upstream": "https://h/s/ZDk3OGE4YjctNWY2Ny00NGFl/mcp"})
    assert secrets_on_command_line(in_path) == ["--upstream"]


PLANTED_KEY = "k-planted-31337"
PLANTED_TOKEN = "tok-planted-4242"


@pytest.mark.parametrize("mode", ["headless", "--tui", "stdio"])
def test_every_way_of_running_warns_of_secrets_typed_on_its_command_line_naming_never_their_values(
    mode: str, tmp_path: Path
) -> None:
    """`ps` shows a secret typed as a flag to every user of the machine: the headless proxy, the
    proxy with its TUI (on a pty here) and `mcp-proxy stdio` each warn once, by flag name."""
    log = tmp_path / "log.jsonl"
    flags = ["--upstream", f"http://127.0.0.1:9/mcp?api_key={PLANTED_KEY}", "--upstream-era", "modern"]
    flags += ["--admin", "127.0.0.1:0", "--admin-token", PLANTED_TOKEN, "--log-file", str(log)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCP_PROXY_")} | {"TERM": "xterm"}
    command = [sys.executable, "-c", "from proxy.cli import main; raise SystemExit(main())"]
    primary: int | None = None
    pipes: dict[str, Any] = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL}
    pipes["stderr"] = subprocess.PIPE
    if mode == "stdio":  # stdin at its end at once: the stdio proxy serves nobody and exits
        argv = [*command, "stdio", *flags]
    elif mode == "--tui":
        primary, secondary = pty.openpty()
        argv = [*command, "--tui", "--listen", "127.0.0.1:0", *flags]
        pipes = {"stdin": secondary, "stdout": secondary, "stderr": secondary}
    else:
        argv = [*command, "--listen", "127.0.0.1:0", *flags]
    process = subprocess.Popen(argv, cwd=tmp_path, env=env, **pipes)
    if primary is not None:
        os.close(pipes["stdin"])
        threading.Thread(target=_drain, args=(primary,), daemon=True).start()
    try:
        deadline = time.monotonic() + 30
        while b"secret_on_command_line" not in (log.read_bytes() if log.exists() else b""):
            assert time.monotonic() < deadline, f"no warning logged; the proxy exited {process.poll()}"
            time.sleep(0.05)  # polling a file, bounded by the deadline above
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=10)
        if primary is not None:
            os.close(primary)
    warnings = [json.loads(line) for line in log.read_text().splitlines() if "secret_on_command_line" in line]
    assert len(warnings) == 1
    assert warnings[0]["flags"] == ["--admin-token", "--upstream"]
    said = log.read_bytes() + (err or b"")
    assert PLANTED_KEY.encode() not in said
    assert PLANTED_TOKEN.encode() not in said


def _drain(primary: int) -> None:
    """Read what a TUI draws on its pty, so it never blocks on a full buffer."""
    with suppress(OSError):
        while os.read(primary, 65536):
            pass


def test_with_json_logs_a_refused_start_is_one_json_line_a_log_shipper_reads(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MCP_PROXY_LOG_FORMAT", "json")
    monkeypatch.setenv("MCP_PROXY_MAX_CHAINS", "lots")

    code, out, err = run_main(capsys, "--upstream", UPSTREAM)

    (line,) = err.splitlines()
    refused = json.loads(line)
    assert (code, out) == (2, "")
    assert (refused["event"], refused["level"]) == ("start_refused", "error")
    assert refused["error"].startswith("max_chains (env MCP_PROXY_MAX_CHAINS): ")
    code, _, err = run_main(capsys, "--log-format", "console", "--upstream", UPSTREAM)
    assert err.startswith("mcp-proxy: max_chains (env MCP_PROXY_MAX_CHAINS): ")


@pytest.mark.parametrize("why", ["address in use", "credentials in the upstream URL"])
def test_with_the_default_log_format_and_stderr_piped_a_refused_start_is_json_like_every_other_line(
    why: str, busy_port: int, tmp_path: Path
) -> None:
    upstream = "http://admin:x@127.0.0.1:9/mcp" if why.startswith("credentials") else UPSTREAM
    listen = f"127.0.0.1:{busy_port}"
    # auto, the default; stderr a pipe, as under a container, systemd or CI
    done = run_cli(
        "--upstream", upstream, "--listen", listen, "--no-admin-enabled", cwd=tmp_path, log_format="auto"
    )

    assert done.returncode == 2, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines()]  # every line JSON, the refusal too
    refused = lines[-1]
    assert (refused["event"], refused["level"]) == ("start_refused", "error"), lines
    assert ("Address already in use" if why == "address in use" else "credentials") in refused["error"]
    assert "admin:x" not in done.stderr
