"""Fault rules and the gate that applies them: `MATCH => ACTION [p=P] [count=N]`, decided per message.

A rule is parsed once (`parse_rule`), and refused with the reason when its action cannot act on any
message its match can pick. The gate keeps the rules in order; for each message it returns the fault
of the first rule that picks it, acts on it, still has a count left and wins its draw (probability
`p`, drawn from the gate's own seeded `random.Random`, so a run with the same seed and traffic injects
the same faults). The same gate holds the intercept rules (`intercepts`), judged first, whose
action is a hold. Pure: the transport asks, carries the fault out, and records it.
"""

from __future__ import annotations

import fnmatch
import itertools
import random
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from proxy.engine.gate.actions import HOLD, Action, parse_action, plain_number
from proxy.engine.gate.match import Match, Seen, parse_match
from proxy.engine.gate.messages import Asked
from proxy.wire.jsonrpc import Message
from proxy.wire.mcp import target_name

ARROW: Final = "=>"
MAX_RULES: Final = 100
"""Most fault rules held at once (each message is judged against all of them)."""

BRIDGED_MODES: Final = ("legacy_to_mrtr", "mrtr_to_legacy", "bridged")
BRIDGED_ACTIONS: Final = ("delay", "error", "drop")
"""What a fault can do on a bridged exchange: hold or answer the client's message before the bridge."""


@dataclass(frozen=True, slots=True)
class FaultRule:
    """One rule: which messages (`match`), what to do (`action`), how often (`p`) and how many times."""

    match: Match
    action: Action
    p: float = 1.0
    count: int | None = None
    """Most faults the rule injects (None: no limit)."""

    @property
    def text(self) -> str:
        """The rule as written in a configuration (normalized)."""
        if self.action.kind == HOLD:  # an intercept rule: MATCH [timeout=...]
            timeout = self.action.text()
            return f"{self.match.text or '*'}{' ' + timeout if timeout else ''}"
        options = "" if self.p == 1.0 else f" p={plain_number(self.p)}"
        if self.count is not None:
            options += f" count={self.count}"
        return f"{self.match.text or '*'} {ARROW} {self.action.text()}{options}"

    def describe(self) -> dict[str, Any]:
        """The rule as the admin API shows it."""
        return {
            "rule": self.text,
            "match": self.match.text or "*",
            "action": self.action.text(),
            "p": self.p,
            "count": self.count,
        }


def parse_rule(text: str) -> FaultRule:
    """Parse `MATCH => ACTION [p=P] [count=N]`; ValueError says what is wrong and what to write."""
    match_text, arrow, rest = text.partition(ARROW)
    if not arrow:
        raise ValueError(
            f"a fault rule is MATCH => ACTION [p=P] [count=N], as in "
            f"'method:tools/call => delay=200ms p=0.5'; no '=>' in {text.strip()!r}"
        )
    words = rest.split()
    if not words:
        raise ValueError("a fault rule needs an action after '=>' (delay=, error=, drop, cut_after=, ...)")
    options = list(words[1:])
    action_words = [words[0]]
    # an error's message may have spaces: every word up to the first option belongs to it
    is_error = words[0].lower().startswith("error=")
    while is_error and options and not options[0].lower().startswith(("p=", "count=")):
        action_words.append(options.pop(0))
    action = parse_action(" ".join(action_words))
    p, count = _options(options)
    rule = FaultRule(parse_match(match_text), action, p, count)
    _check(rule)
    return rule


def _options(words: Sequence[str]) -> tuple[float, int | None]:
    p, count = 1.0, None
    given: set[str] = set()
    for word in words:
        key, _, value = word.partition("=")
        key = key.lower()
        if key in given:  # which one was meant is the writer's to say, not the last one's to win
            raise ValueError(f"{key}= is given twice in one rule; keep the one you mean, got {word!r}")
        given.add(key)
        if key == "p":
            try:
                p = float(value)
            except ValueError:
                p = -1.0
            if not 0.0 < p <= 1.0:
                raise ValueError(
                    f"p= is a probability above 0, up to 1 (a rule with p=0 never acts), got {value!r}"
                )
        elif key == "count":
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"count= is how many faults the rule injects (1 or more), got {value!r}")
            count = int(value)
        else:
            raise ValueError(f"after the action come only p=P and count=N, got {word!r}")
    return p, count


