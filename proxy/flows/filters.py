"""Which chains a reader asked for: the one filter `/api/chains`, the exports and their CLI share.

A filter is built from named parameters (`status`, `method`, `mode`, `q`), each given any number of
times or as a comma-separated list, the way a query string or a repeated flag gives them; every given
criterion must hold. An unknown status or mode is refused naming the parameter and what it accepts,
so the admin API can answer 400 and the CLI can exit 2 with the same words. Plain data: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from proxy.flows.events import ChainStatus, ChainSummary, Mode


class FilterError(ValueError):
    """A filter parameter holds a value it does not accept; the message names both."""


@dataclass(frozen=True, slots=True)
class ChainFilter:
    """Keeps the chains whose headline meets every criterion given; an empty filter keeps all."""

    statuses: frozenset[ChainStatus] = frozenset()
    methods: frozenset[str] = frozenset()
    modes: frozenset[Mode] = frozenset()
    text: str = ""
    """A case-insensitive substring of id, method, name, client name, error, session or notes."""

    def __call__(self, summary: ChainSummary) -> bool:
        if self.statuses and summary.status not in self.statuses:
            return False
        if self.methods and summary.method not in self.methods:
            return False
        if self.modes and summary.mode not in self.modes:
            return False
        needle = self.text.strip().lower()
        return not needle or needle in _haystack(summary)

    @property
    def empty(self) -> bool:
        """Whether the filter keeps every chain."""
        return not (self.statuses or self.methods or self.modes or self.text.strip())

    @property
    def needs_end(self) -> bool:
        """Whether a chain can be judged only once it has ended (its status, error and notes settle then)."""
        return bool(self.statuses or self.text.strip())

    @classmethod
    def from_params(cls, values: Callable[[str], Iterable[str]]) -> ChainFilter:
        """The filter of named parameters; `values(name)` gives every value given for `name`.

        Raises FilterError for an unknown status or mode.
        """
        texts = [text for text in values("q") if text.strip()]
        return cls(
            statuses=frozenset(_members(values, "status", ChainStatus)),
            methods=frozenset(_split(values("method"))),
            modes=frozenset(_members(values, "mode", Mode)),
            text=texts[0] if texts else "",
        )


def _haystack(summary: ChainSummary) -> str:
    fields = (summary.id, summary.method, summary.name, summary.client_name, summary.error, summary.session)
    return " ".join([*(f for f in fields if f), *summary.notes]).lower()


def _split(values: Iterable[str]) -> set[str]:
    return {item.strip() for value in values for item in value.split(",") if item.strip()}


_E = TypeVar("_E", bound=StrEnum)


def _members(values: Callable[[str], Iterable[str]], name: str, kind: type[_E]) -> set[_E]:
    given = _split(values(name))
    allowed = sorted(member.value for member in kind)
    unknown = sorted(given - set(allowed))
    if unknown:
        raise FilterError(f"{name} must be one of {', '.join(allowed)}, got {', '.join(unknown)}")
    return {kind(value) for value in given}
