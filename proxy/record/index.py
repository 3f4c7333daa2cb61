"""Indexing a capture for browsing: every chain's final headline, with its records spilled to a file.

A capture of hours holds tens of thousands of chains and millions of records; a browser needs every
headline at hand (the list and its filter reach each chain) but the records of only the chains it
shows. The index pass reads the capture once, in order, through the same chain builder every reader
uses (so it shows what a live watcher saw), and keeps nothing of the file in memory: each record is
appended to a *spill file* as one line, and each chain, once the reader's bounded store lets it go
(nothing can join it any more), comes out as one `indexed` line with its final headline and the spill
offsets of its records. A browser keeps the headlines and reads a chain's records back
(`read_records`) only when it shows that chain.

The pass builds no records: a spill line is a record's reference (`proxy.record.record_refs`: where
its observation and HTTP head lines are in the capture, its sequence number and round), and the
record is built from the capture's lines when it is read back, by the same code that would have built
it during the pass. A record another writer saved whole (an event line) is spilled as its JSON.

`python -m proxy.record.index --spill FILE CAPTURE...` runs the pass in a process of its own (the TUI
starts it, so the pass has a core to itself and the screen stays live) and writes JSON lines on stdout:

- `{"type": "index_progress", "read": bytes, "total": bytes}` now and then;
- `{"type": "indexed", "chain": ChainSummary, "records": [offset, ...], "dropped": n}` per chain;
- every other flow event the capture makes (`proxy_info`, `session`, `continuation`), as itself;
- last, `{"type": "index_end", "corrupt_lines": n, "corrupt": [[file, line, reason], ...],
  "unknown_lines": n, "unknown": [[file, line, "kind 'x'"], ...], "cut_short": [file, ...],
  "left_out_lines": n, "unplaced_lines": n, "chains": n}`
  (`left_out_lines`: lines of exchanges whose opening line was skipped, which no chain can hold;
  `unplaced_lines`: messages that joined no chain, the request they answer skipped).

`read_tail` builds the newest part of a capture on its own, for a first screen while the pass runs:
its chains are built without what came before them (a call opened earlier is not among them), and
their ids carry `TAIL_PREFIX` so they are never taken for the index's.

No aiohttp, structlog or textual; no traffic.
"""

from __future__ import annotations

import argparse
import os
import sys
from array import array
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Final

import orjson
from pydantic import ValidationError

from proxy.flows.events import (
    ChainChanged,
    ChainOpened,
    ChainSummary,
    FlowEvent,
    MessageRecord,
    MessageRecorded,
    ProxyInfo,
    event_from_json,
    event_to_json,
)
from proxy.flows.observations import Observation
from proxy.flows.store import Chain, ChainStore
from proxy.record.capture import (
    MAX_CORRUPT_SHOWN,
    MAX_GAPS_SHOWN,
    MAX_UNKNOWN_SHOWN,
    CaptureReader,
    file_minor,
)
from proxy.record.observations import OBS_PREFIX, ObservationReplayer, UnknownKind
from proxy.record.old_header_text import headers_as_text, stores_latin1
from proxy.record.record_refs import RecordBuilder, Ref, RefTaker, position

RING: Final = 500
"""Chains the index pass keeps built before letting ended ones go (open ones are held until they end)."""

MAX_RECORDS: Final = 1000
"""Records indexed per chain (the TUI keeps as many); later ones are counted in `dropped`."""

PROGRESS_EVERY: Final = 8192
"""Observation lines between two progress lines."""

OUT_BUFFER: Final = 1024 * 1024
"""Bytes of the pass's output held before they are written (progress lines are written at once)."""

TAIL_PREFIX: Final = "r~"
"""The id prefix of chains `read_tail` builds (the index's own ids start with `r`)."""


