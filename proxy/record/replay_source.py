"""A capture read for replaying: its chains as plans, in the order they opened, and what it recorded.

The capture's files are read oldest first (rotated parts by their headers) through the same chain
builder as `tui --open` and `export`, so `r5` names the same chain in all three. Chains come out as
the reader's bounded store lets them go (nothing can join them then), which is the order they opened
in, except that a chain still open when newer ones pushed it out of the ring comes out when it ends.
Memory holds what the store holds, never the file. Pure data and file reading: no network.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from proxy.flows.events import ProxyInfo, event_from_json
from proxy.flows.store import Chain, ChainStore
from proxy.record.export import JSON_MESSAGES, ExportReport, note_left_out, note_skipped, open_readers
from proxy.record.observations import ObservationReplayer
from proxy.record.parts import oldest_first
from proxy.record.replay_plan import ChainPlan, plan_chain


@dataclass
class CaptureSource:
    """What the capture says of where it was recorded, and what reading it skipped."""

    paths: list[Path]
    upstream: str | None = None
    """The upstream the recording proxy pointed at (its first `proxy_info`), as it showed it."""
    upstream_era: str = "unknown"
    """The era it spoke to (`legacy`, `modern`, `dual`, `unknown`): the first `proxy_info` that knew
    one. A proxy that starts before its server, or in front of one that wants a token, says
    `unknown` first and learns the era from the first request it forwards, in a later line."""
    upstream_era_forced: bool = False
    """That era was forced (`--upstream-era`), not probed: a replay speaks it again."""
    report: ExportReport = field(default_factory=ExportReport)
    order_notes: list[str] = field(default_factory=list)

    def _info(self, event: ProxyInfo) -> None:
        if self.upstream is None:
            self.upstream = event.upstream
        if self.upstream_era == "unknown":
            self.upstream_era = event.upstream_era
            self.upstream_era_forced = event.upstream_era_forced


REPLAY_RING: Final = 64
"""Ended chains the reader keeps built before letting the oldest go to the replay: few, since each is
replayed once it is let go and nothing joins it after it ended (open ones are held until they end)."""


def open_capture(paths: Sequence[Path]) -> CaptureSource:
    """The capture's files in the order to read them, and the upstream it recorded; raises
    CaptureFormatError or CaptureError early (a file that is not a capture is refused before anything
    is replayed)."""
    order = oldest_first(paths)
    for reader in open_readers(order.paths, ObservationReplayer(store=ChainStore(max_chains=1))):
        reader.close()
    source = CaptureSource(order.paths, order_notes=order.notes())
    for info in _infos(order.paths):
        source._info(info)
        if source.upstream_era != "unknown":
            break
    return source


def _infos(paths: Sequence[Path]) -> Iterator[ProxyInfo]:
    """The capture's `proxy_info` lines in order, read a line at a time: only lines naming the kind
    are parsed, and the caller stops at the first that knows the upstream's era."""
    for path in paths:
        with path.open("rb") as file:
            for line in file:
                if b'"proxy_info"' not in line:
                    continue
                try:
                    event = event_from_json(line)
                except ValueError:
                    continue
                if isinstance(event, ProxyInfo):
                    yield event


def plans(source: CaptureSource) -> Iterator[ChainPlan]:
    """Every chain of the capture as a plan, as the reader lets it go (see the module docstring)."""
    gone: deque[Chain] = deque()
    store = ChainStore(max_chains=REPLAY_RING, max_messages_per_chain=JSON_MESSAGES, on_gone=gone.append)
    replayer = ObservationReplayer(store=store, headlines=False)
    for reader in open_readers(source.paths, replayer):
        with reader:
            for _event in reader:  # the replayer's store files each chain; `gone` hears of the finished
                while gone:
                    chain = gone.popleft()
                    yield plan_chain(chain.summary, chain.messages)
            note_skipped(reader, source.report)
    note_left_out(replayer, source.report)
    for chain in store.drain():
        yield plan_chain(chain.summary, chain.messages)
