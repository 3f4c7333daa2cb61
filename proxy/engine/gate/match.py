"""Which messages a rule picks: the TUI filter's syntax (`proxy/flows/query.py`), applied to one message.

    method:tools/call   tool:delete_*   name:res://x   era:modern   mode:passthrough
    session:08b2   body:octocat   dir:client|server   round:1|>1   -term   *

Terms are ANDed; `-` (or `!`) negates one. Values match exactly or as a glob (`*`, `?`),
case-insensitively; `session:` also matches a substring, `body:` a substring (or a glob) of the
message as JSON. `session:` and `body:` see what the TUI filter sees: secrets masked (matched
against the values in clear, a rule's hit count would confirm a guessed secret a character at a
time). A response is matched by the request it answers (its method and name), so `method:tools/call`
picks both the call and its answer unless `dir:` says which. `*` alone (or no term) picks every
message. Parsed once into a `Match`; `Match.matches` is a pure function.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Final

from proxy.wire.filter_terms import body_like, holds_or_like, like, split_word
from proxy.wire.mcp import INPUT_METHODS, SERVER_SENT_METHODS

FIELDS: Final = ("method", "tool", "name", "era", "mode", "session", "body", "dir", "round")
"""Field names a rule's match knows (a subset of the TUI filter's, plus `dir` and `round`)."""

_DIRECTIONS: Final = {"client": "client", "server": "server", "to_server": "client", "to_client": "server"}
_MODE_ALIASES: Final = {"pass": "passthrough"}

SERVER_METHODS: Final = tuple(sorted(method.lower() for method in SERVER_SENT_METHODS))
"""Methods a server sends a client (lower case): a rule whose method term fits none of them can
only pick a server's message by the request it answers."""

NOTIFICATION_PREFIX: Final = "notifications/"
"""How every MCP notification's method begins, and no request's."""

_SERVER_REQUESTS: Final = frozenset(method.lower() for method in INPUT_METHODS)
_NOTIFICATIONS: Final = frozenset({("client", "notification"), ("server", "notification")})
_ASKED_OF_CLIENT: Final = frozenset({("server", "request"), ("client", "result"), ("client", "error")})
"""What a method only a server asks picks: the server's request and the client's answer to it."""


@dataclass(frozen=True, slots=True)
class Seen:
    """One message as a rule sees it: who sent it, what it is, and the exchange it travels on."""

    direction: str
    """`client` (the client sent it) or `server`."""
    kind: str
    """`request`, `notification`, `result`, `error` or `invalid`."""
    method: str | None
    """Its method; for a response, the method of the request it answers (None when unknown)."""
    name: str | None
    """The tool, prompt or resource it concerns (for a response, its request's)."""
    era: str
    mode: str
    """`passthrough`, `legacy_to_mrtr` or `mrtr_to_legacy` (`mode:bridged` matches either bridge)."""
    session: str | None
    """The session id as the chains show it: masked (`<redacted len=N hmac:…>`), never in clear."""
    round: int | None
    """1 for a first request, 2 for a retry that carries `inputResponses` or `requestState` (an
    MRTR round past the first, whose exact number pass-through cannot know); None for the rest."""
    body: Callable[[], str]
    """The message as lower-cased JSON, redacted as the chains show it, asked for only when a `body:`
    term needs it."""


@dataclass(frozen=True, slots=True)
class Term:
    """One condition: a field and its lower-cased value (`round` keeps its operator in `op`)."""

    field: str
    value: str
    negate: bool = False
    op: str = "="


