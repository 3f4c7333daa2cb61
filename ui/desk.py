"""The TUI's control seam: what its screens ask of a proxy's fault and intercept rules (a "desk").

The screens talk to a `RuleDesk` and nothing else. Two desks fit it: `ui.desk_http.HttpDesk` over
the admin API (`mcp-proxy tui --attach URL`) and `ui.desk_local.LocalDesk` over the control objects
of a proxy running in this process (`mcp-proxy --upstream URL --tui`). A capture (`--open FILE`) has
no desk: the keys say why instead of failing.

Both desks speak the admin API's JSON shapes (docs/admin-api.md, docs/intercept.md), read here into
small frozen dataclasses, so a field the proxy adds later never breaks the TUI. A desk raises
`DeskError` with the proxy's own reason (a refused rule, an invalid edit, a message already
released), which the screens show as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

READ_ONLY_CAPTURE = "read-only: a capture cannot be changed"
"""What the rule and held-message keys say when the TUI shows a capture file."""

DecisionKind = Literal["forward", "drop", "answer"]


class DeskError(Exception):
    """The proxy refused an operation, or could not be reached; the text is shown to the user."""

    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.status = status
        """The admin API's HTTP status when it refused (None: not reached, or in-process)."""


@dataclass(frozen=True, slots=True)
class FaultRule:
    """A fault rule in force (`GET /api/faults`)."""

    id: str
    rule: str
    injected: int = 0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FaultRule:
        """Read one rule of the API's listing."""
        return cls(id=str(data["id"]), rule=str(data.get("rule", "")), injected=int(data.get("injected", 0)))


@dataclass(frozen=True, slots=True)
class InterceptRule:
    """An intercept rule in force: what it holds and for how long before forwarding unchanged."""

    id: str
    match: str
    timeout_s: float
    held: int = 0

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> InterceptRule:
        """Read one rule of the API's listing."""
        return cls(
            id=str(data["id"]),
            match=str(data.get("match", "")),
            timeout_s=float(data.get("timeout_s", 0.0)),
            held=int(data.get("held", 0)),
        )


@dataclass(frozen=True, slots=True)
class Held:
    """A message an intercept rule holds until someone decides on it or its deadline passes.

    `message` is the JSON-RPC message as the proxy shows it: redacted, so a secret reads as a
    `<redacted len=N hmac:…>` stand-in (which the proxy puts back if an edit leaves it in place).
    """

    id: str
    rule: str
    direction: str
    kind: str
    method: str
    held_at: float
    deadline: float
    message: dict[str, Any] = field(default_factory=dict)
    exchange: str = ""
    chain: str | None = None
    mode: str = ""
    side: str = ""

    @property
    def label(self) -> str:
        """The id as people read it: `h3` of `h3-9f2c41ab` (the random part only keeps web pages from
        guessing the id; decisions still name the whole id)."""
        return self.id.partition("-")[0]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Held:
        """Read one held message of the API's listing."""
        message = data.get("message")
        return cls(
            id=str(data["id"]),
            rule=str(data.get("rule", "")),
            direction=str(data.get("direction", "")),
            kind=str(data.get("kind", "")),
            method=str(data.get("method") or ""),
            held_at=float(data.get("held_at", 0.0)),
            deadline=float(data.get("deadline", 0.0)),
            message=dict(message) if isinstance(message, Mapping) else {},
            exchange=str(data.get("exchange") or ""),
            chain=data.get("chain") if isinstance(data.get("chain"), str) else None,
            mode=str(data.get("mode") or ""),
            side=str(data.get("side") or ""),
        )

    @property
    def jsonrpc_id(self) -> Any:
        """The held message's JSON-RPC id (None for a notification)."""
        return self.message.get("id")

    @property
    def answerable(self) -> bool:
        """Whether `answer` can apply: a notification, or a client's answer to a server, has no answer."""
        return self.kind in ("request", "response") and not (
            self.kind == "response" and self.direction == "client"
        )


@dataclass(frozen=True, slots=True)
class Released:
    """How a held message left the held list: `decision` (`forward`, `forward_edited`, `drop`,
    `answer`, `abandoned`), who or what made it (`by`: `api`, `tui`, `timeout`, `client`,
    `rule_deleted`, `drain`), and when."""

    id: str
    decision: str
    by: str
    at: float

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Released:
        """Read one release of the API's listing."""
        return cls(
            id=str(data["id"]),
            decision=str(data.get("decision", "")),
            by=str(data.get("by", "")),
            at=float(data.get("at", 0.0)),
        )


@dataclass(frozen=True, slots=True)
class Intercepts:
    """The intercept rules in force, the messages held now and how the latest ones were released
    (`GET /api/intercepts`)."""

    rules: tuple[InterceptRule, ...] = ()
    held: tuple[Held, ...] = ()
    released: tuple[Released, ...] = ()

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Intercepts:
        """Read the API's listing (a proxy that lists no releases gives none)."""
        return cls(
            rules=tuple(InterceptRule.from_json(r) for r in data.get("rules") or ()),
            held=tuple(Held.from_json(h) for h in data.get("held") or ()),
            released=tuple(Released.from_json(r) for r in data.get("released") or ()),
        )


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with a held message: forward it (as held, or edited), drop it, or answer it."""

    kind: DecisionKind
    message: dict[str, Any] | None = None
    """forward: the edited message to send instead (None sends it unchanged)."""
    answer: dict[str, Any] | None = None
    """answer: a JSON-RPC response whose `result` or `error` is the answer."""

    def body(self, by: str = "tui") -> dict[str, Any]:
        """The decision as `POST /api/intercepts/held/{id}` takes it."""
        out: dict[str, Any] = {"decision": self.kind, "by": by}
        if self.kind == "forward" and self.message is not None:
            out["message"] = self.message
        if self.kind == "answer" and self.answer is not None:
            if "error" in self.answer:
                out["error"] = self.answer["error"]
            else:
                out["result"] = self.answer.get("result")
        return out

    def describe(self) -> str:
        """The decision in a few words, for the notice after it went through."""
        if self.kind == "forward":
            return "forwarded edited" if self.message is not None else "forwarded"
        if self.kind == "answer":
            return "answered with an error" if self.answer and "error" in self.answer else "answered"
        return "dropped"


class RuleDesk(Protocol):
    """The operations the TUI's rule and held-message screens need from a proxy."""

    description: str

    async def fault_rules(self) -> list[FaultRule]:
        """The fault rules in force."""
        ...

    async def add_fault(self, rule: str) -> FaultRule:
        """Put a fault rule in force; DeskError with the proxy's reason when it is refused."""
        ...

    async def delete_fault(self, rule_id: str) -> None:
        """Take a fault rule out of force."""
        ...

    async def intercepts(self) -> Intercepts:
        """The intercept rules in force and the messages held now."""
        ...

    async def add_intercept(self, rule: str, hold_for: str | None = None) -> InterceptRule:
        """Put an intercept rule in force; `hold_for` (`30s`) bounds each hold (None: the proxy's default)."""
        ...

    async def delete_intercept(self, rule_id: str) -> None:
        """Take an intercept rule out of force (the proxy forwards what it held unchanged)."""
        ...

    async def decide(self, held_id: str, decision: Decision) -> None:
        """Release a held message as decided; DeskError with the reason when refused."""
        ...

    async def wait_held(self, after: str | None, seconds: float) -> None:
        """Return when a message newer than `after` is held, or after at most `seconds`."""
        ...

    async def close(self) -> None:
        """Let go of connections."""
        ...
