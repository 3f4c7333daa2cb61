"""`mcp-proxy export`: a capture as HAR 1.2, JSON or NDJSON of chains, or its spans to a collector.

    mcp-proxy export --har run.har run.jsonl
    mcp-proxy export --json - --status error run.jsonl.1 run.jsonl
    mcp-proxy export --otlp http://collector:4318 run.jsonl
    mcp-proxy export --curl r7 run.jsonl        # the chain's client requests as curl commands

Filters are those of the admin API's `/api/chains` (`--status`, `--method`, `--mode`, `--q`), read by
the same code. Several files are read oldest first, by the start time each file's header holds
(rotated parts in any order; stderr says when the order given was not that one). Exit status:
0 when every line was read, 1 when the export was written but some lines were skipped (each named on
stderr and in the file; lines of kinds a newer mcp-proxy wrote are named but fail nothing), 2 when
nothing could be exported (a file that is not a capture, bad flags).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from proxy.addresses import otlp_url
from proxy.cli_output import output_file
from proxy.cli_parser import CliParser
from proxy.cli_pipes import reader_left, tell
from proxy.flows.events import ChainStatus, Direction, MessageRecord, Mode, Side
from proxy.flows.filters import ChainFilter, FilterError
from proxy.framing.http import masked_url
from proxy.record.capture import HEADER_PREFIX, CaptureError, CaptureFormatError
from proxy.record.curl import NoRequest, Target, bodiless_request, curl_command
from proxy.record.export import (
    ChainFound,
    Format,
    counted,
    export_capture,
    export_spans,
    find_chain,
    missing_chain_hint,
    open_readers,
)
from proxy.record.observations import ObservationReplayer
from proxy.record.parts import PartsOrder, oldest_first

SKIPPED_EXIT = 1
"""Exit status of an export written with lines skipped."""

OTLP_BATCH = 512
"""Spans queued for the collector before the export waits for it to take them (nothing is dropped)."""

OTLP_CLOSE_SECONDS = 30.0
"""Seconds the exporter is given to stop once every span was handed over."""


def build_export_parser() -> argparse.ArgumentParser:
    """The parser of `mcp-proxy export`."""
    parser = CliParser(
        prog="mcp-proxy export",
        description="Export a capture as HAR 1.2, its chains as JSON or NDJSON, its spans to an OTLP "
        "collector, or one chain's requests as curl commands. "
        "Exit 0: all read (lines of kinds a newer mcp-proxy wrote are named on stderr); 1: written, some "
        "lines skipped (named on stderr); 2: nothing exported.",
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
    target.add_argument(
        "--curl",
        metavar="CHAIN",
        help="print a curl command per request the client sent in chain CHAIN (ids as in tui --open "
        "or --json: r1, r2, ...); secrets are $MCP_... placeholders to set first",
    )
    parser.add_argument(
        "--to",
        choices=("proxy", "upstream"),
        default=None,
        help="only with --curl: where its commands send, the proxy's address (default; the replay is "
        "recorded) or the upstream",
    )
    parser.add_argument(
        "captures",
        nargs="+",
        type=Path,
        metavar="CAPTURE",
        help="capture file(s); rotated parts in any order (read oldest first, by their headers)",
    )
    filters = parser.add_argument_group(
        "filters of --har, --json and --ndjson (as GET /api/chains; each repeats or takes a comma list)"
    )
    filters.add_argument(
        "--status", action="append", default=[], help=", ".join(s.value for s in ChainStatus)
    )
    filters.add_argument("--method", action="append", default=[], help="JSON-RPC method, or 'GET stream'")
    filters.add_argument("--mode", action="append", default=[], help=", ".join(m.value for m in Mode))
    filters.add_argument(
        "--q",
        action="append",
        default=[],
        metavar="QUERY",
        help="the TUI filter's language: 'tool:ask_* status:error', 'body:octocat', free text",
    )
    return parser


def main(argv: Sequence[str]) -> int:
    """Run `mcp-proxy export` (argv without the subcommand)."""
    args = build_export_parser().parse_args(argv)
    misplaced = _misplaced(args)
    if misplaced is not None:
        tell(f"mcp-proxy export: {misplaced}")
        return 2
    if args.otlp is not None:
        return _to_collector(args)
    if args.curl is not None:
        return _curl(args.captures, args.curl, args.to or "proxy")
    fmt, target = next((f, getattr(args, f.value)) for f in Format if getattr(args, f.value) is not None)
    try:
        keep = ChainFilter.from_params(lambda name: getattr(args, name))
    except FilterError as exc:
        tell(f"mcp-proxy export: {exc}")
        return 2
    if _reads_into_itself(target, args.captures) is not None:
        tell(f"mcp-proxy export: {target} is one of the captures read: write elsewhere")
        return 2
    if _is_capture(target):
        tell(
            f"mcp-proxy export: {target} is a capture, and writing the {fmt.value} there would replace it; "
            f"the output comes first: mcp-proxy export --{fmt.value} OUT CAPTURE..."
        )
        return 2
    try:
        order = _checked_in_order(args.captures)
        with output_file(target) as out:
            report = export_capture(order.paths, fmt, out, keep, order)
    except (CaptureFormatError, CaptureError) as exc:
        tell(f"mcp-proxy export: {exc}")
        return 2
    except BrokenPipeError:
        if str(target) != "-":
            raise
        return reader_left()
    except OSError as exc:
        tell(f"mcp-proxy export: cannot write {target}: {exc.strerror or exc}")
        return 2
    for line in report.lines():
        tell(f"mcp-proxy export: {line}")
    what = (
        counted(report.written, "entry", "entries") if fmt is Format.HAR else counted(report.written, "chain")
    )
    where = "stdout" if str(target) == "-" else str(target)
    tell(f"mcp-proxy export: wrote {what} to {where}")
    return SKIPPED_EXIT if report.lost_lines else 0


def _misplaced(args: argparse.Namespace) -> str | None:
    """What was given to an export it does not apply to (said, never silently ignored), if anything."""
    chosen = next(
        f"--{name}" for name in ("har", "json", "ndjson", "otlp", "curl") if getattr(args, name) is not None
    )
    if args.to is not None and args.curl is None:
        return f"--to applies to --curl (where its commands send), not to {chosen}"
    filters = [f"--{name}" for name in ("status", "method", "mode", "q") if getattr(args, name)]
    if filters and args.curl is not None:
        return (
            f"{', '.join(filters)} filter the chains of --har, --json and --ndjson; "
            "--curl takes one chain by its id"
        )
    return None


def _to_collector(args: argparse.Namespace) -> int:
    """`--otlp URL`: every span of the capture to the collector; waits for it rather than dropping any."""
    from proxy.record.otlp_setup import OtlpUnavailable, load_sender

    if args.status or args.method or args.mode or args.q:
        tell("mcp-proxy export: --otlp sends every span; filters are for chain exports")
        return 2
    try:
        otlp_url(args.otlp)
    except ValueError as exc:
        tell(f"mcp-proxy export: --otlp: {exc}")
        return 2
    reasons: list[str] = []
    try:
        captures = _checked_in_order(args.captures).paths
        sender = load_sender(
            args.otlp, queue_size=OTLP_BATCH, on_failure=lambda _count, reason: reasons.append(reason)
        )
    except (CaptureFormatError, CaptureError, OtlpUnavailable) as exc:
        tell(f"mcp-proxy export: {exc}")
        return 2
    try:
        report = export_spans(captures, sender.send_all)
        sender.flush()
    finally:
        sender.close(OTLP_CLOSE_SECONDS)
    for line in report.lines():
        tell(f"mcp-proxy export: {line}")
    counts = sender.counts()
    # The URL's query may carry the collector's key, and the failure's reason quotes the URL: both
    # are masked, as the live proxy's log lines mask them (this output lands in CI logs).
    tell(f"mcp-proxy export: sent {counted(counts['sent'], 'span')} to {masked_url(sender.endpoint)}")
    if counts["export_failed"]:
        tell(
            f"mcp-proxy export: {counts['export_failed']} of {counted(report.written, 'span')} "
            f"not delivered: {masked_url(reasons[-1]) if reasons else 'the collector failed'}"
        )
        return 2 if not counts["sent"] else SKIPPED_EXIT
    return SKIPPED_EXIT if report.lost_lines else 0


def _curl(paths: Sequence[Path], chain_id: str, to: Target) -> int:
    """Print the chain's client requests as curl commands on stdout; what was skipped on stderr."""
    try:
        found = find_chain(_checked_in_order(paths).paths, chain_id)
    except (CaptureFormatError, CaptureError) as exc:
        tell(f"mcp-proxy export: {exc}")
        return 2
    for line in found.report.lines():
        tell(f"mcp-proxy export: {line}")
    chain = found.chain
    if chain is None:
        tell(f"mcp-proxy export: no chain {chain_id!r} in the capture ({missing_chain_hint([chain_id])})")
        return 2
    messages = list(chain.messages)
    mode = chain.summary.mode
    if to == "upstream" and chain.summary.upstream_transport == "sse":
        tell(f"mcp-proxy export: {SSE_UPSTREAM_NO_URL}")
        return 2
    if to == "upstream" and mode in (Mode.LEGACY_TO_MRTR, Mode.MRTR_TO_LEGACY):
        return _curl_bridged(found, chain_id, messages, mode)
    client_sent = [m for m in messages if m.direction is Direction.TO_SERVER and m.side is not Side.UPSTREAM]
    sent = [m for m in client_sent if m.kind != "http"] or [m for m in client_sent if bodiless_request(m)]
    if not sent:
        tell(
            f"mcp-proxy export: chain {chain_id} holds no request the client sent (messages the "
            "server sent on its own, or a request the capture did not keep): nothing to copy as curl"
        )
        return 2
    return _print_curl(found, chain_id, messages, sent, to)