def _check(rule: FaultRule) -> None:
    """Refuse a rule whose action cannot act on anything its match picks, naming why."""
    match, action = rule.match, rule.action
    mode = match.only("mode")
    sender = match.only("dir")
    if (
        mode is not None
        and mode in BRIDGED_MODES
        and (sender == "server" or action.kind not in BRIDGED_ACTIONS)
    ):
        raise ValueError(
            f"on a bridged exchange (mode:{mode}) faults act on the client's messages only, with "
            f"{', '.join(BRIDGED_ACTIONS)}: the bridges' own messages do not pass through the gate yet"
        )
    if action.kind in ("cut_after", "corrupt_state") and sender == "server":
        what = (
            "cuts the SSE stream that answers a client request"
            if action.kind == "cut_after"
            else "alters the requestState a client's retry carries"
        )
        raise ValueError(
            f"{action.kind} {what}: its rule picks the client's request (dir:client, or no dir:), "
            "not a server message"
        )
    if action.kind == "corrupt_state" and match.only("round") == "1":
        raise ValueError("corrupt_state alters a retry's requestState: round:1 has none (use round:>1)")
    picked = match.picks()
    if picked is not None and not picked:
        raise ValueError(f"{action.kind}: {match.text} picks no message (its terms exclude each other)")
    if picked is not None and not any(action.acts_on(sender, kind) for sender, kind in picked):
        raise ValueError(
            f"{action.kind} {_ACTS_ON[action.kind]}: {match.text} picks only {_picked_text(picked)}"
        )


_ACTS_ON: Final = {
    "error": "answers a client's request, or replaces a server's answer",
    "cut_after": "cuts the SSE stream that answers a client's request",
    "corrupt_state": "alters the requestState a client's retry carries",
}
"""What each action that cannot act on every message acts on, for the reason a rule is refused."""


