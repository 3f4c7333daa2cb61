"""Playbook: a scripted conversation with any sans-IO engine (`handle(event) -> list[command]`).

`Playbook(engine) >> event << command << command >> event ...` reads like a sequence diagram;
asserting it feeds the events in order and compares each step's commands with the expected list,
exactly. Use `unittest.mock.ANY` for a field a test does not care about (a log line's fields, say).
Observations (ObserveContinuation, ObserveSession) and the router's era rechecks (RecheckUpstreamEra)
are left out unless the Playbook is built with `hide=()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.engine.commands import ObserveContinuation, ObserveSession, RecheckUpstreamEra

OBSERVATIONS: tuple[type, ...] = (ObserveContinuation, ObserveSession, RecheckUpstreamEra)
"""Commands a Playbook leaves out unless asked: most tests are about the protocol, a few (which pass
`hide=()`) about what the observer and the router are told."""


class Engine(Protocol):
    """Anything with the sans-IO engine shape."""

    def handle(self, event: Any) -> list[Any]: ...


@dataclass
class Playbook:
    """Events fed in order, each answered by an exact list of commands."""

    engine: Engine
    steps: list[tuple[Any, list[Any]]] = field(default_factory=list)
    hide: tuple[type, ...] = OBSERVATIONS
    """Command kinds neither expected nor compared (observations, by default)."""

    def __rshift__(self, event: Any) -> Playbook:
        self.steps.append((event, []))
        return self

    def __lshift__(self, command: Any) -> Playbook:
        assert self.steps, "a command must follow an event"
        self.steps[-1][1].append(command)
        return self

    def __bool__(self) -> bool:
        for number, (event, expected) in enumerate(self.steps, 1):
            actual = [c for c in self.engine.handle(event) if not isinstance(c, self.hide)]
            if actual != expected:
                lines = [f"step {number}: {event!r}", "expected:"]
                lines += [f"  {c!r}" for c in expected] or ["  (nothing)"]
                lines += ["actual:"] + ([f"  {c!r}" for c in actual] or ["  (nothing)"])
                raise AssertionError("\n".join(lines))
        self.steps.clear()
        return True


def protocol(commands: list[Any]) -> list[Any]:
    """The commands without observations (for tests that call `handle` themselves)."""
    return [c for c in commands if not isinstance(c, OBSERVATIONS)]
