"""Observations in a capture: each written as one line of the capture schema, and built back into events.

The capture stores what the proxy observed (`proxy.flows.observations`), not the chains it built from
it: one `{"type": "obs", "kind": ..., "t": ..., ...}` line per observation, redacted and bounded,
whether or not anyone watched. The schema is the capture's own (`docs/capture-format.md`): each kind
has a fixed name and fields, independent of any Python name. Reading a capture builds those lines
with a `ChainBuilder` of the reader's own, so `tui --open` and exports see the chains a live watcher
would have seen. Chains built from a capture get ids starting with `r`, so they never collide with the
ids of chains the proxy built live.

A reader of this major version accepts fields and kinds it does not know (a newer minor version added
them): unknown fields are ignored; a line of an unknown kind is skipped and counted, apart when the
file's minor is newer than this one, as a corrupt line otherwise (`proxy.record.capture`).
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable
from typing import Any, Final

import orjson

from proxy.flows.chains import ChainBuilder
from proxy.flows.endpoint import Endpoint
from proxy.flows.events import Channel, Direction, FlowEvent, Mode, ProxyInfo, Side, same_run
from proxy.flows.observations import (
    AnsweredByProxy,
    BodyNotInspected,
    BytesOut,
    ContinuationMoved,
    EventIdSeen,
    ExchangeClosed,
    ExchangeOpened,
    FaultInjected,
    InterceptHeld,
    InterceptReleased,
    InvalidBody,
    LegClosed,
    LegHeadSeen,
    LegLinked,
    LegMessageSeen,
    LegOpened,
    MessageSeen,
    Observation,
    OriginRewritten,
    ResponseHeadSeen,
    UpstreamSessionMoved,
    key_of,
)
from proxy.flows.proxy_notes import by_intercept
from proxy.flows.records import Filed
from proxy.flows.redact import AlreadyRedacted, CutBody, Redactor
from proxy.flows.store import ChainStore
from proxy.record.run_ends import RUN_REPLACED
from proxy.record.unplaced import Unplaced
from proxy.wire.jsonrpc import Kind, Message
from proxy.wire.weight import value_weight

OBS_TYPE: Final = "obs"
"""The `type` of an observation line."""

OBS_PREFIX: Final = b'{"type":"obs"'
"""How every observation line starts (the reader tells them from event lines by it)."""

KINDS: Final[dict[type[Any], str]] = {
    ExchangeOpened: "exchange_opened",
    MessageSeen: "message",
    ResponseHeadSeen: "response_head",
    InvalidBody: "invalid_body",
    BytesOut: "bytes_out",
    BodyNotInspected: "body_not_inspected",
    AnsweredByProxy: "answered_by_proxy",
    EventIdSeen: "event_id",
    ExchangeClosed: "exchange_closed",
    LegMessageSeen: "leg_message",
    LegOpened: "leg_opened",
    LegHeadSeen: "leg_head",
    LegLinked: "leg_linked",
    LegClosed: "leg_closed",
    ContinuationMoved: "continuation",
    UpstreamSessionMoved: "upstream_session",
    FaultInjected: "fault",
    InterceptHeld: "intercept_held",
    InterceptReleased: "intercept_released",
    OriginRewritten: "origin_rewritten",
}
"""The schema name of each observation kind."""

_LEG_KINDS: Final = (LegMessageSeen, LegOpened, LegHeadSeen, LegLinked, LegClosed)
"""The kinds that belong to a bridge's upstream leg (keyed by it, not by an exchange)."""

_CLASSES: Final = {name: cls for cls, name in KINDS.items()}
_FIELDS: Final = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in KINDS}
_ENUMS: Final = {"direction": Direction, "channel": Channel, "side": Side, "mode": Mode}


class UnknownKind(ValueError):
    """An observation line of a kind this version does not know (a newer minor version wrote it)."""