SSE_UPSTREAM_NO_URL = (
    "the upstream speaks HTTP+SSE (2024-11-05): each message goes to the endpoint the server names on "
    "a live GET stream, its session in the query, which no command written ahead can know; copy it "
    "toward the proxy instead (--to proxy), which speaks that transport to the server for you"
)
"""Why `--curl --to upstream` refuses a chain whose upstream was an HTTP+SSE server."""


def _curl_bridged(found: ChainFound, chain_id: str, messages: list[MessageRecord], mode: Mode) -> int:
    """`--to upstream` of a bridged chain: the server never got the client's requests, which are of the
    other era, but the proxy's own in its place; those are the commands, said so."""
    sent = [m for m in messages if m.direction is Direction.TO_SERVER and m.side is Side.UPSTREAM]
    sent = [m for m in sent if m.kind != "http"]
    if not sent:
        tell(
            f"mcp-proxy export: chain {chain_id} was bridged ({mode.value}), so the server never got the "
            "client's requests, and the capture holds none the proxy sent it in their place: nothing "
            "to copy as curl --to upstream (--to proxy copies the client's)"
        )
        return 2
    tell(
        f"mcp-proxy export: chain {chain_id} was bridged ({mode.value}): the server got the proxy's own "
        f"requests in its era, not the client's; these are those (--to proxy copies the client's). "
        f"{_bridged_session(mode, sent)}"
    )
    return _print_curl(found, chain_id, messages, sent, "upstream")


