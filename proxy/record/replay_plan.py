"""What replaying one recorded chain takes: the client's requests as sent, and its answers to questions.

A chain's client side is in the captured client's era. A plan holds what that client sent (the first
request with its HTTP headers, the later retries of a 2026-07-28 call, notifications such as
`notifications/initialized`) and the questions it was asked with the answers it gave (read by the
mock's chain reader, `proxy.record.mock_table.ChainReader`, from the client's side). A question the
replayed server asks is answered from the recording when one asked the same (method and params less
ids, `_meta` and other run-specific fields); each recorded answer is given once, in recorded order. A
question the recording was asked and its client never answered (a 2026-07-28 client that got
`input_required` and did not retry) is where that client stopped: a replay asked it stops there too.
A question the server asked that never reached the client, answered by the proxy's intercept in the
client's place, is answered with what the server got then, when the client's side holds no answer to
it: the replay's server hears what the recording's did.

Everything in a capture was redacted when it was written: a value replaced by a stand-in
(`<redacted len=N hmac:...>`) cannot be sent again, and a plan says which header or body field needs
the user's own value. Pure data: no I/O.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

from proxy.flows.endpoint import is_plain_chain
from proxy.flows.events import BEGAN_EARLIER, ChainStatus, ChainSummary, Direction, MessageRecord, Side
from proxy.record.mock_table import Ask, ChainReader, shown
from proxy.record.replay_compare import CLIENT_SIDES, join, without_envelope
from proxy.record.run_ends import RUN_REPLACED

STAND_IN: Final = re.compile(r"<redacted len=\d+ hmac:[0-9a-f]+>")
"""A redacted value as captures hold it."""

SESSION_HEADER: Final = "mcp-session-id"

NOT_SENT: Final = frozenset(
    {
        "host",
        "content-length",
        "connection",
        "keep-alive",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "proxy-connection",
        "accept-encoding",
        SESSION_HEADER,
        "last-event-id",
    }
)
"""Request headers a replay does not copy: hop-by-hop ones, the length and host its own request has,
the session (the replay's is new) and compression (the replay reads the bytes as they come)."""

HANDSHAKES: Final = frozenset({"initialize", "server/discover"})
"""Requests that describe the peers rather than ask them to do something: a replay against another
server (a newer build, the other era's) answers them differently by design."""


class PlanKind(StrEnum):
    """What a recorded chain was, and so how it is replayed."""

    CALL = "call"
    """A client request and its answer (the questions on the way included)."""
    HANDSHAKE = "handshake"
    """`initialize` (and `notifications/initialized`) or `server/discover`."""
    NOTIFICATION = "notification"
    """A client notification on its own."""
    DELETE = "delete"
    """A legacy session's end."""
    STREAM = "stream"
    """A standalone GET stream: carries only what the server chooses to send; not replayed."""
    HTTP = "http"
    """A plain HTTP request to a path beside the MCP endpoint (an OAuth step): not replayed."""
    OTHER = "other"
    """Nothing the client sent can be told from the recording (a refused or cut request)."""


@dataclass(frozen=True)
class Sent:
    """One HTTP request the client sent, as recorded."""

    body: dict[str, Any]
    headers: dict[str, str]


@dataclass(frozen=True)
class AnswerMiss:
    """A question the recording was not asked, and the nearest one it was (`nearest_unanswered`: its
    client never answered that one); or, when the recording was asked the same question but fewer
    times (`answered`), how many."""

    asked: str
    nearest: str | None
    answered: int = 0
    nearest_unanswered: bool = False

    def text(self) -> str:
        """`no recorded answer to elicitation/create ...; nearest recorded: ...`."""
        if self.answered:
            times = "once" if self.answered == 1 else f"{self.answered} times"
            return (
                f"asked {self.asked} more often than recorded: the recording answered it {times}, "
                "and the replay asked it again"
            )
        if not self.nearest:
            return f"no recorded answer to {self.asked}; the recording was asked nothing"
        never = " (asked, and never answered: its client stopped there)" if self.nearest_unanswered else ""
        return f"no recorded answer to {self.asked}; nearest recorded: {self.nearest}{never}"


def question_key(method: str, params: Any) -> str:
    """What two questions must share to be the same question: method and params less ids and `_meta`
    (as the mock matches requests: what frames a question is not what it asks)."""
    kept = without_envelope(params) if isinstance(params, dict) else {}
    kept = {k: v for k, v in kept.items() if v is not None and k != "_meta"}
    return method + " " + json.dumps(kept, sort_keys=True, separators=(",", ":"), default=str)


class RecordedAnswers:
    """The questions the recording was asked with the client's answers, taken by question, each once,
    in recorded order; a question its client never answered is kept, with no answer (`answer` None),
    as where that client stopped. `by_proxy`: questions the proxy's intercept answered in the client's
    place (the client never saw them), taken when the client's own answers hold none the same."""

    def __init__(self, asks: Iterable[Ask], by_proxy: Iterable[Ask] = ()) -> None:
        self.asks = list(asks)
        self._used: set[int] = set()
        self.by_proxy = list(by_proxy)
        self._proxy_used: set[int] = set()

    def take(self, method: str, params: Any) -> Ask | AnswerMiss:
        """The recorded question the same as this one with its answer (None: the recording's client
        never answered it), or why there is none."""
        key = question_key(method, params)
        if not any(question_key(a.method, a.params) == key for a in self.asks):
            for i, ask in enumerate(self.by_proxy):
                if i not in self._proxy_used and question_key(ask.method, ask.params) == key:
                    self._proxy_used.add(i)
                    return ask
        same = 0
        for i, ask in enumerate(self.asks):
            if question_key(ask.method, ask.params) != key:
                continue
            if i not in self._used:
                self._used.add(i)
                return ask
            same += 1
        asked = shown(method, params)
        if same:
            return AnswerMiss(asked, None, answered=same)
        if not self.asks:
            return AnswerMiss(asked, None)
        near = max(
            self.asks,
            key=lambda a: difflib.SequenceMatcher(
                None, asked, shown(a.method, a.params), autojunk=False
            ).ratio(),
        )
        return AnswerMiss(asked, shown(near.method, near.params), nearest_unanswered=near.answer is None)


@dataclass
class ChainPlan:
    """Everything replaying one recorded chain takes."""

    summary: ChainSummary
    kind: PlanKind
    records: list[MessageRecord]
    """The chain's messages as recorded (compared with the replay's)."""
    first: Sent | None = None
    retries: list[Sent] = field(default_factory=list)
    """Later requests of the same method (a 2026-07-28 client's retries after `input_required`)."""
    notes: list[Sent] = field(default_factory=list)
    """Notifications the client sent after its request (`notifications/initialized`)."""
    answers: RecordedAnswers = field(default_factory=lambda: RecordedAnswers(()))
    stopped: str | None = None
    """The question a 2026-07-28 client was asked last and never answered: it got `input_required`
    and sent no retry after it, so a replay stops after the same round and compares what it got."""
    problem: str | None = None
    """Why it cannot be replayed as recorded (a message cut at the capture's body limit)."""
    edited: tuple[str, ...] = ()
    """The places of its request a `--set` edited (`params.arguments.b`), left out of the comparison:
    the recording never held the value sent there."""
    unrecorded: str | None = None
    """Why the recording holds only part of the chain (it began in a capture part not read, or never
    ended): a replay compared with it could only differ, so it is skipped, saying this."""

    @property
    def chain(self) -> str:
        """The recorded chain's id (`r5`)."""
        return self.summary.id

    @property
    def era(self) -> str:
        """The era of the client that recorded it (`legacy`, `modern` or `unknown`)."""
        return self.summary.client_era

    @property
    def session(self) -> str | None:
        """The recorded (redacted) session it ran in, for a legacy client."""
        return self.summary.session

    def headline(self) -> str:
        """`tools/call greet`: what the chain asked, in a few words."""
        return " ".join(p for p in (self.summary.method or "?", self.summary.name) if p)


def plan_chain(summary: ChainSummary, records: Iterable[MessageRecord]) -> ChainPlan:
    """The plan of one recorded chain (its summary and messages, as the chain builder made them)."""
    messages = list(records)
    method = summary.method or ""
    plan = ChainPlan(summary, _kind(method), messages, unrecorded=_unrecorded(summary))
    if is_plain_chain(summary.method, summary.name):
        plan.kind = PlanKind.HTTP
    if plan.kind in (PlanKind.DELETE, PlanKind.STREAM, PlanKind.HTTP):
        return plan
    reader = ChainReader(summary.id, summary.client_era, CLIENT_SIDES)
    for record in messages:
        reader.read(record)
        if record.side not in CLIENT_SIDES or record.direction is not Direction.TO_SERVER:
            continue
        _file_sent(plan, record)
    plan.answers = RecordedAnswers((a for r in reader.rounds for a in r), answered_by_proxy(messages))
    if plan.era == "modern" and reader.answer is None and reader.rounds:
        unanswered = next((a for a in reader.rounds[-1] if a.answer is None), None)
        plan.stopped = shown(unanswered.method, unanswered.params) if unanswered else None
    if plan.first is None:
        plan.kind = PlanKind.OTHER
        plan.problem = plan.problem or "the recording holds no request the client sent"
    elif plan.kind is PlanKind.CALL and "id" not in plan.first.body:
        plan.kind = PlanKind.NOTIFICATION
    return plan


def answered_by_proxy(records: Iterable[MessageRecord]) -> list[Ask]:
    """The server's questions the proxy's intercept answered in the client's place, with that answer
    (its record's `answered_by`), in recorded order: what the server got for them."""
    asked: dict[Any, MessageRecord] = {}
    found: list[Ask] = []
    for record in records:
        body = record.body
        if record.side is not Side.UPSTREAM or not isinstance(body, dict):
            continue
        if record.direction is Direction.TO_CLIENT and record.kind == "request":
            asked[record.jsonrpc_id] = record  # as many as the chain holds records, at most
        elif record.kind in ("result", "error") and record.answered_by is not None:
            question = asked.pop(record.jsonrpc_id, None)
            if question is None or not isinstance(question.body, dict):
                continue
            params = question.body.get("params")
            answer = body.get("result") if record.kind == "result" else {"error": body.get("error")}
            found.append(
                Ask(
                    f"proxy-{len(found) + 1}",
                    str(question.method),
                    params if isinstance(params, dict) else None,
                    answer,
                )
            )
    return found


UNENDED: Final = (
    "the recording never saw it end (its proxy stopped mid-call, or the capture part holding its end "
    "was not given): nothing to compare with"
)
BEGAN_IN_A_PART_NOT_READ: Final = (
    "it began in a capture part not given (read alone, or rotated away): its first messages are "
    "there; give the earlier parts too"
)


def _unrecorded(summary: ChainSummary) -> str | None:
    """Why the recording holds only part of the chain, if it does."""
    if BEGAN_EARLIER in summary.notes:
        return BEGAN_IN_A_PART_NOT_READ
    if summary.status is ChainStatus.PENDING or RUN_REPLACED in summary.notes:
        return UNENDED
    return None


def _kind(method: str) -> PlanKind:
    if method == "DELETE session":
        return PlanKind.DELETE
    if method == "GET stream":
        return PlanKind.STREAM
    if method in HANDSHAKES:
        return PlanKind.HANDSHAKE
    return PlanKind.CALL


def _file_sent(plan: ChainPlan, record: MessageRecord) -> None:
    if record.kind in ("result", "error") and record.truncated:  # else read as a question never answered
        plan.problem = (
            "the client's answer to a question was cut at the capture's body limit "
            "(record it again with a larger capture_body_limit)"
        )
    if record.kind not in ("request", "notification"):
        return  # the client's answers to questions are built anew from the recorded answers
    body = record.body
    if record.truncated or not isinstance(body, dict):
        plan.problem = (
            f"the client's {record.method or 'message'} was cut at the capture's body limit "
            "(record it again with a larger capture_body_limit)"
        )
        return
    http = record.http
    sent = Sent(body, dict(http.headers) if http else {})
    if plan.first is None:
        plan.first = sent
    elif record.kind == "request" and body.get("method") == plan.first.body.get("method"):
        plan.retries.append(sent)
    elif record.kind == "notification":
        plan.notes.append(sent)


# -- redacted values ----------------------------------------------------------------------------


def headers_to_send(
    recorded: Mapping[str, str], given: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """The headers a replayed request carries, and the names of redacted ones nobody gave a value for.

    `given` (the user's `--header NAME: VALUE`, any case) replaces or adds; a recorded header whose
    value holds a stand-in is sent only when given.
    """
    wanted = {k.lower(): (k, v) for k, v in given.items()}
    out: dict[str, str] = {}
    missing: list[str] = []
    for name, value in recorded.items():
        key = name.lower()
        if key in NOT_SENT or key in wanted:
            continue
        if STAND_IN.search(value):
            missing.append(name)
            continue
        out[name] = value
    for name, value in wanted.values():
        out[name] = value
    return out, missing


def redacted_paths(value: Any, path: str = "") -> list[str]:
    """Where a body holds a stand-in for a redacted value (`params.arguments.token`)."""
    if isinstance(value, str):
        return [path] if STAND_IN.search(value) else []
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in redacted_paths(v, join(path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in redacted_paths(v, f"{path}[{i}]")]
    return []
