"""Comparing a recorded chain with its replay: both normalised, message by message, first difference named.

Two runs of one call never agree on everything: JSON-RPC ids, session ids, times, the `requestState`
a server seals (or keeps in memory instead), the names a server gives its `inputRequests` entries (a
2026-07-28 server's `name`, the proxy's bridge's `elicitation-1`), the order in which questions asked
at once arrive and are answered (and whether a bridge put them in one round or two), the protocol
envelope a 2026-07-28 message carries in `_meta` (`io.modelcontextprotocol/...`, `progressToken`,
trace context) and a legacy one never does. Those are normalised away; what is left is what the
server did, and is compared exactly. The user names more (`--ignore PATH`, glob-like) for fields of
their own that change run to run, or whole messages (`--ignore notifications/message`).

Only the client's side of a chain is compared (messages the client sent or received: `both` in
pass-through, `client` behind a bridge), so a chain replayed in the captured client's era against a
server of the other era compares with the recording as the client saw both. Pure data: no I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from proxy.flows.events import Direction, MessageRecord, Side
from proxy.flows.redact import TRUNCATED_KEY

CLIENT_SIDES: Final = frozenset({Side.BOTH, Side.CLIENT})
"""Sides whose messages the client exchanged (behind a bridge, `upstream` is the proxy's own leg)."""

JSONRPC_KINDS: Final = frozenset({"request", "notification", "result", "error", "invalid"})
"""Records that carry a JSON-RPC message (the others are HTTP heads with no body)."""

ENVELOPE_META: Final = frozenset({"progressToken", "traceparent", "tracestate", "baggage"})
"""`_meta` keys that frame a message rather than say anything of the operation (with every
`io.modelcontextprotocol/` key: protocol version, client and server info, capabilities, log level)."""

ENVELOPE_PREFIX: Final = "io.modelcontextprotocol/"

RUN_SPECIFIC_KEYS: Final = frozenset({"elicitationId", "requestState"})
"""Keys dropped wherever they occur: a URL elicitation's id is minted anew on every run, and whether a
server keeps a call's state in `requestState` or in its own memory is its own business (a bridge in
front of a legacy server always sends one; a 2026-07-28 server may send none for one round)."""

SHOWN_CHARS: Final = 120
"""Characters of a differing value shown before it is cut with `...`."""


class _Missing:
    """A message or field that one side has and the other has not."""

    def __repr__(self) -> str:
        return "(none)"


MISSING: Final = _Missing()


@dataclass(frozen=True)
class Compared:
    """One message of a chain in the form it is compared in."""

    label: str
    """What it is, in a few words: `tools/call request`, `elicitation/create result`."""
    body: Any
    """The message without the fields the ignore rules hide: what is shown of a message only one side
    has, and what questions are put in order by."""
    whole: Any
    """The message with every field: what is compared, a difference being passed over when the
    ignore rules hide the path it is reported at (in a list matched by name, an index names an item
    of one side only)."""
    index: int = 0
    """The message it stands for: its number among the chain's client-side messages, from 1."""


@dataclass(frozen=True)
class Difference:
    """The first place where a replay differs from its recording."""

    index: int
    """The message's number in the chain's client side, from 1 (the recording's; the replay's when
    the recording has no such message)."""
    label: str
    path: str
    """Where in the message (`result.content[0].text`); empty when a whole message is missing or extra."""
    recorded: Any
    replayed: Any
    replayed_index: int | None = None
    """The replay's message it was compared with (its number there), if any."""

    def text(self) -> str:
        """`message 3 (tools/call result) result.content[0].text: recorded "Ada", replayed "Bob"`."""
        where = f" {self.path}" if self.path else ""
        return (
            f"message {self.index} ({self.label}){where}: recorded {shown(self.recorded)}, "
            f"replayed {shown(self.replayed)}"
        )

    def as_json(self) -> dict[str, Any]:
        """Plain data for `--json` (a missing side is null, with `recorded_missing`/`replayed_missing`)."""
        out: dict[str, Any] = {"message": self.index, "label": self.label, "path": self.path}
        if self.replayed_index is not None and self.replayed_index != self.index:
            out["replayed_message"] = self.replayed_index
        for name, value in (("recorded", self.recorded), ("replayed", self.replayed)):
            out[name] = None if value is MISSING else value
            if value is MISSING:
                out[f"{name}_missing"] = True
        return out


def shown(value: Any) -> str:
    """A value as compact JSON, cut short."""
    if value is MISSING:
        return "(none)"
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 3] + "..."