class ObservationEncoder:
    """Turns observations into capture lines, redacting and bounding what they carry.

    Runs for every observation while a capture is on, so the common kinds take short paths; enum
    members go to orjson as they are (it writes their values), and a message body already encoded for
    the redaction check is embedded as that JSON text, not encoded a second time.
    """

    def __init__(self, redactor: Redactor, body_limit: int) -> None:
        self._redactor = redactor
        self._body_limit = body_limit

    def encode(self, obs: Observation) -> bytes:
        """One capture line (with its newline) for one observation."""
        line: dict[str, Any] = {"type": OBS_TYPE, "kind": KINDS[type(obs)]}
        for name in _FIELDS[type(obs)]:
            line[name] = getattr(obs, name)
        redactor = self._redactor
        match obs:
            case MessageSeen() | LegMessageSeen():
                line["msg"] = self._message(obs.msg)
                if line.get("sse_id"):  # the server's event id: any known secret in it masked
                    line["sse_id"] = redactor.scrub(line["sse_id"])
                if "joins" in line and line["joins"] is None:  # written only when set, as readers assume
                    del line["joins"]
                if isinstance(obs, LegMessageSeen):
                    if obs.note is None:  # a leg's: written only when set
                        del line["note"]
                elif obs.answered_by is None:  # written only when set, as readers assume
                    del line["answered_by"]
            case EventIdSeen():
                line["sse_id"] = redactor.scrub(obs.sse_id)
            case ExchangeOpened():
                line["headers"] = redactor.headers(obs.headers)
                line["path"] = redactor.target(obs.path)
                line["session"] = obs.session and redactor.token(obs.session)
                if obs.client_transport == "http":  # written only when not the usual, which readers assume
                    del line["client_transport"]
                if obs.upstream_transport == "http":
                    del line["upstream_transport"]
                if obs.connection is None:  # written only when known, as readers assume
                    del line["connection"]
            case LegOpened():  # transports written only when not the usual, which readers assume
                if obs.client_transport == "http":
                    del line["client_transport"]
                if obs.upstream_transport == "http":
                    del line["upstream_transport"]
            case ResponseHeadSeen() | LegHeadSeen():
                line["headers"] = redactor.headers(obs.headers)
            case ContinuationMoved():  # a principal's keyed fingerprint
                line["principal"] = obs.principal and redactor.fingerprint(obs.principal)
                if obs.outcome is None:  # written only when set, as readers assume
                    del line["outcome"]
            case UpstreamSessionMoved():
                line["principal"] = obs.principal and redactor.fingerprint(obs.principal)
            case LegClosed() if obs.outcome is None:  # written only when set, as readers assume
                del line["outcome"]
            case ExchangeClosed():  # trailers written only when the upstream sent some
                if obs.trailers is None:
                    del line["trailers"]
                else:
                    line["trailers"] = redactor.headers(obs.trailers)
            case InterceptReleased():  # the edit or answer sent in the held message's place
                line["message"] = redactor.body_bounded(obs.message, self._body_limit)[0]
            case InvalidBody():  # the raw bytes that were not JSON-RPC
                line["body"] = redactor.text_body(obs.body[: self._body_limit].decode("utf-8", "replace"))
            case _:
                pass
        return orjson.dumps(line, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE)

    def _message(self, msg: Message) -> dict[str, Any]:
        body, truncated, encoded = self._redactor.body_for_capture(msg.raw, self._body_limit)
        out: dict[str, Any] = {"kind": msg.kind, "raw": body if encoded is None else orjson.Fragment(encoded)}
        if msg.id is not None:
            out["id"] = msg.id
        if msg.method is not None:
            out["method"] = msg.method
        if msg.problem is not None:
            out["problem"] = msg.problem
        if truncated:
            out["truncated"] = True
        return out


def decode(line: dict[str, Any]) -> Observation:
    """The observation one decoded line stands for; unknown fields are ignored.

    Raises `UnknownKind` for a kind this version does not know, and KeyError, TypeError or ValueError
    for a line that is not a well-formed observation.
    """
    kind = line["kind"]
    fast = _FAST.get(kind) if isinstance(kind, str) else None
    if fast is not None:
        return fast(line)
    cls = _CLASSES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise UnknownKind(f"unknown observation kind {kind!r}")
    values: dict[str, Any] = {}
    for name in _FIELDS[cls]:
        if name in line:
            values[name] = line[name]
    for name, enum in _ENUMS.items():
        if name in values:
            values[name] = enum(values[name])
    if "msg" in values:
        data = values["msg"]
        if data.get("truncated") and "note" in _FIELDS[cls] and values.get("note") is None:
            values["note"] = "body truncated in the capture"
        values["msg"] = _message(data)
    if cls is InvalidBody:
        values["body"] = str(values["body"]).encode("utf-8")
    if cls is ContinuationMoved:
        values["pending_keys"] = tuple(str(k) for k in values["pending_keys"])
        if not isinstance(values.get("outcome"), str):
            # read as an outcome this reader does not know: the move's state still applies, and the
            # line is not half applied then reported corrupt (the chain ends before its event is built)
            values.pop("outcome", None)
    values["t"] = float(values["t"])
    obs: Observation = cls(**values)
    return obs


