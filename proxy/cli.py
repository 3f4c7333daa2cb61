"""`mcp-proxy`: the command line. Flags are generated from `Settings`, so each setting is declared once.

The UI is imported lazily, only when a TUI is asked for, so the plain proxy never loads textual (an
optional extra: a headless install has none).
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import os
import re
import signal
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, get_args, get_origin
from urllib.parse import urlsplit

from pydantic import SecretStr
from pydantic.fields import FieldInfo

from proxy import __version__, early_signals
from proxy.cli_parser import CliParser
from proxy.cli_pipes import print_out
from proxy.config import ENV_PREFIX, RULE_LISTS, ConfigError, Settings, flag_name
from proxy.config_load import LoadedSettings, load_settings
from proxy.config_print import render_settings
from proxy.record.capture import CaptureError
from proxy.wire.path_keys import credential_segment


def _flag_type(annotation: Any) -> Any:
    args = get_args(annotation)
    if annotation is bool:
        return bool
    if annotation is int or int in args:
        return int
    if annotation is float or float in args:
        return float
    if Path in args:
        return Path
    return str


_SENTENCE_END = re.compile(r"(?<=\.)\s+(?=[A-Z`])")


def summary(description: str) -> str:
    """The first sentence of a setting's description, for `--help` (descriptions wrap mid-sentence)."""
    return _SENTENCE_END.split(" ".join(description.split()), maxsplit=1)[0]


_METAVARS = {int: "N", float: "SECONDS", Path: "PATH"}
"""What a flag's value is, by type, for the usage line (every float setting is a number of seconds)."""

_STRING_METAVARS = {
    "upstream": "URL",
    "otlp_endpoint": "URL",
    "upstream_cmd": "'CMD ARGS'",
    "listen": "HOST:PORT",
    "admin": "HOST:PORT",
    "health": "HOST:PORT",
    "sse_path": "PATH",
    "sse_messages_path": "PATH",
}


def _metavar(name: str, annotation: Any) -> str | None:
    """`{auto,off}` for a choice, else what the value is (`N`, `SECONDS`, `HOST:PORT`); None: the name."""
    if get_origin(annotation) is Literal:
        return "{" + ",".join(str(choice) for choice in get_args(annotation)) + "}"
    kind = _flag_type(annotation)
    return _STRING_METAVARS.get(name) if kind is str else _METAVARS.get(kind)


def _default_note(info: FieldInfo) -> str:
    """` (default: 60.0)` after a setting's help; nothing for one unset (or empty) unless given."""
    default = info.get_default(call_default_factory=True)
    if default is None or default == []:
        return ""
    shown = ("on" if default else "off") if isinstance(default, bool) else str(default)
    return f" (default: {shown})".replace("%", "%%")  # argparse formats help with %


