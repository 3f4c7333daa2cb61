"""`mcp-proxy replay`: captured chains sent again to a live server, in either era, and compared.

    mcp-proxy replay run.jsonl --chain r12                       # against the capture's upstream
    mcp-proxy replay run.jsonl --all --upstream http://staging:8000/mcp --ignore '*.timestamp'
    mcp-proxy replay run.jsonl --all --upstream-cmd 'node build/server.js stdio'   # a stdio server

Each chain is played in the era of the client that recorded it, through an in-process proxy in front
of the server, whose bridges convert when the server speaks the other era (`proxy.replay`); that
proxy speaks to the server in the era the recording did (`proxy.replay.era`), and the start says
which and why. The server's questions are answered from the capture where the same question was
recorded (`--ask` asks on the terminal where none was). One line per chain: same, differs (the first
difference, with both values and where), failed (why) or skipped. Exit status: 0 when every replayed
chain is the same (a handshake's differences are shown, not counted), 1 when one differs or failed
or lines of the capture were skipped (a chain may be missing, as `export` says too), 2
when nothing could be replayed (bad flags, a file that is not a capture or holds no chain, chains all
skipped, a server that cannot be reached or no longer speaks the era the capture was forced to).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import shlex
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from proxy.cli_parser import CliParser
from proxy.cli_pipes import tell
from proxy.config import ConfigError, Settings
from proxy.config_load import load_settings
from proxy.framing.http import masked_command, masked_url
from proxy.record.capture import CaptureError, CaptureFormatError
from proxy.record.export import counted, missing_chain_hint
from proxy.record.replay_compare import IgnoreRules
from proxy.record.replay_edit import Edit, EditError, edited_plan, parse_edit
from proxy.record.replay_outcome import ChainOutcome
from proxy.record.replay_plan import ChainPlan, PlanKind
from proxy.record.replay_source import CaptureSource, open_capture, plans
from proxy.wire.visible import visible

if TYPE_CHECKING:
    from proxy.replay.runner import Replay

USAGE_EXIT: Final = 2
DIFFERS_EXIT: Final = 1


def build_replay_parser() -> argparse.ArgumentParser:
    """The parser of `mcp-proxy replay`."""
    parser = CliParser(
        prog="mcp-proxy replay",
        description="Replay captured chains against a live server, in the era the recording spoke to "
        "it, and compare them with the recording. Exit 0: all the same; 1: a chain differs or failed, "
        "or lines of the capture were skipped; "
        "2: nothing replayed (bad flags, not a capture, no chain in it or all skipped, server "
        "unreachable or no longer speaking the "
        "era the capture was forced to).",
    )
    parser.add_argument("captures", nargs="+", type=Path, metavar="CAPTURE", help="capture file(s)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--chain",
        action="append",
        default=[],
        metavar="ID",
        help="a chain to replay (ids as tui --open and export --json show them: r1, r2, ...); repeatable",
    )
    which.add_argument("--all", action="store_true", help="replay every chain, in recorded order")
    target = parser.add_mutually_exclusive_group()
    target.add_argument(
        "--upstream",
        metavar="URL",
        default=None,
        help="the server to replay against (default: the upstream the capture recorded)",
    )
    target.add_argument(
        "--upstream-cmd",
        metavar="'CMD ARGS'",
        default=None,
        help="a stdio server to replay against: the replay's proxy starts this command (split as a "
        "shell would, no shell run) and stops it at the end",
    )
    parser.add_argument(
        "--upstream-era",
        choices=("auto", "legacy", "modern"),
        default=None,
        help="the era to speak to the server in; auto probes it (default: the upstream_era setting "
        "when not auto, else the era the recording spoke to the server: forced again when the "
        "recording forced it or when the server now speaks both eras)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="TOML file of proxy settings (also MCP_PROXY_*): the replay's proxy redacts, bounds and "
        "bridges as they say",
    )
    parser.add_argument(
        "--ignore",
        action="append",
        default=[],
        metavar="PATH",
        help="a field to leave out of the comparison, e.g. result.content[0].text or *.timestamp "
        "(* any characters, [*] any index); paths read as the report shows them: in a list of named "
        "items (tools, prompts, resources), [5] is the recorded item at that place, or an item only "
        "the new answer has at its place there; repeatable",
    )
    parser.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="a header every replayed request carries, in place of a recorded one (a credential the "
        "capture holds redacted); @FILE reads one per line, keeping the value out of the process "
        "list; repeatable",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        dest="edits",
        metavar="PATH=VALUE",
        help="send the chain's request edited: a value under params, as JSON or plain text "
        "(params.arguments.b=4, params.name=other_tool); the report compares the answer with the "
        "recording, so it shows what the edit changed; with one --chain; repeatable",
    )
    parser.add_argument(
        "--ask",
        action="store_true",
        help="ask on the terminal for the answer to a server question the capture holds none for "
        "(default: that chain fails, naming the question)",
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=30.0,
        metavar="SECONDS",
        help="how long one chain's replay may take (default 30)",
    )
    parser.add_argument("--json", action="store_true", help="print the outcome as one JSON document")
    return parser


def _seconds(text: str) -> float:
    """A chain's time limit: seconds above 0 (argparse names the flag when this refuses)."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise argparse.ArgumentTypeError(f"expected seconds above 0, such as 30, got {text!r}")
    return seconds


