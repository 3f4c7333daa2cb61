"""Exporting a capture: read it line by line, build its chains, write HAR, JSON or NDJSON as it goes.

One pass over the file(s), in order (a capture and its rotated parts share one chain builder, oldest
file first), building only what the export uses: the final headlines and records the store keeps (no
headline announcements), and for HAR not even records. The reader's chain store is small and
bounded: HAR entries are written as their exchange ends and JSON chains as the store lets them go,
so memory holds what is open at one time, never the file. A line the reader cannot read is skipped,
and named (file, line number, reason) in what `export_capture` returns, which the HAR's `log.comment`
and the JSON's `skipped` member repeat; the rest is exported. Everything in a capture was redacted
when it was written, so nothing here redacts again, and nothing here can show what the capture does
not hold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import IO, Any, Final
from urllib.parse import urlsplit

from proxy.flows.endpoint import Endpoint
from proxy.flows.events import LIVE_ID, UNFINISHED, ProxyInfo, end_unfinished
from proxy.flows.filters import ChainFilter
from proxy.flows.redact import AlreadyRedacted
from proxy.flows.span_records import SpanRecord
from proxy.flows.spans import SpanFollower
from proxy.flows.store import Chain, ChainStore
from proxy.record.batches import Batch, BatchesOf
from proxy.record.capture import (
    FORMAT_VERSION,
    MAX_CORRUPT_SHOWN,
    MAX_GAPS_SHOWN,
    MAX_UNKNOWN_SHOWN,
    CaptureReader,
    newer_minor,
)
from proxy.record.capture_gap import CaptureGap
from proxy.record.chains_json import ChainsOut, JsonWriter, NdjsonWriter
from proxy.record.har import HarWriter
from proxy.record.har_capture import HarFromCapture
from proxy.record.observations import ObservationReplayer
from proxy.record.parts import PartsOrder, capture_end
from proxy.record.run_ends import CaptureEnd

RING: Final = 500
"""Chains the export's store keeps built (ended ones past it are let go; open ones are held)."""

