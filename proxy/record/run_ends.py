"""Where a capture's record of a proxy run ends, and what every reader says of a call still open there.

A capture records each call as it goes, so a call the record holds no end of was still open where
the record of its run stops. No reader may show it `pending` once that run is gone: the process that
would have ended it is not there any more. One rule, for every reader of a capture (`tui --open`,
`export --json`, `--ndjson` and `--har`):

- a later line of the same file is the `proxy_info` of another run (a restarted proxy appends to its
  capture): the earlier run's open calls end `incomplete`, noted `RUN_REPLACED`;
- the last file read ends and a later part of its capture lies beside it, not given (a rotation went
  on in the next file): `incomplete`, noted by `later_part_note`, which names that part;
- the last file read ends and nothing follows it: the run ended there (it stopped or was killed),
  `incomplete`, noted `CAPTURE_ENDS`;
- the last file read is still being written (a running proxy holds its lock): its calls may still be
  running, and stay `pending`, as a running proxy's own export shows them.

The notes live here; finding which case holds is `proxy.record.parts.capture_end`. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

RUN_REPLACED: Final = (
    "its proxy run ended before it did: a later run of the proxy wrote on in this capture, so no "
    "answer can come for it any more"
)
"""The note on a call an earlier run of the proxy left open, in a capture a later run appended to."""

OPEN_AT_RUN_END: Final = "still open when its proxy run ended (a later run wrote on in this capture)"
"""A HAR entry's comment on an exchange an earlier run left open, in a capture a later run appended to."""

CAPTURE_ENDS: Final = (
    "the capture ends before this call did: its proxy's run ended there (it stopped or was killed), "
    "so no answer can come for it any more"
)
"""The note on a call still open where the last capture file read ends, with no later part beside it."""


@dataclass(frozen=True, slots=True)
class CaptureEnd:
    """What the end of the last capture file read means for what is still open there."""

    note: str
    """The note on a chain still open there (it ends `incomplete`)."""
    open_entry: str
    """A HAR entry's comment on an exchange still open there."""


RUN_ENDED_THERE: Final = CaptureEnd(
    CAPTURE_ENDS, "still open where the capture ends (its proxy's run ended there: stopped or killed)"
)
"""The end of a capture with nothing after it: its proxy's run ended there."""


def in_later_part(part: Path) -> CaptureEnd:
    """The end of a capture part whose next part (`part`, beside it) was not read."""
    return CaptureEnd(
        f"the capture part read ends before this call did: it goes on in the later part {part.name}, "
        "which was not read (open or export the parts together to see its end)",
        f"still open where this capture part ends (it goes on in {part.name}, which was not read)",
    )
