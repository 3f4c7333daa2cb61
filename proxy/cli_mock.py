"""`mcp-proxy mock`: serve a capture back as an MCP server, to clients of either era.

    mcp-proxy mock run.jsonl --listen 127.0.0.1:8000     # clients use http://127.0.0.1:8000/mcp

The capture's recorded requests are answered with their recorded results, in-flight requests and
MRTR rounds included (`proxy.record.mock_table`). A mock server of the capture's era listens on a
loopback port of its own (`proxy.mock`); the proxy runs in front of it in the same process, with its
usual logs, capture and admin settings (`MCP_PROXY_*`, `--config`), so a client of the other era is
served through the proxy's own bridge. A request the capture never recorded gets a JSON-RPC error
naming the nearest recorded one. Exit status: 0 after a signal, 2 when the capture cannot be served.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from proxy.cli import add_setting_flags, admin_may_move, load, serve_until_signalled, start_failure
from proxy.cli_parser import CliParser
from proxy.config import ConfigError
from proxy.config_load import LoadedSettings
from proxy.record.capture import CaptureError, CaptureFormatError
from proxy.record.mock_table import MockTable, TableReport, read_table

ANSWER_TIMEOUT: Final = 300.0
"""Default seconds the mock waits for a client to answer a recorded question before it goes on."""


def build_mock_parser() -> argparse.ArgumentParser:
    """The parser of `mcp-proxy mock`."""
    parser = CliParser(
        prog="mcp-proxy mock",
        description="Serve a capture back as an MCP server: recorded requests get their recorded "
        "results (and in-flight requests or MRTR rounds), in the era the client speaks.",
    )
    parser.add_argument(
        "captures", nargs="+", type=Path, metavar="CAPTURE", help="capture file(s), oldest first"
    )
    parser.add_argument(
        "--listen",
        default=None,
        metavar="HOST:PORT",
        help="where clients connect (default: the listen setting, 127.0.0.1:8080)",
    )
    parser.add_argument("--config", type=Path, default=None, help="TOML file of proxy settings")
    parser.add_argument(
        "--capture", type=Path, default=None, metavar="FILE", help="record the mock's own traffic here"
    )
    parser.add_argument(
        "--answer-timeout",
        type=float,
        default=ANSWER_TIMEOUT,
        metavar="SECONDS",
        help=f"how long to wait for a client's answer to a recorded question (default {ANSWER_TIMEOUT:g})",
    )
    add_setting_flags(parser, leave_out=MOCK_OWN)
    for flag in NO_UPSTREAM_FLAGS:
        parser.add_argument(flag, nargs="?", action=_NoUpstream, help=argparse.SUPPRESS)
    return parser


NO_UPSTREAM_FLAGS: Final = ("--upstream", "--upstream-cmd", "--upstream-transport", "--upstream-era")
"""The proxy's upstream flags, which the mock refuses by name: otherwise argparse would take one for a
prefix of the flags it does have (`--upstream-stop-grace`, ...) and answer "ambiguous option"."""


class _NoUpstream(argparse.Action):
    """Refuse an upstream flag, saying why: the mock is the server, answering from its captures."""

    def __call__(self, parser: argparse.ArgumentParser, *_args: object, **_kwargs: object) -> None:
        parser.error(
            f"{self.option_strings[0]}: the mock has no upstream: it answers from the CAPTURE files "
            "themselves, in the era each client speaks (docs/mock.md)"
        )


MOCK_OWN = frozenset(
    {"upstream", "upstream_cmd", "upstream_transport", "upstream_era", "listen", "capture", "tui"}
)
"""Settings the mock has no flag for (it has no upstream; `--listen` and `--capture` are its own, above;
it draws no TUI): every other setting of the proxy is a flag here too (`--admin`, `--log-format`, ...)."""


def main(argv: Sequence[str]) -> int:
    """Run `mcp-proxy mock` (argv without the subcommand)."""
    args = build_mock_parser().parse_args(argv)
    if args.captures and args.capture is not None and args.capture in args.captures:
        print("mcp-proxy mock: --capture names a capture being served: record elsewhere", file=sys.stderr)
        return 2
    try:
        loaded = load(args)
        table, report = read_table(args.captures)
    except (ConfigError, CaptureFormatError, CaptureError) as exc:
        print(f"mcp-proxy mock: {exc}", file=sys.stderr)
        return 2
    if table.era == "unknown":
        print(
            "mcp-proxy mock: the capture holds no answered request to serve "
            "(`mcp-proxy export --json - CAPTURE` shows its chains)",
            file=sys.stderr,
        )
        return 2
    for note in [*report.order_notes, *report.skipped.lines()]:
        print(f"mcp-proxy mock: {note}", file=sys.stderr)
    return _run(loaded, table, report, [str(p) for p in report.read], args.answer_timeout)


def _run(loaded: LoadedSettings, table: MockTable, report: TableReport, names: list[str], wait: float) -> int:
    from proxy import logs
    from proxy.runtime_tuning import use_fast_loop

    settings = loaded.settings
    try:
        log_file = logs.configure(level=settings.log_level, fmt=settings.log_format, file=settings.log_file)
    except logs.LogFileError as exc:
        print(start_failure(loaded, exc), file=sys.stderr)
        return 2
    try:
        with asyncio.Runner(loop_factory=use_fast_loop()) as runner:
            return runner.run(_serve_mock(loaded, table, report, names, wait))
    except OSError as exc:
        logs.flush()  # the lines logged before it come first
        print(start_failure(loaded, exc), file=sys.stderr)
        return 2
    finally:
        logs.flush()
        if log_file is not None:
            log_file.close()


async def _serve_mock(
    loaded: LoadedSettings, table: MockTable, report: TableReport, names: list[str], wait: float
) -> int:
    """The mock server of the capture's era, and the proxy before it, until a signal."""
    from proxy.logs import get_logger
    from proxy.mock.backend import MockServer
    from proxy.mock.legacy import LegacyMock
    from proxy.mock.modern import ModernMock
    from proxy.runtime import Proxy

    kind: type[MockServer] = LegacyMock if table.era == "legacy" else ModernMock
    server = kind(table, answer_timeout=wait)
    url = await server.start()
    try:
        settings = loaded.settings.model_copy(update={"upstream": url, "upstream_era": table.era})
        get_logger().info(
            "mock_serving",
            captures=names,
            era=table.era,
            operations=table.size,
            methods=table.methods(),
            unanswered=report.unanswered,
            corrupt_lines=report.corrupt_lines,
            left_out_lines=report.left_out_lines,
            unknown_lines=report.unknown_lines,
            dropped=table.dropped,
        )
        proxy = Proxy(settings, admin_fallback=admin_may_move(loaded))
        table.masked = proxy.redactor.body  # a miss names the request as the proxy records it
        return await serve_until_signalled(proxy)
    finally:
        await server.stop()
