"""Stop signals that arrive before the proxy can act on them, kept until it can.

The proxy's own handlers go in once its event loop runs, a second or more after the process starts
(the imports, the settings, the runtime). Until then a stop signal meets the default disposition:
a plain process dies at once, without the `stopped_while_starting` line and exit 0 a stop gets later,
and a container's PID 1 (the image's entrypoint without an init) ignores it, since the kernel drops
a signal PID 1 has no handler for. A pod deleted right after it started then waits for SIGKILL. So
the console script installs these handlers first, before any heavy import; they only remember the
signal, and the runtime honours it as soon as it can: it exits at once, having served nothing.

Only the standard library is imported here: this module runs before everything else.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
"""The signals that stop the proxy (SIGTERM drains, the others stop at once)."""

_remembered: list[signal.Signals] = []
Handler = Callable[[int, FrameType | None], Any] | int | None
"""What `signal.signal` returns: a function, SIG_DFL or SIG_IGN, or None (set outside Python)."""

_previous: dict[signal.Signals, Handler] = {}


def _remember(signum: int, _frame: FrameType | None) -> None:
    _remembered.append(signal.Signals(signum))


def install() -> None:
    """Remember the stop signals from now on, until the runtime's own handlers replace these."""
    for sig in STOP_SIGNALS:
        _previous[sig] = signal.signal(sig, _remember)


def pending() -> signal.Signals | None:
    """The first stop signal that came while only these handlers were in, or None."""
    return _remembered[0] if _remembered else None


def uninstall() -> None:
    """Put back the handlers these replaced, where they are still in (not yet replaced by the loop's)."""
    for sig, before in _previous.items():
        if signal.getsignal(sig) is _remember:
            signal.signal(sig, before if before is not None else signal.SIG_DFL)
    _previous.clear()
