"""Facts in a capture: how an observation is written as one line, and built back into events.

While nobody watches live, the proxy does not build chains for the traffic it relays or bridges (see
`proxy.flows.facts`); the capture then records the observations themselves, one `{"type": "fact"}`
line each, redacted and bounded like every other line. Reading a capture replays those lines through
a `ChainBuilder` of the reader's own, so `tui --open` and exports see the same chains a live watcher
would have seen. Chains built from facts get ids starting with `r`, so they never collide with the
ids of chains the proxy built live in the same file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import orjson

from proxy.flows.chains import ChainBuilder
from proxy.flows.events import Channel, Direction, FlowEvent, Side
from proxy.flows.facts import Fact, FactClock
from proxy.flows.redact import AlreadyRedacted, Redactor
from proxy.flows.store import ChainStore
from proxy.wire.jsonrpc import Kind, Message

FACT_TYPE: Final = "fact"
"""The `type` of a fact line."""

FACT_PREFIX: Final = b'{"type":"fact"'
"""How every fact line starts (the reader tells them from event lines by it)."""

_ENUMS: Final = {"direction": Direction, "channel": Channel, "side": Side}


class FactEncoder:
    """Turns facts into capture lines, redacting and bounding what they carry.

    Runs for every fact the proxy defers, so the common builder calls have their own short paths;
    enum members go to orjson as they are (it writes their values), and a message body already
    encoded for the redaction check is embedded as that JSON text, not encoded a second time.
    """

    def __init__(self, redactor: Redactor, body_limit: int) -> None:
        self._redactor = redactor
        self._body_limit = body_limit

    def encode(self, fact: Fact) -> bytes:
        """One capture line (with its newline) for one fact."""
        kw = fact.kwargs
        op = fact.op
        kwargs: dict[str, Any]
        if op == "message":
            kwargs = dict(kw)
            kwargs["msg"] = self._message(kw["msg"])
        elif op == "leg_message":  # a bridge's upstream leg: the fact is keyed by the leg
            kwargs = dict(kw)
            kwargs["message"] = self._message(kw["message"])
        elif op == "open_exchange":
            kwargs = dict(kw)
            kwargs["headers"] = self._redactor.headers(kw["headers"])
            kwargs["path"] = self._redactor.path(kw["path"])
            session = kw.get("session")
            kwargs["session"] = session and self._redactor.token(session)
        elif op == "response_head":
            kwargs = dict(kw)
            kwargs["headers"] = self._redactor.headers(kw["headers"])
        elif op in ("continuation_changed", "upstream_session"):  # a principal's keyed fingerprint
            kwargs = dict(kw)
            principal = kw.get("principal")
            kwargs["principal"] = principal and self._redactor.fingerprint(principal)
        elif op == "mark_invalid":  # the raw bytes that were not JSON-RPC
            kwargs = dict(kw)
            kwargs["body"] = kw["body"][: self._body_limit].decode("utf-8", "replace")
        else:
            kwargs = kw
        line = {"type": FACT_TYPE, "t": fact.t, "op": op, "exchange": fact.exchange, "kw": kwargs}
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


REPEAT_PREFIX: Final = b'{"type":"fact","repeat":true,'
"""How a repeated fact line starts: a line an earlier file of the capture already held."""

MAX_REPEATED_LINES: Final = 8
"""Lines kept per open exchange or leg to repeat at the top of a new file (its opening ones)."""

DEFAULT_REPEAT_BYTES: Final = 8 * 1024 * 1024
"""Bytes of opening lines kept for repeating; past it, newly opened exchanges are not repeated."""


class OpenFacts:
    """The lines that opened what is still open, repeated at the top of every new capture file.

    A rotation or a reopen starts a new file while exchanges, streams and a bridge's legs are open;
    repeating their opening lines (the exchange, its client requests, a leg's first message) makes
    each file readable on its own. The copies are marked `repeat`, so a reader that read the earlier
    file already (rotated files in order) skips them and nothing is counted twice. Bounded: at most
    `MAX_REPEATED_LINES` per exchange or leg and `max_bytes` in all.
    """

    def __init__(self, max_bytes: int = DEFAULT_REPEAT_BYTES) -> None:
        self._held: dict[str, list[bytes]] = {}
        self._bytes = 0
        self.max_bytes = max_bytes
        self.not_repeated = 0
        """Exchanges or legs opened while the bound was full (a file may then not stand alone)."""

    def wrote(self, fact: Fact, line: bytes) -> None:
        """Note one fact line as written, keeping it if it opens or shapes something still open."""
        op, key = fact.op, fact.exchange
        if op in ("close_exchange", "leg_closed"):
            self._drop(key)
        elif op == "open_exchange" or (op in ("leg_message", "link_leg") and key not in self._held):
            self._drop(key)
            self._keep(key, line, new=True)
        elif op == "message" and key in self._held and fact.kwargs.get("direction") is Direction.TO_SERVER:
            self._keep(key, line, new=False)

    def preamble(self) -> list[bytes]:
        """The repeated lines, in the order they were written, for the top of a new file."""
        return [line for lines in self._held.values() for line in lines]

    def _keep(self, key: str, line: bytes, *, new: bool) -> None:
        if self._bytes + len(line) > self.max_bytes:
            self.not_repeated += new
            return
        lines = self._held.setdefault(key, []) if new else self._held[key]
        if len(lines) < MAX_REPEATED_LINES:
            lines.append(REPEAT_PREFIX + line[len(FACT_PREFIX) + 1 :])
            self._bytes += len(lines[-1])

    def _drop(self, key: str) -> None:
        lines = self._held.pop(key, None)
        if lines:
            self._bytes -= sum(len(line) for line in lines)


class FactReplayer:
    """Builds the events of a capture's fact lines with a chain builder of its own."""

    def __init__(self, *, body_limit: int = 65536, max_chains: int = 100_000) -> None:
        self._events: list[FlowEvent] = []
        self._restored: set[str] = set()
        """Exchanges and legs this file's repeated lines opened (their other repeated lines apply)."""
        self._clock = FactClock(lambda: 0.0)
        self._builder = ChainBuilder(
            ChainStore(max_chains=max_chains),
            self._events.append,
            AlreadyRedacted(),
            clock=self._clock,
            body_limit=body_limit,
            id_prefix="r",
        )

    def replay(self, line: dict[str, Any]) -> list[FlowEvent]:
        """The events one fact line makes (often none until its exchange's messages arrive).

        A repeated line (see `OpenFacts`) is skipped when what it opens was already open here before
        this file began (read from an earlier file); otherwise it stands in for the lost original.
        """
        if line.get("repeat") is True:
            key = str(line["exchange"])
            if key not in self._restored:
                if self._knows(line["op"], key):
                    return []
                self._restored.add(key)
        kwargs = dict(line["kw"])
        for key, enum in _ENUMS.items():
            if key in kwargs:
                kwargs[key] = enum(kwargs[key])
        for key in ("msg", "message"):
            if key in kwargs:
                if kwargs[key].get("truncated") and kwargs.get("note") is None:
                    kwargs["note"] = "body truncated in the capture"
                kwargs[key] = _message(kwargs[key])
        if "body" in kwargs:
            kwargs["body"] = str(kwargs["body"]).encode("utf-8")
        if line["op"] not in _OPS:
            raise ValueError(f"unknown fact op {line['op']!r}")
        op: Callable[..., Any] = getattr(self._builder, line["op"])
        self._clock.at = float(line["t"])
        try:
            op(str(line["exchange"]), **kwargs)
        finally:
            self._clock.at = None
        events = self._events[:]
        self._events.clear()
        return events

    def start_file(self) -> None:
        """A new file begins: its repeated lines are judged afresh against what is open."""
        self._restored.clear()

    def _knows(self, op: str, key: str) -> bool:
        return self._builder.has_leg(key) if _leg_op(op) else self._builder.has_exchange(key)


_OPS: Final = frozenset(
    {
        "open_exchange",
        "message",
        "response_head",
        "note_event_id",
        "add_bytes_out",
        "mark_invalid",
        "close_exchange",
        "leg_message",
        "link_leg",
        "leg_closed",
        "continuation_changed",
        "upstream_session",
    }
)
"""The builder calls a fact may stand for (anything else in a file is refused)."""


def _leg_op(op: str) -> bool:
    return op in ("leg_message", "link_leg", "leg_closed")


def _message(data: dict[str, Any]) -> Message:
    return Message(
        Kind(data["kind"]),
        data.get("raw"),
        id=data.get("id"),
        method=data.get("method"),
        problem=data.get("problem"),
    )
