"""What a capture answered, as a table a mock server serves from (`mcp-proxy mock`).

Each chain of a capture becomes one recorded *operation*, seen from the server's side (messages the
upstream saw: `both` in pass-through, or the `upstream` edit an intercept sent in place of one, and
`upstream` behind a bridge): the chain's own request (method,
params; a bridge's handshake with the server on the same chain is a recorded handshake of its own), the
rounds of questions the server put to the client before answering (in-flight `elicitation/create`,
`sampling/createMessage`, `roots/list`, or MRTR `inputRequests`), each with the answer the client
recorded, and the final result or error. A round is what the server asked before it heard any answer:
in-flight requests sent one after another's answer are rounds of their own, requests sent together
share one, as an `input_required` result's entries do. The shape is the same whichever era recorded it,
so a server of either era can play it back.

Requests are matched on method and params, less what differs between runs of the same call
(`_meta`, `inputResponses`, `requestState`); `initialize` and `server/discover` match on the method
alone (the client's name and capabilities are its own). A request nothing matches gets the nearest
recorded request of the same method (or, for a method never recorded, of any method) to name in its
error. Everything here was redacted when the capture was written; nothing is invented or revealed.
"""

from __future__ import annotations

import difflib
import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from proxy.flows.events import (
    ChainOpened,
    Direction,
    FlowEvent,
    MessageRecord,
    MessageRecorded,
    SessionChanged,
    Side,
)
from proxy.flows.redact import TRUNCATED_KEY, UNENCODABLE_KEY
from proxy.flows.store import ChainStore
from proxy.record.export import ExportReport, note_left_out, note_skipped, open_readers
from proxy.record.observations import ObservationReplayer
from proxy.record.parts import oldest_first
from proxy.record.redacted_match import first_difference, holds_stand_in

MAX_OPERATIONS: Final = 50_000
"""Operations a table keeps; later chains of a bigger capture are counted in `dropped`, not served."""

SHOWN_CHARS: Final = 160
"""Characters of a request's params shown in an error or log line before it is cut with `...`."""

RUN_SPECIFIC: Final = frozenset({"_meta", "inputResponses", "requestState"})
"""Params that differ between two runs of the same call and so never decide a match."""

METHOD_ONLY: Final = frozenset({"initialize", "server/discover"})
"""Requests matched on the method alone: their params describe the client, not what it asks."""

RELAYED_BOUND: Final = 64
"""Relayed client messages a chain reader remembers, in case an intercept's edit of one follows (it
comes right after the hold it ended): older ones are let go."""

METHOD_NOT_FOUND: Final = -32601
INVALID_PARAMS: Final = -32602


@dataclass(frozen=True)
class Ask:
    """One question the server put to the client, and the client's recorded answer (a bare result)."""

    key: str
    """The `inputRequests` key it was recorded under, or `ask-N` for an in-flight request."""
    method: str
    params: dict[str, Any] | None
    answer: Any = None
    """The recorded answer: the result object, or `{"error": ...}` when the client refused."""


@dataclass(frozen=True)
class Round:
    """Questions asked together, before any of them was answered, and the notifications sent before them."""

    asks: tuple[Ask, ...]
    notes: tuple[dict[str, Any], ...] = ()
    """Notifications (progress, log messages) the server sent on the call's stream before these asks."""


@dataclass(frozen=True)
class Operation:
    """One recorded client request, the rounds that came before its answer, and that answer."""

    chain: str
    """The chain it was read from (`r7`), as `tui --open` and `export` name it."""
    method: str
    params: dict[str, Any]
    rounds: tuple[Round, ...]
    answer: dict[str, Any]
    """`{"result": ...}` or `{"error": ...}`, as recorded."""
    era: str
    """The era of the server that answered it (`legacy`, `modern` or `unknown`)."""
    cut: bool = False
    """A message of it was cut at the capture's body limit: it cannot be played back whole."""
    notes: tuple[dict[str, Any], ...] = ()
    """Notifications the server sent on the call's stream after the last round, before its answer."""

    def shown(self) -> str:
        """The request in a few words, for errors and logs."""
        return shown(self.method, self.params)


@dataclass(frozen=True)
class Miss:
    """Why a request has no recorded answer: a JSON-RPC error code and a message naming the nearest."""

    code: int
    message: str


def match_key(method: str, params: Any) -> str:
    """What two requests must share to be the same recorded call."""
    if method in METHOD_ONLY:
        return method
    kept = _kept_params(params)
    return method + " " + json.dumps(kept, sort_keys=True, separators=(",", ":"), default=str)