def parse_headers(values: Sequence[str]) -> dict[str, str]:
    """`NAME: VALUE` strings as a dict, `@FILE` giving one per line (as curl's `-H @FILE` does, so a
    credential stays out of the process list and the shell history); raises ValueError naming a
    malformed one."""
    out: dict[str, str] = {}
    for text in _header_lines(values):
        name, colon, value = text.partition(":")
        if not colon or not name.strip():
            first = text.strip().split(None, 1)[0] if text.strip() else ""
            # only the first word is shown: the rest may be a credential typed without its colon
            raise ValueError(f"--header {first!r}...: expected 'NAME: VALUE'")
        out[name.strip()] = value.strip()
    return out


def _header_lines(values: Sequence[str]) -> list[str]:
    """The header arguments with each `@FILE` replaced by its non-empty lines."""
    lines: list[str] = []
    for text in values:
        if not text.startswith("@"):
            lines.append(text)
            continue
        path = Path(text[1:])
        try:
            content = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
            raise ValueError(f"--header @{path}: cannot read it: {reason}") from None
        lines.extend(line.rstrip("\r") for line in content.split("\n") if line.strip())
    return lines


def main(argv: Sequence[str]) -> int:
    """Run `mcp-proxy replay` (argv without the subcommand)."""
    args = build_replay_parser().parse_args(argv)
    if not args.all and not args.chain:
        tell("mcp-proxy replay: name chains with --chain ID, or replay them all with --all")
        return USAGE_EXIT
    if args.edits and len(args.chain) != 1:
        tell("mcp-proxy replay: --set edits one chain: name it with one --chain ID")
        return USAGE_EXIT
    try:
        headers = parse_headers(args.header)
        edits = tuple(parse_edit(text) for text in args.edits)
        if any(not p.strip() for p in args.ignore):
            raise ValueError("--ignore: an empty path")
        source = open_capture(args.captures)
        settings = load_settings(config_path=args.config, flags={}).settings
    except ConfigError as exc:
        tell(f"mcp-proxy replay: {exc}")
        return USAGE_EXIT
    except ValueError as exc:
        tell(f"mcp-proxy replay: {exc}")
        return USAGE_EXIT
    except (CaptureFormatError, CaptureError) as exc:
        tell(f"mcp-proxy replay: {exc}")
        return USAGE_EXIT
    for note in source.order_notes:
        tell(f"mcp-proxy replay: {note}")
    if args.upstream_cmd is not None:
        if not args.upstream_cmd.strip():
            tell("mcp-proxy replay: --upstream-cmd: an empty command")
            return USAGE_EXIT
        upstream = f"stdio:{masked_command(shlex.split(args.upstream_cmd))}"
        recorded = f"; the capture recorded {source.upstream}" if source.upstream else ""
        tell(f"mcp-proxy replay: replaying against {upstream} (--upstream-cmd{recorded})")
    else:
        named = args.upstream or source.upstream
        problem = _upstream_problem(named, args.upstream is not None, source)
        if problem:
            tell(f"mcp-proxy replay: {problem}")
            return USAGE_EXIT
        assert named is not None
        upstream = named
        tell(f"mcp-proxy replay: {_target_line(upstream, args.upstream is not None, source)}")
    from proxy import logs
    from proxy.runtime_tuning import use_fast_loop

    logs.configure(level="warning", fmt="console")  # among the report's plain lines, even in a pipe
    with asyncio.Runner(loop_factory=use_fast_loop()) as runner:
        return runner.run(_replay(args, source, upstream, headers, settings, edits))