def _scalar_types(hint: Any) -> tuple[type, ...] | None:
    """The types a field's plain value may have (`int` for a float too), or None when it is not a
    plain value (a dict, a message, an enum: their decoding checks them)."""
    members = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    allowed: list[type] = []
    for member in members:
        if member is type(None) or member in (str, int, bool):
            allowed.append(member)
        elif member is float:
            allowed += [float, int]
        else:
            return None
    return tuple(allowed)


_SCALARS: Final = {
    cls: tuple(
        (name, allowed)
        for name, hint in typing.get_type_hints(cls).items()
        if (allowed := _scalar_types(hint)) is not None
    )
    for cls in KINDS
}
"""Each kind's fields of plain values, with the types each may hold."""


def check_types(obs: Observation) -> Observation:
    """`obs` when each plain field holds a value of its type; TypeError naming the first that does
    not, so a damaged line is refused before any of it is applied (a string HTTP status would
    otherwise reach a chain)."""
    for name, allowed in _SCALARS[type(obs)]:
        value = getattr(obs, name)
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            raise TypeError(f"{name!r} holds {type(value).__name__}, not {allowed[0].__name__}")
    return obs


# The kinds nearly every line holds are decoded by a function each: a capture of hours is read line by
# line, and the general loop above costs several times more. Each reads exactly what the general loop
# would (required fields by key, optional ones with their defaults), so both give equal observations;
# an enum value that is not a member raises ValueError as the enum's constructor would.


def _enum_value(members: dict[str, Any], value: Any, enum: type[Any]) -> Any:
    try:
        return members[value]
    except (KeyError, TypeError):
        return enum(value)  # raises the ValueError the general path would


_DIRECTION: Final = {m.value: m for m in Direction}
_CHANNEL: Final = {m.value: m for m in Channel}
_SIDE: Final = {m.value: m for m in Side}
_MODE: Final = {m.value: m for m in Mode}


NOTED_IN_CLIENTS_PLACE: Final = re.compile(r"the proxy's intercept \((\S+)\), sent in the client's place$")
"""The note of an intercept's answer in the client's place on a `message` line written before
`answered_by` was (early 1.12 lines): such a line is read as made by that rule. Part of the capture
contract for those lines, whatever the proxy's notes say now."""


def _answered_by(line: dict[str, Any], note: Any) -> str | None:
    """A message line's `answered_by`, or the one its note says on a line written without the field."""
    if "answered_by" in line:
        by = line["answered_by"]
        return by if isinstance(by, str) else None
    if line.get("side") != Side.UPSTREAM.value or not isinstance(note, str):
        return None
    noted = NOTED_IN_CLIENTS_PLACE.search(note)
    return by_intercept(noted[1]) if noted else None


def _message_seen(line: dict[str, Any]) -> MessageSeen:
    data = line["msg"]
    note = line.get("note")
    answered_by = _answered_by(line, note) if note is not None or "answered_by" in line else None
    if note is None and data.get("truncated"):
        note = "body truncated in the capture"
    side = line.get("side", Side.BOTH)
    return MessageSeen(
        float(line["t"]),
        line["exchange"],
        _message(data),
        line["size"],
        _enum_value(_DIRECTION, line["direction"], Direction),
        _enum_value(_CHANNEL, line["channel"], Channel),
        side if side is Side.BOTH else _enum_value(_SIDE, side, Side),
        line.get("sse_id"),
        note,
        answered_by,
    )


def _leg_message(line: dict[str, Any]) -> LegMessageSeen:
    return LegMessageSeen(
        float(line["t"]),
        line["leg"],
        line["exchange"],
        _message(line["msg"]),
        line["size"],
        _enum_value(_DIRECTION, line["direction"], Direction),
        _enum_value(_CHANNEL, line["channel"], Channel),
        line.get("joins"),
        line.get("note"),
    )


