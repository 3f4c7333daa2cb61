"""The chain query language of the TUI's filter bar, the admin API's `q` and the exports' `--q`:
parse once, then match chain headlines with pure functions.

    method:tools/call   tool:ask_*   name:res://ask   status:error   era:legacy   mode:legacy_to_mrtr
    bridged   -bridged   client:claude   session:08b2   id:c12   duration:>500ms   body:octocat
    free text

Terms are ANDed. A `-` (or `!`) in front negates a term. Field values match exactly or as a glob
(`*`, `?`), case-insensitively; `body:` matches a substring (or a glob) of any message body as JSON;
free text matches a substring of the id, method, name, client, error or notes, or of any body.
Bodies are searched only when a term needs them and only through the callable the caller hands in,
so matching a headline stays cheap. A query that does not parse keeps its error message and matches
everything, so a typo never empties the screen; the status bar shows the error instead.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from proxy.flows.events import ChainStatus, ChainSummary, MessageRecord, Mode
from proxy.wire.filter_terms import body_like, holds_or_like, like, split_word

FIELDS = ("method", "tool", "name", "status", "era", "mode", "client", "session", "id", "duration", "body")
"""Field names the language knows (the help screen lists them)."""

FLAGS = ("bridged", "invalid")
"""Bare words that test a property rather than search text."""

MESSAGE_FIELDS = frozenset({"method", "tool", "name", "era", "mode", "session", "body", "dir", "round"})
"""Fields of the rules' match language (docs/faults.md): terms that pick single messages."""

Bodies = Callable[[], str]
"""Gives a chain's message bodies as lower-cased text, one body per line."""

BODY_FIELDS = frozenset({"body", "text"})
"""Fields of terms that search message bodies (`body:` and free text)."""

_STATUS_ALIASES = {
    "waiting": "waiting_client",
    "wait": "waiting_client",
    "failed": "error",
    "fail": "error",
    "canceled": "cancelled",
    "cancel": "cancelled",
}
_MODE_ALIASES = {"pass": "passthrough", "bridge": "bridged"}
_KNOWN_VALUES: dict[str, tuple[str, ...]] = {
    "status": tuple(status.value for status in ChainStatus),
    "mode": (*(mode.value for mode in Mode), "bridged"),
    "era": ("legacy", "modern", "unknown"),
}
"""Fields whose values are a closed set: a value outside it (not a glob) is a typo, said as one."""
_DURATION = re.compile(r"^(>=|<=|>|<|=)?\s*(\d+(?:\.\d+)?)\s*(ms|s|m)?$", re.IGNORECASE)
_UNIT_MS = {"ms": 1.0, "s": 1000.0, "m": 60000.0}


@dataclass(frozen=True, slots=True)
class Term:
    """One condition of a query: a field test, a flag, or free text; possibly negated."""

    field: str
    value: str
    negate: bool = False
    op: str = "="
    millis: float = 0.0


Found = Callable[[Term], bool]
"""Says whether a chain's bodies hold what a `body:` or free-text term looks for."""


@dataclass(frozen=True, slots=True)
class Query:
    """A parsed filter: its terms (ANDed), the text it came from, and a parse error if any."""

    text: str = ""
    terms: tuple[Term, ...] = ()
    error: str | None = None

    @property
    def active(self) -> bool:
        """True when the query can hide anything."""
        return bool(self.terms) and self.error is None

    def matches(self, summary: ChainSummary, now: float | None = None, bodies: Bodies | None = None) -> bool:
        """True when the chain passes every term (always True for an empty or broken query).

        `bodies` gives the chain's message bodies as lower-cased text, asked for only when a term
        searches them; without it, `body:` matches nothing and free text only the headline.
        """
        found = None if bodies is None else partial(_found_in, bodies)
        return self.matches_found(summary, now, found)

    def matches_found(self, summary: ChainSummary, now: float | None, found: Found | None) -> bool:
        """`matches`, with what the chain's bodies hold decided by `found` (a search that read them
        elsewhere, or a guess of each outcome); without it, as `matches` without bodies."""
        if not self.active:
            return True
        return all(_term_matches(term, summary, now, found) != term.negate for term in self.terms)

    def verdict(self, summary: ChainSummary, now: float | None = None) -> bool | None:
        """Whether the chain passes whatever its bodies hold (True), fails whatever they hold (False),
        or passes only if they hold the right things (None): the answer without reading its bodies."""
        if not self.active:
            return True
        depends = False
        for term in self.terms:
            without = _term_matches(term, summary, now, None) != term.negate
            within = _term_matches(term, summary, now, _always) != term.negate
            if term.field in BODY_FIELDS and within != without:
                depends = True
            elif not without:
                return False
        return None if depends else True

    @property
    def body_terms(self) -> tuple[Term, ...]:
        """The terms that search message bodies, in order (none when the query is not active)."""
        return tuple(term for term in self.terms if term.field in BODY_FIELDS) if self.active else ()


