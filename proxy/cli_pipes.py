"""A command's stdout whose reader went away (`mcp-proxy ... | head`): end quietly, as `cat` does.

Python answers a write into a closed pipe with `BrokenPipeError`, a traceback and exit 1; a command
whose output a person cuts short with `head` should say nothing more and exit as a command killed by
SIGPIPE does.
"""

from __future__ import annotations

import os
import sys

from proxy.wire.visible import visible

PIPE_CLOSED_EXIT = 141
"""Exit status when stdout's reader went away: what a command killed by SIGPIPE returns."""


def reader_left() -> int:
    """stdout's reader stopped reading: nothing more to say; the exit status to return.

    stdout is pointed at /dev/null so the interpreter's last flush at exit does not fail again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return PIPE_CLOSED_EXIT


def print_out(text: str) -> int:
    """Print `text` and a newline on stdout: 0, or `PIPE_CLOSED_EXIT` when its reader left."""
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        return reader_left()
    return 0


def tell(text: str) -> None:
    """One message for the person running a command, on stderr, shown through `visible`: it may name
    what a capture or a server chose (a chain id, a method, an error's text), which a terminal must
    show, not obey."""
    print(visible(text), file=sys.stderr)
