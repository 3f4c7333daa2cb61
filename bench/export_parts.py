"""Where a HAR export's time goes: the same capture read three ways, each a floor for the next.

    .venv/bin/python bench/export_parts.py CAPTURE [CAPTURE...]

1. `read + parse`: every line read and decoded with orjson, nothing else (what any reader pays);
2. `chains`: the lean chain replay every export runs (`ObservationReplayer` without records or
   headline announcements), with nothing drafted or written;
3. `har`: the whole HAR export (`export_capture`), written to memory.

Each is CPU seconds of this process (`time.process_time`) and MiB of capture per CPU second; run it
on a quiet machine, in the same minutes as whatever it is compared with. Make a big capture with
`bench/export.py` (it records a seed and replicates it) or use a real one.
"""

from __future__ import annotations

import io
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def read_and_parse(paths: list[Path]) -> None:
    for path in paths:
        with path.open("rb") as f:
            for line in f:
                orjson.loads(line)


def chains(paths: list[Path]) -> None:
    from proxy.flows.store import ChainStore
    from proxy.record.export import RING, open_readers
    from proxy.record.observations import ObservationReplayer

    store = ChainStore(max_chains=RING, max_messages_per_chain=1)
    for reader in open_readers(paths, ObservationReplayer(store=store, headlines=False, records=False)):
        with reader:
            for _ in reader:
                pass


def har(paths: list[Path]) -> None:
    from proxy.record.export import Format, export_capture

    export_capture(paths, Format.HAR, io.BytesIO())


def main() -> int:
    paths = [Path(p) for p in sys.argv[1:]]
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    mib = sum(p.stat().st_size for p in paths) / 2**20
    parts: list[tuple[str, Callable[[list[Path]], None]]] = [
        ("read + parse", read_and_parse),
        ("chains", chains),
        ("har", har),
    ]
    print(f"| part ({mib:.1f} MiB of capture) | CPU seconds | MiB per CPU second |")
    print("|---|---|---|")
    for name, part in parts:
        started = time.process_time()
        part(paths)
        seconds = time.process_time() - started
        print(f"| {name} | {seconds:.2f} | {mib / seconds:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