@dataclass(frozen=True, slots=True)
class Match:
    """A parsed match: its terms, ANDed (none: every message)."""

    text: str
    terms: tuple[Term, ...]

    def matches(self, seen: Seen) -> bool:
        """Whether the message passes every term."""
        return all(_term(term, seen) != term.negate for term in self.terms)

    def only(self, field: str) -> str | None:
        """The value a positive term requires of `field`, if one does (`dir`: who must send it)."""
        for term in self.terms:
            if term.field == field and not term.negate:
                return term.value
        return None

    def picks(self) -> frozenset[tuple[str, str]] | None:
        """The (sender, kind) pairs the method and dir terms leave a message, when a method term tells:
        `notifications/...` picks notifications, a method only a server asks (`elicitation/create`)
        its request and the client's answer. None when the terms allow any kind of message."""
        picked: frozenset[tuple[str, str]] | None = None
        for term in self.terms:
            if term.field != "method" or term.negate:
                continue
            if term.value.startswith(NOTIFICATION_PREFIX):
                kinds = _NOTIFICATIONS
            elif term.value in _SERVER_REQUESTS:
                kinds = _ASKED_OF_CLIENT
            else:
                continue
            picked = kinds if picked is None else picked & kinds
        sender = self.only("dir")
        if picked is None or sender is None:
            return picked
        return frozenset(pair for pair in picked if pair[0] == sender)

    def may_pick_server_request(self) -> bool:
        """Whether a message a server sends on its own (not an answer) could pass the method terms.

        Lets the gate skip an exchange whose client messages no rule can concern: answers are judged
        by the request, and what else a server may send has one of `SERVER_METHODS`.
        """
        if self.only("dir") == "client":
            return False
        for term in self.terms:
            if term.negate:
                continue
            if term.field == "tool":
                return False
            if term.field == "method" and not any(fnmatchcase(m, term.value) for m in SERVER_METHODS):
                return False
        return True


def parse_match(text: str) -> Match:
    """Parse a match; raises ValueError naming the term at fault and what it accepts."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"match: {exc}") from None
    if words == ["*"]:
        return Match(text=text.strip(), terms=())
    return Match(text=text.strip(), terms=tuple(_parse_term(word) for word in words))


def _parse_term(word: str) -> Term:
    negate, name, value = split_word(word)
    if value is None:
        raise ValueError(
            f"match: {word!r} is not a field term; a rule picks messages with FIELD:VALUE "
            f"({', '.join(FIELDS)}), or * for every message"
        )
    if name not in FIELDS:
        raise ValueError(f"match: unknown field {name!r} (known: {', '.join(FIELDS)})")
    if not value:
        raise ValueError(f"match: {name}: needs a value")
    value = value.lower()
    if name == "dir":
        if value not in _DIRECTIONS:
            raise ValueError(f"match: dir: is client or server (who sent the message), got {value!r}")
        return Term("dir", _DIRECTIONS[value], negate)
    if name == "round":
        return _round_term(value, negate)
    if name == "mode":
        value = _MODE_ALIASES.get(value, value)
    return Term(name, value, negate)


def _round_term(value: str, negate: bool) -> Term:
    """`round:1` (a first request) or `round:>1` / `round:>=2` (a retry); nothing finer is known."""
    if value == "1":
        return Term("round", "1", negate)
    if value in (">1", ">=2"):
        return Term("round", "2", negate, ">=")
    raise ValueError(
        f"match: round: is 1 (a first request) or >1 (an MRTR retry); pass-through cannot count "
        f"rounds further, got {value!r}"
    )


def _term(term: Term, seen: Seen) -> bool:
    field = term.field
    if field == "method":
        return like(seen.method, term.value)
    if field == "tool":
        return seen.method == "tools/call" and like(seen.name, term.value)
    if field == "name":
        return like(seen.name, term.value)
    if field == "dir":
        return seen.direction == term.value
    if field == "era":
        return like(seen.era, term.value)
    if field == "mode":
        if term.value == "bridged":  # as in the TUI filter: either bridge
            return seen.mode in ("legacy_to_mrtr", "mrtr_to_legacy")
        return like(seen.mode, term.value)
    if field == "session":
        return holds_or_like(seen.session, term.value)
    if field == "round":
        if seen.round is None:
            return False
        return seen.round >= 2 if term.op == ">=" else seen.round == 1
    return body_like(term.value, seen.body())
