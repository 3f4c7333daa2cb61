"""How the chain builder files what a bridge reports of its own side: the upstream legs it makes
(their messages, response heads, links and closes; a GET stream's own chain), the upstream calls it
parks between rounds, and the upstream sessions it holds.
"""

from __future__ import annotations

from typing import Any

from proxy.flows.builder_state import BuilderState
from proxy.flows.events import BRIDGE_ERAS, ChainStatus, Channel, Direction, HttpInfo, Mode, Side
from proxy.flows.exchanges import Exchange, ExchangeFacts
from proxy.flows.observations import PROXY_STOPPING
from proxy.flows.records import Head
from proxy.flows.stream_legs import STREAM_METHOD
from proxy.wire.jsonrpc import Kind, Message, classify_value

CLIENT_NEVER_RETRIED = (
    "parked upstream call expired: the client did not retry within continuation_ttl (a 2026-07-28 "
    "client may stop asking; the proxy cancelled the call upstream)"
)
"""The note on a bridged call whose client never came back with the answers."""

STOPPED_WHILE_PARKED = (
    "parked upstream call let go as the proxy stopped: the client had not retried yet (a 2026-07-28 "
    "client may stop asking; the proxy closed the call's upstream session)"
)
"""The note on a bridged call still waiting for its client's retry when the proxy stopped: nothing
failed, the call just has no end to show."""


