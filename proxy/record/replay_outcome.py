"""How one chain's replay went: same, differs (the first difference), failed or skipped, and why.

Plain data, shared by the replay (`proxy.replay`), its command line and the TUI's side-by-side screen,
which keeps both chains' messages (`keep_records`). No I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from proxy.flows.events import MessageRecord
from proxy.record.replay_compare import Difference

Status = Literal["same", "differs", "failed", "skipped"]


@dataclass
class ChainOutcome:
    """How one chain's replay went."""

    chain: str
    headline: str
    status: Status
    setup: bool = False
    """A handshake: it describes the server, so its differences are shown but not counted."""
    difference: Difference | None = None
    reason: str | None = None
    replayed_chain: str | None = None
    recorded: list[MessageRecord] = field(default_factory=list)
    replayed: list[MessageRecord] = field(default_factory=list)
    """Both chains' messages, kept only when asked (the TUI's side by side)."""
    proxy_changes: list[str] = field(default_factory=list)
    """What the recording proxy changed in this chain (a fault injected, an intercept's edit, drop or
    answer): a difference may then be expected, since the replay sends what the client sent."""

    @property
    def word(self) -> str:
        """How it went in a word or two: `same`, `differs`, `setup differs`, `failed`, `skipped`."""
        return "setup differs" if self.setup and self.status == "differs" else self.status

    @property
    def compared(self) -> bool:
        """Whether it was replayed at all (skipped chains compare nothing, so they prove nothing)."""
        return self.status != "skipped"

    @property
    def counts(self) -> bool:
        """Whether it makes the replay fail: a difference outside the handshake, or a failure."""
        return self.status == "failed" or (self.status == "differs" and not self.setup)

    def line(self) -> str:
        """`r5 tools/call greet: same`, one line for the summary."""
        return self._line() + self._changes()

    def _line(self) -> str:
        head = f"{self.chain} {self.headline}: "
        if self.status == "differs" and self.difference is not None:
            word = "setup differs (not counted)" if self.setup else "differs"
            return head + f"{word}: {self.difference.text()}"
        if self.reason:
            return head + f"{self.status}: {self.reason}"
        return head + self.status

    def _changes(self) -> str:
        if not self.proxy_changes:
            return ""
        changes = "; ".join(self.proxy_changes)
        return f" [recorded with the proxy's changes, so a difference may be expected: {changes}]"

    def as_json(self) -> dict[str, Any]:
        """Plain data for `--json`."""
        out: dict[str, Any] = {"chain": self.chain, "request": self.headline, "status": self.status}
        if self.setup:
            out["setup"] = True
        if self.replayed_chain:
            out["replayed_chain"] = self.replayed_chain
        if self.difference is not None:
            out["difference"] = self.difference.as_json()
        if self.reason:
            out["reason"] = self.reason
        if self.proxy_changes:
            out["proxy_changes"] = self.proxy_changes
        return out
