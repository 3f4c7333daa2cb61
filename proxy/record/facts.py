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


class FactReplayer:
    """Builds the events of a capture's fact lines with a chain builder of its own."""

    def __init__(self, *, body_limit: int = 65536, max_chains: int = 100_000) -> None:
        self._events: list[FlowEvent] = []
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
        """The events one fact line makes (often none until its exchange's messages arrive)."""
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


def _message(data: dict[str, Any]) -> Message:
    return Message(
        Kind(data["kind"]),
        data.get("raw"),
        id=data.get("id"),
        method=data.get("method"),
        problem=data.get("problem"),
    )