def parse_query(text: str) -> Query:
    """Parse the filter bar's text; errors are returned in the Query, never raised."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        problem = "a quote is not closed" if "quotation" in str(exc) else str(exc)
        return Query(text=text, error=f"filter: {problem}")
    terms: list[Term] = []
    for word in words:
        try:
            terms.append(_parse_term(word))
        except ValueError as exc:
            return Query(text=text, error=f"filter: {exc}")
    return Query(text=text, terms=tuple(terms))


def message_match(text: str) -> str:
    """The filter's text when each of its terms picks single messages (a rule's MATCH), else ''.

    `status:`, `duration:`, `client:`, `id:`, flags and free text describe chains, not messages, so a
    filter holding any of them is no rule's match.
    """
    try:
        words = shlex.split(text)
    except ValueError:
        return ""
    for word in words:
        _negate, name, value = split_word(word)
        if value is None or not value or name not in MESSAGE_FIELDS:
            return ""
    return text.strip()


_QUOTABLE = frozenset({"method", "tool", "name", "client", "session", "id", "body"})
"""Fields whose value may hold a space when quoted (`method:"GET stream"`, as the Method column shows it)."""


def _parse_term(word: str) -> Term:
    if " " in word:  # it was quoted: a field's value as it is, or free text
        negate, name, quoted = split_word(word)
        if quoted and name.lower() in _QUOTABLE:
            return Term(field=name.lower(), value=quoted.lower(), negate=negate)
        return Term(field="text", value=word.lower())
    negate, name, value = split_word(word)
    if value is None:  # not a field term: a flag, or free text
        if name.lower() in FLAGS:
            return Term(field=name.lower(), value="", negate=negate)
        return Term(field="text", value=name.lower(), negate=negate)
    if name not in FIELDS:
        raise ValueError(f"unknown field {name!r} (known: {', '.join(FIELDS)})")
    if not value:
        raise ValueError(f"{name}: needs a value")
    if name == "duration":
        return _duration_term(value, negate)
    value = value.lower()
    if name == "status":
        value = _STATUS_ALIASES.get(value, value)
    elif name == "mode":
        value = _MODE_ALIASES.get(value, value)
    known = _KNOWN_VALUES.get(name)
    if known is not None and not any(c in value for c in "*?") and value not in known:
        raise ValueError(f"{name}: no such value {value!r} (known: {', '.join(known)})")
    return Term(field=name, value=value, negate=negate)


def _duration_term(value: str, negate: bool) -> Term:
    found = _DURATION.match(value.strip())
    if found is None:
        raise ValueError(f"duration: expected e.g. >500ms, <2s or >=1m, got {value!r}")
    op, number, unit = found.groups()
    millis = float(number) * _UNIT_MS[(unit or "ms").lower()]
    return Term(field="duration", value=value, negate=negate, op=op or ">=", millis=millis)


def body_found(term: Term, text: str) -> bool:
    """Whether bodies given as `Bodies` gives them hold what the term looks for (its negation aside)."""
    return term.value in text if term.field == "text" else body_like(term.value, text)


def _always(_term: Term) -> bool:
    return True


def _found_in(bodies: Bodies, term: Term) -> bool:
    return body_found(term, bodies())


def _term_matches(term: Term, s: ChainSummary, now: float | None, found: Found | None) -> bool:
    field = term.field
    if field == "text":
        return _text_matches(term.value, s) or (found is not None and found(term))
    if field == "body":
        return found is not None and found(term)
    if field == "bridged":
        return s.bridged
    if field == "invalid":
        return s.invalid
    if field == "duration":
        return _duration_matches(term, s, now)
    if field == "era":
        return like(s.client_era, term.value) or like(s.upstream_era, term.value)
    if field == "mode":
        return s.bridged if term.value == "bridged" else like(s.mode.value, term.value)
    if field == "tool":
        return s.method == "tools/call" and like(s.name, term.value)
    direct = {
        "method": s.method,
        "name": s.name,
        "status": s.status.value,
        "client": s.client_name,
        "session": s.session,
        "id": s.id,
    }
    if field in ("client", "session"):
        return holds_or_like(direct[field], term.value)
    return like(direct[field], term.value)


def _text_matches(needle: str, s: ChainSummary) -> bool:
    haystack = (s.id, s.method, s.name, s.client_name, s.error, s.mode.value, *s.notes)
    return any(needle in part.lower() for part in haystack if part)


def _duration_matches(term: Term, s: ChainSummary, now: float | None) -> bool:
    if s.duration_ms is not None:
        took = s.duration_ms
    elif now is not None:
        took = max(0.0, (now - s.started) * 1000)
    else:
        return False
    limit = term.millis
    return {
        ">": took > limit,
        ">=": took >= limit,
        "<": took < limit,
        "<=": took <= limit,
        "=": abs(took - limit) < 0.5,
    }[term.op]


def bodies_text(messages: Iterable[MessageRecord]) -> str:
    """Message bodies as `Bodies` gives them: lower-cased JSON, one body per line."""
    return "\n".join(body_text(record.body) for record in messages)


def body_text(body: Any) -> str:
    """One body as the language searches it: its JSON (or text), lower-cased."""
    if body is None:
        return ""
    text = body if isinstance(body, str) else json.dumps(body, ensure_ascii=False, default=str)
    return text.lower()