class Indexer:
    """Builds a capture's chains, spilling their records and handing each chain over when it is final."""

    def __init__(
        self,
        spill: IO[bytes],
        emit: Callable[[bytes], None],
        *,
        ring: int = RING,
        max_records: int = MAX_RECORDS,
    ) -> None:
        self._spill = spill
        self._emit = emit
        self._max_records = max_records
        self._records: dict[str, array[int]] = {}
        self._dropped: dict[str, int] = {}
        self._offset = spill.tell()
        self._let_go: list[Chain] = []
        """Chains the store let go while an observation was built: handed over after its events."""
        self.store = ChainStore(max_chains=ring, max_messages_per_chain=1, on_gone=self._let_go.append)
        self._file_no = 0
        self._reader: CaptureReader | None = None
        self._refs = RefTaker(self._ref, self._where)
        self.replayer = ObservationReplayer(
            store=self.store,
            on_applied=self._applied,
            headlines=False,
            records=False,
            on_filed=self._refs.filed,
        )
        self.chains = 0
        self._built = 0
        """Events of the last observation line, which the reader is about to yield again: taken once."""
        self._written: dict[str, ChainSummary] = {}
        """Headlines of chains a capture holds as event lines (a saved feed), handed over at the end."""
        self._lines = 0
        self.on_progress: Callable[[int], None] | None = None
        """Hears, every `PROGRESS_EVERY` observation lines, how far into the current file the pass is."""

    def reading(self, file_no: int, reader: CaptureReader) -> None:
        """The pass reads this file next (0 the oldest): where its lines are is kept for their records."""
        self._file_no, self._reader = file_no, reader

    def _where(self) -> int:
        return position(self._file_no, self._reader.line_start if self._reader is not None else 0)

    def _applied(self, obs: Observation, events: list[FlowEvent], filed_in: str | None) -> None:
        self._refs.applied(obs, events, filed_in)
        self._lines += 1
        if self._lines % PROGRESS_EVERY == 0 and self.on_progress is not None and self._reader is not None:
            self.on_progress(self._reader.position)
        self._built = len(events)
        for event in events:
            self._take(event)
        if self._let_go:
            for chain in self._let_go:
                self._gone(chain)
            self._let_go.clear()

    def event(self, event: FlowEvent) -> None:
        """One event the reader yields: an observation's (taken as it was built), or an event line's."""
        if self._built:
            self._built -= 1
            return
        if isinstance(event, ChainOpened | ChainChanged):  # a chain another writer built: its headline
            self._written[event.chain.id] = event.chain
            return
        self._take(event)

    def _take(self, event: FlowEvent) -> None:
        if isinstance(event, MessageRecorded):
            self._record(event.chain_id, event.message)
        elif not isinstance(event, ChainOpened | ChainChanged):
            self._emit(event_to_json(event))

    def _record(self, chain_id: str, record: MessageRecord) -> None:
        self._spill_line(chain_id, record.model_dump_json().encode())

    def _ref(self, chain_id: str, ref: Ref) -> None:
        self._spill_line(chain_id, orjson.dumps(ref))

    def _spill_line(self, chain_id: str, text: bytes) -> None:
        offsets = self._records.get(chain_id)
        if offsets is None:
            offsets = self._records[chain_id] = array("q")
        if len(offsets) >= self._max_records:
            self._dropped[chain_id] = self._dropped.get(chain_id, 0) + 1
            return
        line = text + b"\n"
        offsets.append(self._offset)
        self._spill.write(line)
        self._offset += len(line)

    def _gone(self, chain: Chain) -> None:
        self._hand_over(chain.summary)

    def _hand_over(self, summary: ChainSummary) -> None:
        chain_id = summary.id
        offsets = self._records.pop(chain_id, None)
        out = {
            "type": "indexed",
            "chain": summary.model_dump(mode="json", exclude_none=True),
            "records": offsets.tolist() if offsets is not None else [],
            "dropped": self._dropped.pop(chain_id, 0),
        }
        self._emit(orjson.dumps(out))
        self.chains += 1

    def finish(self) -> None:
        """Hand over every chain still built (the capture ended), oldest first."""
        for chain in self.store.drain():
            self._gone(chain)
        for summary in self._written.values():
            self._hand_over(summary)
        self._written.clear()
        self._spill.flush()


