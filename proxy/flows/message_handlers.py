"""How the chain builder files a JSON-RPC message seen on a client exchange: the chain it joins
(`correlate` decides), what the server sent back that no client can take (a stray answer, a batch
its version lacks), a client body that is not JSON-RPC, and a plain HTTP request's bodies.

This is the path every relayed message takes while someone watches: keep it lean.
"""

from __future__ import annotations

from proxy.flows.answer_faults import STRAY_NOTES, batch_note, declared_version, is_stray, stray_note
from proxy.flows.builder_state import BuilderState, note_counted
from proxy.flows.events import ChainStatus, Channel, Direction, Side
from proxy.flows.exchanges import Exchange
from proxy.flows.records import Head, as_plain_body, carries_head
from proxy.flows.store import Chain
from proxy.wire.jsonrpc import Kind, Message
from proxy.wire.mcp import LISTEN, LISTEN_ACKNOWLEDGED

# Enum members read through their class cost about ten times a module constant's on Python 3.11
# (the enum metaclass's attribute hook): every message to a client passes `_answer_seen`.
_INVALID = Kind.INVALID
_JSON = Channel.JSON
_RESULT = Kind.RESULT
_TO_CLIENT = Direction.TO_CLIENT
_UPSTREAM = Side.UPSTREAM