def _bridged_session(mode: Mode, sent: list[MessageRecord]) -> str:
    """What the proxy's own requests of a bridged chain need to be sent again, by the server's era: a
    legacy server's session (the bridge held one), or for a 2026-07-28 server nothing but each
    retry's `requestState`, which that server keeps in its answers instead of a session."""
    if mode is Mode.LEGACY_TO_MRTR:
        retries = any(_params(m).get("requestState") is not None for m in sent)
        then = (
            ": a retry's MCP_REQUEST_STATE comes from the answer to the command before it" if retries else ""
        )
        return f"A 2026-07-28 server holds no session, so no command carries a session id{then}"
    if any(m.method == "initialize" for m in sent):
        return (
            "They ride the proxy's own session with the server, which the chain's initialize opens: "
            "run that command first and set MCP_SESSION_ID to the Mcp-Session-Id it answers"
        )
    return (
        "They rode the proxy's own session with the server, which an earlier chain opened: open one "
        "with an initialize to the server first and set MCP_SESSION_ID to the Mcp-Session-Id it answers"
    )


def _params(record: MessageRecord) -> dict[str, object]:
    """The params of a recorded request's body (empty when it has none)."""
    body = record.body if isinstance(record.body, dict) else {}
    params = body.get("params")
    return params if isinstance(params, dict) else {}


def _print_curl(
    found: ChainFound, chain_id: str, messages: list[MessageRecord], sent: list[MessageRecord], to: Target
) -> int:
    """Print a command for each of `sent` on stdout, and what was written on stderr."""
    info = found.info
    try:
        commands = [
            curl_command(
                messages,
                m,
                chain_id=chain_id,
                proxy_url=info.listen if info else None,
                upstream_url=info.upstream if info else None,
                target=to,
                session_opener=found.session_opener(),
                batches=found.batches,
            )
            for m in sent
        ]
    except NoRequest as exc:
        tell(f"mcp-proxy export: {exc}")
        return 2
    try:
        sys.stdout.write("\n".join(commands))
        sys.stdout.flush()
    except BrokenPipeError:
        return reader_left()
    tell(f"mcp-proxy export: wrote {counted(len(commands), 'curl command')} of chain {chain_id}")
    return SKIPPED_EXIT if found.report.lost_lines else 0


def _reads_into_itself(target: Path, captures: Sequence[Path]) -> Path | None:
    """The capture `target` names too, if any: opening it for writing would empty it before it is read."""
    if str(target) == "-" or not target.exists():
        return None
    for capture in captures:
        try:
            if capture.exists() and target.samefile(capture):
                return capture
        except OSError:
            continue
    return None


def _is_capture(target: Path) -> bool:
    """Whether `target` is an existing capture file (its header line), which an export must not overwrite."""
    if str(target) == "-" or not target.is_file():
        return False
    try:
        with target.open("rb") as handle:
            return handle.read(len(HEADER_PREFIX)) == HEADER_PREFIX
    except OSError:
        return False


def _checked_in_order(paths: Sequence[Path]) -> PartsOrder:
    """The captures checked (`_check`), each once, oldest first by their headers, saying on stderr when
    that is not the order given, and which parts were given twice or are missing."""
    _check(paths)
    order = oldest_first(paths)
    for note in order.notes():
        tell(f"mcp-proxy export: {note}")
    return order


def _check(paths: Sequence[Path]) -> None:
    """Read every file's header before the output is created, so a refused capture leaves no file."""
    for reader in open_readers(paths, ObservationReplayer()):
        reader.close()