JSON_MESSAGES: Final = 10_000
"""Messages one chain keeps in a JSON export (later ones are counted in `dropped_messages`)."""


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """`1 line`, `2 lines`: a count with its noun in the number it takes (`plural` when not noun + s)."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


class Format(StrEnum):
    """What an export writes."""

    HAR = "har"
    JSON = "json"
    NDJSON = "ndjson"


@dataclass
class ExportReport:
    """What an export wrote and what it had to skip."""

    written: int = 0
    """HAR entries or chains written."""
    corrupt_lines: int = 0
    corrupt: list[tuple[str, int, str]] = field(default_factory=list)
    """File, line number and reason of the first corrupt lines (all are counted)."""
    unknown_lines: int = 0
    """Lines of a kind or type a newer proxy wrote, skipped."""
    unknown: list[tuple[str, int, str]] = field(default_factory=list)
    """File, line number and kind or type (`kind 'x'`) of the first of them (all are counted)."""
    cut_short: list[str] = field(default_factory=list)
    """Files whose last line was cut short (a proxy killed mid-write): that line is skipped."""
    cut_short_lines: dict[str, int] = field(default_factory=dict)
    """The number of each of those lines."""
    unfinished: list[tuple[str, int]] = field(default_factory=list)
    """File and line number of a last line a running proxy was still writing: left out, not skipped."""
    left_out_lines: int = 0
    """Lines left out because the opening line of their exchange was skipped (they have no chain)."""
    left_out: list[tuple[str, int, str]] = field(default_factory=list)
    """Exchange, lines left out and `file:line` of its skipped opening line, for the first of them."""
    unplaced_lines: int = 0
    """Message lines that joined no chain (on a client exchange, the request they answer was skipped;
    on a bridge's leg, the capture ties it to none): in a HAR they are in their exchange's or leg's
    entry; a chain export has nowhere to put them."""
    unplaced: list[tuple[str, int, str | None, bool]] = field(default_factory=list)
    """Exchange (or leg), its lines that joined no chain, `file:line` of the corrupt line skipped
    before them (None when none was) and whether it is a bridge's upstream leg, for the first of them."""
    gap_lines: int = 0
    """Stretches of a run its capture did not record (`capture_gap` lines): said, not skipped."""
    gaps: list[tuple[str, int, CaptureGap]] = field(default_factory=list)
    """File, line number and content of the first of them."""
    newer: list[tuple[str, str]] = field(default_factory=list)
    """Files of a newer minor format version, each with its version: read, though whatever that
    version added is ignored or skipped (said, never counted as skipped by itself)."""

    def lines(self) -> list[str]:
        """One sentence per thing skipped, and per file of a newer minor format, for stderr and the
        HAR's comment; empty when there is nothing to say."""
        out = [f"skipped {path}:{line}: {reason}" for path, line, reason in self.corrupt]
        if self.corrupt_lines > len(self.corrupt):
            out.append(f"skipped {counted(self.corrupt_lines - len(self.corrupt), 'more corrupt line')}")
        out.extend(
            f"left out {counted(lines, 'later line')} of exchange {exchange}: its opening line ({where}) "
            "was skipped"
            for exchange, lines, where in self.left_out
        )
        more = self.left_out_lines - sum(lines for _, lines, _ in self.left_out)
        if more > 0:
            out.append(f"left out {counted(more, 'more line')} of exchanges whose opening line was skipped")
        out.extend(self._unplaced_lines())
        out.extend(gap.sentence(f"{path}:{line}") for path, line, gap in self.gaps)
        if self.gap_lines > len(self.gaps):
            stretches = counted(self.gap_lines - len(self.gaps), "more stretch", "more stretches")
            out.append(f"{stretches} of the run not recorded")
        out.extend(
            f"skipped {path}:{line}: a line of {what}, which a newer mcp-proxy wrote"
            for path, line, what in self.unknown
        )
        if self.unknown_lines > len(self.unknown):
            unnamed = counted(self.unknown_lines - len(self.unknown), "more line")
            out.append(f"skipped {unnamed} of kinds a newer mcp-proxy wrote")
        for path in self.cut_short:
            where = f"{path}:{self.cut_short_lines[path]}" if path in self.cut_short_lines else path
            out.append(f"{where}: last line cut short (a proxy stopped mid-write)")
        out.extend(
            f"{path}:{line}: left out the last line, which the running proxy is still writing"
            for path, line in self.unfinished
        )
        out.extend(
            f"{path}: capture format {version} is newer than this mcp-proxy writes ({FORMAT_VERSION}): "
            "what it added is not shown (upgrade mcp-proxy to see it)"
            for path, version in self.newer
        )
        return out

    def _unplaced_lines(self) -> list[str]:
        """One sentence per exchange whose message lines joined no chain, and one for the rest."""
        out = []
        for exchange, lines, after, leg in self.unplaced:
            they, joined = ("it", "it joined") if lines == 1 else ("them", "they joined")
            if after:
                why = f"a line before {they} ({after}) was skipped"
            elif leg:
                why = f"the capture ties {they} to no client exchange or earlier leg"
            else:
                why = "what they answer is not in the capture"
            where = f"upstream leg {exchange}" if leg else f"exchange {exchange}"
            noun = "line" if leg else "later line"
            out.append(f"left out {counted(lines, noun)} of {where}: {joined} no chain, {why}")
        more = self.unplaced_lines - sum(entry[1] for entry in self.unplaced)
        if more > 0:
            out.append(f"left out {counted(more, 'more line')} that joined no chain")
        return out

    @property
    def any_skipped(self) -> bool:
        """Whether any line was skipped (corrupt, of a newer kind, or cut short) or joined no chain: each
        is named."""
        return bool(self.corrupt_lines or self.unknown_lines or self.cut_short or self.unplaced_lines)

    @property
    def lost_lines(self) -> bool:
        """Whether a line this mcp-proxy reads is missing from what was written: a corrupt line, a
        last line cut short, or a line that joined no chain (the exit status says so). Lines of kinds a
        newer minor wrote, which the format promises to read past, are named but fail nothing."""
        return bool(self.corrupt_lines or self.cut_short or self.unplaced_lines)

    @property
    def loses_chains(self) -> bool:
        """Whether a skipped line may have held a chain: a corrupt line, a last line cut short, or the
        lines of an exchange whose opening line was one of those. Lines of kinds a newer minor wrote
        (which the format promises to read past) and lines that joined no chain lose none."""
        return bool(self.corrupt_lines or self.cut_short or self.left_out_lines)

    def skipped(self) -> dict[str, Any] | None:
        """The JSON export's `skipped` member; None when nothing was skipped or left unrecorded."""
        if not self.any_skipped and not self.gap_lines:
            return None
        return {
            "corrupt_lines": self.corrupt_lines,
            "corrupt": [{"file": p, "line": n, "reason": r} for p, n, r in self.corrupt],
            "left_out_lines": self.left_out_lines,
            "left_out": [{"exchange": x, "lines": n, "opening_line": w} for x, n, w in self.left_out],
            "unplaced_lines": self.unplaced_lines,
            "unplaced": [_unplaced_entry(*entry) for entry in self.unplaced],
            "unknown_lines": self.unknown_lines,
            "unknown": [{"file": p, "line": n, "reason": r} for p, n, r in self.unknown],
            "cut_short": self.cut_short,
            "not_recorded": [gap.to_dict(path, line) for path, line, gap in self.gaps],
        }


def _unplaced_entry(exchange: str, lines: int, after: str | None, leg: bool) -> dict[str, Any]:
    """One `skipped.unplaced` element; a bridge's leg is named in `exchange` too (as a HAR's
    `_mcp.exchange` names it), with `leg: true`."""
    entry: dict[str, Any] = {"exchange": exchange, "lines": lines, "after_line": after}
    if leg:
        entry["leg"] = True
    return entry


def open_readers(paths: Sequence[Path], replayer: ObservationReplayer) -> list[CaptureReader]:
    """Open every file (checking its header) before anything is written; closes them all on failure."""
    readers: list[CaptureReader] = []
    try:
        for path in paths:
            readers.append(CaptureReader(path, replayer=replayer))
    except BaseException:
        for reader in readers:
            reader.close()
        raise
    return readers


def export_capture(
    paths: Sequence[Path],
    fmt: Format,
    out: IO[bytes],
    keep: ChainFilter | None = None,
    parts: PartsOrder | None = None,
) -> ExportReport:
    """Export the capture files (oldest first) to `out`; returns what was written and skipped.

    `parts` (how the files given were put in order) lets the HAR's comment and the JSON's `parts`
    member say which parts were given twice or are missing, as stderr does.
    Raises CaptureFormatError or CaptureError before writing anything when a file is not a readable
    capture.
    """
    keep = keep or ChainFilter()
    parts = parts or PartsOrder(list(paths))
    report = ExportReport()
    if fmt is Format.HAR:
        searched = keep.needs_bodies  # the chains keep their messages for the query to search
        store = ChainStore(max_chains=RING, max_messages_per_chain=JSON_MESSAGES if searched else 1)
        har = HarWriter(out)
        entries = HarFromCapture(har.write, store, keep=keep, lean=not searched)
        _read(
            open_readers(paths, entries.replayer),
            report,
            entries.proxy_info,
            chained=False,
            on_file=entries.file_header,
        )
        end = settle_at_end(store, paths)
        entries.finish(end.open_entry if end is not None else None)
        report.written = entries.written
        har.close([*parts.problems(), *report.lines()])
        return report
    writer: JsonWriter | NdjsonWriter = (
        JsonWriter(out, [str(p) for p in paths]) if fmt is Format.JSON else NdjsonWriter(out)
    )
    chains = ChainsOut(writer.write, keep)
    store = ChainStore(max_chains=RING, max_messages_per_chain=JSON_MESSAGES, on_gone=chains.gone)
    _read(open_readers(paths, ObservationReplayer(store=store, headlines=False)), report, None)
    settle_at_end(store, paths)
    for chain in store.drain():
        chains.gone(chain)
    report.written = chains.written
    if isinstance(writer, JsonWriter):
        writer.close(report.skipped(), parts.summary())
    return report


def export_spans(paths: Sequence[Path], send: Callable[[SpanRecord], None]) -> ExportReport:
    """Replay the capture files (oldest first) into spans, each handed to `send` with its original times.

    The spans are those the proxy would have exported live (`proxy.flows.spans`): the capture's
    observations carry the times they were made, and its session ids are already the redacted stand-ins.
    """
    report = ExportReport()
    follower = SpanFollower(lambda span: _count(report, send, span), AlreadyRedacted())

    def upstream(info: ProxyInfo) -> None:
        follower.endpoint = Endpoint.of_upstream(info.upstream)
        parts = urlsplit(info.upstream)
        try:
            follower.set_upstream(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
        except ValueError:  # a masked or odd URL: the legs go without server.address
            follower.set_upstream(None, None)

    store = ChainStore(max_chains=RING, max_messages_per_chain=1)
    replayer = ObservationReplayer(
        store=store,
        on_applied=lambda obs, _events, _chain: follower.observe_all((obs,)),
        headlines=False,
        records=False,
    )
    _read(open_readers(paths, replayer), report, upstream, chained=False)
    follower.release_all()  # the capture ended: no cancel comes for a span still held for one
    return report


def _count(report: ExportReport, send: Callable[[SpanRecord], None], span: SpanRecord) -> None:
    report.written += 1
    send(span)


def missing_chain_hint(chain_ids: Sequence[str]) -> str:
    """What to say after `no chain ... in the capture`: where a capture's ids are listed, and why a
    live proxy's id is not among them."""
    where = "`mcp-proxy export --json - CAPTURE` lists its chains and their ids"
    if any(LIVE_ID.fullmatch(chain_id) for chain_id in chain_ids):
        return f"a running proxy's chain id; a capture numbers its chains r1, r2, ... ({where})"
    return where


@dataclass
class ChainFound:
    """One chain read out of a capture (None when no chain had that id) and the proxy that recorded it."""

    chain: Chain | None = None
    info: ProxyInfo | None = None
    report: ExportReport = field(default_factory=ExportReport)
    openers: dict[str, str] = field(default_factory=dict)
    """Session (as recorded, redacted) -> the id of the chain whose `initialize` opened it."""
    batches: dict[str, Batch] = field(default_factory=dict)
    """Exchange -> the JSON-RPC batch it carried, for the found chain's exchanges that carried one."""

    def session_opener(self) -> str | None:
        """The chain that opened the found chain's session, if the capture holds it."""
        session = self.chain.summary.session if self.chain is not None else None
        return self.openers.get(session) if session else None


def find_chain(paths: Sequence[Path], chain_id: str) -> ChainFound:
    """Read the capture files (oldest first) for the chain `chain_id`, with its messages in order.

    Chains are numbered as every reader of the capture numbers them (`r1`, `r2`, ... in file order),
    so an id seen in `tui --open` or a JSON export names the same chain here. Raises like
    `export_capture` when a file is not a readable capture.
    """
    found = ChainFound()

    def gone(chain: Chain) -> None:
        summary = chain.summary
        if summary.id == chain_id:
            found.chain = chain
        if summary.method == "initialize" and summary.session:
            found.openers.setdefault(summary.session, summary.id)

    def info(event: ProxyInfo) -> None:
        found.info = found.info or event

    store = ChainStore(max_chains=RING, max_messages_per_chain=JSON_MESSAGES, on_gone=gone)
    batches = BatchesOf(chain_id)
    replayer = ObservationReplayer(store=store, headlines=False, on_applied=batches.applied)
    _read(open_readers(paths, replayer), found.report, info)
    settle_at_end(store, paths)
    for chain in store.drain():
        gone(chain)
    batches.finish()
    found.batches = batches.found
    return found


def settle_at_end(store: ChainStore, paths: Sequence[Path]) -> CaptureEnd | None:
    """End `incomplete` every chain still open where the capture read ends, noted with what that end
    means (`proxy.record.run_ends`), as `tui --open` shows them; returns it (None: a running proxy
    still writes the last file, and its open calls may still run, so they stay as they are)."""
    end = capture_end(paths[-1]) if paths else None
    if end is None:
        return None
    for chain in store.unended():
        if chain.summary.status in UNFINISHED:
            end_unfinished(chain.summary, end.note)
    return end


def _read(
    readers: list[CaptureReader],
    report: ExportReport,
    on_info: Any,
    *,
    chained: bool = True,
    on_file: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Drive every reader to its end (the replayer's listener does the work), noting what was skipped;
    `chained`: what is written is chains, which lose the message lines that joined none; `on_file`
    gets each file's header before its lines."""
    for reader in readers:
        if on_file is not None:
            on_file(reader.header)
        with reader:
            for event in reader:
                if on_info is not None and isinstance(event, ProxyInfo):
                    on_info(event)
            note_skipped(reader, report)
    if readers:
        note_left_out(readers[-1].replayer, report, unplaced=chained)


def note_left_out(
    replayer: ObservationReplayer | None, report: ExportReport, *, unplaced: bool = True
) -> None:
    """Add the lines a replayer left out with their exchange's skipped opening line to `report` (once
    every file of the capture was read: an exchange may close in a later part), and, when `unplaced`
    (chains are written, not exchanges: a HAR keeps them in their exchange's entry), the message lines
    that joined no chain."""
    if replayer is None:
        return
    replayer.finish()
    report.left_out_lines += replayer.lost_lines
    report.left_out.extend((lost.exchange, lost.lines, lost.where) for lost in replayer.lost)
    if not unplaced:
        return
    joined_none = replayer.unplaced
    report.unplaced_lines += joined_none.lines
    report.unplaced.extend((u.exchange, u.lines, u.after, u.leg) for u in joined_none.settled)


def note_skipped(reader: CaptureReader, report: ExportReport) -> None:
    """Add what a reader read to its end had to skip to `report`."""
    report.corrupt_lines += reader.corrupt_lines
    room = MAX_CORRUPT_SHOWN - len(report.corrupt)
    report.corrupt.extend((str(reader.path), line, reason) for line, reason in reader.corrupt[:room])
    report.unknown_lines += reader.skipped_unknown
    room = MAX_UNKNOWN_SHOWN - len(report.unknown)
    report.unknown.extend((str(reader.path), line, what) for line, what in reader.unknown[:room])
    report.gap_lines += reader.gap_lines
    room = MAX_GAPS_SHOWN - len(report.gaps)
    report.gaps.extend((str(reader.path), line, gap) for line, gap in reader.gaps[:room])
    if reader.unfinished_line is not None:
        report.unfinished.append((str(reader.path), reader.unfinished_line))
    if reader.truncated:
        report.cut_short.append(str(reader.path))
        if reader.truncated_line is not None:
            report.cut_short_lines[str(reader.path)] = reader.truncated_line
    if newer_minor(reader.header):  # the major was checked when the file opened
        report.newer.append((str(reader.path), str(reader.header["version"])))