def _kept_params(params: Any) -> dict[str, Any]:
    if not isinstance(params, dict):
        return {}
    kept = {k: v for k, v in params.items() if k not in RUN_SPECIFIC and v is not None}
    if "arguments" in kept and kept["arguments"] == {}:
        del kept["arguments"]  # `arguments: {}` and no arguments ask the same
    return kept


def shown(method: str, params: Any) -> str:
    """`tools/call add {"a":2,"b":3}`: the method, the name or uri, and the rest, cut short."""
    kept = _kept_params(params)
    head = kept.pop("name", None) or kept.pop("uri", None)
    if set(kept) == {"arguments"}:
        kept = kept["arguments"]
    rest = json.dumps(kept, sort_keys=True, separators=(",", ":"), default=str) if kept else ""
    if len(rest) > SHOWN_CHARS:
        rest = rest[: SHOWN_CHARS - 3] + "..."
    return " ".join(part for part in (method, str(head) if head else "", rest) if part)


def _as_sent(params: Any) -> Any:
    """Params shown as the client sent them (a table read without a proxy in front, in tests)."""
    return params


@dataclass
class MockTable:
    """Recorded operations by match key, served in recorded order (the last one repeats)."""

    operations: dict[str, list[Operation]] = field(default_factory=dict)
    served: Counter[str] = field(default_factory=Counter)
    dropped: int = 0
    """Chains past `MAX_OPERATIONS`, not kept."""
    sessions: bool = False
    """The recorded server gave legacy sessions (`Mcp-Session-Id`): the mock asks later requests for
    one of its own, as that server did."""
    redacted: dict[str, list[str]] = field(default_factory=dict)
    """Method -> the match keys of its recorded calls whose params hold a redacted stand-in, in
    recorded order: a request is fitted to them when no recorded call matches it exactly."""
    masked: Callable[[Any], Any] = _as_sent
    """How a request's params are shown in a miss's message, which the mock logs and the proxy in
    front of it records: the user's redaction (`Redactor.body`), so the message never holds in clear
    what a recorded body would not."""

    def add(self, op: Operation) -> None:
        """Keep `op` (or count it dropped once the table is full)."""
        if self.size >= MAX_OPERATIONS:
            self.dropped += 1
            return
        key = match_key(op.method, op.params)
        if key not in self.operations and op.method not in METHOD_ONLY and holds_stand_in(op.params):
            self.redacted.setdefault(op.method, []).append(key)
        self.operations.setdefault(key, []).append(op)

    @property
    def size(self) -> int:
        """How many operations the table holds."""
        return sum(len(ops) for ops in self.operations.values())

    @property
    def era(self) -> str:
        """The era most recorded answers came from: the era the mock serves in (`unknown` when none)."""
        eras = Counter(op.era for ops in self.operations.values() for op in ops if op.era != "unknown")
        return eras.most_common(1)[0][0] if eras else "unknown"

    def methods(self) -> list[str]:
        """Every recorded method, sorted."""
        return sorted({ops[0].method for ops in self.operations.values()})

    def recorded(self, method: str) -> Operation | None:
        """The first recorded operation of `method`, whatever its params."""
        return next((ops[0] for ops in self.operations.values() if ops[0].method == method), None)

    def lookup(self, method: str, params: Any, era: str | None = None) -> Operation | Miss:
        """The recorded answer to this request: the next in recorded order, else a Miss naming the nearest.

        With `era`, the answers a server of that era gave come first: a capture of a dual-era server
        holds a `tools/list` answered to each era, and a 2026-07-28 client must not get the legacy
        one (it lacks the caching hints that era requires). The others serve when the era has none.
        """
        key = self._recorded_key(method, params)
        ops = self.operations.get(key) if key is not None else None
        if key is None or not ops:
            return self._miss(method, params)
        if era is not None:
            same = [op for op in ops if op.era == era]
            if same and len(same) < len(ops):
                ops, key = same, f"{key}\x00{era}"
        index = min(self.served[key], len(ops) - 1)
        self.served[key] += 1
        return ops[index]

    def _recorded_key(self, method: str, params: Any) -> str | None:
        """The match key of the recorded calls this request is: its own; else its own once masked as the
        proxy masks (the recording's `redact_key` and body keys give a redacted value's very stand-in);
        else the first recorded call whose stand-ins, each fitting any value, make it fit."""
        key = match_key(method, params)
        if key in self.operations:
            return key
        if method in METHOD_ONLY or method not in self.redacted:
            return None
        masked = match_key(method, self.masked(params))
        if masked in self.operations:
            return masked
        kept = _kept_params(params)
        return next(
            (
                k
                for k in self.redacted[method]
                if first_difference(_kept_params(self.operations[k][0].params), kept) is None
            ),
            None,
        )

    def _miss(self, method: str, params: Any) -> Miss:
        same = [ops[0] for ops in self.operations.values() if ops[0].method == method]
        asked = shown(method, self.masked(params))
        if same:
            near = _nearest(asked, same)
            where = first_difference(_kept_params(near.params), _kept_params(params))
            return Miss(
                INVALID_PARAMS,
                f"mock: no recorded {method} matches {asked}; nearest recorded: {near.shown()} "
                f"(chain {near.chain}); they differ at {where or 'the params as a whole'}",
            )
        every = [ops[0] for ops in self.operations.values()]
        if not every:
            return Miss(METHOD_NOT_FOUND, f"mock: {method} was never recorded (the capture holds none)")
        family = method.partition("/")[0] + "/"  # `prompts/get` is nearer `prompts/list` than any tool
        kin = [op for op in every if op.method.startswith(family)]
        near = _nearest(asked, kin or every)
        return Miss(
            METHOD_NOT_FOUND,
            f"mock: {method} was never recorded; nearest recorded: {near.shown()} (chain {near.chain})",
        )


