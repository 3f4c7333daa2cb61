"""The CLI's TUI half: `mcp-proxy tui --attach URL | --open FILE`, `mcp-proxy demo`, and `--tui`.

Kept out of `proxy.cli` so the plain proxy's command line never imports textual: `proxy.cli` imports
this module only when one of these commands is asked for, and this module imports `ui` (and the
demo's `mcp` SDK) only inside the functions that need them. The TUI's packages are an extra
(`mcp-debug-proxy[tui]`) that a headless install, the Docker image's among them, leaves out, so every
TUI command first checks they import and otherwise says in one line how to install them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from proxy import install_hint
from proxy.cli_parser import CliParser
from proxy.config_load import LoadedSettings
from proxy.record.capture import CaptureError, CaptureFormatError, CaptureReader

if TYPE_CHECKING:
    from proxy.flows.bus import Subscription
    from proxy.logs import LogKeeper
    from proxy.replay.runner import TuiReplayer
    from proxy.runtime import Proxy
    from ui.app import ProxyTui

TOKEN_ENV = "MCP_PROXY_ADMIN_TOKEN"
"""Where `tui --attach` finds the admin token when `--token` is not given."""

OWN_PACKAGES = frozenset({"ui", "proxy"})
"""Top-level packages of this project: one of them failing to import is a bug, not a missing extra."""


def no_terminal() -> str | None:
    """None when stdin and stdout are a terminal; else the line saying the TUI needs one (drawn into a
    pipe or a file it would leave escape codes there and wait for keys nobody can press)."""
    if sys.stdin.isatty() and sys.stdout.isatty():
        return None
    return (
        "mcp-proxy: the TUI needs a terminal on stdin and stdout (here one is a pipe or a file); "
        "run it in a terminal (without one, follow the proxy's log or export its capture)"
    )


def tui_missing(extra: str = "tui") -> str | None:
    """None when the TUI's packages import; else the line naming what is missing and the extra to install."""
    try:
        import ui.app
        import ui.feeds  # noqa: F401 - imported only to learn whether its dependencies are installed
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if not missing or missing in OWN_PACKAGES:
            raise
        return (
            f"mcp-proxy: the TUI needs the {extra} extra ({missing} is not installed): {install_hint(extra)}"
        )
    return None


def build_tui_parser() -> argparse.ArgumentParser:
    """The parser of `mcp-proxy tui` and `mcp-proxy demo`."""
    parser = CliParser(prog="mcp-proxy")
    commands = parser.add_subparsers(dest="command", required=True)
    tui = commands.add_parser("tui", help="watch chains: attach to a running proxy or open a capture")
    source = tui.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--attach", metavar="URL", help="admin API of a running proxy, e.g. http://127.0.0.1:9901"
    )
    source.add_argument("--open", metavar="FILE", type=Path, help="a JSONL capture written with --capture")
    tui.add_argument("--token", default=None, help=f"admin API bearer token (also {TOKEN_ENV})")
    tui.add_argument(
        "--history", type=int, default=500, help="recent chains to fetch on attach (default 500)"
    )
    tui.add_argument(
        "--upstream",
        metavar="URL",
        default=None,
        help="the server `r` replays a chain against (default: the attached proxy's upstream, or the "
        "one the capture recorded)",
    )
    demo = commands.add_parser(
        "demo", help="bundled servers, proxies and clients of both eras (needs [demo])"
    )
    demo.add_argument("--tui", action="store_true", help="show the chains live in the TUI")
    demo.add_argument("--json", action="store_true", help="print the results as JSON")
    for command in (tui, demo):  # a word it does not know is its mistake, answered with its own flags
        command.set_defaults(command_parser=command)
    return parser


def main(argv: Sequence[str]) -> int:
    """Run `tui` or `demo` (argv starts with the subcommand)."""
    args, unknown = build_tui_parser().parse_known_args(argv)
    if unknown:
        args.command_parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "demo":
        return run_demo(tui=args.tui, as_json=args.json)
    if (missing := tui_missing()) is not None:
        print(missing, file=sys.stderr)
        return 2
    if args.open is not None:
        return open_capture(args.open, args.upstream)
    return attach(args.attach, attach_token(args.token, os.environ), args.history, args.upstream)


def attach_token(given: str | None, environ: Mapping[str, str]) -> str | None:
    """The admin token to attach with: `--token`, else the proxy's own variable, read as the proxy
    reads it (without the newline a secret file leaves)."""
    return (given or environ.get(TOKEN_ENV) or "").strip() or None


def open_capture(path: Path, upstream: str | None = None) -> int:
    """`tui --open FILE`: check the file is a readable capture, then browse it."""
    try:
        CaptureReader(path).close()
    except (CaptureError, CaptureFormatError) as exc:
        print(f"mcp-proxy: capture: {exc}", file=sys.stderr)
        return 2
    if (terminal := no_terminal()) is not None:
        print(terminal, file=sys.stderr)
        return 2
    from ui.app import ProxyTui
    from ui.feeds import CaptureFeed
    from ui.model import CAPTURE_CHAINS

    ProxyTui(CaptureFeed(path), max_chains=CAPTURE_CHAINS, replayer=_replayer(upstream)).run()
    return 0


