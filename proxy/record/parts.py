"""The files of a capture to read, and their order: each part once, oldest first, gaps named.

Rotated parts share one chain builder and must be read oldest first: a newer part read first opens
the calls its repeated lines hold, and the older part then opens them again, so the export shows
extra chains. Every file's header says when the file was started (`created`), so the order the
user gave is checked against it and put right. A part given twice (the same path twice, or a copy
under another name that a glob caught) would open its calls twice too: a file whose header is
another's, and whose bytes the other holds from its start, is read once, as the file holding more
(of two alike, the one given first).
A header also says which file it `follows` (the one its writer wrote before it, from format 1.10)
and the `series` of parts it belongs to (the `created` of their first file): a given part that
follows a file not given, started after an older part given of its series, has a part missing
before it, which is said, since every call that went on in the missing part ends pending. Another
capture given beside the parts (another proxy's, an earlier run's) is of another series, so it
never makes a part look missing.
Only the headers are read here (and the bytes of files whose headers are the same); a file that is
not a capture is left for the reader to refuse, naming it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from proxy.record.capture import CaptureError, CaptureFormatError, CaptureReader, being_written, header_time
from proxy.record.har import iso_time
from proxy.record.run_ends import RUN_ENDED_THERE, CaptureEnd, in_later_part

COMPARE_CHUNK: Final = 64 * 1024
"""Bytes compared at a time when two files share a header (so a big copy is never read whole)."""


@dataclass(frozen=True, slots=True)
class Copy:
    """A file not read, because another one given holds all it holds."""

    path: Path
    same_as: Path

    def sentence(self) -> str:
        """Why the file is not read, for stderr and an export's summary."""
        if self.path == self.same_as:
            return f"{self.path} is given twice: read once"
        return (
            f"not reading {self.path}: it is a copy of {self.same_as} (the same header, and "
            f"{self.same_as} holds all its lines), read once"
        )


@dataclass(frozen=True, slots=True)
class Gap:
    """At least one part missing between two files given of one series: `after` is the newest of them
    before it."""

    after: Path
    before: Path
    follows: float
    """The `created` of the file `before` continues, which was not given."""


@dataclass(frozen=True, slots=True)
class PartsOrder:
    """The files in the order to read them, and what a user should be told about it."""

    paths: list[Path]
    reordered: bool = False
    """The files were given in another order (they are read by their start times instead)."""
    unsure: list[Path] = field(default_factory=list)
    """Files whose start time is not known or is another file's too: read in the order given."""
    copies: list[Copy] = field(default_factory=list)
    """Files given that are copies of another one given: not read."""
    gaps: list[Gap] = field(default_factory=list)
    """Places between two files read where the headers say a part is missing."""

    def notes(self) -> list[str]:
        """Sentences for stderr; empty when the order given was the order read, each file once."""
        out = self.problems()
        if self.reordered:
            out.append(
                "reading the captures oldest first, by the time each file was started: "
                + ", ".join(str(p) for p in self.paths)
            )
        if self.unsure:
            out.append(self._unsure_sentence())
        return out

    def _unsure_sentence(self) -> str:
        """What the headers leave unknown about the order: worded for one file alone, for one file
        among others (its header gives no start time: two alike take two files), and for several."""
        if len(self.paths) == 1:
            return (
                f"{self.paths[0]}: its header gives no start time (its `created` is missing or not a number)"
            )
        if len(self.unsure) == 1:
            return (
                f"cannot tell where {self.unsure[0]} goes among the other files (its header gives no "
                "start time): read in the order given"
            )
        return (
            "cannot tell which is older of "
            + ", ".join(str(p) for p in self.unsure)
            + " (no distinct start time in their headers): read in the order given"
        )

    def problems(self) -> list[str]:
        """Sentences on parts given twice or missing, for stderr and an export's own summary."""
        out = [c.sentence() for c in self.copies]
        out.extend(
            f"a capture part is missing between {g.after} and {g.before}: {g.before} continues a file "
            f"started at {iso_time(g.follows)}, which was not given: what went on in it "
            "is not read (its calls end pending, or lack their start); give every part"
            for g in self.gaps
        )
        return out

    def summary(self) -> dict[str, Any] | None:
        """The JSON export's `parts` member; None when every part was given once."""
        if not (self.copies or self.gaps):
            return None
        return {
            "copies": [{"file": str(c.path), "same_as": str(c.same_as)} for c in self.copies],
            "missing": [
                {"after": str(g.after), "before": str(g.before), "follows": iso_time(g.follows)}
                for g in self.gaps
            ],
        }


@dataclass(frozen=True, slots=True)
class _Head:
    """What a file's header says about its place among the parts."""

    path: Path
    header: dict[str, Any] | None
    created: float | None
    follows: float | None
    series: float | None


def _head(path: Path) -> _Head:
    try:
        with CaptureReader(path) as reader:
            header = reader.header
    except (CaptureError, CaptureFormatError):
        return _Head(path, None, None, None, None)
    times = (header_time(header, name) for name in ("created", "follows", "series"))
    return _Head(path, header, *times)


