"""Edits to a recorded request before it is replayed: `replay --chain r5 --set params.arguments.b=4`.

What mitmproxy does with duplicate, edit, replay: the chain is sent again with one or more values of
its request changed, and the report compares what came back with the recording, so the difference
the edit made is shown. Each edit is `PATH=VALUE`: PATH names a place in the request's JSON-RPC body
under `params` (`params.arguments.b`, `params.arguments.items[0]`, `params.name`, and a key holding
dots or brackets quoted: `params._meta["com.example/flag"]`), VALUE is JSON
(`4`, `"four"`, `[1, 2]`, `null`) or, when it is not JSON, the text as it is. An edit may add a key
to an object but never reaches through something that is not one. A 2026-07-28 client's retries of
the same call get the same edits, since a server binds its `requestState` to the call's arguments,
and so do the recording's copies of them, so the comparison reports what the edit changed.

Pure: plans in, plans out.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from proxy.flows.events import Direction
from proxy.flows.redact import REQUEST_STATE_KEY
from proxy.record.replay_compare import join
from proxy.record.replay_plan import ChainPlan, Sent

_STEP = re.compile(r'([^.\[\]"]+)|\[(\d+)\]|\["([^"]*)"\]')


class EditError(ValueError):
    """An edit that does not parse, or does not fit the request it is for; the message says which."""


@dataclass(frozen=True, slots=True)
class Edit:
    """One `--set`: where in the request (keys and list indices, from `params`) and the new value."""

    text: str
    path: tuple[str | int, ...]
    value: Any
    as_text: bool = False
    """VALUE was no JSON, so it goes as the text typed (said, in case a JSON value was meant)."""

    @property
    def said(self) -> str:
        """The edit as the replay announces it."""
        return f"{self.text} (not JSON: sent as text)" if self.as_text else self.text

    def announced(self, mask: Callable[[Any], Any]) -> str:
        """The edit as the replay announces it, its value shown as `mask` (the replay's proxy's
        redactor) shows a request holding it there: a value under a key it redacts is never printed."""
        path, shown = self._shown(mask)
        if path == self.path and type(shown) is type(self.value) and shown == self.value:
            return self.said
        where = self.text.partition("=")[0].strip() if path == self.path else _reported_at(path)
        return f"{where}={shown if isinstance(shown, str) else json.dumps(shown)}"

    def shown_at(self, mask: Callable[[Any], Any]) -> tuple[str | int, ...]:
        """Where the request sent shows the edit, as `mask` shows it: its place, or the place of what
        holds it when that is masked whole (an object under a key the proxy redacts)."""
        return self._shown(mask)[0]

    def _shown(self, mask: Callable[[Any], Any]) -> tuple[tuple[str | int, ...], Any]:
        body: Any = self.value
        for step in reversed(self.path):
            body = [body] if isinstance(step, int) else {step: body}
        shown = mask({"jsonrpc": "2.0", **body})
        for depth, step in enumerate(self.path):
            if isinstance(step, int) and isinstance(shown, list):
                shown = shown[0]
            elif isinstance(step, str) and isinstance(shown, dict):
                shown = shown[step]
            else:
                return self.path[:depth], shown  # masked whole here: the place inside shows nowhere
        return self.path, shown


def parse_edit(text: str) -> Edit:
    """`params.arguments.b=4` as an Edit; raises EditError saying what is wrong."""
    where, equals, raw = text.partition("=")
    where = where.strip()
    if not equals or not where:
        raise EditError(f"--set {text!r}: expected PATH=VALUE, such as params.arguments.b=4")
    path = _path(where, text)
    if path[0] != "params" or len(path) < 2:
        raise EditError(f"--set {text!r}: PATH is a place under params, such as params.arguments.b")
    if isinstance(path[1], str) and path[1].lower() == REQUEST_STATE_KEY.lower():
        raise EditError(
            f"--set {text!r}: params.{path[1]} is the replay's own (each retry echoes the one the "
            "server's result gave), not the recording's: it cannot be edited"
        )
    try:
        return Edit(text, path, json.loads(raw))
    except ValueError:
        return Edit(text, path, raw, as_text=True)


def _path(where: str, text: str) -> tuple[str | int, ...]:
    steps: list[str | int] = []
    at = 0
    for found in _STEP.finditer(where):
        if found.start() != at and where[at : found.start()] != ".":
            raise EditError(f"--set {text!r}: cannot read the path at {where[at:]!r}")
        key, index, quoted = found.groups()
        steps.append(int(index) if index is not None else quoted if quoted is not None else key)
        at = found.end()
    if at != len(where) or not steps:
        raise EditError(f"--set {text!r}: cannot read the path at {where[at:]!r}")
    return tuple(steps)


def apply_edits(body: dict[str, Any], edits: tuple[Edit, ...]) -> dict[str, Any]:
    """A copy of the JSON-RPC `body` with each edit made, in order; raises EditError on a misfit."""
    out = copy.deepcopy(body)
    for edit in edits:
        place: Any = out
        for step in edit.path[:-1]:
            place = _step_into(place, step, edit)
        last = edit.path[-1]
        if isinstance(last, int):
            if not isinstance(place, list) or not -len(place) <= last < len(place):
                raise EditError(f"--set {edit.text!r}: no item [{last}] there")
            place[last] = edit.value
        elif isinstance(place, dict):
            place[last] = edit.value
        else:
            raise EditError(f"--set {edit.text!r}: {last!r} is not under an object in the request")
    return out


def _step_into(place: Any, step: str | int, edit: Edit) -> Any:
    if isinstance(step, int):
        if isinstance(place, list) and -len(place) <= step < len(place):
            return place[step]
        raise EditError(f"--set {edit.text!r}: no item [{step}] in the request there")
    if not isinstance(place, dict):
        raise EditError(f"--set {edit.text!r}: {step!r} is not under an object in the request")
    if step not in place:
        place[step] = {}  # an edit may add an object's key, and what leads to it
    return place[step]


def edited_plan(
    plan: ChainPlan, edits: tuple[Edit, ...], mask: Callable[[Any], Any] | None = None
) -> ChainPlan:
    """The plan with its request, and each retry of it, edited (its notifications are left alone).

    The edited places are left out of the comparison (`ChainPlan.edited`), so it reports what the edit
    changed in the answers: the replay's proxy may show the value sent there masked (a key it redacts)
    where the recording never held it, or what holds it masked whole, which `mask` (the replay's
    proxy's redactor) tells, so that place is left out instead. The recording's copies of those
    requests get the same places, holding null, so what leads to a place an edit added compares the
    same; they never hold the value sent, which the report would otherwise show as recorded.
    """
    if plan.first is None:
        raise EditError(f"chain {plan.chain} holds no request to edit")
    first = replace(plan.first, body=apply_edits(plan.first.body, edits))
    retries = [_edited(sent, edits) for sent in plan.retries]
    method = plan.first.body.get("method")
    places = tuple(replace(edit, value=None) for edit in edits)
    records = [
        record.model_copy(update={"body": apply_edits(record.body, places)})
        if record.direction is Direction.TO_SERVER
        and record.kind == "request"
        and record.method == method
        and isinstance(record.body, dict)
        else record
        for record in plan.records
    ]
    edited = tuple(_reported_at(edit.path if mask is None else edit.shown_at(mask)) for edit in edits)
    return replace(plan, first=first, retries=retries, records=records, edited=edited)


def _reported_at(path: tuple[str | int, ...]) -> str:
    """An edit's place as the comparison reports a difference there (`params.items[0]`)."""
    text = ""
    for step in path:
        text = f"{text}[{step}]" if isinstance(step, int) else join(text, step)
    return text


def _edited(sent: Sent, edits: tuple[Edit, ...]) -> Sent:
    return replace(sent, body=apply_edits(sent.body, edits))