def _picked_text(picked: frozenset[tuple[str, str]]) -> str:
    """What a rule's match can pick, in words (`notifications`)."""
    if all(kind == "notification" for _, kind in picked):
        return "notifications"
    if all(sender == "client" for sender, _ in picked):
        return "the client's answer to a server's request"
    if all(sender == "server" for sender, _ in picked):
        return "a server's request to the client"
    return "a server's request to the client and the client's answer to it"


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault the gate decided on: the rule (by id) and its action."""

    rule_id: str
    action: Action

    def describe(self) -> str:
        """The fault in a few words (`delay 200 ms`)."""
        return self.action.describe()

    def made_note(self) -> str:
        """The note on a message this fault made or took away, in pass-through and bridges alike."""
        return f"fault injected by the proxy: {self.describe()} [{self.rule_id}]"


@dataclass(frozen=True, slots=True)
class _Could:
    """What a rule's positive method and name terms require, as compiled patterns: a quick, generous
    test of whether the rule could pick anything of an exchange (its full match decides later)."""

    any_server: bool
    """It may pick a message a server sends on its own, which no client message foretells."""
    method: tuple[re.Pattern[str], ...]
    name: tuple[re.Pattern[str], ...]
    tool: bool

    @classmethod
    def of(cls, match: Match) -> _Could:
        def patterns(*fields: str) -> tuple[re.Pattern[str], ...]:
            return tuple(
                re.compile(fnmatch.translate(term.value), re.IGNORECASE)
                for term in match.terms
                if term.field in fields and not term.negate
            )

        tool = any(term.field == "tool" and not term.negate for term in match.terms)
        return cls(match.may_pick_server_request(), patterns("method"), patterns("tool", "name"), tool)

    def __call__(self, method: str | None, name: str | None) -> bool:
        if self.tool and method != "tools/call":
            return False
        if self.method and (method is None or not all(p.match(method) for p in self.method)):
            return False
        return not self.name or (name is not None and all(p.match(name) for p in self.name))


@dataclass(slots=True)
class _Held:
    rule_id: str
    rule: FaultRule
    could: _Could
    fired: int = 0
    """Messages the rule picked that still count against its `count`: its faults injected, and those
    decided and not yet carried out (a cut waits for its stream); one found not to fit is given back."""
    injected: int = 0
    """Faults the transport carried out for the rule (`settle`): what the listing shows."""


@dataclass(slots=True)
class FaultGate:
    """The rules in force, in order, and the seeded draw that decides a rule with `p` below 1."""

    seed: int | None = None
    rng: random.Random = field(init=False)
    injected: Counter[str] = field(default_factory=Counter)
    """Faults carried out, by action (`delay`, `error`, ...; `not_injected`: a rule picked a message
    its action turned out not to fit). The transport counts them as it records them."""
    _rules: list[_Held] = field(default_factory=list)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _intercepts: list[_Held] = field(default_factory=list)
    """Intercept rules (`proxy.engine.gate.intercepts`): judged before the fault rules."""
    _intercept_ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def __len__(self) -> int:
        """Rules in force, fault and intercept rules alike (0: the traffic need not ask the gate)."""
        return len(self._rules) + len(self._intercepts)

    @property
    def fault_count(self) -> int:
        """Fault rules in force."""
        return len(self._rules)

    def add_intercept(self, rule: FaultRule) -> str:
        """Put an intercept rule (a hold) in force after the others; its id (`i1`, `i2`, ...)."""
        if rule.action.kind != HOLD:
            raise ValueError("an intercept rule holds the messages it picks; fault actions go in fault rules")
        if len(self._intercepts) >= MAX_RULES:
            raise ValueError(f"at most {MAX_RULES} intercept rules are held at once; delete some first")
        rule_id = f"i{next(self._intercept_ids)}"
        self._intercepts.append(_Held(rule_id, rule, _Could.of(rule.match)))
        return rule_id

    def remove_intercept(self, rule_id: str) -> bool:
        """Take an intercept rule out of force; False when none has that id."""
        for i, held in enumerate(self._intercepts):
            if held.rule_id == rule_id:
                del self._intercepts[i]
                return True
        return False

    def clear_intercepts(self) -> list[str]:
        """Take every intercept rule out of force; their ids."""
        ids = [held.rule_id for held in self._intercepts]
        self._intercepts.clear()
        return ids

    @property
    def holding(self) -> bool:
        """Whether any intercept rule is in force."""
        return bool(self._intercepts)

    def intercepts(self) -> list[tuple[str, FaultRule, int]]:
        """Each intercept rule in force: its id, the rule, and how many messages it picked."""
        return [(held.rule_id, held.rule, held.fired) for held in self._intercepts]

    def add(self, rule: FaultRule) -> str:
        """Put a rule in force after the others; returns its id (`f1`, `f2`, ...)."""
        if len(self._rules) >= MAX_RULES:
            raise ValueError(f"at most {MAX_RULES} fault rules are held at once; delete some first")
        rule_id = f"f{next(self._ids)}"
        self._rules.append(_Held(rule_id, rule, _Could.of(rule.match)))
        return rule_id

    def remove(self, rule_id: str) -> bool:
        """Take a rule out of force; False when no rule has that id."""
        for i, held in enumerate(self._rules):
            if held.rule_id == rule_id:
                del self._rules[i]
                return True
        return False

    def clear(self) -> int:
        """Take every rule out of force; returns how many there were."""
        count = len(self._rules)
        self._rules.clear()
        return count

    def label(self, rule_id: str) -> str:
        """`f1: <rule text>` for a rule in force (its id alone once it is gone), for notes and logs."""
        for held in (*self._intercepts, *self._rules):
            if held.rule_id == rule_id:
                return f"{rule_id}: {held.rule.text}"
        return rule_id

    def listing(self) -> list[dict[str, Any]]:
        """Every rule in force with its id and how many faults it injected."""
        return [
            {"id": held.rule_id, **held.rule.describe(), "injected": held.injected} for held in self._rules
        ]

    def settle(self, fault: Fault, *, applied: bool) -> None:
        """The transport carried `fault` out (`applied`), or found its action does not fit the message:
        counted by action (`not_injected`), and a fault not injected gives its rule's count back, so
        `count=N` is spent only by faults injected."""
        self.injected[fault.action.kind if applied else "not_injected"] += 1
        for held in self._rules:
            if held.rule_id == fault.rule_id:
                if applied:
                    held.injected += 1
                else:
                    held.fired = max(0, held.fired - 1)
                return

    def concerns(self, client: Sequence[Message], asked: Asked | None = None) -> bool:
        """Whether any rule could pick a message of an exchange whose client sent `client`.

        Answers are judged by the request they answer (`asked`: a client's answer by the server's
        request, as `asked_of` gives it); a message a server sends on its own is judged by its
        method. An exchange no rule concerns is relayed as if there were no gate, so this looks only
        at each rule's method and name patterns, compiled once.
        """
        for held in (*self._intercepts, *self._rules):
            rule = held.rule
            if rule.count is not None and held.fired >= rule.count:
                continue
            could = held.could
            if could.any_server:
                return True
            for msg in client:
                if msg.is_response:
                    method, name = (
                        asked.get(msg.id, (None, None)) if asked and msg.id is not None else (None, None)
                    )
                else:
                    method, name = msg.method, target_name(msg.method, msg.params)
                if could(method, name):
                    return True
        return False

    def decide_hold(self, seen: Seen) -> Fault | None:
        """The hold of the first intercept rule that picks the message (fault rules are not asked):
        what a bridge's own messages are judged by."""
        for held in self._intercepts:
            if held.rule.match.matches(seen):
                held.fired += 1
                return Fault(held.rule_id, held.rule.action)
        return None

    def decide(self, seen: Seen) -> Fault | None:
        """The fault for one message: the first rule that picks it, acts on it and wins its draw.

        Intercept rules come first: a message one of them picks is held (a `hold` action), and no
        fault acts on it.
        """
        hold = self.decide_hold(seen) if self._intercepts else None
        if hold is not None:
            return hold
        for held in self._rules:
            rule = held.rule
            if rule.count is not None and held.fired >= rule.count:
                continue
            if not rule.action.acts_on(seen.direction, seen.kind) or not rule.match.matches(seen):
                continue
            if rule.p < 1.0 and self.rng.random() >= rule.p:
                continue
            held.fired += 1
            return Fault(held.rule_id, rule.action)
        return None