def _nearest(asked: str, candidates: Sequence[Operation]) -> Operation:
    """The candidate whose few words read most like the request's (ties: the first recorded)."""

    def likeness(op: Operation) -> float:
        return difflib.SequenceMatcher(None, asked, op.shown(), autojunk=False).ratio()

    return max(candidates, key=likeness)


# -- building the table from a capture ---------------------------------------------------------


SERVER_SIDES: Final = frozenset({Side.BOTH, Side.UPSTREAM})
"""Sides whose messages the server exchanged (the client's side of a bridge is the proxy's doing)."""


class ChainReader:
    """Turns one chain's messages seen from one side into an Operation.

    The mock reads the server's side (`SERVER_SIDES`); a replay reads the client's (`both` and
    `client`: the questions the client was asked and what it answered, in its own era). The operation
    is the chain's own request (`method`, or the first request read when the chain names none) and its
    retries. Behind a bridge the server also saw the bridge's own handshake on the chain (an
    `initialize` before the call, a `server/discover`): never the operation nor its answer, it is kept
    in `handshakes` as a recorded answer of its own. JSON-RPC ids are matched to the latest request
    sent under them, since a chain's legs may reuse one.

    A pass-through message is recorded `both` as it arrives, before any intercept decides on it: when
    an edit of it went upstream in its place (`upstream`, same exchange, id and kind, as
    `proxy.flows.store.sent_in_place` files it), the edit is what the server saw, so what the relayed
    copy set is undone and the edit read instead.
    """

    def __init__(
        self, chain: str, era: str, sides: frozenset[Side] = SERVER_SIDES, method: str | None = None
    ) -> None:
        self.chain = chain
        self.era = era
        self.sides = sides
        self.own_method = method
        """The method of the request the chain was opened for, when the chain's headline names one."""
        self.method: str | None = None
        self.params: dict[str, Any] = {}
        self.rounds: list[list[Ask]] = []
        self.answered: set[str] = set()
        self._where: dict[Any, tuple[int, int]] = {}
        """An unanswered in-flight request's id -> its round and place in that round."""
        self._sent: dict[Any, tuple[str, dict[str, Any]] | None] = {}
        """A request id -> what was last sent under it: None for the operation (or a retry of it), the
        method and params of a bridge's handshake not yet answered."""
        self.handshakes: list[Operation] = []
        self.answer: dict[str, Any] | None = None
        self.cut = False
        self.notes: list[dict[str, Any]] = []
        """Notifications not yet placed: they go before the next round, or before the answer."""
        self.round_notes: list[tuple[dict[str, Any], ...]] = []
        self._relayed: dict[tuple[str, Any, bool], tuple[str, Any]] = {}
        """(exchange, id, is a request) of a relayed client message -> how to undo what it set, should
        an intercept's edit of it follow: `own` (the operation), `retry` (the round before its
        answers), `answer` (the question's place and its ask before)."""

    def read(self, record: MessageRecord) -> None:
        if record.side not in self.sides or record.kind == "http":
            return
        body = record.body
        if record.kind == "notification":
            if record.direction is Direction.TO_CLIENT and isinstance(body, dict) and self.answer is None:
                self.notes.append(body)
            return
        if record.truncated or not isinstance(body, dict) or TRUNCATED_KEY in body or UNENCODABLE_KEY in body:
            self._cut(record)
            return
        if record.direction is Direction.TO_SERVER:
            self._to_server(record, body)
        else:
            self._to_client(record, body)

    def _cut(self, record: MessageRecord) -> None:
        """A message too big to play back: the operation's own makes it served as an error naming the
        limit; a bridge's handshake cut short is only left out."""
        to_client = record.direction is Direction.TO_CLIENT
        if record.kind == "request" and not to_client and not self._is_own(str(record.method)):
            return
        if to_client and record.kind in ("result", "error") and record.jsonrpc_id in self._sent:
            if self._sent[record.jsonrpc_id] is not None:
                del self._sent[record.jsonrpc_id]
                return
            self.answer = {}
        self.cut = self.cut or record.kind in ("request", "result", "error")

    def _is_own(self, method: str) -> bool:
        if self.method is not None:
            return method == self.method
        return self.own_method is None or method == self.own_method

    def _to_server(self, record: MessageRecord, body: dict[str, Any]) -> None:
        replaced = self._replaced(record)
        if record.kind == "request":
            method = str(body.get("method"))
            if replaced != "own" and not self._is_own(method):
                if method in METHOD_ONLY:
                    self._sent[record.jsonrpc_id] = (method, _params(body) or {})
                return
            if self.method is None or replaced == "own":
                self.method, self.params = method, _params(body) or {}
                self._relaying(record, ("own", None))
            else:  # an MRTR retry: its answers fill the last round
                self._relaying(record, ("retry", list(self.rounds[-1]) if self.rounds else None))
                self._answers(body.get("params"))
            self._sent[record.jsonrpc_id] = None
        elif record.kind in ("result", "error") and record.jsonrpc_id in self._where:
            r, i = self._where.pop(record.jsonrpc_id)
            self._relaying(record, ("answer", (r, i, self.rounds[r][i])))
            answer = body.get("result") if record.kind == "result" else {"error": body.get("error")}
            self.rounds[r][i] = _answered(self.rounds[r][i], answer)
            self.answered.add(self.rounds[r][i].key)

    def _relaying(self, record: MessageRecord, undo: tuple[str, Any]) -> None:
        """Remember how to undo what a relayed client message set (bounded: an edit follows at once)."""
        if record.side is not Side.BOTH:
            return
        if len(self._relayed) >= RELAYED_BOUND:
            del self._relayed[next(iter(self._relayed))]
        self._relayed[(record.exchange, record.jsonrpc_id, record.kind == "request")] = undo

    def _replaced(self, record: MessageRecord) -> str | None:
        """An intercept's edit sent upstream in place of a relayed client message: what that message set
        is undone, and what it was (`own`, `retry`, `answer`) returned; None for any other message (an
        answer the proxy made in the client's place, `answered_by`, replaces nothing the client sent)."""
        if record.side is not Side.UPSTREAM or record.answered_by is not None:
            return None
        undo = self._relayed.pop((record.exchange, record.jsonrpc_id, record.kind == "request"), None)
        if undo is None:
            return None
        what, saved = undo
        if what == "retry" and saved is not None:
            self.rounds[-1] = saved
        elif what == "answer":
            r, i, before = saved
            self.rounds[r][i] = before
            self.answered.discard(before.key)
            self._where[record.jsonrpc_id] = (r, i)
        return str(what)

    def _to_client(self, record: MessageRecord, body: dict[str, Any]) -> None:
        if record.kind == "request" and self.method is not None:
            if not self.rounds or any(a.key in self.answered for a in self.rounds[-1]):
                self._new_round([])
            key = f"ask-{sum(len(r) for r in self.rounds) + 1}"
            self.rounds[-1].append(Ask(key, str(body.get("method")), _params(body)))
            self._where[record.jsonrpc_id] = (len(self.rounds) - 1, len(self.rounds[-1]) - 1)
        elif record.kind in ("result", "error") and record.jsonrpc_id in self._sent:
            answer = {"result": body.get("result")} if record.kind == "result" else _error(body)
            sent = self._sent[record.jsonrpc_id]
            if sent is not None:
                del self._sent[record.jsonrpc_id]
                self.handshakes.append(Operation(self.chain, *sent, (), answer, self.era))
                return
            result = answer.get("result")
            if isinstance(result, dict) and result.get("resultType") == "input_required":
                self._input_required(result)
            else:
                self.answer = answer

    def _input_required(self, result: dict[str, Any]) -> None:
        requests = result.get("inputRequests")
        asks: list[Ask] = []
        for key, entry in (requests if isinstance(requests, dict) else {}).items():
            if isinstance(entry, dict):
                asks.append(Ask(str(key), str(entry.get("method")), _params(entry)))
        self._new_round(asks)

    def _new_round(self, asks: list[Ask]) -> None:
        self.rounds.append(asks)
        self.round_notes.append(tuple(self.notes))
        self.notes.clear()

    def _answers(self, params: Any) -> None:
        responses = params.get("inputResponses") if isinstance(params, dict) else None
        if not self.rounds or not isinstance(responses, dict):
            return
        self.rounds[-1] = [
            _answered(a, responses[a.key]) if a.key in responses else a for a in self.rounds[-1]
        ]

    def operation(self) -> Operation | None:
        if self.method is None or self.answer is None:
            return None  # a chain the server never answered has nothing to play back
        rounds = tuple(Round(tuple(r), n) for r, n in zip(self.rounds, self.round_notes, strict=True))
        return Operation(
            self.chain, self.method, self.params, rounds, self.answer, self.era, self.cut, tuple(self.notes)
        )


