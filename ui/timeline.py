"""A chain's messages arranged as the story of one client operation, for the chain tree.

Pure: messages in, `Node`s out. The shape is

    client request
    round N (when there were several)
        upstream leg: request -> response, with the time the upstream took
        nested request -> the client's answer, with the time the client (or a human) took
        call / retry (an MRTR client retrying through pass-through)
    final result

in the order the messages happened (by their per-chain sequence number), so anything after the
final result is drawn after it.

Requests and responses are paired by JSON-RPC id within one side of the proxy (client side, or the
upstream side a bridge talks to) and one direction, because a server->client request may reuse an
id the client also used. `counterparts` finds, for a message a bridge rewrote, the message(s) on the
other side it became or came from, so the message view can show what the client saw beside what the
server saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from proxy.flows.events import ChainSummary, Direction, MessageRecord, Mode, Side

Role = Literal["call", "leg", "nested", "orphan", "single"]
NodeKind = Literal["message", "pair", "round"]


@dataclass(slots=True)
class Pair:
    """A request and its response on one side (either may be missing), or one lone message."""

    request: MessageRecord | None = None
    response: MessageRecord | None = None
    extras: list[MessageRecord] = field(default_factory=list)

    @property
    def first(self) -> MessageRecord:
        """The earliest message of the pair (what orders it in the tree)."""
        found = self.request or self.response or (self.extras[0] if self.extras else None)
        assert found is not None
        return found

    @property
    def role(self) -> Role:
        """What this exchange was: the client's call, an upstream leg, a nested request, ..."""
        req = self.request
        if req is None:
            return "orphan" if self.response is not None else "single"
        if req.direction is Direction.TO_CLIENT:
            return "nested"
        return "leg" if req.side is Side.UPSTREAM else "call"

    @property
    def elapsed_ms(self) -> float | None:
        """Time from request to response, when both were seen."""
        if self.request is None or self.response is None:
            return None
        return max(0.0, (self.response.ts - self.request.ts) * 1000)


@dataclass(slots=True)
class Node:
    """One line of the chain tree: a message, a request/response pair, or a round."""

    kind: NodeKind
    message: MessageRecord | None = None
    pair: Pair | None = None
    round: int = 0
    children: list[Node] = field(default_factory=list)


def _group(record: MessageRecord) -> str:
    return "upstream" if record.side is Side.UPSTREAM else "client"


def _id(value: Any) -> str:
    return repr(value)


def pair_messages(messages: list[MessageRecord], *, relayed: bool = False) -> list[Pair]:
    """Pair requests with responses (same side, opposite direction, same id); keep the rest alone.

    `relayed` (a pass-through chain): a record on the upstream's side is the server's leg of a message
    the proxy changed (what the server got or sent instead of what the client sent or got); it stands
    alone where it happened, and the client's request pairs with the answer the client got.
    """
    items: list[Pair] = []
    open_requests: dict[tuple[str, Direction, str], Pair] = {}
    by_exchange: dict[str, Pair] = {}
    for record in messages:
        if relayed and record.side is Side.UPSTREAM:
            items.append(Pair(extras=[record]))
        elif record.kind == "request" and record.jsonrpc_id is not None:
            pair = Pair(request=record)
            open_requests[(_group(record), record.direction, _id(record.jsonrpc_id))] = pair
            items.append(pair)
        elif record.kind in ("result", "error") and record.jsonrpc_id is not None:
            asked = Direction.TO_SERVER if record.direction is Direction.TO_CLIENT else Direction.TO_CLIENT
            found = open_requests.pop((_group(record), asked, _id(record.jsonrpc_id)), None)
            if found is None:
                found = Pair(response=record)
                items.append(found)
            else:
                found.response = record
            by_exchange[record.exchange] = found
        elif record.kind == "http" and record.exchange in by_exchange:
            by_exchange[record.exchange].extras.append(record)  # the 202 that acknowledged an answer
        else:
            items.append(Pair(extras=[record]))
            if record.kind != "http" or record.direction is Direction.TO_SERVER:
                # a GET's or DELETE's own request head takes its answer's bare head under it
                by_exchange.setdefault(record.exchange, items[-1])
    return items


def build_timeline(summary: ChainSummary, messages: list[MessageRecord]) -> list[Node]:
    """The tree under a chain's headline: request, rounds of legs and nested pairs, final result."""
    items = pair_messages(messages, relayed=summary.mode is Mode.PASSTHROUGH)
    calls = [p for p in items if p.role == "call"]
    head: list[Node] = []
    tail: list[Node] = []
    if len(calls) == 1:
        origin = calls[0]
        items.remove(origin)
        assert origin.request is not None
        head.append(Node("message", message=origin.request))
        if origin.response is not None:
            tail.append(Node("message", message=origin.response, pair=origin))
        tail.extend(Node("message", message=extra) for extra in origin.extras)
    body = [_pair_node(p) for p in items]
    rounds = sorted({p.first.round for p in items})
    if len(rounds) > 1 or summary.rounds > 1:
        grouped: list[Node] = []
        for number in rounds:
            children = [n for n, p in zip(body, items, strict=True) if p.first.round == number]
            grouped.append(Node("round", round=number, children=children))
        body = grouped
    return sorted(head + body + tail, key=_when)


def _when(node: Node) -> int:
    """Where a node sits in time: its message's, its pair's first, or its earliest child's sequence.

    The final result is drawn where it happened, so what follows it (the `notifications/initialized`
    after an `initialize` result, a late cancellation) is drawn after it, not before.
    """
    if node.message is not None:
        return node.message.seq
    if node.pair is not None:
        return node.pair.first.seq
    return min((_when(child) for child in node.children), default=0)


def _pair_node(pair: Pair) -> Node:
    if pair.role == "single":
        first, *rest = pair.extras  # a lone message, and the bare HTTP answer to its POST
        return Node("message", message=first, children=[Node("message", message=m) for m in rest])
    if pair.role == "orphan":
        return Node("message", message=pair.response, pair=pair)
    children = [Node("message", message=m) for m in (pair.request, pair.response) if m is not None]
    children.extend(Node("message", message=m) for m in pair.extras)
    return Node("pair", pair=pair, children=children)


def counterparts(messages: list[MessageRecord], record: MessageRecord) -> list[MessageRecord]:
    """The message(s) on the other side of the proxy that `record` was rewritten from or into.

    Requests to the server are received on the client side and sent upstream; responses and nested
    requests travel the other way. The message received first maps to what the proxy sent next on
    the other side; a message sent maps to what was received since the previous one it sent.
    Empty for pass-through (`side` both) and for HTTP-only records.
    """
    if record.side is Side.BOTH or record.kind == "http":
        return []
    other = Side.CLIENT if record.side is Side.UPSTREAM else Side.UPSTREAM
    same = [m for m in messages if m.side is record.side and m.direction is record.direction]
    theirs = [m for m in messages if m.side is other and m.direction is record.direction and m.kind != "http"]
    receiving = Side.CLIENT if record.direction is Direction.TO_SERVER else Side.UPSTREAM
    if record.side is receiving:
        later = [m.seq for m in same if m.seq > record.seq and m.kind != "http"]
        until = min(later, default=None)
        found = [m for m in theirs if m.seq > record.seq and (until is None or m.seq < until)]
        if not found:
            found = [m for m in theirs if m.seq > record.seq][:1]
        return found
    earlier = [m.seq for m in same if m.seq < record.seq and m.kind != "http"]
    since = max(earlier, default=0)
    found = [m for m in theirs if since < m.seq < record.seq]
    if not found:
        found = [m for m in theirs if m.seq < record.seq][-1:]
    return found