def _upstream_problem(upstream: str | None, given: bool, source: CaptureSource) -> str | None:
    if not upstream:
        return "the capture names no upstream: give the server with --upstream URL"
    if not upstream.startswith(("http://", "https://")):
        return f"replay sends to an HTTP server, not {masked_url(upstream)!r}: give one with --upstream URL"
    if "@" in urlsplit(upstream).netloc:
        return (
            f"the URL carries credentials (user:password@), which replay does not send: "
            f"{masked_url(upstream)!r}; give them with --header 'Authorization: VALUE' instead"
        )
    if not given and "<redacted" in upstream:
        return f"the capture's upstream ({upstream}) holds masked credentials: give it with --upstream URL"
    return None


def _target_line(upstream: str, given: bool, source: CaptureSource) -> str:
    if given:
        recorded = f"; the capture recorded {source.upstream}" if source.upstream else ""
        return f"replaying against {masked_url(upstream)} (--upstream{recorded})"
    era = "" if source.upstream_era == "unknown" else f", a {source.upstream_era} server then"
    return f"replaying against {masked_url(upstream)} (the upstream the capture recorded{era})"


async def _replay(
    args: argparse.Namespace,
    source: CaptureSource,
    upstream: str,
    headers: dict[str, str],
    settings: Settings,
    edits: tuple[Edit, ...] = (),
) -> int:
    from proxy.replay.era import EraUnspoken, RecordedEra
    from proxy.replay.runner import Replay, ReplayOptions, Unreachable

    options = ReplayOptions(
        ignore=IgnoreRules(tuple(args.ignore)),
        headers=headers,
        ask=_ask_on_terminal if args.ask else None,
        timeout=args.timeout,
        upstream_era=args.upstream_era,
        recorded=RecordedEra(source.upstream_era, source.upstream_era_forced),
        settings=settings,
        upstream_cmd=args.upstream_cmd,
    )
    wanted = set(args.chain)
    absent = _absent(source, wanted)
    if absent:
        said = f"no chain {', '.join(absent)} in the capture ({missing_chain_hint(absent)})"
        return _cannot(args, upstream, source, [], said)
    outcomes: list[ChainOutcome] = []
    try:
        async with Replay(upstream, options) as replay:
            era = _era(replay)
            tell(f"mcp-proxy replay: {_era_line(era)}")
            mask = replay.proxy.redactor.body
            chosen = _edited(plans(source), edits, wanted, mask) if edits else plans(source)
            async for outcome in replay.run(chosen, lambda c: args.all or c in wanted):
                outcomes.append(outcome)
                if not args.json:
                    print(visible(outcome.line()), flush=True)
    except Unreachable as exc:
        return _cannot(args, upstream, source, outcomes, f"the server cannot be reached: {exc}")
    except (EraUnspoken, EditError, OSError) as exc:
        return _cannot(args, upstream, source, outcomes, str(exc))
    missing = sorted(wanted - {o.chain for o in outcomes})
    counts = Counter(o.word for o in outcomes)
    if args.json:
        print(json.dumps(_document(upstream, source, outcomes, missing, era), indent=2))
    elif outcomes:
        print(_summary(counts, len(outcomes)))
    for line in source.report.lines():
        tell(f"mcp-proxy replay: {line}")
    if missing:
        tell(
            f"mcp-proxy replay: no chain {', '.join(missing)} in the capture ({missing_chain_hint(missing)})"
        )
        return USAGE_EXIT
    if not any(o.compared for o in outcomes):
        tell(f"mcp-proxy replay: {_nothing_replayed(outcomes)}")
        return USAGE_EXIT
    if source.report.loses_chains:
        tell(
            "mcp-proxy replay: lines of the capture that may hold chains were skipped (above), so "
            "chains may be missing from what was replayed: exit 1"
        )
        return DIFFERS_EXIT
    return DIFFERS_EXIT if any(o.counts for o in outcomes) else 0


def _cannot(
    args: argparse.Namespace, upstream: str, source: CaptureSource, outcomes: list[ChainOutcome], said: str
) -> int:
    """Exit 2 saying why on stderr and, with `--json`, in a document on stdout too (`ok` false,
    `error` the reason, the chains replayed before it): a CI step reading the document finds why."""
    tell(f"mcp-proxy replay: {said}")
    if args.json:
        document = {
            "upstream": masked_url(upstream),
            "recorded_upstream": source.upstream,
            "chains": [o.as_json() for o in outcomes],
            "error": said,
            "ok": False,
        }
        print(json.dumps(document, indent=2))
    return USAGE_EXIT