def _exchange_opened(line: dict[str, Any]) -> ExchangeOpened:
    mode = line.get("mode", Mode.PASSTHROUGH)
    return ExchangeOpened(
        float(line["t"]),
        line["exchange"],
        line["http_method"],
        line["path"],
        line["headers"],
        line["session"],
        line.get("client_era", "unknown"),
        line.get("upstream_era", "unknown"),
        mode if mode is Mode.PASSTHROUGH else _enum_value(_MODE, mode, Mode),
        line.get("body_size", 0),
        line.get("client_transport", "http"),
        line.get("upstream_transport", "http"),
        line.get("connection"),
    )


def _response_head(line: dict[str, Any]) -> ResponseHeadSeen:
    return ResponseHeadSeen(
        float(line["t"]), line["exchange"], line["status"], line["content_type"], line["headers"]
    )


def _exchange_closed(line: dict[str, Any]) -> ExchangeClosed:
    trailers = line.get("trailers")  # one of another type is read as none: the exchange still ended
    kept = trailers if isinstance(trailers, dict) else None
    return ExchangeClosed(float(line["t"]), line["exchange"], line.get("outcome"), kept)


def _leg_closed(line: dict[str, Any]) -> LegClosed:
    outcome = line.get("outcome")  # one of another type is read as none: the leg still ended
    return LegClosed(float(line["t"]), line["leg"], outcome if isinstance(outcome, str) else None)


_FAST: Final[dict[str, Callable[[dict[str, Any]], Observation]]] = {
    "message": _message_seen,
    "leg_message": _leg_message,
    "exchange_opened": _exchange_opened,
    "response_head": _response_head,
    "exchange_closed": _exchange_closed,
    "leg_closed": _leg_closed,
}


_KIND: Final = {m.value: m for m in Kind}


def _message(data: dict[str, Any]) -> Message:
    raw = data.get("raw")
    if data.get("truncated") and isinstance(raw, dict):  # the capture's stand-in for a cut body
        raw = CutBody(raw)
    return Message(
        _enum_value(_KIND, data["kind"], Kind),
        raw,
        id=data.get("id"),
        method=data.get("method"),
        problem=data.get("problem"),
    )


REPEAT_PREFIX: Final = b'{"type":"obs","repeat":true,'
"""How a repeated observation line starts: a line an earlier file of the capture already held."""

MAX_REPEATED_LINES: Final = 8
"""Lines kept per open exchange or leg to repeat at the top of a new file (its opening ones)."""

DEFAULT_REPEAT_BYTES: Final = 8 * 1024 * 1024
"""Bytes of opening lines kept for repeating; past it, newly opened exchanges are not repeated."""

_START, _ADD, _END = "start", "add", "end"
"""What an observation does to the opening lines kept of what it belongs to (`_opening_step`)."""


def _opening_step(obs: Observation, held: bool) -> str | None:
    """Whether `obs` starts the opening lines of its exchange or leg (it opens it), adds to them (its
    client's request, a leg's head), ends them (it closes it), or leaves them be; `held`: lines of it
    are kept already."""
    match obs:
        case ExchangeClosed() | LegClosed():
            return _END
        case ExchangeOpened():
            return _START
        case LegMessageSeen() | LegLinked() | LegOpened() if not held:
            return _START
        case LegHeadSeen():  # a GET stream's head comes before any message on it
            return _ADD if held else _START
        case MessageSeen(direction=Direction.TO_SERVER) if held:
            return _ADD
        case _:
            return None


