"""Capture completeness: is everything the clients saw in a capture, exactly once?

A soak or a test knows what its clients sent and received; the capture says what the proxy recorded.
`check_capture` reads a capture (rotated files in order, oldest first) and counts, for each expected
message, the client-facing records whose body holds its marker: a text unique to that message (an
argument the client chose, echoed by the server into progress notifications and results). A message
the proxy relayed unchanged is recorded once (`side: both`); a bridged one once as the client saw it
(`side: client`) and again as the server saw it (`side: upstream`), so only the client-facing records
count. Beside the expectations the report counts what the capture says about itself: chains that
never ended, records filed twice (the same chain and sequence number) and corrupt lines.

Pure reading: no traffic, no aiohttp, no structlog.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import orjson

from proxy.flows.events import DECIDED, ChainChanged, ChainOpened, ChainStatus, FlowEvent, MessageRecorded
from proxy.record.capture import CaptureReader
from proxy.record.observations import ObservationReplayer

ToWhom = Literal["to_server", "to_client"]
"""Which way an expected message travelled (the values of `MessageRecord.direction`)."""

_CLIENT_SIDES = frozenset({"both", "client"})

ENDED: Final = frozenset({*DECIDED, ChainStatus.INCOMPLETE})
"""The statuses of a chain that ended (an incomplete one ended too, in a part read alone)."""

MARKER_TOKEN: Final = re.compile(r"[A-Za-z0-9_.:#-]+")
"""What a marker looks like: a whole token of these characters (`soak-17-progress-2`), never part of a
longer one, so `m-1` is not found inside `m-10`."""


@dataclass(frozen=True, slots=True)
class Expected:
    """One message a client sent or received, named by a marker unique to it (a `MARKER_TOKEN`)."""

    marker: str
    direction: ToWhom
    label: str = ""
    """What the caller calls it (shown in the report: `call 17 progress 2`)."""
    count: int = 1
    """Client-facing records that must hold the marker: more than one when the client itself sent the
    message more than once (an MRTR retry repeats the call's arguments each round)."""


@dataclass(slots=True)
class CompletenessReport:
    """What `check_capture` found: per-expectation counts and the capture's own loose ends."""

    expected: int = 0
    found_once: int = 0
    """Expected messages found exactly as often as expected (once, unless `Expected.count` says)."""
    missing: list[Expected] = field(default_factory=list)
    duplicated: list[tuple[Expected, int]] = field(default_factory=list)
    records: int = 0
    """Client-facing message records read (pass-through and the client side of bridges)."""
    chains: int = 0
    unfinished_chains: list[str] = field(default_factory=list)
    """Chains with a request that the capture never shows ending (ok or error)."""
    repeated_records: int = 0
    """Records filed twice under the same chain and sequence number (never expected)."""
    corrupt_lines: int = 0
    truncated: bool = False
    """The last file ended in a cut line (a proxy killed mid-write)."""

    @property
    def completeness(self) -> float:
        """Percent of expected messages found as often as expected (100.0 when nothing was expected)."""
        return 100.0 if self.expected == 0 else round(100.0 * self.found_once / self.expected, 3)

    @property
    def ok(self) -> bool:
        """Every expected message as often as expected, nothing filed twice, no corrupt line."""
        return self.found_once == self.expected and not self.repeated_records and not self.corrupt_lines

    def to_dict(self, *, sample: int = 20) -> dict[str, Any]:
        """A JSON-ready summary (at most `sample` missing and duplicated entries listed)."""
        return {
            "completeness_pct": self.completeness,
            "ok": self.ok,
            "expected": self.expected,
            "found_once": self.found_once,
            "missing": len(self.missing),
            "duplicated": len(self.duplicated),
            "missing_sample": [_show(e) for e in self.missing[:sample]],
            "duplicated_sample": [{**_show(e), "count": n} for e, n in self.duplicated[:sample]],
            "records": self.records,
            "chains": self.chains,
            "unfinished_chains": len(self.unfinished_chains),
            "unfinished_sample": self.unfinished_chains[:sample],
            "repeated_records": self.repeated_records,
            "corrupt_lines": self.corrupt_lines,
            "truncated": self.truncated,
        }


def _show(e: Expected) -> dict[str, str]:
    return {"marker": e.marker, "direction": e.direction, "label": e.label, "count": str(e.count)}


def capture_files(path: Path) -> list[Path]:
    """A capture and its rotated files (`path.N` ... `path.1`, `path`), oldest first."""
    path = Path(path)
    rotated = sorted(
        (p for p in path.parent.glob(path.name + ".*") if p.suffix[1:].isdigit()),
        key=lambda p: int(p.suffix[1:]),
        reverse=True,
    )
    return [*rotated, *([path] if path.exists() else [])]


def read_events(paths: Sequence[Path], report: CompletenessReport | None = None) -> Iterator[FlowEvent]:
    """Every event of several capture files in order, observations built by one replayer across the files.

    One replayer, so an exchange whose observations a rotation split over two files is built whole.
    """
    replayer = ObservationReplayer()
    for i, path in enumerate(paths):
        with CaptureReader(path, replayer=replayer) as reader:
            yield from reader
            if report is not None:
                report.corrupt_lines += reader.corrupt_lines
                report.truncated = reader.truncated and i == len(paths) - 1


def check_capture(capture: Path | Sequence[Path], expected: Iterable[Expected]) -> CompletenessReport:
    """Count each expected message's client-facing records in a capture; a path takes its rotated files too.

    The soak driver calls this once at the end of a run with every message its clients saw.
    """
    paths = capture_files(capture) if isinstance(capture, Path | str) else list(capture)
    report = CompletenessReport()
    bodies: list[tuple[str, str]] = []  # (direction, body text) of each client-facing record
    seen: set[tuple[str, int]] = set()
    open_requests: dict[str, bool] = {}
    for event in read_events(paths, report):
        if isinstance(event, MessageRecorded):
            msg = event.message
            key = (event.chain_id, msg.seq)
            if key in seen:
                report.repeated_records += 1
            seen.add(key)
            if msg.side.value in _CLIENT_SIDES:
                report.records += 1
                bodies.append((msg.direction.value, _text(msg.body)))
        elif isinstance(event, ChainOpened):
            report.chains += 1
            open_requests[event.chain.id] = event.chain.jsonrpc_id is not None
        elif isinstance(event, ChainChanged) and event.chain.status in ENDED:
            open_requests.pop(event.chain.id, None)
    report.unfinished_chains = [cid for cid, is_request in open_requests.items() if is_request]
    _count(report, list(expected), bodies)
    return report


def _text(body: Any) -> str:
    if isinstance(body, str):
        return body
    try:
        return orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:
        return repr(body)


def _count(report: CompletenessReport, expected: list[Expected], bodies: list[tuple[str, str]]) -> None:
    """Count, per direction, the records holding each marker as a whole token (once per record)."""
    markers = {e.marker for e in expected}
    counts: Counter[tuple[str, str]] = Counter()
    for direction, text in bodies:
        for token in set(MARKER_TOKEN.findall(text)) & markers:
            counts[(direction, token)] += 1
    report.expected = len(expected)
    for e in expected:
        n = counts[(e.direction, e.marker)]
        if n == e.count:
            report.found_once += 1
        elif n < e.count:
            report.missing.append(e)
        else:
            report.duplicated.append((e, n))


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m proxy.record.completeness CAPTURE EXPECTED.jsonl`: print the report, exit 1 unless ok.

    Each line of EXPECTED is `{"marker": ..., "direction": "to_client"|"to_server", "label": ...,
    "count": 1}` (label and count optional).
    """
    parser = argparse.ArgumentParser(prog="python -m proxy.record.completeness")
    parser.add_argument("capture", type=Path)
    parser.add_argument("expected", type=Path)
    args = parser.parse_args(argv)
    items = [
        Expected(str(obj["marker"]), obj["direction"], str(obj.get("label", "")), int(obj.get("count", 1)))
        for obj in (orjson.loads(line) for line in args.expected.read_bytes().splitlines() if line.strip())
    ]
    report = check_capture(args.capture, items)
    sys.stdout.write(orjson.dumps(report.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
