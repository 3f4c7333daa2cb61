"""Where an export writes: stdout, or a file replaced only once the whole output is in it.

An export that fails partway (a full disk, a collector's error, an interrupt) leaves the file it was
asked to write as it was, never a cut HAR or JSON in place of the previous good one: the output goes
to a temporary file beside the target (same filesystem, so the rename is atomic) and is renamed over
it on success, removed on failure. A target that exists and is no regular file (`/dev/stdout`, a
FIFO) is written directly, as nothing could be renamed over it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO


@contextlib.contextmanager
def output_file(target: Path) -> Iterator[IO[bytes]]:
    """Write `target` whole or not at all (`-` is stdout, which is written as it goes)."""
    if str(target) == "-":
        yield sys.stdout.buffer
        return
    if target.exists() and not target.is_file():
        with target.open("wb") as out:
            yield out
        return
    temporary = target.with_name(f".{target.name}.{os.getpid()}.part")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the mode `open("wb")` gives
    try:
        with os.fdopen(fd, "wb") as out:
            yield out
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