class OpenLines:
    """The lines that opened what is still open, repeated at the top of every new capture file.

    A rotation or a reopen starts a new file while exchanges, streams and a bridge's legs are open;
    repeating their opening lines (the exchange, its client requests, a leg's first message and its
    response head) makes each file readable on its own. The copies are marked `repeat`, so a reader
    that read the earlier file already (rotated files in order) skips them and nothing is counted
    twice. Bounded: at most `MAX_REPEATED_LINES` per exchange or leg and `max_bytes` in all.
    """

    def __init__(self, max_bytes: int = DEFAULT_REPEAT_BYTES) -> None:
        self._held: dict[str, list[bytes]] = {}
        self._bytes = 0
        self.max_bytes = max_bytes
        self._unwritten: dict[str, list[Observation]] = {}
        """The opening observations the file refused, of what is still open (`unwritten`)."""
        self._unwritten_bytes = 0

    def wrote(self, obs: Observation, line: bytes) -> None:
        """Note one line as written, keeping it if it opens or shapes something still open."""
        key = key_of(obs)
        step = _opening_step(obs, key in self._held)
        if step is _END:
            self._drop(key)
        elif step is _START:
            self._drop(key)
            self._keep(key, line, new=True)
        elif step is _ADD:
            self._keep(key, line, new=key not in self._held)

    def unwritten(self, obs: Observation) -> None:
        """Hear of an observation that was not written (the file refused it): what it ends is no longer
        open, so no new file repeats it; one that opens what stays open, or shapes it (its client's
        request), is kept as it is, without encoding it (bounded like the lines: `max_bytes`), so
        the file a reopen starts can place what that exchange or leg does next (`unwritten_lines`)."""
        key = key_of(obs)
        kept = self._unwritten
        written = key in self._held  # its opening is in a file already (a write that failed midway)
        step = _opening_step(obs, written or key in kept)
        if step is _END:
            self._drop(key)
            self._drop_unwritten(key)
        elif step is _START and not written:
            self._drop_unwritten(key)
            self._keep_unwritten(key, obs, new=True)
        elif step is _ADD and not written:
            self._keep_unwritten(key, obs, new=key not in kept)

    def unwritten_lines(self, encode: Callable[[Observation], bytes]) -> list[bytes]:
        """The repeated lines of the opening observations the file refused, of what is still open (each
        exchange's or leg's in the order they were made), now kept as written ones are; for the file
        that takes writes again."""
        kept, self._unwritten, self._unwritten_bytes = self._unwritten, {}, 0
        lines: list[bytes] = []
        for observations in kept.values():
            for obs in observations:
                line = encode(obs)
                self.wrote(obs, line)
                lines.append(REPEAT_PREFIX + line[len(OBS_PREFIX) + 1 :])
        return lines

    def _keep_unwritten(self, key: str, obs: Observation, *, new: bool) -> None:
        weight = _weight(obs)
        if self._bytes + self._unwritten_bytes + weight > self.max_bytes:
            return
        kept = self._unwritten.setdefault(key, []) if new else self._unwritten.get(key)
        if kept is not None and len(kept) < MAX_REPEATED_LINES:
            kept.append(obs)
            self._unwritten_bytes += weight

    def _drop_unwritten(self, key: str) -> None:
        kept = self._unwritten.pop(key, None)
        if kept:
            self._unwritten_bytes -= sum(_weight(obs) for obs in kept)

    def preamble(self) -> list[bytes]:
        """The repeated lines, in the order they were written, for the top of a new file."""
        return [line for lines in self._held.values() for line in lines]

    def _keep(self, key: str, line: bytes, *, new: bool) -> None:
        if self._bytes + len(line) > self.max_bytes:
            return
        lines = self._held.setdefault(key, []) if new else self._held[key]
        if len(lines) < MAX_REPEATED_LINES:
            lines.append(REPEAT_PREFIX + line[len(OBS_PREFIX) + 1 :])
            self._bytes += len(lines[-1])

    def _drop(self, key: str) -> None:
        lines = self._held.pop(key, None)
        if lines:
            self._bytes -= sum(len(line) for line in lines)


def _weight(obs: Observation) -> int:
    """Estimated memory an observation kept unencoded holds (its message, as decoded)."""
    if isinstance(obs, MessageSeen | LegMessageSeen):
        return value_weight(obs.msg.raw, obs.size)
    return SMALL_OBSERVATION


SMALL_OBSERVATION: Final = 512
"""Estimated memory of an observation with no message (an exchange's head, a leg's link)."""


Applied = Callable[[Observation, list[FlowEvent], str | None], None]
"""Hears of each observation once built: the events it made and the chain it filed a message in."""


MAX_LOST_TRACKED: Final = 1024
"""Exchanges with a lost opening line followed at once; past it the oldest is reported with the lines
counted so far, and its later ones are no longer counted."""

