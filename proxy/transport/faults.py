"""Fault injection on pass-through exchanges: the gated relay.

The front asks `gated_relay` once per pass-through exchange, and only while a rule is in force
(`RelayContext.gate` is None otherwise: one attribute read is all the gate costs then). An exchange
that no rule could concern is relayed as usual, on the task-free hot path. One a rule may concern is
relayed here, in a task, message by message: the client's messages are judged before anything goes
upstream (delay, answer with an error, drop, send twice, alter a retry's `requestState`), the
server's as they come (delay, replace an answer with an error, drop, send an event twice, cut the
SSE stream after N events). An SSE response is framed event by event so each event can be judged
before it is written; its bytes go out unchanged unless a fault changes that event.

Every fault is a `FaultInjected` observation: the chain notes it, the log line carries it, /metrics
counts it and the capture keeps it. A rule that picks a message its action turns out not to fit (a
cut for a JSON answer) is recorded as not injected, with the reason.

A message the proxy changed is recorded as each peer had it, never as one relayed unchanged: what its
sender sent on the sender's leg, and what the proxy sent in its place (an intercept's edit, a fault's
error) on the receiver's, with a note saying why (`proxy.flows.store.sent_in_place`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from proxy.engine.gate.actions import HOLD
from proxy.engine.gate.match import Seen
from proxy.engine.gate.messages import (
    Asked,
    asked_of,
    corrupt_state,
    drop_answer,
    dropped_answer,
    error_answer,
    intercept_dropped_answer,
    intercept_refusal,
    intercept_reply,
    seen,
)
from proxy.engine.gate.rules import Fault, FaultGate
from proxy.engine.passthrough import BODY_CUT, ClientHead
from proxy.flows.events import Channel, Direction, Side
from proxy.flows.observations import AnsweredByProxy, FaultInjected, MessageSeen, ResponseHeadSeen
from proxy.flows.proxy_notes import answered_for_client, by_intercept
from proxy.framing.classify import Rejection, Route
from proxy.framing.http import forward_request_headers
from proxy.framing.sse_events import EventSplitter, event_message, event_with_data
from proxy.logs import get_logger
from proxy.transport.bridge_faults import server_asked
from proxy.transport.client_side import ClientGone, ClientSide, answer_headers
from proxy.transport.origin_rewrites import read_document
from proxy.transport.relay import PassthroughRelay, RelayContext, Started
from proxy.transport.response_budget import Hold
from proxy.transport.upstream_pool import UpstreamError, UpstreamResponse
from proxy.wire.jsonrpc import Kind, Message, RequestId, classify_value, dumps, member_sizes, parse_body

_LOG = get_logger()

COPY_LIMIT = 32 * 1024 * 1024
"""Most bytes of a duplicate request's answer read (and discarded) before the copy is let go."""

CUT_OUTCOME = "cut_by_fault"
"""How an exchange whose SSE stream a `cut_after` fault cut ends (the capture's `outcome`)."""


def gated_relay(
    relays: RelayContext, client: ClientSide, exchange: str, route: Route | Rejection
) -> PassthroughRelay | None:
    """The relay for an exchange a fault rule may concern; None when none can (the usual relay serves it)."""
    gate = relays.gate
    if gate is None or not isinstance(route, Route):
        return None
    messages = route.body.messages
    asked = asked_of(messages, server_asked(relays.observations, route.session_id))
    if not gate.concerns(messages, asked):
        return None
    era = str(route.era)
    masks = relays.observations.redactor
    judged = [
        seen(msg, "client", era=era, session=route.session_id, asked=asked, masks=masks) for msg in messages
    ]
    return GatedRelay(relays, client, exchange, gate, route, judged, asked)