def add_setting_flags(parser: argparse.ArgumentParser, leave_out: frozenset[str] = frozenset()) -> None:
    """One flag per Settings field, named `--field-name`, defaulting to 'not typed' (None); none for
    the fields in `leave_out` (settings a command has no use for: its help lists only what acts)."""
    group = parser.add_argument_group(
        "settings (each also a TOML key, such as upstream_timeout or faults, and the variable named "
        "after it: MCP_PROXY_UPSTREAM_TIMEOUT, MCP_PROXY_FAULTS)"
    )
    for name, info in Settings.model_fields.items():
        if name in leave_out:
            continue
        flag = flag_name(name)
        help_text = summary(info.description or "").replace("%", "%%") + _default_note(info)
        kind = _flag_type(info.annotation)
        if name in RULE_LISTS:  # one rule per flag: a rule may hold commas
            help_text += f" Repeat the flag per rule; in {ENV_PREFIX}{name.upper()}, rules are split on `;`."
            group.add_argument(flag, dest=name, action="append", default=None, metavar="RULE", help=help_text)
        elif kind is bool:
            group.add_argument(
                flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        elif SecretStr in get_args(info.annotation):
            group.add_argument(flag, dest=name, default=None, metavar="SECRET", help=help_text)
        elif get_origin(info.annotation) is list:  # repeated, each a comma-separated list
            group.add_argument(flag, dest=name, action="append", default=None, metavar="A,B", help=help_text)
        else:
            metavar = _metavar(name, info.annotation)
            group.add_argument(flag, dest=name, type=kind, default=None, metavar=metavar, help=help_text)


def build_parser() -> argparse.ArgumentParser:
    """The `mcp-proxy` argument parser (run, tui, demo)."""
    parser = CliParser(
        prog="mcp-proxy",
        description="Debugging proxy for MCP: logs round-trips, groups chains, bridges eras.",
        epilog="Also: `mcp-proxy tui --attach URL | --open FILE` (watch chains), "
        "`mcp-proxy export --har|--json|--ndjson OUT CAPTURE` (HAR, chains for scripts), "
        "`mcp-proxy export --otlp URL CAPTURE` (its spans to a collector), "
        "`mcp-proxy export --curl CHAIN CAPTURE` (a chain's requests as curl commands), "
        "`mcp-proxy mock CAPTURE --listen HOST:PORT` (a capture served back as an MCP server), "
        "`mcp-proxy stdio --upstream URL | -- CMD ARGS...` (the proxy as a stdio server), "
        "`mcp-proxy replay CAPTURE --chain ID | --all [--upstream URL]` (chains sent again to a live "
        "server, in either era, and compared) and "
        "`mcp-proxy demo [--tui]` (a tour with bundled servers); each has its own --help.",
    )
    parser.add_argument("--version", action="version", version=f"mcp-proxy {__version__}")
    parser.add_argument(
        "--config", type=Path, default=None, help="TOML file of settings (also MCP_PROXY_CONFIG)"
    )
    parser.add_argument(
        "--print-config", action="store_true", help="print each effective setting and its source, then exit"
    )
    add_setting_flags(parser)
    return parser


def load(args: argparse.Namespace) -> LoadedSettings:
    """Settings from defaults < file < env < the flags the user typed."""
    flags = {
        name: getattr(args, name) for name in Settings.model_fields if getattr(args, name, None) is not None
    }
    return load_settings(config_path=args.config, flags=flags)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `mcp-proxy` console script."""
    words = list(sys.argv[1:] if argv is None else argv)
    if words and words[0] in ("tui", "demo"):
        from proxy.cli_tui import main as tui_main

        return tui_main(words)
    if words and words[0] == "export":
        from proxy.cli_export import main as export_main

        return export_main(words[1:])
    if words and words[0] == "stdio":
        from proxy.cli_stdio import main as stdio_main

        return stdio_main(words[1:])
    if words and words[0] == "mock":
        from proxy.cli_mock import main as mock_main

        return mock_main(words[1:])
    if words and words[0] == "replay":
        from proxy.cli_replay import main as replay_main

        return replay_main(words[1:])
    parser = build_parser()
    args = parser.parse_args(words)
    try:
        loaded = load(args)
    except ConfigError as exc:
        return refuse_start(str(exc), args.log_format or os.environ.get(f"{ENV_PREFIX}LOG_FORMAT"))
    if args.print_config:
        return print_out(render_settings(loaded))
    settings = loaded.settings
    if not settings.upstream and not settings.upstream_cmd:
        return refuse_start(
            "upstream: required (--upstream URL or MCP_PROXY_UPSTREAM, or a stdio server's command line "
            "with --upstream-cmd 'CMD ARGS')",
            settings.log_format,
        )
    if settings.otlp_endpoint:
        from proxy.record.otlp_setup import missing_sdk

        missing = missing_sdk()
        if missing:
            source = loaded.sources.get("otlp_endpoint", "default").replace(":", " ", 1)
            return refuse_start(f"otlp_endpoint ({source}): {missing}", settings.log_format)
    if settings.tui:
        from proxy.cli_tui import run_with_tui

        early_signals.uninstall()  # the TUI's own keys and handlers decide from here
        return 0 if early_signals.pending() is not None else run_with_tui(loaded)
    return run_proxy(loaded)


def admin_may_move(loaded: LoadedSettings) -> bool:
    """Whether the admin API may take a free port when its own is taken: only if the user never set it."""
    return loaded.sources.get("admin", "default") == "default"


def run_proxy(loaded: LoadedSettings) -> int:
    """Run the proxy until SIGINT (stop now) or SIGTERM (drain for drain_grace seconds), then exit 0."""
    from proxy import logs
    from proxy.runtime import Proxy
    from proxy.runtime_tuning import tune_gc, tune_malloc, use_fast_loop

    settings = loaded.settings
    try:
        log_file = logs.configure(level=settings.log_level, fmt=settings.log_format, file=settings.log_file)
    except logs.LogFileError as exc:
        return refuse_start(start_failure(loaded, exc).removeprefix("mcp-proxy: "), settings.log_format)
    try:
        proxy = Proxy(settings, admin_fallback=admin_may_move(loaded), keep_chains=settings.admin_enabled)
        warn_of_settings(loaded)
        tune_gc()
        tune_malloc()
        with asyncio.Runner(loop_factory=use_fast_loop()) as runner:
            return runner.run(serve_until_signalled(proxy))
    except OSError as exc:
        logs.flush()  # the lines logged before it come first
        return refuse_start(start_failure(loaded, exc).removeprefix("mcp-proxy: "), settings.log_format)
    finally:
        logs.flush()
        if log_file is not None:
            log_file.close()


def refuse_start(reason: str, log_format: str | None) -> int:
    """Say in one line why the proxy does not start, and exit 2: a JSON object when the logs are JSON
    (`log_format json`, as the image sets, or `auto` with stderr no terminal, as every other line
    decides), so a log shipper reads it like every other line."""
    from proxy.logs import choose_format

    requested = (log_format or "auto").strip().lower()
    if choose_format(requested, sys.stderr) == "json":
        stamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        line = json.dumps({"error": reason, "event": "start_refused", "level": "error", "timestamp": stamp})
        print(line, file=sys.stderr)
    else:
        print(f"mcp-proxy: {reason}", file=sys.stderr)
    return 2


def warn_of_settings(loaded: LoadedSettings) -> None:
    """Say at start what the settings do that their author may not see: secrets typed on the command
    line, and file keys a variable overrides. Every way of running the proxy (headless,
    `--tui`, `stdio`) says so once logging is set up."""
    from proxy import logs

    for name, file_source in loaded.overridden.items():
        logs.get_logger().warning(
            "config_key_overridden",
            setting=name,
            file=file_source.removeprefix("file:"),
            by=loaded.sources[name].replace(":", " ", 1),
            hint="the file's value has no effect; unset the variable (an image's ENV sets some) to let "
            "the file decide",
        )
    warn_of_secrets_on_command_line(loaded)


def warn_of_secrets_on_command_line(loaded: LoadedSettings) -> None:
    """Warn, naming the flags and never their values, of secrets typed on the command line."""
    from proxy import logs

    if exposed := secrets_on_command_line(loaded):
        logs.get_logger().warning(
            "secret_on_command_line",
            flags=exposed,
            hint="any user of this machine can read a process's command line (ps, /proc); give "
            "secrets as MCP_PROXY_* variables or in the --config file instead",
        )


def secrets_on_command_line(loaded: LoadedSettings) -> list[str]:
    """The flags that put a secret in the process's command line: a secret setting (`--admin-token`,
    `--redact-key`, `--state-key`) or an `--upstream` URL with a query value or a path segment that may
    be a credential."""
    exposed = [
        flag_name(name)
        for name, info in Settings.model_fields.items()
        if SecretStr in get_args(info.annotation) and loaded.sources.get(name, "").startswith("flag:")
    ]
    upstream = loaded.settings.upstream
    typed = loaded.sources.get("upstream", "").startswith("flag:")
    if typed and upstream:
        parts = urlsplit(upstream)
        if "=" in parts.query or any(credential_segment(s) for s in parts.path.split("/")):
            exposed.append("--upstream")
    return exposed


def start_failure(loaded: LoadedSettings, exc: OSError) -> str:
    """The one line that blames the setting at fault when the proxy cannot start, and what to do."""
    from proxy.logs import LogFileError
    from proxy.transport.health import ListenError
    from proxy.transport.self_loop import UpstreamIsThisProxy

    if isinstance(exc, UpstreamIsThisProxy):
        return f"mcp-proxy: {exc}"
    if isinstance(exc, CaptureError):  # an OSError too, but the file is at fault, not the listener
        source = loaded.sources.get("capture", "default").replace(":", " ", 1)
        return f"mcp-proxy: capture ({source}): {exc}"
    if isinstance(exc, LogFileError):
        source = loaded.sources.get("log_file", "default").replace(":", " ", 1)
        return f"mcp-proxy: {exc.strerror}".replace("log_file:", f"log_file ({source}):", 1)
    setting = exc.setting if isinstance(exc, ListenError) else "listen"  # the front's bind failed
    address = str(getattr(loaded.settings, setting))
    source = loaded.sources.get(setting, "default")
    where = "the default" if source == "default" else "set by " + source.replace(":", " ", 1)
    # asyncio's own text repeats the address; the C library's names only the cause
    code = exc.errno
    cause = os.strerror(code) if code is not None and code in errno.errorcode else exc.strerror or str(exc)
    return f"mcp-proxy: {setting} ({address}, {where}): {cause}; {bind_hint(setting, address, exc)}"


def bind_hint(setting: str, address: str, exc: OSError) -> str:
    """What the user can do about a listener that could not bind `address`."""
    flag = flag_name(setting)
    host = address.rpartition(":")[0]
    if exc.errno == errno.EADDRINUSE:
        if setting == "listen":  # clients are pointed at this port: never move it behind their back
            grace = Settings.model_fields["drain_grace"].default
            return (
                "another process serves there, perhaps an mcp-proxy still draining after SIGTERM (it "
                f"holds the port up to its drain_grace, {grace:g} s by default): to restart in place, "
                f"start again once it has exited; else pick another port with {flag} HOST:PORT and point "
                f"clients at it ({flag} {host}:0 takes any free one, logged at start)"
            )
        return f"pick another port, or {flag} {host}:0 for any free one (logged at start)"
    if exc.errno == errno.EACCES:
        return f"ports below 1024 need privileges: pick a port from 1024 up ({flag} HOST:PORT)"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{host} is no address of this machine: use 127.0.0.1, 0.0.0.0 or one of its own ({flag})"
    return f"check the host and port ({flag} HOST:PORT)"


async def serve_until_signalled(proxy: Any) -> int:
    """Serve until a signal: SIGTERM drains (a second signal cuts the drain), SIGINT stops at once.
    A signal during the start (the era probe waiting on a silent upstream) stops it at once too, and
    one that came before these handlers were in (`proxy.early_signals`) stops it before it starts.

    SIGHUP (the terminal closed) stops at once like SIGINT, so no proxy is left holding its ports
    behind a closed terminal; SIGUSR1 reopens the capture file and the log file, for external log
    rotation (as nginx does).
    """
    from proxy.cli_signals import start_unless_stopped
    from proxy.logs import get_logger

    loop = asyncio.get_running_loop()
    signals: asyncio.Queue[signal.Signals] = asyncio.Queue()
    asked = asyncio.Event()

    def signalled(sig: signal.Signals) -> None:
        signals.put_nowait(sig)
        asked.set()

    stopping = early_signals.STOP_SIGNALS
    for sig in stopping:
        loop.add_signal_handler(sig, signalled, sig)
    loop.add_signal_handler(signal.SIGUSR1, proxy.reopen_files)
    if (early := early_signals.pending()) is not None:  # came before these handlers: nothing starts
        signalled(early)
    try:
        if asked.is_set() or not await start_unless_stopped(proxy.start(), asked):
            get_logger().info("stopped_while_starting", signal=signals.get_nowait().name)
            return 0
        first = await signals.get()
        for sig in stopping:
            loop.add_signal_handler(sig, proxy.hurry)
        await proxy.drain(proxy.settings.drain_grace if first is signal.SIGTERM else 0.0)
    finally:
        await proxy.stop()
        for sig in (*stopping, signal.SIGUSR1):
            loop.remove_signal_handler(sig)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
