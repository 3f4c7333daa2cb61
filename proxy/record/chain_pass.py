"""The chain pass of an export: which chain each observation line joined, worked out in a process of its own.

A HAR export needs, for every message, the chain the chain builder filed it in, and that builder is
sequential: each line's chain depends on every line before it. Drafting and rendering the entries
costs about as much again. So a big export runs as two processes reading the same files at once:
this pass builds the chains (the same lean `ObservationReplayer` every reader uses) and writes, on its
stdout, one short record per line that the other side cannot work out alone; the exporting process
reads the lines itself, drafts and writes the entries, and takes each line's chain from the records.
On a machine with two cores the two halves run side by side.

A record names its line by file number (0 the oldest) and byte offset, so a line one side skips as
corrupt never shifts the other's lines. One record per line, space-separated, in file order:

- `C FILE OFFSET CHAIN`: the line's observation filed a message (or the response head) in `CHAIN`;
- `L FILE OFFSET CHAIN FACTS`: a leg message, filed in `CHAIN`, whose chain had the eras and mode of
  `FACTS` (a JSON array: client era, upstream era, mode; a capture's text, so JSON keeps it one field)
  when the message was built (a leg's entry carries them);
- `S FILE OFFSET`: a repeated line (the top of a rotated part) the pass skipped, because what it
  repeats was already open from an earlier file;
- `E`: the pass read every file to its end.

`python -m proxy.record.chain_pass CAPTURE...` runs the pass; `ChainsFromPass` starts it and reads
its records. Lines the pass cannot read are skipped as every reader skips them; the exporting
process, reading the same bytes, skips and reports them itself.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Final

import orjson

from proxy.flows.observations import LegMessageSeen, Observation
from proxy.flows.store import ChainStore
from proxy.record.capture import CaptureReader
from proxy.record.observations import ObservationReplayer

RING: Final = 500
"""Chains the pass keeps built before letting ended ones go (open ones are held until they end)."""

OUT_BUFFER: Final = 16 * 1024
"""Bytes of records the pass holds before writing them: about a thousand records, so the exporting
side, which waits for each line's record, trails the pass by little."""

STOP_WAIT: Final = 5.0
"""Seconds a pass whose records ended short of `E` is given to exit before it is killed."""

STDERR_SHOWN: Final = 2000
"""Characters of a failed pass's stderr repeated in the error."""


class ChainPassError(RuntimeError):
    """The chain pass stopped before its end (its own stderr, cut, is the message)."""


class ChainPass:
    """Replays capture files into chains and writes the record of each line that needs one."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._file_no = 0
        self._reader: CaptureReader | None = None
        self._store = ChainStore(max_chains=RING, max_messages_per_chain=1)
        self.replayer = ObservationReplayer(
            store=self._store, on_applied=self._applied, headlines=False, records=False
        )
        self.replayer.on_skipped = self._skipped

    def run(self, paths: Sequence[Path]) -> None:
        """Read every file, oldest first, writing records as lines are built; `E` last."""
        for file_no, path in enumerate(paths):
            with CaptureReader(path, replayer=self.replayer) as reader:
                self._file_no, self._reader = file_no, reader
                for _ in reader:
                    pass
        self._out.write(b"E\n")
        self._out.flush()

    def _where(self) -> str:
        reader = self._reader
        return f"{self._file_no} {reader.line_start if reader is not None else 0}"

    def _applied(self, obs: Observation, _events: object, chain: str | None) -> None:
        if chain is None:
            return
        if isinstance(obs, LegMessageSeen):
            summary = self._store.peek(chain)
            if summary is not None:
                head = summary.summary
                facts = orjson.dumps([head.client_era, head.upstream_era, str(head.mode)])
                self._out.write(f"L {self._where()} {chain} ".encode() + facts + b"\n")
                return
        self._out.write(f"C {self._where()} {chain}\n".encode())

    def _skipped(self) -> None:
        self._out.write(f"S {self._where()}\n".encode())


class ChainsFromPass:
    """Runs the chain pass in a child process and answers, line by line, which chain each one joined.

    Ask in file order (`at`); the records come in the same order, so only the next one is held.
    """

    def __init__(self, paths: Sequence[Path]) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "proxy.record.chain_pass", *(str(p) for p in paths)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self._proc.stdout is not None
        self._records = self._proc.stdout
        self._file = self._offset = -1
        """The place of the next record (file number, offset); -1 once the records ended."""
        self._fields: list[str] = []
        """The next record's kind and what follows its place."""
        self._ended = False
        self._read()

    @property
    def pid(self) -> int:
        """The pass's process id."""
        return self._proc.pid

    def at(self, file_no: int, offset: int) -> list[str] | None:
        """The record of the line at `offset` of file `file_no` (its kind and fields after the place)."""
        while self._file != -1 and (
            self._file < file_no or (self._file == file_no and self._offset < offset)
        ):
            self._read()
        if self._offset == offset and self._file == file_no:
            fields = self._fields
            self._read()
            return fields
        return None

    def finish(self) -> None:
        """Check the pass read everything; raises ChainPassError, with its stderr, when it did not."""
        while self._file != -1:
            self._read()
        if not self._ended:
            try:
                self._proc.wait(timeout=STOP_WAIT)
            except subprocess.TimeoutExpired:
                self._proc.kill()
            said = self._stderr()
            self.close()
            raise ChainPassError(said or f"the chain pass exited with status {self._proc.returncode}")
        self.close()

    def close(self) -> None:
        """Stop the pass (if it still runs) and wait for it."""
        if self._proc.poll() is None:
            self._proc.kill()
        self._proc.wait()
        self._records.close()
        if self._proc.stderr is not None:
            self._proc.stderr.close()

    def _read(self) -> None:
        fields = self._records.readline().decode().split(" ", 4)
        if len(fields) < 3:
            self._file = self._offset = -1
            self._ended = fields == ["E\n"]
            return
        self._file, self._offset = int(fields[1]), int(fields[2])
        if fields[0] == "L":  # its chain's eras and mode, as the capture held them: JSON, spaces and all
            self._fields = ["L", fields[3], *(str(fact) for fact in orjson.loads(fields[4]))]
        else:
            self._fields = [fields[0], *(f.rstrip("\n") for f in fields[3:])]

    def _stderr(self) -> str:
        err = self._proc.stderr
        if err is None:
            return ""
        return err.read().decode("utf-8", "replace").strip()[-STDERR_SHOWN:]


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m proxy.record.chain_pass CAPTURE...`: the records on stdout (see the module doc)."""
    paths = [Path(p) for p in (sys.argv[1:] if argv is None else argv)]
    with open(sys.stdout.fileno(), "wb", buffering=OUT_BUFFER, closefd=False) as out:
        ChainPass(out).run(paths)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
