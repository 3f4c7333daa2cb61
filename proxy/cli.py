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
    parser = build_parser()
    args = parser.parse_args(argv)
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
    return run_proxy(settings)


def run_proxy(settings: Settings) -> int:
    """Run the proxy until SIGINT/SIGTERM."""
    from proxy import logs
    from proxy.runtime import Proxy

    log_file = logs.configure(level=settings.log_level, fmt=settings.log_format, file=settings.log_file)
    try:
        return asyncio.run(_serve(Proxy(settings)))
    except CaptureError as exc:  # an OSError too, but the file is at fault, not the listener
        print(f"mcp-proxy: capture: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"mcp-proxy: listen ({settings.listen}): {exc.strerror or exc}", file=sys.stderr)
        return 2
    finally:
        if log_file is not None:
            log_file.close()


async def _serve(proxy: Any) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await proxy.run(stop)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
