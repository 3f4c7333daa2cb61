"""`mcp-proxy`: the command line. Flags are generated from `Settings`, so each setting is declared once.

The UI is imported lazily, only when a TUI is asked for, so the plain proxy never loads textual.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, get_args

from pydantic import SecretStr

from proxy import __version__
from proxy.config import ConfigError, LoadedSettings, Settings, flag_name, load_settings, render_settings
from proxy.record.capture import CaptureError


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


def add_setting_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per Settings field, named `--field-name`, defaulting to 'not typed' (None)."""
    group = parser.add_argument_group("settings (each also MCP_PROXY_<NAME> or a TOML key)")
    for name, info in Settings.model_fields.items():
        flag = flag_name(name)
        help_text = (info.description or "").split("\n")[0]
        kind = _flag_type(info.annotation)
        if kind is bool:
            group.add_argument(
                flag, dest=name, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        elif SecretStr in get_args(info.annotation):
            group.add_argument(flag, dest=name, default=None, metavar="SECRET", help=help_text)
        else:
            group.add_argument(flag, dest=name, type=kind, default=None, help=help_text)


def build_parser() -> argparse.ArgumentParser:
    """The `mcp-proxy` argument parser (run, tui, demo)."""
    parser = argparse.ArgumentParser(
        prog="mcp-proxy",
        description="Debugging proxy for MCP: logs round-trips, groups chains, bridges eras.",
        epilog="Also: `mcp-proxy tui --attach URL | --open FILE` (watch chains) and "
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
    parser = build_parser()
    args = parser.parse_args(words)
    try:
        loaded = load(args)
    except ConfigError as exc:
        print(f"mcp-proxy: {exc}", file=sys.stderr)
        return 2
    if args.print_config:
        print(render_settings(loaded))
        return 0
    settings = loaded.settings
    if not settings.upstream:
        print("mcp-proxy: upstream: required (--upstream URL or MCP_PROXY_UPSTREAM)", file=sys.stderr)
        return 2
    if settings.tui:
        from proxy.cli_tui import run_with_tui

        return run_with_tui(settings)
    return run_proxy(settings)


def run_proxy(settings: Settings) -> int:
    """Run the proxy until SIGINT (stop now) or SIGTERM (drain for drain_grace seconds), then exit 0."""
    from proxy import logs
    from proxy.runtime import Proxy, tune_gc, use_fast_loop

    log_file = logs.configure(level=settings.log_level, fmt=settings.log_format, file=settings.log_file)
    try:
        proxy = Proxy(settings)
        tune_gc()
        with asyncio.Runner(loop_factory=use_fast_loop()) as runner:
            return runner.run(_serve(proxy))
    except OSError as exc:
        print(start_failure(settings, exc), file=sys.stderr)
        return 2
    finally:
        if log_file is not None:
            log_file.close()


def start_failure(settings: Settings, exc: OSError) -> str:
    """The one line that blames the setting at fault when the proxy cannot start."""
    from proxy.transport.admin import AdminListenError

    if isinstance(exc, CaptureError):  # an OSError too, but the file is at fault, not the listener
        return f"mcp-proxy: capture: {exc}"
    if isinstance(exc, AdminListenError):
        return f"mcp-proxy: admin ({settings.admin}): {exc.strerror or exc}"
    return f"mcp-proxy: listen ({settings.listen}): {exc.strerror or exc}"


async def _serve(proxy: Any) -> int:
    """Serve until a signal: SIGTERM drains (a second signal cuts the drain), SIGINT stops at once.

    SIGHUP reopens the capture file, for external log rotation.
    """
    loop = asyncio.get_running_loop()
    signals: asyncio.Queue[signal.Signals] = asyncio.Queue()
    stopping = (signal.SIGINT, signal.SIGTERM)
    for sig in stopping:
        loop.add_signal_handler(sig, signals.put_nowait, sig)
    loop.add_signal_handler(signal.SIGHUP, proxy.reopen_capture)
    try:
        await proxy.start()
        first = await signals.get()
        for sig in stopping:
            loop.add_signal_handler(sig, proxy.hurry)
        await proxy.drain(proxy.settings.drain_grace if first is signal.SIGTERM else 0.0)
    finally:
        await proxy.stop()
        for sig in (*stopping, signal.SIGHUP):
            loop.remove_signal_handler(sig)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