MAX_LOST_SHOWN: Final = 20
"""Exchanges with lines left out named in a report (all their lines are counted)."""


@dataclasses.dataclass
class LostOpening:
    """An exchange whose opening line was skipped as corrupt, and its later lines left out with it."""

    exchange: str
    where: str
    """`file:line` of the skipped opening line."""
    lines: int = 0


def _opens_a_chain(obs: Observation) -> bool:
    """A client's request that is not a 2026-07-28 retry (which joins the chain of the call it
    continues): the line a chain opens on."""
    return (
        isinstance(obs, MessageSeen)
        and obs.direction is Direction.TO_SERVER
        and obs.msg.kind is Kind.REQUEST
        and "requestState" not in obs.msg.params
        and "inputResponses" not in obs.msg.params
    )


def _answers_a_lost_request(obs: MessageSeen) -> bool:
    """The server's answer to a client request that joined no chain after a line was skipped: that
    line was the request, and its chain is lost (one answer per request, so one chain per answer)."""
    return obs.direction is Direction.TO_CLIENT and obs.msg.is_response


class ObservationReplayer:
    """Builds the events of a capture's observation lines with a chain builder of its own.

    `headlines`, `records` and `on_filed` say what the builder announces (`ChainBuilder`): a reader
    that needs only the final headlines (read from the store), only which chain each message joined,
    or records built later (`proxy.record.record_refs`) goes without the rest, and replays a big
    capture several times faster; the chains are the same.
    """

    def __init__(
        self,
        *,
        body_limit: int = 65536,
        max_chains: int = 100_000,
        store: ChainStore | None = None,
        on_applied: Applied | None = None,
        id_prefix: str = "r",
        headlines: bool = True,
        records: bool = True,
        on_filed: Filed | None = None,
    ) -> None:
        self._events: list[FlowEvent] = []
        self._lost: dict[str, LostOpening] = {}
        """Exchanges whose opening line was skipped as corrupt, still open in the capture: their later
        lines cannot be built into anything (bounded: `MAX_LOST_TRACKED`, the oldest forgotten)."""
        self.lost: list[LostOpening] = []
        """Exchanges whose later lines were left out because their opening line was skipped, in the
        order they ended (bounded: `MAX_LOST_SHOWN`; `lost_lines` counts every line)."""
        self.lost_lines = 0
        """Lines left out because the opening line of their exchange was skipped."""
        self._restored: set[str] = set()
        """Exchanges and legs this file's repeated lines opened (their other repeated lines apply)."""
        self.unplaced = Unplaced()
        """Message lines that joined no chain (on a client exchange, the request they answer was
        skipped as corrupt; on a leg, nothing in the capture ties it to a chain), counted and named
        for the report."""
        self._run: ProxyInfo | None = None
        """The `proxy_info` of the run whose lines are read now (None before the first)."""
        self.run_changed = False
        """Whether the last `proxy_info` read began another run than the lines before it (a reader
        with drafts of its own ends the earlier run's open ones too: `proxy.record.har_capture`)."""
        self._on_applied = on_applied
        """Hears of each observation once built, with the events it made and the chain it filed in."""
        self._builder = ChainBuilder(
            store if store is not None else ChainStore(max_chains=max_chains),
            self._events.append,
            AlreadyRedacted(),
            clock=lambda: 0.0,
            body_limit=body_limit,
            id_prefix=id_prefix,
            headlines=headlines,
            records=records,
            on_filed=on_filed,
        )

    def replay(self, line: dict[str, Any]) -> list[FlowEvent]:
        """The events one observation line makes (often none until its exchange's messages arrive).

        A repeated line (see `OpenLines`) is skipped when what it opens was already open here before
        this file began (read from an earlier file); otherwise it stands in for the lost original.
        """
        obs = check_types(decode(line))
        if self._lost and self._left_out(obs):
            if _opens_a_chain(obs):
                self._builder.chain_lost()
            return []
        if line.get("repeat") is True:
            key = key_of(obs)
            if key not in self._restored:
                if self._knows(obs, key):
                    return []
                self._restored.add(key)
            chain = self._builder.apply(obs)
            if isinstance(obs, ExchangeOpened):
                self._builder.began_earlier(key)
        else:
            chain = self._builder.apply(obs)
        kind = type(obs)
        if kind is ExchangeClosed or kind is LegClosed:
            self.unplaced.closed(key_of(obs))
        elif chain is None and kind is MessageSeen:
            assert isinstance(obs, MessageSeen)
            if self.unplaced.last_skipped is not None and _answers_a_lost_request(obs):
                self._builder.chain_lost()
            self.unplaced.joined_none(key_of(obs))
        elif chain is None and kind is LegMessageSeen:
            self.unplaced.joined_none(key_of(obs), leg=True)
        events = self._events
        if events:
            events = events[:]
            self._events.clear()
        else:
            events = []
        if self._on_applied is not None:
            self._on_applied(obs, events, chain)
        return events

    def proxy_info(self, info: ProxyInfo) -> list[FlowEvent]:
        """A `proxy_info` line, taken in the two steps every reader of a capture needs: the run it
        begins (`run_seen`), then the endpoint it names (`set_upstream`). Returns the events the first
        made, which go before the line's own."""
        events = self.run_seen(info)
        self.set_upstream(info)
        return events

    def run_seen(self, info: ProxyInfo) -> list[FlowEvent]:
        """A `proxy_info` line's run: when it is another run's than the one read so far (a restarted
        proxy appending to its capture), that run is gone, and the calls it left open end `incomplete`
        (`RUN_REPLACED`); returns the events that made (their new headlines). `run_changed` says which."""
        before, self._run = self._run, info
        self.run_changed = before is not None and not same_run(before, info)
        if not self.run_changed:
            return []
        self._builder.run_ended(RUN_REPLACED)
        events = self._events[:]
        self._events.clear()
        return events

    def set_upstream(self, info: ProxyInfo) -> None:
        """A `proxy_info` line's upstream, whose path is the MCP endpoint: the exchanges to any other
        path that follow are plain HTTP (`proxy.flows.endpoint`)."""
        self._builder.endpoint = Endpoint.of_upstream(info.upstream)

    @property
    def builder(self) -> ChainBuilder:
        """The chain builder (a reader asks it how many chains have finished)."""
        return self._builder

    def opening_lost(self, exchange: str, where: str) -> None:
        """The opening line of `exchange` (at `where`, `file:line`) was skipped as corrupt: its later
        lines are left out and counted (the builder cannot place them), and the report names it."""
        if exchange in self._lost or self._builder.has_exchange(exchange):
            return
        if len(self._lost) >= MAX_LOST_TRACKED:
            self._settle(self._lost.pop(next(iter(self._lost))))
        self._lost[exchange] = LostOpening(exchange, where)

    def finish(self) -> None:
        """The capture's end: exchanges whose opening line was lost and never closed are reported too,
        as are those still open with lines that joined no chain."""
        for lost in self._lost.values():
            self._settle(lost)
        self._lost.clear()
        self.unplaced.finish()

    def line_skipped(self, where: str) -> None:
        """A line (at `where`, `file:line`) was skipped as corrupt: later lines that join no chain are
        named after it."""
        self.unplaced.last_skipped = where

    def _left_out(self, obs: Observation) -> bool:
        """Whether `obs` belongs to an exchange whose opening line was lost (a repeated opening line
        in a later file restores it: that one is built)."""
        if isinstance(obs, ExchangeOpened):
            lost = self._lost.pop(obs.exchange, None)
            if lost is not None:
                self._settle(lost)
            return False
        if isinstance(obs, _LEG_KINDS):  # a leg's, by its own key
            return False
        lost = self._lost.get(getattr(obs, "exchange", ""))
        if lost is None:
            return False
        lost.lines += 1
        self.lost_lines += 1
        if isinstance(obs, ExchangeClosed):
            self._settle(self._lost.pop(obs.exchange))
        return True

    def _settle(self, lost: LostOpening) -> None:
        if lost.lines and len(self.lost) < MAX_LOST_SHOWN:
            self.lost.append(lost)

    def start_file(self) -> None:
        """A new file begins: its repeated lines are judged afresh against what is open."""
        self._restored.clear()

    def _knows(self, obs: Observation, key: str) -> bool:
        if isinstance(obs, _LEG_KINDS):
            return self._builder.has_leg(key)
        return self._builder.has_exchange(key)
