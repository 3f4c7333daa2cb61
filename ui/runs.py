"""Proxy runs as an attached TUI tells them apart: one process of a proxy, from its start to its stop.

A proxy that restarts on the same admin address (or another proxy that took it) is another run: its
chains, sessions and counts start over. Its `proxy_info` says which run it is (`run`, the tag its
chain ids start with, and `started`); `proxy.flows.events.same_run` compares two (every capture
reader does too), these pure helpers name one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from proxy.flows.events import ProxyInfo
from proxy.wire.visible import visible


def run_label(info: ProxyInfo) -> str:
    """A proxy run in a few words: its run tag, else its start time, else its version."""
    if info.run:
        return visible(info.run)
    if info.started is not None:
        return "started " + time.strftime("%H:%M:%S", time.localtime(info.started))
    return visible(f"v{info.version}")


@dataclass(frozen=True, slots=True)
class Reattached:
    """What answered when a lost feed came back: the same proxy run, or another (`info`)."""

    info: ProxyInfo
    same: bool
    earlier: ProxyInfo | None = None
    """The run it replaced (None when the same one came back)."""
