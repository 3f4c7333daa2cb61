"""`mcp-proxy stdio`: the proxy as a stdio MCP server, for clients that launch their servers.

    mcp-proxy stdio --upstream http://127.0.0.1:8000/mcp [--capture F] [--admin HOST:PORT]
    mcp-proxy stdio [SETTINGS] -- CMD ARGS...      # wrap a stdio server (the shim)

A desktop client launches it like any stdio server; it reads the client's JSON-RPC lines on stdin and
answers on stdout, relaying through the proxy's engines (pass-through, or a bridge when the eras
differ) with every observation: watch it with `mcp-proxy tui --attach` on the admin API, or record it
with `--capture`. stdout belongs to the protocol, so logs go to stderr (or `--log-file`) and `--tui`
is refused. Every setting of `mcp-proxy` applies (flags, `MCP_PROXY_*`, `--config`); nothing listens
for HTTP clients. The client closing stdin stops the proxy (and a wrapped server) cleanly; exit 0.
A wrapped server that exits on its own stops the proxy too, with stdout closed, one line on stderr
saying why, and exit 1: the client sees its server go, as it would without the proxy. So does one that
dies during the start-up probe or cannot be started, before stdin is read.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from proxy.cli import add_setting_flags, admin_may_move, load, start_failure, warn_of_settings
from proxy.cli_parser import CliParser
from proxy.config import ConfigError, flag_name
from proxy.config_load import LoadedSettings
from proxy.config_print import render_settings

SERVER_LOST_EXIT = 1
"""The exit status when the wrapped server exited on its own or never came up (the client's server
is gone)."""

HTTP_CLIENTS_ONLY = frozenset(
    {
        "listen",
        "head_read_timeout",
        "body_read_timeout",
        "keepalive_timeout",
        "max_client_connections",
        "max_streams_per_client",
        "max_pipelined_bytes",
        "max_body_bytes_in_flight",
        "sse_path",
        "sse_messages_path",
        "max_sse_sessions",
        "max_sse_sessions_per_client",
        "sse_queue_bytes",
    }
)
"""Settings of the listener HTTP clients reach (its address, connection limits and timeouts, the
HTTP+SSE endpoints): the stdio command serves no HTTP client, so it has no flag for them (a config
file or environment shared with `mcp-proxy --upstream ...` may still set them; they are unused)."""


def build_stdio_parser() -> argparse.ArgumentParser:
    """The parser of `mcp-proxy stdio` (the command after `--` is split off before it runs)."""
    why = "sets the listener HTTP clients reach; mcp-proxy stdio serves one client on stdin/stdout"
    no_tui = (
        "draws on the terminal, but stdout carries the protocol here: watch with "
        "`mcp-proxy tui --attach http://ADMIN` (the admin address is logged at start)"
    )
    parser = CliParser(
        elsewhere={
            **{flag_name(name): why for name in HTTP_CLIENTS_ONLY},
            "--tui": no_tui,
            "--no-tui": no_tui,
        },
        prog="mcp-proxy stdio",
        usage="mcp-proxy stdio --upstream URL [SETTINGS] | mcp-proxy stdio [SETTINGS] -- CMD ARGS...",
        description="Serve one stdio MCP client (stdin/stdout) through the proxy, to an HTTP upstream "
        "or a stdio server it starts (after --).",
    )
    parser.add_argument(
        "--config", type=Path, default=None, help="TOML file of settings (also MCP_PROXY_CONFIG)"
    )
    parser.add_argument(
        "--print-config", action="store_true", help="print each effective setting and its source, then exit"
    )
    add_setting_flags(parser, leave_out=HTTP_CLIENTS_ONLY | {"tui"})
    return parser


def split_command(words: Sequence[str]) -> tuple[list[str], list[str]]:
    """The proxy's own words, and the server command after the first `--` (empty without one)."""
    items = list(words)
    if "--" not in items:
        return items, []
    cut = items.index("--")
    return items[:cut], items[cut + 1 :]


def main(words: Sequence[str]) -> int:
    """Entry point of `mcp-proxy stdio` (`words` follow the `stdio` word)."""
    own, command = split_command(words)
    parser = build_stdio_parser()
    args = parser.parse_args(own)
    if command:
        if args.upstream is not None or args.upstream_cmd is not None:
            parser.error("give either --upstream URL, --upstream-cmd or a command after --, not two")
        args.upstream_cmd = shlex.join(command)
    try:
        loaded = load(args)
    except ConfigError as exc:
        print(f"mcp-proxy stdio: {exc}", file=sys.stderr)
        return 2
    if args.print_config:
        print(render_settings(loaded), file=sys.stderr)  # stdout is the protocol's, even here
        return 0
    settings = loaded.settings
    if not settings.upstream and not settings.upstream_cmd:
        print(
            "mcp-proxy stdio: upstream: required (--upstream URL, MCP_PROXY_UPSTREAM, or -- CMD ARGS...)",
            file=sys.stderr,
        )
        return 2
    if settings.tui:
        print(
            "mcp-proxy stdio: --tui: stdout carries the protocol; watch with `mcp-proxy tui --attach "
            "http://ADMIN` (the admin address is logged at start) or record with --capture",
            file=sys.stderr,
        )
        return 2
    return run_stdio(loaded)


def run_stdio(loaded: LoadedSettings) -> int:
    """Serve the stdio client until it closes stdin or a signal comes (exit 0), or until the server
    it wraps exits on its own or turns out not to have started (exit 1, saying so on stderr)."""
    from proxy import logs
    from proxy.runtime import Proxy
    from proxy.runtime_tuning import tune_gc, tune_malloc, use_fast_loop
    from proxy.transport.stdio_client import protocol_pipes

    pipes = protocol_pipes()  # before anything could print: stdout is the protocol's from here
    settings = loaded.settings
    lost: str | None = None
    try:
        log_file = logs.configure(level=settings.log_level, fmt=settings.log_format, file=settings.log_file)
    except logs.LogFileError as exc:
        print(start_failure(loaded, exc), file=sys.stderr)
        return 2
    try:
        proxy = Proxy(
            settings,
            admin_fallback=admin_may_move(loaded),
            http_clients=False,
            keep_chains=settings.admin_enabled,
        )
        warn_of_settings(loaded)
        tune_gc()
        tune_malloc()
        with asyncio.Runner(loop_factory=use_fast_loop()) as runner:
            lost = runner.run(_serve(proxy, pipes))
    except OSError as exc:
        logs.flush()  # the lines logged before it come first
        print(start_failure(loaded, exc), file=sys.stderr)
        return 2
    finally:
        logs.flush()
        if log_file is not None:
            log_file.close()
    if lost is None:
        return 0
    # Plain words, last, also when the log goes to a file: a desktop host shows a server's stderr.
    print(lost, file=sys.stderr)
    return SERVER_LOST_EXIT


async def _serve(proxy: Any, pipes: Any) -> str | None:
    """Start the proxy, serve stdio until stdin ends, a signal, or the wrapped server's own exit,
    then stop everything; returns why the wrapped server is gone, if it is."""
    from proxy.cli_signals import start_unless_stopped
    from proxy.transport.stdio_client import serve_stdio

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, proxy.reopen_files)
    lost: str | None = None
    try:
        if await start_unless_stopped(proxy.start(), stop):
            lost = await serve_stdio(proxy.serving(), pipes, stop)
    finally:
        await proxy.stop()
        for sig in (*signals, signal.SIGUSR1):
            loop.remove_signal_handler(sig)
    return lost