def _absent(source: CaptureSource, wanted: set[str]) -> list[str]:
    """The chains named with `--chain` that the capture does not hold, found by reading it once
    before anything is sent: a request with side effects must not reach the server when the replay
    then exits 2 for a typo in another id."""
    if not wanted:
        return []
    held = {plan.chain for plan in plans(CaptureSource(source.paths))}
    return sorted(wanted - held)


def _nothing_replayed(outcomes: list[ChainOutcome]) -> str:
    """Why the replay compared nothing: a capture with no chain (a recording that saw no traffic), or
    chains that were all skipped; a check that compared nothing must not pass."""
    if not outcomes:
        return (
            "the capture holds no chain to replay (did the recording proxy see any traffic?): "
            "nothing was compared"
        )
    return f"{counted(len(outcomes), 'chain')} to replay, all skipped (above): nothing was compared"


def _edited(
    chosen: Iterable[ChainPlan], edits: tuple[Edit, ...], wanted: set[str], mask: Callable[[Any], Any]
) -> Iterator[ChainPlan]:
    """The plans, the one `--chain` names edited (said on stderr, each value as `mask` shows it in
    the request sent); raises EditError on a misfit."""
    said = ", ".join(edit.announced(mask) for edit in edits)
    for plan in chosen:
        if plan.chain in wanted:
            if plan.kind is not PlanKind.CALL:
                raise EditError(f"--set: chain {plan.chain} is a {plan.kind.value}, not a call to edit")
            plan = edited_plan(plan, edits, mask)
            tell(f"mcp-proxy replay: {plan.chain} {plan.headline()}: sending it edited: {said}")
        yield plan


def _era(replay: Replay) -> dict[str, Any]:
    """The era the replay's proxy speaks to the server in, how it got it, and why (`--json`'s)."""
    return {
        "era": replay.proxy.router.eras.label,
        "forced": replay.era.setting != "auto",
        "why": replay.era.why,
        "from_recording": not replay.era_chosen,
    }


SPOKEN: Final = {
    "legacy": "the legacy era",
    "modern": "the 2026-07-28 era",
    "dual": "both eras (each chain in its client's)",
}


def _era_line(era: dict[str, Any]) -> str:
    """`speaking the legacy era to the server, forced: recorded with the upstream era forced to legacy`."""
    spoken = SPOKEN.get(era["era"], "the era it answers in")
    how = "forced" if era["forced"] else "as probed"
    why = f": {era['why']}" if era["why"] else ""
    hint = " (--upstream-era auto probes it instead)" if era["forced"] and era["from_recording"] else ""
    return f"speaking {spoken} to the server, {how}{why}{hint}"


WORDS: Final = ("same", "differs", "setup differs", "failed", "skipped")


def _summary(counts: Counter[str], total: int) -> str:
    parts = [f"{counts[w]} {w}" for w in WORDS if counts[w]]
    return f"{total} chain{'s' if total != 1 else ''} replayed: " + (", ".join(parts) or "none")


def _document(
    upstream: str, source: CaptureSource, outcomes: list[Any], missing: list[str], era: dict[str, Any]
) -> dict[str, Any]:
    counts = Counter(o.word for o in outcomes)
    return {
        "upstream": masked_url(upstream),
        "recorded_upstream": source.upstream,
        "upstream_era": {k: era[k] for k in ("era", "forced", "why")},
        "chains": [o.as_json() for o in outcomes],
        "summary": {w.replace(" ", "_"): counts[w] for w in WORDS},
        "not_found": missing,
        **({"skipped": skipped} if (skipped := source.report.skipped()) else {}),
        "ok": not missing
        and any(o.compared for o in outcomes)
        and not any(o.counts for o in outcomes)
        and not source.report.loses_chains,
    }


async def _ask_on_terminal(plan: ChainPlan, method: str, params: Any) -> Any:
    """Show the question on stderr and read one line of JSON from stdin as the answer (empty: none)."""
    question = visible(json.dumps(params, indent=2, ensure_ascii=False), lines=True)
    print(
        f"\n{visible(f'{plan.chain} {plan.headline()}')}: the server asks {visible(method)}, "
        "which the capture has no answer to:\n"
        f"{question}\nanswer (one line of JSON, the bare result, e.g. "
        '{"action": "accept", "content": {...}}; empty to fail the chain): ',
        end="",
        file=sys.stderr,
        flush=True,
    )
    line = await asyncio.to_thread(sys.stdin.readline)
    if not line.strip():
        return None
    try:
        return json.loads(line)
    except ValueError as exc:
        tell(f"mcp-proxy replay: not JSON ({exc}): the chain fails")
        return None