def attach(url: str, token: str | None, history: int, upstream: str | None = None) -> int:
    """`tui --attach URL`: follow a running proxy's admin feed, reconnecting when it restarts."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        print(f"mcp-proxy: --attach: not an http(s) URL: {url!r}", file=sys.stderr)
        return 2
    if (terminal := no_terminal()) is not None:
        print(terminal, file=sys.stderr)
        return 2
    from ui.app import ProxyTui
    from ui.desk_http import HttpDesk
    from ui.feeds import AttachFeed

    feed = AttachFeed(url, token, history=history)
    ProxyTui(feed, desk=HttpDesk(url, token), replayer=_replayer(upstream)).run()
    return 0


def _replayer(upstream: str | None) -> TuiReplayer:
    """The TUI's `r` outside a proxy process: the replay's own proxy logs nowhere (the TUI owns the
    terminal)."""
    from proxy import logs
    from proxy.replay.runner import for_tui

    logs.configure(quiet=True)
    return for_tui(upstream)


def run_demo(*, tui: bool, as_json: bool) -> int:
    """`mcp-proxy demo`: needs the `mcp` SDK (the `demo` extra); says so plainly when it is missing."""
    try:
        from proxy.demo.run import main as demo_main
    except ModuleNotFoundError as exc:
        print(
            f"mcp-proxy demo: needs the demo extra ({exc.name} is missing): {install_hint('demo')}",
            file=sys.stderr,
        )
        return 2
    if tui and (missing := tui_missing("demo") or no_terminal()) is not None:
        print(missing, file=sys.stderr)
        return 2
    return demo_main(["--tui"] * tui + ["--json"] * as_json)


def run_with_tui(loaded: LoadedSettings) -> int:
    """`mcp-proxy --upstream URL --tui`: the proxy and the TUI in one process and one event loop.

    Logs go to `log_file` or nowhere (the TUI owns the terminal); either way the proxy's own lines
    (not the traffic's) are kept for the TUI's event log (`E`), and the warnings are summed up on
    stderr once the TUI has given the terminal back. A proxy that cannot start, or a TUI that is not
    installed, says why on stderr before the TUI ever takes the screen.
    """
    from proxy import logs
    from proxy.cli import admin_may_move, start_failure, warn_of_settings
    from proxy.runtime import Proxy

    if (missing := tui_missing() or no_terminal()) is not None:
        print(missing, file=sys.stderr)
        return 2
    settings = loaded.settings
    keeper = logs.LogKeeper()
    try:
        log_file = logs.configure(
            level=settings.log_level, fmt="json", file=settings.log_file, quiet=True, keeper=keeper
        )
    except logs.LogFileError as exc:
        print(start_failure(loaded, exc), file=sys.stderr)
        return 2
    warn_of_settings(loaded)
    try:
        return asyncio.run(_serve_with_tui(Proxy(settings, admin_fallback=admin_may_move(loaded)), keeper))
    except OSError as exc:
        print(start_failure(loaded, exc), file=sys.stderr)
        return 2
    finally:
        if log_file is not None:
            log_file.close()
        if keeper.warnings:
            print(warnings_said(keeper, settings.log_file), file=sys.stderr)


def warnings_said(keeper: LogKeeper, log_file: Path | None) -> str:
    """What the proxy warned of while the TUI had the terminal, said once it is given back."""
    assert keeper.last_warning is not None
    _, level, event, fields = keeper.last_warning
    where = f"the whole log is in {log_file}" if log_file else "--log-file FILE keeps the whole log"
    count = f"{keeper.warnings} warning{'s' if keeper.warnings != 1 else ''}"
    return f"mcp-proxy: {count} while the TUI ran ({where}); the last: {level} {event} {fields}".rstrip()


def in_process_tui(proxy: Proxy, feed: Subscription, log: LogKeeper | None = None) -> ProxyTui:
    """The TUI of a proxy in this process: its bus for the chains, its controls for the rule keys,
    and the proxy's own log lines for its event log."""
    from proxy.desk_ops import DeskOps
    from proxy.replay.runner import for_tui
    from ui.app import ProxyTui
    from ui.desk_local import LocalDesk
    from ui.feeds import BusFeed

    description = f"in-process proxy {proxy.url}"
    replayer = for_tui(proxy.settings.upstream, proxy.settings)
    return ProxyTui(
        BusFeed(feed, description),
        desk=LocalDesk(DeskOps(proxy), description),
        replayer=replayer,
        log=log,
    )


async def _serve_with_tui(proxy: Proxy, log: LogKeeper) -> int:
    feed = proxy.bus.subscribe("tui")  # before start: the TUI must see the first proxy_info
    await proxy.start()
    app = in_process_tui(proxy, feed, log)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGHUP):  # SIGHUP: the terminal the TUI drew on is gone
        loop.add_signal_handler(sig, app.exit)
    # As without the TUI: logrotate's SIGUSR1 reopens the capture (its default action would kill us).
    loop.add_signal_handler(signal.SIGUSR1, proxy.reopen_files)
    try:
        await app.run_async()
    finally:
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
            loop.remove_signal_handler(sig)
        feed.close()
        await proxy.stop()
    return 0