def _params(message: dict[str, Any]) -> dict[str, Any] | None:
    params = message.get("params")
    return params if isinstance(params, dict) else None


def _error(message: dict[str, Any]) -> dict[str, Any]:
    return {"error": message.get("error")}


def _answered(ask: Ask, answer: Any) -> Ask:
    return Ask(ask.key, ask.method, ask.params, answer)


@dataclass
class TableReport:
    """What reading the capture skipped, for the mock's start-up lines."""

    skipped: ExportReport = field(default_factory=ExportReport)
    """The lines skipped, as `export` and `replay` tell them: the first corrupt ones named by file and
    line (`MAX_CORRUPT_SHOWN`), the lines of exchanges whose opening line was skipped (no operation
    holds them), lines a newer mcp-proxy wrote."""
    unanswered: int = 0
    """Chains whose request the server never answered (or that were not requests): not served."""
    read: list[Path] = field(default_factory=list)
    """The files, in the order read: oldest first by their headers' start times."""
    order_notes: list[str] = field(default_factory=list)
    """What to tell the user about that order (it was not the order given, or could not be told)."""

    @property
    def corrupt_lines(self) -> int:
        """Lines skipped because they could not be read."""
        return self.skipped.corrupt_lines

    @property
    def left_out_lines(self) -> int:
        """Lines of exchanges whose opening line was skipped as corrupt."""
        return self.skipped.left_out_lines

    @property
    def unknown_lines(self) -> int:
        """Lines of kinds a newer mcp-proxy wrote."""
        return self.skipped.unknown_lines