class LegHandlers(BuilderState):
    """The builder's handlers of a bridge's upstream legs, parked calls and upstream sessions."""

    def leg_message(
        self,
        leg: str,
        exchange_id: str,
        message: Any,
        *,
        size: int,
        direction: Direction,
        channel: Channel,
        note: str | None = None,
        joins: str | None = None,
    ) -> str | None:
        """Record a message on an upstream leg a bridge made; it joins the chain of the request it serves.

        A leg keeps its chain after the client exchange that caused it has closed (a parked call).
        A message that `joins` another leg goes to that leg's chain, and its own leg stays unbound:
        a session's GET stream carries questions for one call after another. A message on a leg the
        capture calls a GET stream that joins no call is the stream's own, even while the exchange
        the stream was opened for is open (`StreamLegs`).
        Upstream-side messages never change the chain's status: the client side decides that.
        """
        chain_id = self._legs.get(leg if joins is None else joins)
        if chain_id is None:
            own = joins is None and self._streams.declared(leg, channel)
            if self._lost and self._lost.leg(leg, joins, None if own else exchange_id):
                return None  # what it serves was dropped unbuilt: no other chain takes it
            ex = None if own else self._exchanges.get(exchange_id)
            chain_id = ex.main_chain() if ex is not None else None
            if chain_id is None:
                chain_id = self._stream_chain(leg, direction, channel)
                if chain_id is None:
                    return None
            elif joins is None:
                self._legs[leg] = chain_id
        chain = self.store.peek(chain_id)
        if chain is None:
            return None
        if self._keeps_records:
            self._leg_fact(leg)
        msg = message if isinstance(message, Message) else classify_value(message)
        if msg.kind is Kind.REQUEST:
            if direction is Direction.TO_SERVER:
                chain.upstream_requests += 1
                if chain.summary.mode is Mode.LEGACY_TO_MRTR and msg.method == chain.summary.method:
                    chain.summary.rounds = chain.upstream_requests
            else:  # the legacy server asks in flight: the client is asked it as `input_required`
                chain.summary.nested += 1
        seen = (
            self._leg_heads.pop(leg, None) if direction is Direction.TO_CLIENT and self._leg_heads else None
        )
        head = seen[0] if seen is not None else None
        if not self._keeps_records:
            return self._count(
                chain, direction, size, False, Head.NONE if head is None else Head.LEG_RESPONSE
            )
        record = self._records.message(
            chain,
            msg,
            exchange=leg,
            side=Side.UPSTREAM,
            direction=direction,
            channel=channel,
            size=size,
            note=note,
        )
        record.http = head
        self._file(chain, record, invalid=False)
        return chain.summary.id

    def _stream_chain(self, leg: str, direction: Direction, channel: Channel) -> str | None:
        """The chain of a GET stream's own, opened for a message on it that joins no other (as of when
        the stream was opened, when the capture says); None when `leg` is no stream."""
        if not self._streams.is_stream(leg, direction, channel):
            return None
        mode, opened_at, transports = self._streams.origin(leg)
        eras = BRIDGE_ERAS.get(mode, ("unknown", "unknown"))
        clock = self._clock
        now = clock()
        stream = Exchange(leg, "GET", "", now, None, eras[0], eras[1], mode, {}, *transports)
        seen, clock.at = clock.at, opened_at if opened_at is not None else now
        try:
            chain = self._ledger.open(stream, method=STREAM_METHOD, name=None, ident=None)
        finally:
            clock.at = seen
        chain_id = chain.summary.id
        self._legs[leg] = chain_id
        self._streams.own(leg, chain_id)
        return chain_id

    def continuation_changed(
        self,
        exchange_id: str,
        *,
        continuation: str,
        state: str,
        principal: str | None,
        pending_keys: list[str],
        age_ms: float,
        outcome: str | None = None,
    ) -> None:
        """Announce a parked upstream call's change, and end a chain that still waits when it goes.

        The call is named by the exchange that parked it first (its chain is looked up then and
        remembered). `ended` becomes `completed`, or `cancelled` when the chain failed. A call whose
        client never came back (`expired`, its wait run out or, `outcome` `proxy_stopping`, the proxy
        stopped first) ends its chain incomplete: a 2026-07-28 client may stop asking, so nothing
        failed; one whose upstream went first (`lost`) fails it.
        """
        chain_id = self._continuations.get(continuation)
        if chain_id is None:
            ex = self._exchanges.get(exchange_id)
            chain_id = ex.main_chain() if ex is not None else None
            if chain_id is None:
                return
            self._continuations[continuation] = chain_id
        chain = self.store.peek(chain_id)
        if state in ("ended", "expired", "lost"):
            self._continuations.pop(continuation, None)
        if state == "ended":
            failed = chain is not None and chain.summary.status in (ChainStatus.ERROR, ChainStatus.CANCELLED)
            state = "cancelled" if failed else "completed"
        if chain is not None and chain.summary.ended is None:
            if state == "expired":
                stopped = outcome == PROXY_STOPPING
                chain.summary.notes.append(STOPPED_WHILE_PARKED if stopped else CLIENT_NEVER_RETRIED)
                self._ledger.finish(chain, ChainStatus.INCOMPLETE, None, self._clock())
            elif state in ("lost", "cancelled"):
                chain.summary.notes.append(f"parked upstream call {state}")
                self._ledger.finish(chain, ChainStatus.ERROR, f"parked upstream call {state}", self._clock())
        self._ledger.continuation_event(
            chain_id, state, principal=principal, pending_keys=pending_keys, age_ms=age_ms, outcome=outcome
        )

    def upstream_session(
        self, name: str, *, state: str, principal: str, capabilities: str, version: str | None = None
    ) -> None:
        """Announce a change of an upstream session a bridge holds (the sessions view shows it)."""
        self._ledger.upstream_session_event(
            name, state, principal=principal, capabilities=capabilities, version=version
        )

    def link_leg(self, leg: str, related: str) -> None:
        """File a new leg in the chain of an earlier one (an answer to, or cancel of, a parked call)."""
        chain_id = self._legs.get(related)
        if chain_id is not None:
            self._legs[leg] = chain_id
        elif self._lost:
            self._lost.leg(leg, related)
        if self._keeps_records:
            self._leg_fact(leg).related = related

    def _leg_fact(self, leg: str) -> ExchangeFacts:
        """The facts of a leg, begun when it is opened, first linked or carries a message (or, in a
        capture before 1.7, when the head of a request that carried none arrived)."""
        facts: ExchangeFacts | None = self._leg_facts.get(leg)
        if facts is None:
            facts = self._leg_facts[leg] = ExchangeFacts()
        if facts.started is None:
            facts.started = self._clock()
        return facts

    def leg_head(self, leg: str, *, status: int, content_type: str | None, headers: dict[str, str]) -> None:
        """Remember the upstream's response head to a leg; the leg's first message back carries it."""
        now = self._clock()
        self._leg_heads[leg] = (self._records.response_head(status, content_type, headers), now)
        if self._keeps_records:  # a head before any message or opening: a bodiless request's, begun then
            self._leg_fact(leg).head_at = now

    def leg_closed(self, leg: str, outcome: str | None = None) -> str | None:
        """Forget a finished leg's chain; a response head no message carried gets an `http` record.
        The leg's facts keep how it ended (`outcome`), as an exchange's do.

        Returns the chain that got that record, else None.
        """
        head = self._leg_heads.pop(leg, None) if self._leg_heads else None
        facts = self._leg_facts.pop(leg, None) if self._leg_facts else None
        if facts is not None:
            facts.ended, facts.outcome = self._clock(), outcome
        chain_id = self._legs.pop(leg, None)
        own = self._streams.closed(leg)
        if chain_id is None:
            return None
        filed = self._record_leg_head(chain_id, leg, *head) if head is not None else None
        if own is not None:
            self._stream_ended(own, facts.head_at if facts is not None else None)
        self._release((chain_id,))
        return filed

    def _stream_ended(self, chain_id: str, answered: float | None) -> None:
        """A GET stream with a chain of its own closed: so does its chain (the upstream's time ends at
        its response head, when known)."""
        chain = self.store.peek(chain_id)
        if chain is not None and chain.summary.ended is None:
            self._ledger.finish(chain, ChainStatus.OK, None, self._clock(), answered=answered)

    def _record_leg_head(self, chain_id: str, leg: str, head: HttpInfo, at: float) -> str | None:
        """File the `http` record of a leg's response head no message carried, timed when it came."""
        chain = self.store.peek(chain_id)
        if chain is None:
            return None
        if not self._keeps_records:
            return self._count(chain, Direction.TO_CLIENT, 0, False, Head.HTTP_LEG)
        record = self._records.http_only(chain, leg, head, side=Side.UPSTREAM, ts=at)
        self._file(chain, record, invalid=False)
        return chain.summary.id
