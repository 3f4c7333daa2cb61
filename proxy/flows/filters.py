"""Which chains a reader asked for: the one filter `/api/chains`, the exports and their CLI share.

A filter is built from named parameters (`status`, `method`, `mode`, `q`), each given any number of
times or as a comma-separated list, the way a query string or a repeated flag gives them; every given
criterion must hold. `q` is the TUI filter bar's language (`proxy.flows.query`: `tool:ask_*
status:error body:octocat`, free text), so a query that finds a chain on the screen finds it through
the API and the exports too. An unknown status or mode, or a query that does not parse, is refused
naming the parameter and what it accepts, so the admin API can answer 400 and the CLI can exit 2
with the same words. Plain data: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from typing import Any, TypeVar

from proxy.flows.events import ChainStatus, ChainSummary, Mode
from proxy.flows.query import Bodies, Query, bodies_text, parse_query
from proxy.flows.store import Chain


class FilterError(ValueError):
    """A filter parameter holds a value it does not accept; the message names both."""


@dataclass(frozen=True, slots=True)
class ChainFilter:
    """Keeps the chains whose headline meets every criterion given; an empty filter keeps all."""

    statuses: frozenset[ChainStatus] = frozenset()
    methods: frozenset[str] = frozenset()
    modes: frozenset[Mode] = frozenset()
    text: str = ""
    """A query in the TUI filter's language; FilterError when it does not parse."""
    query: Query = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        query = parse_query(self.text.strip())
        if query.error is not None:
            raise FilterError(f"q: {query.error.removeprefix('filter: ')}")
        object.__setattr__(self, "query", query)

    def __call__(self, summary: ChainSummary, bodies: Bodies | None = None) -> bool:
        """Whether the chain is kept; `bodies` gives its message bodies when the query searches them
        (without, `body:` matches nothing and free text only the headline)."""
        if self.statuses and summary.status not in self.statuses:
            return False
        if self.methods and summary.method not in self.methods:
            return False
        if self.modes and summary.mode not in self.modes:
            return False
        return self.query.matches(summary, None, bodies)

    def keeps(self, chain: Chain) -> bool:
        """Whether a stored chain is kept, its kept messages' bodies searched when the query asks."""
        return self(chain.summary, partial(bodies_text, chain.messages) if self.needs_bodies else None)

    @property
    def empty(self) -> bool:
        """Whether the filter keeps every chain."""
        return not (self.statuses or self.methods or self.modes or self.query.active)

    @property
    def needs_end(self) -> bool:
        """Whether a chain can be judged only once it has ended (its status, error and notes settle then)."""
        return bool(self.statuses or self.query.active)

    @property
    def needs_bodies(self) -> bool:
        """Whether the query searches message bodies (`body:` or free text)."""
        return any(term.field in ("body", "text") for term in self.query.terms)

    @classmethod
    def from_params(cls, values: Callable[[str], Iterable[str]]) -> ChainFilter:
        """The filter of named parameters (`PARAMETERS`); `values(name)` gives every value given for `name`.

        Raises FilterError for an unknown status or mode, and for a parameter given with no value
        (`status=`, `method=,`): a script that builds one from an unset variable would otherwise get
        every chain, as if it had filtered nothing.
        """
        given = {name: list(values(name)) for name in _READERS}
        for name, texts in given.items():
            if any(not _split([text]) for text in texts):
                raise FilterError(f"{name} given without a value; name one, or leave {name} out")
        return cls(**dict(read(given[name]) for name, read in _READERS.items()))


def _split(values: Iterable[str]) -> set[str]:
    return {item.strip() for value in values for item in value.split(",") if item.strip()}


_E = TypeVar("_E", bound=StrEnum)


def _members(given: Iterable[str], name: str, kind: type[_E]) -> frozenset[_E]:
    wanted = _split(given)
    allowed = sorted(member.value for member in kind)
    unknown = sorted(wanted - set(allowed))
    if unknown:
        raise FilterError(f"{name} must be one of {', '.join(allowed)}, got {', '.join(unknown)}")
    return frozenset(kind(value) for value in wanted)


_READERS: dict[str, Callable[[list[str]], tuple[str, Any]]] = {
    "status": lambda given: ("statuses", _members(given, "status", ChainStatus)),
    "method": lambda given: ("methods", frozenset(_split(given))),
    "mode": lambda given: ("modes", _members(given, "mode", Mode)),
    # each `q` one more term, ANDed like the rest
    "q": lambda given: ("text", " ".join(text for text in given if text.strip())),
}
"""Each parameter a filter is built from, and how its values become the `ChainFilter` field it sets."""

PARAMETERS = tuple(_READERS)
"""The names a filter is built from: `ChainFilter.from_params` asks for these and no other."""
