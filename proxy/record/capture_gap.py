"""The `capture_gap` line: what a capture did not record while its file refused writes.

A full disk or a file-size limit stops the writer (`capture_failed`); traffic goes on, and a SIGUSR1
reopen starts writing again. The line written then says when writing stopped and started again and how
much went by unrecorded, so a reader of the parts never takes them for one continuous capture. The
writer counts while stopped (`GapCount`, a few integers: nothing is encoded or kept); the reader
checks each field's type before it believes the line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import orjson

from proxy.record.har import iso_time

GAP_TYPE: Final = "capture_gap"
"""The `type` of the line."""

GAP_PREFIX: Final = b'{"type":"' + GAP_TYPE.encode() + b'"'
"""How every such line starts (a reader tells it from event lines by it)."""


@dataclass(frozen=True, slots=True)
class CaptureGap:
    """A stretch of a proxy's run that its capture did not record."""

    began: float
    """When writing stopped (epoch seconds): the `capture_failed` moment."""
    ended: float
    """When writing started again (the reopen)."""
    observations: int
    """Observations not written: those taken while stopped and those of the write that failed."""
    exchanges_opened: int
    """Exchanges that began while writing was stopped: their lines before `ended` are not here."""
    exchanges_ended: int
    """Exchanges that ended while writing was stopped: their end is not here."""

    def line(self) -> bytes:
        """The capture line, with its newline."""
        return orjson.dumps(
            {
                "type": GAP_TYPE,
                "began": self.began,
                "ended": self.ended,
                "observations": self.observations,
                "exchanges_opened": self.exchanges_opened,
                "exchanges_ended": self.exchanges_ended,
            },
            option=orjson.OPT_APPEND_NEWLINE,
        )

    def sentence(self, where: str) -> str:
        """What was not recorded, for stderr, a HAR's comment and the TUI's status."""
        began, ended = iso_time(self.began), iso_time(self.ended)
        return (
            f"{where}: nothing was recorded from {began} to {ended} (the capture file refused writes): "
            f"{self.observations} observations lost; {self.exchanges_opened} exchanges began and "
            f"{self.exchanges_ended} ended meanwhile"
        )

    def to_dict(self, file: str, line: int) -> dict[str, Any]:
        """The JSON export's element for it."""
        return {
            "file": file,
            "line": line,
            "began": self.began,
            "ended": self.ended,
            "observations": self.observations,
            "exchanges_opened": self.exchanges_opened,
            "exchanges_ended": self.exchanges_ended,
        }


def parse_gap(obj: Any) -> CaptureGap:
    """The gap one decoded line states; ValueError naming the field when a field is missing or of
    the wrong type (checked before anything is believed)."""
    if not isinstance(obj, dict):
        raise ValueError("a capture_gap line is not an object")
    times: list[float] = []
    for name in ("began", "ended"):
        value = obj.get(name)
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ValueError(f"capture_gap field {name!r} is not a number")
        times.append(float(value))
    counts: list[int] = []
    for name in ("observations", "exchanges_opened", "exchanges_ended"):
        value = obj.get(name)
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            raise ValueError(f"capture_gap field {name!r} is not a count")
        counts.append(value)
    return CaptureGap(times[0], times[1], counts[0], counts[1], counts[2])


class GapCount:
    """What goes by while writing is stopped: counted on the traffic path, so integers only."""

    def __init__(self, began: float) -> None:
        self.began = began
        self.observations = 0
        self.exchanges_opened = 0
        self.exchanges_ended = 0

    def ended(self, at: float) -> CaptureGap:
        """The gap, now that writing starts again at `at`."""
        return CaptureGap(self.began, at, self.observations, self.exchanges_opened, self.exchanges_ended)
