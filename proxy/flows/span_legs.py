"""How the span follower takes the upstream legs a bridge makes: each request the bridge sends
upstream is a CLIENT span under the client request it serves (a legacy client's call counts its
upstream rounds), each request the upstream sends on a leg a SERVER span until the proxy answers it,
and a leg that closes first fails what it still owed by its status or the bridge's word for its end.

No I/O, no clock: each observation carries its time.
"""

from __future__ import annotations

from proxy.flows.events import Channel
from proxy.flows.observations import LegClosed, LegHeadSeen, LegLinked, LegMessageSeen
from proxy.flows.span_state import (
    HTTP_NETWORK,
    NOTIFICATION,
    REQUEST,
    RESULT,
    SPAN_CLIENT,
    SPAN_SERVER,
    TO_SERVER,
    OpenLeg,
)
from proxy.flows.span_status import SpanStatus
from proxy.wire.mcp import RESULT_INPUT_REQUIRED, result_type


class LegSpans(SpanStatus):
    """The follower's handlers of a bridge's upstream legs: their messages, heads, links and closes."""

    def _leg_message(self, obs: LegMessageSeen) -> None:
        joins = obs.joins
        leg = self._legs.get(obs.leg if joins is None else joins)
        if leg is None:
            if joins is None and obs.channel is Channel.GET_SSE:
                return  # a session's GET stream serves no one call: only what joins a call is its
            ex = self._exchanges.get(obs.exchange)
            main = ex.main() if ex is not None else None
            if main is None:
                return
            leg = OpenLeg(main[0], main[1], ex.upstream_network if ex is not None else HTTP_NETWORK)
            if joins is None:
                self._legs[obs.leg] = leg
        msg, t, op = obs.msg, obs.t, leg.op
        if obs.direction is TO_SERVER:
            if msg.kind is REQUEST and msg.id is not None:
                attributes = {**leg.network, **self._upstream, **self._method_attributes(msg)}
                if msg.method == op.method:
                    op.upstream_rounds += 1
                    attributes["mcp_proxy.round"] = op.upstream_rounds
                span = self._span(
                    op, self._span_name(msg.method, msg.params), SPAN_CLIENT, t, attributes, leg.parent
                )
                leg.requests[msg.id] = span
            elif msg.is_response and msg.id is not None:
                found = leg.nested.pop(msg.id, None)
                if found is not None:
                    self._answered(found, msg, t)
            elif msg.kind is NOTIFICATION:
                attributes = {**leg.network, **self._upstream, "mcp.method.name": msg.method or ""}
                span = self._span(op, msg.method or "(none)", SPAN_CLIENT, t, attributes, leg.parent)
                if op.sampled:
                    self._finish(span, t)
            return
        if msg.is_response and msg.id is not None:
            done = leg.requests.pop(msg.id, None)
            if done is not None:
                self._outcome(done, msg)
                if msg.kind is RESULT and result_type(msg.result) == RESULT_INPUT_REQUIRED:
                    done.attributes["mcp_proxy.result_type"] = RESULT_INPUT_REQUIRED
                if op.sampled:
                    self._finish(done, t)
        elif msg.kind is REQUEST and msg.id is not None:
            parent = next(iter(leg.requests.values()), leg.parent)
            attributes = {
                **leg.network,
                "mcp.method.name": msg.method or "",
                "jsonrpc.request.id": str(msg.id),
            }
            attributes["mcp_proxy.nested"] = "relayed"
            leg.nested[msg.id] = (
                self._span(op, self._span_name(msg.method, msg.params), SPAN_SERVER, t, attributes, parent),
                op,
            )

    def _leg_linked(self, obs: LegLinked) -> None:
        related = self._legs.get(obs.related)
        if related is not None and obs.leg not in self._legs:
            self._legs[obs.leg] = OpenLeg(related.parent, related.op, related.network, nested=related.nested)

    def _leg_head(self, obs: LegHeadSeen) -> None:
        leg = self._legs.get(obs.leg)
        if leg is not None:
            leg.status = obs.status

    def _leg_closed(self, obs: LegClosed) -> None:
        leg = self._legs.pop(obs.leg, None)
        if leg is None:
            return
        # A failed status names the cause as it does for a relayed exchange; else the bridge's word
        # for how the leg ended when it knew it (a refused connection).
        failed = leg.status is not None and leg.status >= 400
        why = str(leg.status) if failed else obs.outcome or "no_response"
        text = f"HTTP {leg.status}" if failed else "the upstream leg closed before its answer"
        for span in leg.requests.values():
            self._fail(span, why, text)
            if leg.op.sampled:
                self._finish(span, obs.t)
        if leg.nested and not any(other.nested is leg.nested for other in self._legs.values()):
            for span, op in leg.nested.values():
                self._fail(span, why, "nobody answered the upstream's request")
                if op.sampled:
                    self._finish(span, obs.t)
            leg.nested.clear()