class GatedRelay(PassthroughRelay):
    """One pass-through exchange relayed through the gate (always in a task)."""

    __slots__ = (
        "asked",
        "awaited",
        "cut_fault",
        "events_sent",
        "gate",
        "judged",
        "made",
        "route",
        "route_era",
        "session",
    )

    def __init__(
        self,
        ctx: RelayContext,
        client: ClientSide,
        exchange: str,
        gate: FaultGate,
        route: Route,
        judged: list[Seen],
        asked: Asked,
    ) -> None:
        super().__init__(ctx, client, exchange)
        self.gate = gate
        self.judged = judged
        self.asked = asked
        self.route_era = str(route.era)
        self.session = route.session_id
        self.route = route
        """The client's request (an intercept answers a server's request upstream with its headers)."""
        self.cut_fault: Fault | None = None
        self.events_sent = 0
        self.awaited: set[RequestId] | None = None
        """Ids of the requests the response stream answers and has not answered yet (set as it opens)."""
        self.made: list[tuple[Any, Message, str]] = []
        """Messages the proxy sends the client in place of the server's, until observed going out:
        what it sends, what the server sent, and why."""

    # -- the client's messages ------------------------------------------------------------------

    async def relay(self, route: Route) -> None:
        """After `open`: the client's messages through the gate, then upstream and back through it."""
        with self.given_up_on_failure():
            sent = await self._client_faults(route)
            if sent is None:
                return
            try:
                upstream = await self.ctx.pool.request(*self._upstream_call(sent))
            except (TimeoutError, UpstreamError) as exc:
                self.failed(sent, exc)
                return
            await self._answer_through_gate(sent, upstream)

    async def _client_faults(self, route: Route) -> Route | None:
        """Apply the faults on the client's messages; the route to send upstream, or None (answered)."""
        messages = route.body.messages
        single = len(messages) == 1
        delay_ms = 0.0
        twice = False
        for msg, judged in zip(messages, self.judged, strict=True):
            fault = self.gate.decide(judged)
            if fault is None:
                continue
            kind = fault.action.kind
            if kind == "delay":
                delay_ms += fault.action.delay_ms
                self._note(fault, msg, "client", detail="held before it went upstream")
            elif kind in ("error", "drop"):
                if not single:
                    self._note(
                        fault, msg, "client", applied=False, detail="a message in a batch is relayed whole"
                    )
                    continue
                self._note(fault, msg, "client", detail=_answered_detail(kind, msg))
                self._answer_for_client(fault, msg)
                return None
            elif kind == "duplicate":
                twice = True
                self._note(fault, msg, "client", detail="sent upstream twice; the first answer was discarded")
            elif kind == "cut_after":
                self.cut_fault = fault  # noted when the stream is cut, or found to be no stream
            elif kind == "corrupt_state":
                route = self._corrupted(route, fault, msg)
            elif kind == HOLD:
                held = await self._hold_client(route, fault, msg, judged, single)
                if held is None:
                    return None
                route = held
        if delay_ms:
            self._flush()
            await self.ctx.holds.wait(delay_ms / 1000)
        if twice:
            await self._send_copy(route)
        return route

    async def _hold_client(
        self, route: Route, fault: Fault, msg: Message, judged: Seen, single: bool
    ) -> Route | None:
        """Hold a client's message for a decision: the route to send on, or None (the proxy answered)."""
        desk = self.ctx.desk
        if desk is None:
            return route
        self._flush()
        decision = await desk.hold(fault, self.exchange, msg, judged, side="upstream", alone=single)
        if decision.verb == "forward":
            if decision.message is None:
                return route
            raw = dumps(decision.message)
            edited = replace(route, raw=raw, body=parse_body(raw))
            self._sent_upstream(
                edited, f"edited by the proxy's intercept ({fault.rule_id}), sent in place of the client's"
            )
            return edited
        if msg.kind is not Kind.REQUEST:  # a notification or a client's answer: dropped, the client gets 202
            self._emit(ResponseHeadSeen(self.ctx.observations.now(), self.exchange, 202, None, {}))
            self.client.respond(202, b"", None, ())
            self._finish(None)
            return None
        self._emit(AnsweredByProxy(self.ctx.observations.now(), self.exchange, f"intercept {fault.rule_id}"))
        answer = decision.message if decision.verb == "answer" else None
        self._respond_json(*intercept_reply(answer, msg.id, fault.rule_id))
        self._finish(None)
        return None

    async def _hold_server(self, fault: Fault, msg: Message, judged: Seen) -> tuple[Any, bool]:
        """Hold a server's message for a decision: what the client gets in its place (None: nothing),
        and whether that differs from what the server sent (then recorded as `_in_place` says)."""
        desk = self.ctx.desk
        if desk is None:
            return msg.raw, False
        self._flush()
        decision = await desk.hold(fault, self.exchange, msg, judged, side="client")
        rule = fault.rule_id
        if decision.verb == "forward":
            edited = decision.message
            if edited is None:
                return msg.raw, False
            self._in_place(edited, msg, f"edited by the proxy's intercept ({rule})")
            return edited, True
        answered = decision.verb == "answer" and decision.message is not None
        how = f"{'answered' if answered else 'dropped'} at the proxy's intercept ({rule})"
        if msg.kind is Kind.REQUEST:  # a server's request: answered upstream as the client would
            answer = decision.message if decision.verb == "answer" else None
            self._in_place(None, msg, f"not forwarded to the client: {how}")
            by = by_intercept(rule)
            note = answered_for_client(by, not answered)
            await self._answer_upstream(answer or intercept_refusal(msg.id, rule), note, by)
            return None, True
        if msg.is_response:
            answer = decision.message if decision.verb == "answer" else None
            made = answer or intercept_dropped_answer(msg.id, rule)
            instead = "one typed at" if answered else "a drop error from"
            self._in_place(
                made, msg, f"in place of the server's answer: {instead} the proxy's intercept ({rule})"
            )
            return made, True
        self._in_place(None, msg, f"not forwarded to the client: {how}")
        return None, True  # a notification dropped

    async def _answer_upstream(self, answer: dict[str, Any], note: str, by: str) -> None:
        """POST an answer to a server's request upstream, as the client would (its headers, its session),
        recorded first as the server's leg made by `by` (`note` says whose it is): no client sent it."""
        made = classify_value(answer)
        sink = self.ctx.observations
        self._emit(
            MessageSeen(
                sink.now(), self.exchange, made, len(dumps(answer)), Direction.TO_SERVER, Channel.POST,
                Side.UPSTREAM, note=note, answered_by=by,
            )
        )  # fmt: skip
        self._flush()
        own = ("accept", "content-type", "content-length")
        headers = [(k, v) for k, v in forward_request_headers(self.route.headers) if k.lower() not in own]
        headers += [("Accept", "application/json, text/event-stream"), ("Content-Type", "application/json")]
        try:
            resp = await self.ctx.pool.request(
                "POST", self.route.path, tuple(headers), dumps(answer), self.client.raw_query
            )
            try:
                await resp.read(COPY_LIMIT, "the server's reply to an intercept's answer")
            finally:
                resp.close()
        except (TimeoutError, UpstreamError) as exc:
            _LOG.warning("intercept_answer_failed", exchange=self.exchange, detail=str(exc)[:300])

    def _corrupted(self, route: Route, fault: Fault, msg: Message) -> Route:
        altered = corrupt_state(route.raw) if len(route.body.messages) == 1 else None
        if altered is None:
            self._note(
                fault, msg, "client", applied=False, detail="the request carries no requestState string"
            )
            return route
        raw, detail = altered
        self._note(fault, msg, "client", detail=detail)
        return replace(route, raw=raw)

    def _answer_for_client(self, fault: Fault, msg: Message) -> None:
        """A request answered by the fault (error or drop); a notification or answer dropped: 202."""
        rule = fault.rule_id
        if msg.kind.value != "request":  # a notification or a client's answer: the server never gets it
            self._emit(ResponseHeadSeen(self.ctx.observations.now(), self.exchange, 202, None, {}))
            self.client.respond(202, b"", None, ())
            self._finish(None)
            return
        self._emit(AnsweredByProxy(self.ctx.observations.now(), self.exchange, f"fault {rule}"))
        answer = (
            error_answer(msg.id, fault.action, rule)
            if fault.action.kind == "error"
            else drop_answer(msg.id, rule)
        )
        self._respond_json(answer, fault.made_note())
        self._finish(None)

    def _respond_json(self, answer: dict[str, Any], note: str) -> None:
        data = dumps(answer)
        sink = self.ctx.observations
        head = answer_headers("application/json", ())
        self._emit(ResponseHeadSeen(sink.now(), self.exchange, 200, "application/json", head))
        made = parse_body(data).first
        if made is not None:
            self._emit(
                MessageSeen(
                    sink.now(),
                    self.exchange,
                    made,
                    len(data),
                    Direction.TO_CLIENT,
                    Channel.JSON,
                    Side.CLIENT,
                    note=note,
                )
            )
        self.client.respond(200, data, "application/json", ())

    async def _send_copy(self, route: Route) -> None:
        """The duplicate: the same request upstream first, its answer read to the end and discarded."""
        try:
            copy = await self.ctx.pool.request(*self._upstream_call(route))
            try:
                await copy.read(COPY_LIMIT, "the duplicate's answer")
            finally:
                copy.close()
        except (TimeoutError, UpstreamError) as exc:
            _LOG.info("fault_duplicate_failed", exchange=self.exchange, detail=str(exc)[:300])

    # -- the server's messages ------------------------------------------------------------------

    async def _answer_through_gate(self, route: Route, upstream: UpstreamResponse) -> None:
        head = self._take_head(upstream)
        if head.content_encoding is not None:
            await self._compressed_through_gate(route, head, upstream)
            return
        if not head.sse:
            await self._json_through_gate(route, head, upstream)
            return
        self.doubt(route, upstream.status, None)
        self.awaited = {m.id for m in route.body.messages if m.kind is Kind.REQUEST and m.id is not None}
        if self._started(head, upstream, None):  # no length: events may be added or cut
            await self._sse_through_gate(upstream)

    async def _compressed_through_gate(
        self, route: Route, head: ClientHead, upstream: UpstreamResponse
    ) -> None:
        """A compressed answer (`Content-Encoding`) is relayed as it comes, unjudged: the rules judge
        plain bodies only (its compressed bytes hold no event boundary to hold it at), and the chain
        still shows it decoded."""
        if self.cut_fault is not None:
            self._note_cut(applied=False, detail=f"the server's answer is {head.content_encoding}-encoded")
        _LOG.info("fault_body_not_judged", exchange=self.exchange, encoding=head.content_encoding)
        self.doubt(route, upstream.status, None)  # judged by its status: its body is compressed
        if self._started(head, upstream, head.content_length):
            await self.stream_started(Started(upstream, b""))

    async def _json_through_gate(self, route: Route, head: ClientHead, upstream: UpstreamResponse) -> None:
        """A whole (non-SSE) answer: read, judged message by message, sent once the faults are applied.

        One over `max_inspected_bytes` is relayed as it comes, unjudged and unread, as the usual relay
        leaves it; one the upstream cuts short is relayed as far as it came and then cut, as the usual
        relay cuts it (`upstream_cut`): a part of a body holds no message to judge.
        """
        if self.cut_fault is not None:
            self._note_cut(applied=False, detail="the server answered with a JSON body, not an SSE stream")
        with self.ctx.responses.hold() as hold:  # what is read to judge, until it is sent
            await self._json_held(route, head, upstream, hold)

    async def _json_held(
        self, route: Route, head: ClientHead, upstream: UpstreamResponse, hold: Hold
    ) -> None:
        """`_json_through_gate` with what it reads counted in `hold`: an answer the response budget
        (`max_response_bytes_in_flight`) has no room for goes on as one over the limit does."""
        length, limit = head.content_length, self.ctx.inspect_limit
        body = b""
        room = length is None or length > limit or hold.settle(length)
        if room and (length is None or length <= limit):
            refused: list[int] = []  # a size the budget had no room for: reading stopped there

            def counted(size: int) -> bool:
                if hold.settle(size):
                    return True
                refused.append(size)
                return False

            body, cut = await read_document(upstream, limit, counted)
            room = not refused
            if cut is not None:
                self._cut_short(route, head, upstream, body, cut)
                return
        self.doubt(route, upstream.status, body)  # one not read (over the limit) is judged by its status
        if (length is not None and length > limit) or len(body) > limit or not room:
            _LOG.info("fault_body_not_judged", exchange=self.exchange, limit=limit, room=room)
            hold.release()
            if self._started(head, upstream, length, body):
                await self.stream_started(Started(upstream, body))
            return
        body, delay_ms = await self._judge_json(body)
        if delay_ms:
            self._flush()
            await self.ctx.holds.wait(delay_ms / 1000)
        self.client.send_whole(head.status, upstream.reason, head.headers, body)
        self._record_head(head, upstream)
        self._delivered_whole(upstream, body)

    def _cut_short(
        self, route: Route, head: ClientHead, upstream: UpstreamResponse, body: bytes, cut: UpstreamError
    ) -> None:
        """The upstream cut its JSON answer after `body`: the client gets the head and `body`, then the
        cut (a 502 when nothing of a known-length body came, as `_broken_off` decides)."""
        self.doubt(route, upstream.status, None)  # a part of a body: its status alone decides
        if self._started(head, upstream, head.content_length, body, flush=False):
            self._broken_off(BODY_CUT, self.observer_for(upstream, body), cut)

    async def _judge_json(self, body: bytes) -> tuple[bytes, float]:
        """The body with the faults on its messages applied, and the delay they add."""
        parsed = parse_body(body)
        if parsed.parse_error or not parsed.messages:
            return body, 0.0
        delay_ms = 0.0
        changed = False
        out: list[Any] = []
        for msg in parsed.messages:
            judged = self._seen(msg)
            fault = self.gate.decide(judged)
            kind = fault.action.kind if fault is not None else None
            if fault is None or kind is None:
                out.append(msg.raw)
            elif kind == HOLD:
                made, altered = await self._hold_server(fault, msg, judged)
                changed = changed or altered
                if made is not None:
                    out.append(made)
            elif kind == "delay":
                delay_ms += fault.action.delay_ms
                self._note(fault, msg, "server", detail="held before it went to the client")
                out.append(msg.raw)
            elif kind in ("error", "drop"):
                made = (
                    error_answer(msg.id, fault.action, fault.rule_id)
                    if kind == "error"
                    else dropped_answer(msg.id, fault.rule_id)
                )
                self._note(fault, msg, "server", detail=_replaced_detail(kind))
                self._in_place(made, msg, fault.made_note())
                out.append(made)
                changed = True
            else:  # duplicate: one JSON body holds one answer per request
                self._note(fault, msg, "server", applied=False, detail="a JSON body holds each answer once")
                out.append(msg.raw)
        if not changed:
            return body, delay_ms
        if not out:
            return b"", delay_ms
        return dumps(out if parsed.batch else out[0]), delay_ms

    async def _sse_through_gate(self, upstream: UpstreamResponse) -> None:
        """An SSE stream, event by event: each judged before it is written (or not written)."""
        observer = self._observer(upstream, sse=True)
        splitter = EventSplitter()
        self.ctx.open_streams += 1
        cut: UpstreamError | None = None
        outcome: str | None = None
        try:
            async for chunk in upstream.chunks():
                for raw in splitter.feed(chunk):
                    outcome = await self._event(raw, observer)
                    if outcome is not None:
                        break
                if outcome is not None:
                    break
            else:
                if splitter.rest:
                    outcome = await self._event(splitter.rest, observer)
        except UpstreamError as exc:
            cut = exc
        finally:
            self.ctx.open_streams -= 1
        if outcome == CUT_OUTCOME or outcome == "client_disconnected":
            observer.finish()
            self._close_upstream()
            if outcome == CUT_OUTCOME:
                self.client.cut()
            self._finish(outcome)
            return
        if self.cut_fault is not None:
            self._note_cut(applied=False, detail=f"the stream ended after {_events(self.events_sent)}")
        self._observed(observer)
        self._flush()
        if cut is not None:
            _LOG.warning("upstream_fault", exchange=self.exchange, reason="cut", detail=str(cut)[:300])
            self._close_upstream()
            self.client.cut()
            self._finish("upstream_cut")
            return
        await self._end(None)

    async def _event(self, raw: bytes, observer: Any) -> str | None:
        """Judge and write one event; an outcome when the exchange must end here."""
        msg = event_message(raw)
        cut = self.cut_fault
        if msg is not None and cut is not None and self.events_sent >= cut.action.events:  # cut_after=0
            self._note_cut(applied=True, detail=f"after {_events(self.events_sent)}")
            return CUT_OUTCOME
        judged = self._seen(msg) if msg is not None else None
        fault = self.gate.decide(judged) if judged is not None else None
        copies = 1
        if fault is not None and msg is not None and judged is not None:
            kind = fault.action.kind
            if kind == HOLD:
                made, altered = await self._hold_server(fault, msg, judged)
                if made is None:
                    self._flush()
                    return None
                if altered:
                    raw = event_with_data(raw, dumps(made).decode())
            elif kind == "delay":
                self._note(fault, msg, "server", detail="held before it went to the client")
                self._flush()
                await self.ctx.holds.wait(fault.action.delay_ms / 1000)
            elif kind == "drop":
                self._note(fault, msg, "server", detail="not forwarded to the client")
                self._in_place(None, msg, f"not forwarded to the client: {fault.made_note()}")
                self._flush()
                return None
            elif kind == "error":
                made = error_answer(msg.id, fault.action, fault.rule_id)
                raw = event_with_data(raw, dumps(made).decode())
                self._note(fault, msg, "server", detail="the server's answer replaced by the error")
                self._in_place(made, msg, fault.made_note())
            elif kind == "duplicate":
                copies = 2
                self._note(fault, msg, "server", detail="the event written twice")
        try:
            for _ in range(copies):
                await self.client.write(raw)
                observer.feed(raw)
        except ClientGone:
            return "client_disconnected"
        self._flush()
        if msg is not None:
            self.events_sent += 1
            if msg.is_response and msg.id is not None and self.awaited is not None:
                self.awaited.discard(msg.id)
        cut = self.cut_fault
        if cut is not None and self.events_sent >= cut.action.events:
            if self.awaited is not None and not self.awaited:  # the client has every answer it awaits
                self._note_cut(
                    applied=False,
                    detail=f"the server answered in event {self.events_sent}: a cut after the answer "
                    "changes nothing",
                )
                return None
            self._note_cut(applied=True, detail=f"after {_events(self.events_sent)}")
            return CUT_OUTCOME
        return None

    def _seen(self, msg: Message) -> Seen:
        masks = self.ctx.observations.redactor
        return seen(msg, "server", era=self.route_era, session=self.session, asked=self.asked, masks=masks)

    # -- recording ------------------------------------------------------------------------------

    def _sent_upstream(self, route: Route, note: str) -> None:
        """Record what went upstream in place of the client's request (its edit), on the upstream's leg."""
        sink = self.ctx.observations
        messages = route.body.messages
        for msg, size in zip(messages, member_sizes(messages, len(route.raw)), strict=True):
            self._emit(
                MessageSeen(
                    sink.now(), self.exchange, msg, size, Direction.TO_SERVER, Channel.POST, Side.UPSTREAM,
                    note=note,
                )
            )  # fmt: skip

    def _in_place(self, made: Any, original: Message, note: str) -> None:
        """The client gets `made` (None: nothing) instead of the server's `original`: the server's is
        recorded now on its own leg, and `made` as the proxy's when it goes out (`_observe_upstream`)."""
        sink = self.ctx.observations
        size = len(dumps(original.raw))
        channel = Channel.JSON
        if self.sse:
            channel = Channel.GET_SSE if self.client.method == "GET" else Channel.SSE
        self._emit(
            MessageSeen(
                sink.now(), self.exchange, original, size, Direction.TO_CLIENT, channel, Side.UPSTREAM,
                note=note if made is None else None,
            )
        )  # fmt: skip
        if made is not None:
            self.made.append((made, original, note))

    def _observe_upstream(self, msg: Message, size: int, channel: Channel, sse_id: str | None) -> None:
        """A message going out to the client: the proxy's own when it is one `_in_place` recorded."""
        for i, (made, _, note) in enumerate(self.made):  # empty unless the proxy changed a message
            if msg.raw == made:
                del self.made[i]
                sink = self.ctx.observations
                self._emit(
                    MessageSeen(
                        sink.now(), self.exchange, msg, size, Direction.TO_CLIENT, channel, Side.CLIENT,
                        sse_id, note,
                    )
                )  # fmt: skip
                return
        super()._observe_upstream(msg, size, channel, sse_id)

    def _note(
        self,
        fault: Fault,
        msg: Message | None,
        direction: str,
        *,
        applied: bool = True,
        detail: str | None = None,
    ) -> None:
        method = msg.method if msg is not None else None
        if msg is not None and msg.is_response and msg.id is not None:
            method = self.asked.get(msg.id, (None, None))[0]
        self._record_fault(fault, direction, msg.id if msg is not None else None, method, applied, detail)

    def _finish(self, outcome: str | None) -> None:
        """End the exchange; a cut still waiting for its stream is recorded as not injected (and its
        rule's count given back): the exchange ended before the cut could fall."""
        if not self.ended and self.cut_fault is not None:
            self._note_cut(applied=False, detail="the exchange ended before the cut could fall")
        super()._finish(outcome)

    def _note_cut(self, *, applied: bool, detail: str) -> None:
        fault, self.cut_fault = self.cut_fault, None
        if fault is None:
            return
        first = next(iter(self.asked.items()), None)
        ident, method = (first[0], first[1][0]) if first else (None, None)
        self._record_fault(fault, "client", ident, method, applied, detail)

    def _record_fault(
        self,
        fault: Fault,
        direction: str,
        ident: RequestId | None,
        method: str | None,
        applied: bool,
        detail: str | None,
    ) -> None:
        """Count the fault (or its not being injected) and observe it on this exchange."""
        self.gate.settle(fault, applied=applied)
        now = self.ctx.observations.now()
        label = self.gate.label(fault.rule_id)
        held = fault.action.delay_ms if fault.action.kind == "delay" else 0.0
        self._emit(
            FaultInjected(
                now, self.exchange, fault.describe(), label, direction, ident, method, applied, detail, held
            )
        )


def _answered_detail(kind: str, msg: Message) -> str:
    if msg.kind.value != "request":
        return "not forwarded to the server (the client got 202)"
    if kind == "drop":
        return "not forwarded to the server; the client got an error saying so"
    return "answered by the proxy without going upstream"


def _replaced_detail(kind: str) -> str:
    if kind == "drop":
        return "the server's answer not forwarded; the client got an error saying so"
    return "the server's answer replaced by the error"


def _events(count: int) -> str:
    return f"{count} event" if count == 1 else f"{count} events"
