"""The member scanner for bodies that are not JSON: it finds secret-named members in one pass.

Masking a malformed body runs on the event loop, so its cost must grow with the body's size only:
a schema's `properties` nested level in level, each naming a secret-like member, must not make the
scanner read the rest of the text again at every level.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from proxy.flows import text_members
from proxy.flows.redact import Redactor
from proxy.flows.text_members import secret_members


class CountingPattern:
    """A compiled pattern that counts the matches it hands the scanner (its steps through the text)."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.steps = 0

    def search(self, text: str, pos: int = 0) -> re.Match[str] | None:
        self.steps += 1
        return self.pattern.search(text, pos)

    def match(self, text: str, pos: int = 0) -> re.Match[str] | None:
        self.steps += 1
        return self.pattern.match(text, pos)

    def finditer(self, text: str, pos: int = 0) -> Iterator[re.Match[str]]:
        for found in self.pattern.finditer(text, pos):
            self.steps += 1
            yield found


def nested_schemas(depth: int) -> str:
    """A malformed body: schemas whose `properties` name `password`, nested `depth` levels deep."""
    one = '{"properties":{"password":' * depth + '"x"' + "}}" * depth
    return "[" + ",".join([one] * 4) + "] trailing"


def scanner_steps(monkeypatch: pytest.MonkeyPatch, text: str) -> int:
    counters: list[CountingPattern] = []
    for name in ("_NAME_OR_BRACKET", "_STRING_OR_BRACKET", "_STRING", "_BARE"):
        counter = CountingPattern(getattr(text_members, name))
        counters.append(counter)
        monkeypatch.setattr(text_members, name, counter)
    members = list(secret_members(text, lambda name: name == "password"))
    assert members
    return sum(counter.steps for counter in counters)


def test_nested_schema_members_cost_steps_in_proportion_to_the_text(monkeypatch: pytest.MonkeyPatch) -> None:
    shallow, deep = nested_schemas(30), nested_schemas(60)
    tokens = len(re.findall(r'"[^"]*"|[{}\[\]]', deep))
    steps_shallow, steps_deep = scanner_steps(monkeypatch, shallow), scanner_steps(monkeypatch, deep)
    assert steps_deep <= 2 * tokens, (steps_deep, tokens)
    assert steps_deep <= 2.2 * steps_shallow, (steps_shallow, steps_deep)


def test_a_schema_members_object_is_gone_through_and_a_secret_inside_it_masked() -> None:
    text = '{"properties":{"password":{"type":"string","password":"hunter2"}}} trailing'
    shown = Redactor().text_body(text)
    assert "hunter2" not in shown
    assert '"type":"string"' in shown
