"""Where an export writes: stdout, or a file replaced only once the whole output is in it.

An export that fails partway (a full disk, a collector's error, an interrupt) leaves the file it was
asked to write as it was, never a cut HAR or JSON in place of the previous good one: the output goes
to a temporary file beside the file written (same filesystem, so the rename is atomic) and is renamed
over it on success, removed on failure. It is replaced as writing into it would leave it: a symlink
is followed (the file it points to is replaced, the link kept) and an existing file keeps its mode
(an export kept at 0600 stays so). A target that exists and is no regular file (`/dev/stdout`, a
FIFO) is written directly, as nothing could be renamed over it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Final

TEMPORARY_TRIES: Final = 8
"""Names tried for the temporary file before giving up: one a stale file (an export killed before its
rename, its pid since reused) holds is passed over for another."""


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
    written = Path(os.path.realpath(target))  # a symlink's file, replaced where it is
    try:
        kept_mode: int | None = stat.S_IMODE(written.stat().st_mode)
    except FileNotFoundError:
        kept_mode = None
    temporary, fd = _temporary_beside(written)
    try:
        with os.fdopen(fd, "wb") as out:
            if kept_mode is not None:
                os.fchmod(out.fileno(), kept_mode)
            yield out
        os.replace(temporary, written)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _temporary_beside(written: Path) -> tuple[Path, int]:
    """A new file beside `written`, created with the mode `open("wb")` gives, and its descriptor."""
    suffix = str(os.getpid())
    for _ in range(TEMPORARY_TRIES):
        temporary = written.with_name(f".{written.name}.{suffix}.part")
        try:
            return temporary, os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            suffix = f"{os.getpid()}.{secrets.token_hex(4)}"
    raise FileExistsError(f"{written.parent}: no free name for a temporary file beside {written.name}")