# -- ignore patterns -----------------------------------------------------------------------------


@dataclass(frozen=True)
class IgnoreRules:
    """Paths the user asked to leave out of the comparison (`--ignore`), glob-like.

    A path reads `result.content[0].text`; `*` stands for any run of characters (`*.timestamp`: a
    `timestamp` key at any depth, the top included), `[*]` for any index. A pattern that names a
    message's label instead (`notifications/message`, `notifications/*`) leaves those messages out.
    """

    patterns: tuple[str, ...] = ()
    exact: frozenset[str] = frozenset()
    """Paths left out as they are written, no glob (the places a `--set` edited)."""
    _compiled: tuple[re.Pattern[str], ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_compiled", tuple(_compile(p) for p in self.patterns))

    def with_paths(self, paths: Iterable[str]) -> IgnoreRules:
        """These rules, leaving out `paths` too, each exactly as written."""
        return IgnoreRules(self.patterns, self.exact | frozenset(paths))

    def drops(self, label: str) -> bool:
        """Whether a whole message is left out: a pattern naming its label (`notifications/message`)."""
        return any(rx.fullmatch(label) for rx in self._compiled)

    def hides(self, path: str) -> bool:
        """Whether the field at `path` is left out."""
        return path in self.exact or any(rx.fullmatch(path) for rx in self._compiled)

    def apply(self, value: Any, path: str = "") -> Any:
        """`value` without the fields the rules hide."""
        if not self._compiled and not self.exact:
            return value
        if isinstance(value, dict):
            kept = {}
            for key, item in value.items():
                sub = join(path, key)
                if not self.hides(sub):
                    kept[key] = self.apply(item, sub)
            return kept
        if isinstance(value, list):
            return [self.apply(item, f"{path}[{i}]") for i, item in enumerate(value)]
        return value


def _compile(pattern: str) -> re.Pattern[str]:
    text = pattern.strip()
    lead = ""
    if text.startswith("*."):  # `*.timestamp` also names a top-level `timestamp`
        lead, text = r"(?:.*\.)?", text[2:]
    out = []
    i = 0
    while i < len(text):
        if text.startswith("[*]", i):
            out.append(r"\[\d+\]")
            i += 3
        elif text[i] == "*":
            out.append(".*")
            i += 1
        else:
            out.append(re.escape(text[i]))
            i += 1
    return re.compile(lead + "".join(out))


_PLAIN_KEY: Final = re.compile(r"[A-Za-z_$][A-Za-z0-9_$\-]*")


def join(path: str, key: Any) -> str:
    """`path.key`, or `path["odd.key"]` for a key a dot would split."""
    text = str(key)
    if _PLAIN_KEY.fullmatch(text):
        return f"{path}.{text}" if path else text
    return f"{path}[{json.dumps(text)}]"


# -- normalising ---------------------------------------------------------------------------------


def client_side(records: Iterable[MessageRecord]) -> list[MessageRecord]:
    """The messages of a chain the client sent or received, in order (HTTP heads left out)."""
    return [r for r in records if r.side in CLIENT_SIDES and r.kind in JSONRPC_KINDS]


class ChainNormaliser:
    """Puts one chain's client side in compared form: the call, its questions each with its answer,
    then the rest (notifications, the final answer) in order.

    Questions and answers are paired whatever the era: an in-flight request and the client's POSTed
    answer to it, or an `input_required` entry and the retry's `inputResponses` entry of the same key.
    Pairs are compared in content order, not arrival order: when a server asks two things at once,
    which arrives first, and whether a bridge put them in one round or two, is timing, not behaviour.
    A retry is left out when it asks what the call asked (it carries only answers and state).
    """

    def __init__(self, ignore: IgnoreRules | None = None) -> None:
        self.ignore = ignore or IgnoreRules()
        self._methods: dict[tuple[Direction, Any], str] = {}
        """A request's direction and id -> its method, to label the response to it."""

    def chain(self, records: Iterable[MessageRecord]) -> list[Compared]:
        """Every client-side message of a chain, in compared form and order."""
        head: list[Compared] = []
        pairs: list[list[Compared | None]] = []
        rest: list[Compared] = []
        asked: dict[Any, int] = {}
        """An in-flight question's id -> its pair."""
        keyed: dict[str, tuple[int, str]] = {}
        """The last `input_required` round's keys -> their pair and method."""
        for number, record in enumerate(client_side(records), start=1):
            label = self.label(record)
            if self.ignore.drops(label):
                continue
            body = _plain(record.body)
            result = body.get("result") if isinstance(body, dict) else None
            params = body.get("params") if isinstance(body, dict) else None
            if record.kind == "request" and record.direction is Direction.TO_CLIENT:
                asked[record.jsonrpc_id] = len(pairs)
                pairs.append([self._compared(label, body, number), None])
            elif (
                record.direction is Direction.TO_SERVER
                and record.jsonrpc_id in asked
                and record.kind != "request"
            ):
                pairs[asked.pop(record.jsonrpc_id)][1] = self._compared(label, body, number)
            elif isinstance(result, dict) and result.get("resultType") == "input_required":
                keyed = self._round(result, number, pairs, rest, label)
            elif (
                record.kind == "request" and isinstance(params, dict) and "inputResponses" in params and head
            ):
                self._retry(body, number, keyed, pairs, rest, head[0], label)
            elif not head and record.kind == "request":
                head.append(self._compared(label, body, number))
            else:
                rest.append(self._compared(label, body, number))
        ordered = sorted(pairs, key=lambda pair: [_canonical(c.body) if c else "" for c in pair])
        return head + [c for pair in ordered for c in pair if c is not None] + rest

    def _compared(self, label: str, body: Any, number: int) -> Compared:
        return Compared(label, self.ignore.apply(body), body, number)

    def _round(
        self,
        result: dict[str, Any],
        number: int,
        pairs: list[list[Compared | None]],
        rest: list[Compared],
        label: str,
    ) -> dict[str, tuple[int, str]]:
        """An `input_required` result's entries as questions; what else it holds stays a message."""
        keyed: dict[str, tuple[int, str]] = {}
        requests = result.get("inputRequests")
        for key, entry in (requests if isinstance(requests, dict) else {}).items():
            method = str(entry.get("method")) if isinstance(entry, dict) else "?"
            keyed[str(key)] = (len(pairs), method)
            pairs.append([self._compared(f"{method} request", entry, number), None])
        left = {k: v for k, v in result.items() if k not in ("resultType", "inputRequests")}
        if left:
            rest.append(self._compared(label, {"result": left}, number))
        return keyed

    def _retry(
        self,
        body: dict[str, Any],
        number: int,
        keyed: dict[str, tuple[int, str]],
        pairs: list[list[Compared | None]],
        rest: list[Compared],
        call: Compared,
        label: str,
    ) -> None:
        """A retry's answers join their questions; the retry itself only if it asks something else."""
        params = dict(body["params"])
        for key, value in params.pop("inputResponses").items():
            if key in keyed:
                place, method = keyed[key]
                pairs[place][1] = self._compared(f"{method} result", {"result": value}, number)
        retry = self._compared(
            label, {**body, "params": params} if params else _without(body, "params"), number
        )
        if retry.body != call.body:
            rest.append(retry)

    def label(self, record: MessageRecord) -> str:
        """`tools/call request`, `elicitation/create result`, `notifications/progress`: what a message is."""
        body = record.body if isinstance(record.body, dict) else {}
        if record.kind in ("request", "notification"):
            method = record.method or str(body.get("method"))
            if record.kind == "request":
                self._methods[(record.direction, record.jsonrpc_id)] = method
                return f"{method} request"
            return method
        asker = Direction.TO_CLIENT if record.direction is Direction.TO_SERVER else Direction.TO_SERVER
        asked = self._methods.get((asker, record.jsonrpc_id))
        word = "error" if record.kind == "error" else "result" if record.kind == "result" else record.kind
        return f"{asked} {word}" if asked else word


def _plain(body: Any) -> Any:
    """A message without its envelope and its JSON-RPC id."""
    if not isinstance(body, dict):
        return body
    return _without(without_envelope(body), "id")


def _without(body: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != key}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def without_envelope(value: Any) -> Any:
    """A copy without the run- and era-specific parts (see the module docstring)."""
    if isinstance(value, list):
        return [without_envelope(v) for v in value]
    if not isinstance(value, dict):
        return value
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key in RUN_SPECIFIC_KEYS:
            continue
        if key == "_meta" and isinstance(item, dict):
            meta = {
                k: without_envelope(v)
                for k, v in item.items()
                if k not in ENVELOPE_META and not str(k).startswith(ENVELOPE_PREFIX)
            }
            if meta:
                out[key] = meta
        elif key == "params" and item == {}:
            continue  # `params: {}` and no params ask the same (a bridge adds one to `roots/list`)
        else:
            out[key] = without_envelope(item)
    if out.get("params") == {}:  # params that held only an envelope
        del out["params"]
    return out


# -- the first difference ------------------------------------------------------------------------


def first_difference(
    recorded: Sequence[Compared], replayed: Sequence[Compared], ignore: IgnoreRules | None = None
) -> Difference | None:
    """Where the two chains first part, message by message in compared order; None when they agree.

    Inside a message, a difference at a path `ignore` hides is passed over, and the search goes on.
    """
    walk = _Walk(ignore or IgnoreRules())
    for place in range(max(len(recorded), len(replayed))):
        old = recorded[place] if place < len(recorded) else None
        new = replayed[place] if place < len(replayed) else None
        index = old.index if old is not None else new.index if new is not None else place + 1
        again = new.index if new is not None else None
        if old is None or new is None:
            present = old or new
            return Difference(
                index,
                present.label if present is not None else "",
                "",
                MISSING if old is None else old.body,
                MISSING if new is None else new.body,
                again,
            )
        if old.label != new.label:
            return Difference(index, old.label, "", _gist(old), _gist(new), again)
        if cut_when_recorded(old):
            continue  # the capture kept a stand-in, not the answer: nothing of it to compare with
        found = walk.first(old.whole, new.whole, "")
        if found is not None:
            path, was, now = found
            return Difference(index, old.label, path, was, now, again)
    return None


def cut_when_recorded(message: Compared) -> bool:
    """The recorded message is the capture's stand-in for a body cut at its `capture_body_limit`
    (`{"$truncated": true, "size": N, "preview": ...}`): the server's answer is not there to compare."""
    body = message.whole
    return isinstance(body, dict) and body.get(TRUNCATED_KEY) is True


def cut_messages(recorded: Iterable[MessageRecord], ignore: IgnoreRules | None = None) -> list[str]:
    """The recorded messages a comparison passes over for being cut when recorded, as the report
    names them: `message 2 (tools/list result)`."""
    compared = ChainNormaliser(ignore).chain(recorded)
    return [f"message {c.index} ({c.label})" for c in compared if cut_when_recorded(c)]


def _gist(message: Compared) -> Any:
    """What to show of a message of another kind than its counterpart: the message itself (an error's
    own words, a result's content), never its label, which would read as a value the server sent."""
    body = message.body
    if isinstance(body, dict):
        return {k: v for k, v in body.items() if k != "jsonrpc"}
    return body


IDENTITY_KEYS: Final = ("name", "uri", "uriTemplate")
"""Fields that name an item of a list (a tool, prompt, resource or template): lists whose items all
carry one, unique on each side, are compared item by item by it, so a tool added to a list reads as
that tool, not as every later tool changed."""


class _Walk:
    """Finds the first difference between two values that the ignore rules do not hide.

    Hiding is decided on the path a difference is reported at, never on where a value sits in each
    side on its own: in a list whose items are matched by name, `[4]` is the recorded answer's fifth
    item (gone or changed), or the fifth item of the replay's answer when the recording has no item
    of its name, so ignoring it hides exactly what the report would name there.
    """

    def __init__(self, ignore: IgnoreRules) -> None:
        self.hides = ignore.hides

    def first(self, old: Any, new: Any, path: str) -> tuple[str, Any, Any] | None:
        """The first unhidden difference under `path`, as (path, recorded, replayed)."""
        if isinstance(old, dict) and isinstance(new, dict):
            for key in [*old, *(k for k in new if k not in old)]:
                found = self._at(old.get(key, MISSING), new.get(key, MISSING), join(path, key))
                if found is not None:
                    return found
            return None
        if isinstance(old, list) and isinstance(new, list):
            key = _identity(old, new)
            if key is not None:
                return self._by_identity(old, new, path, key)
            for i in range(max(len(old), len(new))):
                found = self._at(
                    old[i] if i < len(old) else MISSING, new[i] if i < len(new) else MISSING, f"{path}[{i}]"
                )
                if found is not None:
                    return found
            return None
        if old is MISSING or new is MISSING or type(old) is not type(new) or old != new:
            return path, old, new
        return None

    def _at(self, old: Any, new: Any, path: str) -> tuple[str, Any, Any] | None:
        """The first difference at `path` or under it, unless the rules hide that path."""
        return None if self.hides(path) else self.first(old, new, path)

    def _by_identity(
        self, old: list[Any], new: list[Any], path: str, key: str
    ) -> tuple[str, Any, Any] | None:
        """The first recorded item missing from the replay or changed in it, then the first item only
        the replay has. Where an item sits is not compared: MCP gives the order of tools, prompts or
        resources no meaning, and a server that builds its list from a dict or a plugin registry
        lists them in another order from build to build."""
        replayed = {item[key]: item for item in new}
        recorded = {item[key] for item in old}
        for i, item in enumerate(old):
            if item[key] not in replayed:  # gone: shown by its name first, however long it is
                if not self.hides(f"{path}[{i}]"):
                    return f"{path}[{i}]", _named_first(item, key), MISSING
                continue
            found = self._at(item, replayed[item[key]], f"{path}[{i}]")
            if found is not None:
                return found
        for j, item in enumerate(new):
            if item[key] not in recorded and not self.hides(f"{path}[{j}]"):
                return f"{path}[{j}]", MISSING, _named_first(item, key)
        return None


def _named_first(item: dict[str, Any], key: str) -> dict[str, Any]:
    """An item of a list matched by `key`, with its name first: a report cut short still names it."""
    return {key: item[key], **{k: v for k, v in item.items() if k != key}}


def _identity(old: list[Any], new: list[Any]) -> str | None:
    """The field that names every item of both lists, uniquely within each; None when none does."""
    for key in IDENTITY_KEYS:
        named = True
        for items in (old, new):
            names = [item.get(key) if isinstance(item, dict) else None for item in items]
            if not all(isinstance(n, str) for n in names) or len(set(names)) != len(names):
                named = False
                break
        if named and (old or new):
            return key
    return None


def compare_chains(
    recorded: Iterable[MessageRecord], replayed: Iterable[MessageRecord], ignore: IgnoreRules | None = None
) -> Difference | None:
    """The first difference between a recorded chain's client side and its replay's, or None."""
    old = ChainNormaliser(ignore).chain(recorded)
    new = ChainNormaliser(ignore).chain(replayed)
    return first_difference(old, new, ignore)