class MessageHandlers(BuilderState):
    """The builder's handlers of the messages of client exchanges."""

    def message(
        self,
        exchange_id: str,
        msg: Message,
        *,
        size: int,
        direction: Direction,
        channel: Channel,
        side: Side = Side.BOTH,
        sse_id: str | None = None,
        note: str | None = None,
        answered_by: str | None = None,
    ) -> str | None:
        """Record one message seen on an exchange; returns the chain it joined.

        Headline changes the message causes are announced after the message itself, so the last
        ChainChanged of a chain already counts its final message.
        """
        if not self._headlines:
            return self._message(exchange_id, msg, size, direction, channel, side, sse_id, note, answered_by)
        with self._ledger.changes_held():
            return self._message(exchange_id, msg, size, direction, channel, side, sse_id, note, answered_by)

    def _message(
        self,
        exchange_id: str,
        msg: Message,
        size: int,
        direction: Direction,
        channel: Channel,
        side: Side,
        sse_id: str | None,
        note: str | None,
        answered_by: str | None,
    ) -> str | None:
        ex = self._exchanges.get(exchange_id)
        if ex is None:
            if self._lost and exchange_id in self._lost.keys:
                self._lost.message(exchange_id, msg)  # the rest of an exchange dropped unbuilt
            return None
        if ex.plain:
            return self._plain_body(ex, msg, size, direction, channel)
        if side is Side.UPSTREAM:
            # One leg of a message the proxy changed on a relayed exchange (what the server sent or got,
            # beside what the client got or sent): it joins its request's chain and decides nothing.
            ex_chain = (ex.requests.get(msg.id) if msg.id is not None else None) or ex.main_chain()
        elif direction is Direction.TO_SERVER:
            ex_chain = self._correlator.client_message(ex, msg)
        else:
            ex_chain = self._correlator.server_message(ex, msg)
        chain = self.store.peek(ex_chain) if ex_chain else None
        if chain is None:
            return None
        if direction is _TO_CLIENT and side is not _UPSTREAM:
            self._answer_seen(ex, chain, msg, channel)
        if sse_id is not None:
            self.note_event_id(exchange_id, sse_id)
        if msg.method == LISTEN_ACKNOWLEDGED and direction is Direction.TO_CLIENT:
            acknowledged(chain, side, self._clock())
        if not self._keeps_records:
            head = _HEADS[carries_head(chain, ex, msg, direction) if side is not Side.UPSTREAM else None]
            filed = self._count(chain, direction, size, msg.kind is Kind.INVALID, head)
        else:
            record = self._records.on_exchange(
                chain,
                ex,
                msg,
                size=size,
                direction=direction,
                channel=channel,
                side=side,
                sse_id=sse_id,
                note=note,
            )
            record.answered_by = answered_by
            self._file(chain, record, invalid=msg.kind is Kind.INVALID)
            filed = chain.summary.id
        if chain.rounds_after is not None:  # a refused retry's answer is filed in its round, then undone
            chain.summary.rounds, chain.rounds_after = chain.rounds_after, None
        if (
            (self._resumes.waits or self._cancel_waits.waits)
            and chain.cancelled
            and msg.method == "notifications/cancelled"
        ):
            self._cancel_wait(ex.session, msg.params.get("requestId"))
        return filed

    def _answer_seen(self, ex: Exchange, chain: Chain, msg: Message, channel: Channel) -> None:
        """Count what the server sent the client on a request's exchange, and note what no client can
        take: a response that answers none of its requests, a batch its declared version lacks."""
        ex.back += 1
        if channel is _JSON:
            ex.json_back += 1
            if ex.json_back == 2 and ex.requests:  # a second message in one JSON body: a batch
                self._batch_answered(ex, chain)
        if msg.kind is _RESULT and msg.id in ex.requests:
            return  # the usual answer: nothing more to look at
        if ex.requests and (msg.is_response or msg.kind is _INVALID) and is_stray(msg, ex.requests):
            ex.strays += 1
            if ex.stray is None:
                ex.stray = msg
            if ex.strays <= STRAY_NOTES:
                note_counted(chain.summary.notes, self._redactor.scrub(stray_note(msg)))
                self._ledger.changed(chain)
        elif msg.kind is _INVALID and ex.invalid_back is None:
            ex.invalid_back = msg.problem or "not JSON-RPC"

    def _batch_answered(self, ex: Exchange, chain: Chain) -> None:
        """Note a batch answer to a request whose declared version has no batches."""
        note = batch_note(declared_version(ex.request_headers))
        if note is not None and note not in chain.summary.notes:
            chain.summary.notes.append(note)
            self._ledger.changed(chain)

    def mark_invalid(self, exchange_id: str, problem: str, *, size: int, body: bytes) -> str | None:
        """Record a client body that is not JSON-RPC (still forwarded in pass-through) as an invalid chain."""
        ex = self._exchanges.get(exchange_id)
        if ex is None:
            return None
        if ex.plain:  # a form or any other body of a plain HTTP request: no JSON-RPC was meant
            text = body[: self._body_limit].decode("utf-8", "replace")
            return self._plain_body(ex, Message(Kind.INVALID, text), size, Direction.TO_SERVER, Channel.POST)
        chain = self._ledger.open(ex, method=None, name=None, ident=None)
        chain.summary.invalid = True
        chain.summary.notes.append(f"invalid request: {problem}")
        preview = body[: self._body_limit].decode("utf-8", "replace")
        msg = Message(Kind.INVALID, preview, problem=problem)
        if self._keeps_records:
            record = self._records.on_exchange(
                chain,
                ex,
                msg,
                size=size,
                direction=Direction.TO_SERVER,
                channel=Channel.POST,
                side=Side.BOTH,
                sse_id=None,
                note=problem,
            )
            self._file(chain, record, invalid=True)
        else:
            head = _HEADS[carries_head(chain, ex, msg, Direction.TO_SERVER)]
            self._count(chain, Direction.TO_SERVER, size, True, head)
        # Nothing can answer it into success; without this it would stay pending for ever.
        self._ledger.finish(chain, ChainStatus.ERROR, f"invalid request: {problem}", self._clock())
        return chain.summary.id

    def _plain_body(
        self, ex: Exchange, msg: Message, size: int, direction: Direction, channel: Channel
    ) -> str | None:
        """File a body of a plain HTTP exchange in its chain as the body it is: no JSON-RPC meaning, no
        problem with it; the first one back carries the response head."""
        chain = self.store.peek(ex.chains[0]) if ex.chains else None
        if chain is None:
            return None
        http = None
        if direction is Direction.TO_CLIENT and not ex.head_recorded and ex.head is not None:
            ex.head_recorded, http = True, ex.head
        if not self._keeps_records:
            return self._count(
                chain, direction, size, False, Head.PLAIN_BODY if http is None else Head.PLAIN_RESPONSE
            )
        record = self._records.message(
            chain,
            msg,
            exchange=ex.id,
            side=Side.BOTH,
            direction=direction,
            channel=channel,
            size=size,
            note=None,
        )
        record = as_plain_body(record)
        record.http = http
        self._file(chain, record, invalid=False)
        return chain.summary.id


_HEADS: dict[Direction | None, Head] = {
    Direction.TO_SERVER: Head.REQUEST,
    Direction.TO_CLIENT: Head.RESPONSE,
    None: Head.NONE,
}


def acknowledged(chain: Chain, side: Side, now: float) -> None:
    """A listen's acknowledgement reached its client (not only the proxy, on a rewritten message's
    upstream side): the listen is answered, its stream stays open."""
    if side is not Side.UPSTREAM and chain.summary.method == LISTEN and chain.acknowledged is None:
        chain.acknowledged = now