def build_table(events: Iterable[FlowEvent], report: TableReport | None = None) -> MockTable:
    """The table of every operation in these events (a capture's, in file order)."""
    report = report if report is not None else TableReport()
    table = MockTable()
    readers: dict[str, ChainReader] = {}
    for event in events:
        if isinstance(event, ChainOpened):
            chain = event.chain
            readers[chain.id] = ChainReader(chain.id, chain.upstream_era, method=chain.method)
        elif isinstance(event, MessageRecorded):
            reader = readers.get(event.chain_id)
            if reader is not None:
                reader.read(event.message)
        elif isinstance(event, SessionChanged) and event.state == "opened" and event.side in SERVER_SIDES:
            table.sessions = True  # the server's own session (relayed, or a bridge's with it)
    handshakes: list[Operation] = []
    for reader in readers.values():
        op = reader.operation()
        if op is None and not reader.handshakes:
            report.unanswered += 1
        elif op is not None:
            table.add(op)
        handshakes.extend(reader.handshakes)
    for handshake in handshakes:  # the capture's own handshakes are served first, a bridge's after them
        table.add(handshake)
    return table


def read_table(paths: Sequence[Path]) -> tuple[MockTable, TableReport]:
    """The table of the capture files, read oldest first whatever order they are given in (rotated
    parts read newest first would open their calls twice); raises CaptureFormatError or CaptureError."""
    order = oldest_first(paths)
    replayer = ObservationReplayer(store=ChainStore(max_chains=64, max_messages_per_chain=1))
    readers = open_readers(order.paths, replayer)
    report = TableReport(read=order.paths, order_notes=order.notes())

    def events() -> Iterable[FlowEvent]:
        for reader in readers:
            with reader:
                replayer.start_file()
                yield from reader
            note_skipped(reader, report.skipped)
        note_left_out(replayer, report.skipped, unplaced=False)

    return build_table(events(), report), report