def oldest_first(paths: Sequence[Path]) -> PartsOrder:
    """The files each once, ordered by their start times; files without a distinct one keep their given
    place; the copies left out and the parts missing between them named."""
    heads, copies = _without_copies([_head(p) for p in paths])
    gaps = _gaps(heads)
    times = [h.created for h in heads]
    known = [t for t in times if t is not None]
    kept = [h.path for h in heads]
    unsure = [h.path for h in heads if h.created is None or known.count(h.created) > 1]
    if unsure:
        return PartsOrder(kept, unsure=unsure, copies=copies, gaps=gaps)
    ordered = [p for _t, p in sorted(zip(known, kept, strict=True), key=lambda pair: pair[0])]
    return PartsOrder(ordered, reordered=ordered != kept, copies=copies, gaps=gaps)


def _without_copies(heads: list[_Head]) -> tuple[list[_Head], list[Copy]]:
    """The files but those another given file holds whole (same header, its bytes from the start), each
    left-out file named with the file read in its place (of copies nested a ⊂ b ⊂ c, both a and b are
    copies of c)."""
    kept: list[_Head] = []
    dropped: list[tuple[Path, Path]] = []
    replaced_by: dict[Path, Path] = {}
    for head in heads:
        twin = next((k for k in kept if _same_part(k, head)), None)
        if twin is None:
            kept.append(head)
            continue
        bigger, smaller = (head, twin) if _size(head.path) > _size(twin.path) else (twin, head)
        if bigger is head:
            kept[kept.index(twin)] = head
            replaced_by[twin.path] = head.path
        dropped.append((smaller.path, bigger.path))
    copies: list[Copy] = []
    for path, same_as in dropped:
        copy = Copy(path, _read_instead(same_as, replaced_by))
        if copy not in copies:
            copies.append(copy)
    return kept, copies


def _read_instead(path: Path, replaced_by: dict[Path, Path]) -> Path:
    """The file read in the place of `path`: the last of the bigger copies that took its place in turn."""
    for _ in range(len(replaced_by)):  # each step is to a bigger file, so no path comes twice
        if path not in replaced_by:
            break
        path = replaced_by[path]
    return path


def _same_part(a: _Head, b: _Head) -> bool:
    """Whether two files are one part: the same file, or one header (its start time known) and the
    smaller one's bytes the start of the bigger one's (a copy, made while it was written or after)."""
    try:
        if a.path.samefile(b.path):
            return True
    except OSError:
        return False
    if a.header is None or a.created is None or a.header != b.header:
        return False
    small, big = sorted((a.path, b.path), key=_size)
    return _starts_with(big, small)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _starts_with(big: Path, small: Path) -> bool:
    """Whether `big` begins with every byte of `small`, compared a chunk at a time."""
    try:
        with big.open("rb") as b, small.open("rb") as s:
            while chunk := s.read(COMPARE_CHUNK):
                if b.read(len(chunk)) != chunk:
                    return False
    except OSError:
        return False
    return True


def _gaps(heads: list[_Head]) -> list[Gap]:
    """Where a file follows one not given that started after an older given file of its series: a part
    is missing.

    A file that follows one older than every file given of its series only lacks the parts before them
    (given alone, or rotated away), which its chains' own notes say; a file of another series (another
    capture given with it), or of none (written before `series`), proves nothing missing."""
    started = {h.created for h in heads if h.created is not None}
    gaps = []
    for head in sorted(heads, key=lambda h: h.created if h.created is not None else float("inf")):
        follows = head.follows
        if follows is None or follows in started or head.series is None:
            continue
        earlier = [
            h for h in heads if h.series == head.series and h.created is not None and h.created < follows
        ]
        if earlier:
            after = max(earlier, key=lambda h: h.created or 0.0)
            gaps.append(Gap(after.path, head.path, follows))
    return gaps


MAX_SIBLINGS: Final = 200
"""Files beside a capture file looked at for the part that follows it (rotation's names first)."""


def later_part(path: Path) -> Path | None:
    """The file beside `path` whose header says it follows `path` (a rotation went on in it), if any.

    Rotated parts are `run.jsonl`, `run.jsonl.1`, ... (the newest unnumbered), so the part after
    `run.jsonl.2` is `run.jsonl.1`: those names are tried first, and the directory is listed only
    when none of them follows `path`. Parts renamed since are then found among the other entries of
    the directory, by their headers alone: at most `MAX_SIBLINGS` of them, in the order the
    directory lists them, so a captures directory with many files costs one bounded read.
    """
    created = _head(path).created
    if created is None:
        return None
    base = re.sub(r"\.\d+$", "", path.name)
    rotated = [path.with_name(base), *(path.with_name(f"{base}.{n}") for n in range(1, 10))]
    found = _following(rotated, path, created)
    if found is not None:
        return found
    try:
        others = list(itertools.islice((p for p in path.parent.iterdir() if p not in rotated), MAX_SIBLINGS))
    except OSError:
        return None
    return _following(others, path, created)


def _following(candidates: Iterable[Path], path: Path, created: float) -> Path | None:
    """The first of `candidates` (other than `path`) whose header says it follows `path`'s `created`."""
    for candidate in candidates:
        if candidate.name == path.name or not candidate.is_file():
            continue
        if _head(candidate).follows == created:
            return candidate
    return None


def capture_end(path: Path) -> CaptureEnd | None:
    """What the end of `path`, the last capture file read, means for what is still open there
    (`proxy.record.run_ends`): None while a running proxy still writes it (its calls may be running)."""
    if being_written(path):
        return None
    later = later_part(path)
    return in_later_part(later) if later is not None else RUN_ENDED_THERE
