"""`mcp-proxy export`: a capture as HAR 1.2, JSON or NDJSON of chains, or its spans to a collector.

    mcp-proxy export --har run.har run.jsonl
    mcp-proxy export --json - --status error run.jsonl.1 run.jsonl
    mcp-proxy export --otlp http://collector:4318 run.jsonl

Filters are those of the admin API's `/api/chains` (`--status`, `--method`, `--mode`, `--q`), read by
the same code. Several files are read in the order given (rotated parts oldest first). Exit status:
0 when every line was read, 1 when the export was written but some lines were skipped (each named on
stderr and in the file), 2 when nothing could be exported (a file that is not a capture, bad flags).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import IO

from proxy.flows.events import ChainStatus, Mode
from proxy.flows.filters import ChainFilter, FilterError
from proxy.record.capture import CaptureError, CaptureFormatError
from proxy.record.export import Format, export_capture, export_spans, open_readers
from proxy.record.observations import ObservationReplayer

SKIPPED_EXIT = 1
"""Exit status of an export written with lines skipped."""

OTLP_BATCH = 512
"""Spans queued for the collector before the export waits for it to take them (nothing is dropped)."""

OTLP_CLOSE_SECONDS = 30.0
"""Seconds the exporter is given to stop once every span was handed over."""


def build_export_parser() -> argparse.ArgumentParser:
    """The parser of `mcp-proxy export`."""
    parser = argparse.ArgumentParser(
        prog="mcp-proxy export",
        description="Export a capture as HAR 1.2, or its chains as JSON or NDJSON. "
        "Exit 0: all read; 1: written, some lines skipped (named on stderr); 2: nothing exported.",
    )
    target = parser.add_mutually_exclusive_group(required=True)
    for fmt, what in (
        (Format.HAR, "HAR 1.2: an entry per HTTP exchange"),
        (Format.JSON, "one JSON document of chains"),
        (Format.NDJSON, "one chain object per line"),
    ):
        target.add_argument(f"--{fmt.value}", metavar="OUT", type=Path, help=f"{what} ('-' for stdout)")
    target.add_argument(
        "--otlp",
        metavar="URL",
        help="send the capture's spans, with their original times, to an OpenTelemetry collector "
        "(OTLP/HTTP base URL; needs the otel extra)",
    )
    parser.add_argument(
        "captures", nargs="+", type=Path, metavar="CAPTURE", help="capture file(s), oldest first"
    )
    filters = parser.add_argument_group("filters (as GET /api/chains; each repeats or takes a comma list)")
    filters.add_argument(
        "--status", action="append", default=[], help=", ".join(s.value for s in ChainStatus)
    )
    filters.add_argument("--method", action="append", default=[], help="JSON-RPC method, or 'GET stream'")
    filters.add_argument("--mode", action="append", default=[], help=", ".join(m.value for m in Mode))
    filters.add_argument(
        "--q", action="append", default=[], metavar="TEXT", help="case-insensitive substring"
    )
    return parser


def main(argv: Sequence[str]) -> int:
    """Run `mcp-proxy export` (argv without the subcommand)."""
    args = build_export_parser().parse_args(argv)
    if args.otlp is not None:
        return _to_collector(args)
    fmt, target = next((f, getattr(args, f.value)) for f in Format if getattr(args, f.value) is not None)
    try:
        keep = ChainFilter.from_params(lambda name: getattr(args, name))
    except FilterError as exc:
        print(f"mcp-proxy export: {exc}", file=sys.stderr)
        return 2
    try:
        _check(args.captures)
        with _output(target) as out:
            report = export_capture(args.captures, fmt, out, keep)
    except (CaptureFormatError, CaptureError) as exc:
        print(f"mcp-proxy export: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"mcp-proxy export: cannot write {target}: {exc.strerror or exc}", file=sys.stderr)
        print(f"mcp-proxy export: {exc}", file=sys.stderr)
        return 2
    for line in report.lines():
        print(f"mcp-proxy export: {line}", file=sys.stderr)
    what = "entries" if fmt is Format.HAR else "chains"
    where = "stdout" if str(target) == "-" else str(target)
    print(f"mcp-proxy export: wrote {report.written} {what} to {where}", file=sys.stderr)
    return SKIPPED_EXIT if report.corrupt_lines else 0


def _to_collector(args: argparse.Namespace) -> int:
    """`--otlp URL`: every span of the capture to the collector; waits for it rather than dropping any."""
    from proxy.record.otlp_setup import OtlpUnavailable, load_sender

    if args.status or args.method or args.mode or args.q:
        print("mcp-proxy export: --otlp sends every span; filters are for chain exports", file=sys.stderr)
        return 2
    reasons: list[str] = []
    try:
        _check(args.captures)
        sender = load_sender(
            args.otlp, queue_size=OTLP_BATCH, on_failure=lambda _count, reason: reasons.append(reason)
        )
    except (CaptureFormatError, CaptureError, OtlpUnavailable) as exc:
        print(f"mcp-proxy export: {exc}", file=sys.stderr)
        return 2
    try:
        report = export_spans(args.captures, sender.send_all)
        sender.flush()
    finally:
        sender.close(OTLP_CLOSE_SECONDS)
    for line in report.lines():
        print(f"mcp-proxy export: {line}", file=sys.stderr)
    counts = sender.counts()
    print(f"mcp-proxy export: sent {counts['sent']} spans to {sender.endpoint}", file=sys.stderr)
    if counts["export_failed"]:
        print(
            f"mcp-proxy export: {counts['export_failed']} of {report.written} spans not delivered: "
            f"{reasons[-1] if reasons else 'the collector failed'}",
            file=sys.stderr,
        )
        return 2 if not counts["sent"] else SKIPPED_EXIT
    return SKIPPED_EXIT if report.corrupt_lines else 0


def _output(target: Path) -> AbstractContextManager[IO[bytes]]:
    if str(target) == "-":
        return nullcontext(sys.stdout.buffer)
    return target.open("wb")


def _check(paths: Sequence[Path]) -> None:
    """Read every file's header before the output is created, so a refused capture leaves no file."""
    for reader in open_readers(paths, ObservationReplayer()):
        reader.close()