def run_index(paths: Sequence[Path], spill: IO[bytes], emit: Callable[[bytes], None]) -> dict[str, Any]:
    """Index the capture files (oldest first); returns the `index_end` object (what was skipped)."""
    indexer = Indexer(spill, emit)
    total = sum(path.stat().st_size for path in paths)
    done = 0
    end: dict[str, Any] = {
        "type": "index_end",
        "corrupt_lines": 0,
        "corrupt": [],
        "unknown_lines": 0,
        "unknown": [],
        "cut_short": [],
        "gap_lines": 0,
        "not_recorded": [],
        "chains": 0,
    }

    def progress(position: int) -> None:
        emit(orjson.dumps({"type": "index_progress", "read": done + position, "total": total}))

    indexer.on_progress = progress
    for file_no, path in enumerate(paths):
        with CaptureReader(path, replayer=indexer.replayer) as reader:
            indexer.reading(file_no, reader)
            progress(reader.position)
            for event in reader:
                indexer.event(event)
            done += path.stat().st_size
            end["corrupt_lines"] += reader.corrupt_lines
            room = MAX_CORRUPT_SHOWN - len(end["corrupt"])
            end["corrupt"].extend([str(path), line, reason] for line, reason in reader.corrupt[:room])
            end["unknown_lines"] += reader.skipped_unknown
            room = MAX_UNKNOWN_SHOWN - len(end["unknown"])
            end["unknown"].extend([str(path), line, what] for line, what in reader.unknown[:room])
            end["gap_lines"] += reader.gap_lines
            room = MAX_GAPS_SHOWN - len(end["not_recorded"])
            end["not_recorded"].extend(gap.sentence(f"{path}:{line}") for line, gap in reader.gaps[:room])
            if reader.truncated:
                end["cut_short"].append(str(path))
    indexer.finish()
    indexer.replayer.finish()
    end["left_out_lines"] = indexer.replayer.lost_lines
    end["unplaced_lines"] = indexer.replayer.unplaced.lines
    end["chains"] = indexer.chains
    return end


def read_records(spill: IO[bytes], offsets: Sequence[int], builder: RecordBuilder) -> list[MessageRecord]:
    """The records at these spill offsets, in order (a chain's records, read back to be shown).

    `builder` reads the capture the index was made of (its files in the same order).
    """
    records = []
    for offset in offsets:
        spill.seek(offset)
        line = spill.readline()
        if line.startswith(b"["):
            records.append(builder.build(orjson.loads(line)))
        else:
            records.append(MessageRecord.model_validate_json(line))
    return records


def read_tail(path: Path, nbytes: int) -> list[FlowEvent]:
    """The events of the last `nbytes` of a capture (from its first whole line), built on their own.

    For a first screen while the index pass runs: chains opened before that point are not among them
    (their later messages are dropped, as for any exchange a reader did not see open), and their ids
    start with `TAIL_PREFIX`. Lines that cannot be read are skipped; the index pass names them.
    """
    replayer = ObservationReplayer(id_prefix=TAIL_PREFIX, max_chains=100_000)
    events: list[FlowEvent] = []
    with path.open("rb") as f:
        latin1_headers = stores_latin1(file_minor(f))
        start = max(0, f.seek(0, os.SEEK_END) - nbytes)
        f.seek(start)
        if start:
            f.readline()  # the rest of a line cut by the seek
        else:
            f.readline()  # the header
        for raw in f:
            if not raw.endswith(b"\n"):
                break  # a line being written (or cut short) ends what can be read
            events.extend(_tail_line(replayer, raw, latin1_headers=latin1_headers))
    return events


def _tail_line(replayer: ObservationReplayer, raw: bytes, *, latin1_headers: bool) -> Iterator[FlowEvent]:
    try:
        if raw.startswith(OBS_PREFIX):
            line = orjson.loads(raw)
            yield from replayer.replay(headers_as_text(line) if latin1_headers else line)
        elif raw.strip():
            event = event_from_json(raw)
            if type(event) is ProxyInfo:
                yield from replayer.proxy_info(event)
            yield event
    except (
        UnknownKind,
        ValidationError,
        orjson.JSONDecodeError,
        KeyError,
        TypeError,
        ValueError,
        AttributeError,
    ):
        return


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m proxy.record.index --spill FILE CAPTURE...`: index to stdout (see the module doc)."""
    parser = argparse.ArgumentParser(
        prog="python -m proxy.record.index", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--spill", type=Path, required=True, help="where the records go (created)")
    parser.add_argument("captures", nargs="+", type=Path, help="capture file(s), oldest first")
    args = parser.parse_args(argv)
    sys.stdout.flush()
    # Lines go out in big writes (the reader wakes once per write, not per line), and at once with
    # each progress line, so the progress shown is never behind.
    with open(sys.stdout.fileno(), "wb", buffering=OUT_BUFFER, closefd=False) as out:

        def emit(line: bytes) -> None:
            out.write(line + b"\n")
            if line.startswith(b'{"type":"index_progress"'):
                out.flush()

        with args.spill.open("wb") as spill:
            end = run_index(args.captures, spill, emit)
        emit(orjson.dumps(end))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
