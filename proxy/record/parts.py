"""The order a capture's files are read in: oldest first, by the time each file was started.

Rotated parts share one chain builder and must be read oldest first: a newer part read first opens
the calls its repeated lines hold, and the older part then opens them again, so the export shows
extra chains. Every file's header says when the file was started (`created`), so the order the
user gave is checked against it and put right. Only the headers are read here; a file that is not a
capture is left for the reader to refuse, naming it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from proxy.record.capture import CaptureError, CaptureFormatError, CaptureReader


@dataclass(frozen=True, slots=True)
class PartsOrder:
    """The files in the order to read them, and what a user should be told about it."""

    paths: list[Path]
    reordered: bool = False
    """The files were given in another order (they are read by their start times instead)."""
    unsure: list[Path] = field(default_factory=list)
    """Files whose start time is not known or is another file's too: read in the order given."""

    def notes(self) -> list[str]:
        """Sentences for stderr; empty when the order given was the order read."""
        out = []
        if self.reordered:
            out.append(
                "reading the captures oldest first, by the time each file was started: "
                + ", ".join(str(p) for p in self.paths)
            )
        if self.unsure:
            out.append(
                "cannot tell which is older of "
                + ", ".join(str(p) for p in self.unsure)
                + " (no distinct start time in their headers): read in the order given"
            )
        return out


def started(path: Path) -> float | None:
    """The `created` time of a capture file's header, or None when it cannot be read."""
    try:
        with CaptureReader(path) as reader:
            created = reader.header.get("created")
    except (CaptureError, CaptureFormatError):
        return None
    if isinstance(created, int | float) and not isinstance(created, bool):
        return float(created)
    return None


def oldest_first(paths: Sequence[Path]) -> PartsOrder:
    """The files ordered by their start times; files without a distinct one keep their given place."""
    times = [started(p) for p in paths]
    known = [t for t in times if t is not None]
    unsure = [p for p, t in zip(paths, times, strict=True) if t is None or known.count(t) > 1]
    if unsure:
        return PartsOrder(list(paths), unsure=unsure)
    ordered = [p for _t, p in sorted(zip(known, paths, strict=True), key=lambda pair: pair[0])]
    return PartsOrder(ordered, reordered=ordered != list(paths))
