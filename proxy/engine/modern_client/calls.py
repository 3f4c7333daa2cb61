"""Carrying one 2026-07-28 client request to a legacy upstream and its answer back (MRTR->legacy).

Theory of operation. Every forwarded request is a *call*: one POST upstream (the leg; its id is the
upstream JSON-RPC id) on the upstream session of its caller and capability set (`sessions`),
with the client's params minus everything 2026-only.
The leg's stream then decides:

- a notification -> shown to the asker if it may see it (`exits.for_client`), or buffered
  while the call is parked; list-changed and resource updates go to the listen streams of the
  same session instead;
- a server request -> `ping` is answered by the bridge; `elicitation/create`,
  `sampling/createMessage` and `roots/list` during `tools/call`, `prompts/get` or `resources/read`
  become a round (`rounds`); anything else is refused upstream with -32601, because a 2026
  client cannot be asked it;
- the final response -> stamped for a 2026 client and sent under the asker's id, which after a
  retry is the retry's id; a `-32042` becomes a URL-elicitation round instead.

A leg that ends or fails without its answer is reported to a waiting client as a gateway fault;
while the call is parked nobody waits, so it is dropped and its retry is told the call was lost
(-32000 naming why, as when the upstream's answer is a fault).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proxy.engine.commands import BridgeCommand, Log
from proxy.engine.modern_client.answers import (
    as_result,
    complete_result,
    gateway_fault,
    relayed_error,
    server_info,
    upstream_params,
)
from proxy.engine.modern_client.exits import abandon, finish, for_client, lose_parked, round_log, stream
from proxy.engine.modern_client.listen import is_change
from proxy.engine.modern_client.rounds import RoundKeeper
from proxy.engine.modern_client.state import Asker, Call, LegRef, MrtrContext
from proxy.engine.modern_client.tokens import binding_for
from proxy.engine.modern_client.upstream_session import UpstreamLink
from proxy.engine.origins import refusal, refusal_log
from proxy.wire import errors
from proxy.wire.jsonrpc import Kind, Message, error_response, request, result_response
from proxy.wire.mcp import INPUT_METHODS, MRTR_METHODS, request_meta

Commands = list[BridgeCommand]


class CallDriver:
    """Starts calls, reads their legs, delivers their answers; rounds are delegated to `rounds`."""

    def __init__(self, ctx: MrtrContext, broadcast: Callable[[Message, UpstreamLink], Commands]) -> None:
        self._ctx = ctx
        self._broadcast = broadcast
        self.rounds = RoundKeeper(ctx, self)

    def register(
        self, exchange: str, msg: Message, headers: tuple[tuple[str, str], ...], at: float, peer: str = ""
    ) -> Call:
        """Record a new call for a client request (it is sent once its session is ready)."""
        assert msg.id is not None
        assert msg.method is not None
        params = msg.params
        asker = Asker(exchange, msg.id, request_meta(params), headers, at)
        binding = binding_for(msg.method, params, headers)
        call = Call(
            self._ctx.new_id("call"), msg.method, upstream_params(params), binding, asker, client=peer
        )
        self._ctx.calls[call.key] = call
        self._ctx.serving[exchange] = call.key
        return call

    def send(self, call: Call) -> Commands:
        """Send the call upstream as a new leg on its session."""
        ctx = self._ctx
        link = ctx.link_of(call)
        leg = ctx.new_id("leg")
        call.leg = call.upstream_id = leg
        call.phase = "running"
        call.generation = link.generation
        message = request(leg, call.method, with_progress_token(call.method, call.params, leg))
        headers = link.headers(call.asker.headers)
        return [ctx.send("call", call.key, call.asker.exchange, message, headers, leg=leg)]

    def requeue(self, call: Call) -> None:
        """The session was lost before the call's leg was answered: send it again after re-initialize."""
        self._ctx.drop_leg(call.leg)
        call.leg = None
        call.resent = True
        call.phase = "queued"

    # -- what arrives on a call's leg ----------------------------------------------------------

    def on_message(self, leg: str, ref: LegRef, msg: Message) -> Commands:
        """One message on a call's leg."""
        call = self._ctx.calls.get(ref.owner)
        if call is None or call.leg != leg:
            self._ctx.drop_leg(leg)
            return []
        if msg.kind is Kind.NOTIFICATION:
            return self._on_notification(call, msg)
        if msg.kind is Kind.REQUEST:
            return self._on_server_request(call, msg)
        if msg.is_response and msg.id == leg:
            return self._on_final(call, msg)
        why = msg.problem or f"a response for id {msg.id!r}"
        return [Log("bridge_upstream_dropped", "warning", {"leg": leg, "why": why})]

    def on_lost(self, leg: str, ref: LegRef, why: str, at: float = 0.0, *, refused: bool = False) -> Commands:
        """The call's leg ended or failed before its answer, at `at` (a parked call says how long it
        waited); `refused`: it could not be sent as it is.

        A refused leg is the client's input (a head no upstream can be sent), so the client hears
        -32600 with HTTP 400, never a 502 that blames the gateway.
        """
        self._ctx.drop_leg(leg)
        call = self._ctx.calls.get(ref.owner)
        if call is None or call.leg != leg:
            return []
        call.leg = None
        fields: dict[str, Any] = {"call": call.key, "leg": leg, "phase": call.phase, "why": why}
        if call.phase == "parked":
            fields["continuation"] = call.continuation
            return [
                Log("bridge_continuation_dead", "warning", fields),
                *lose_parked(self._ctx, call, why, at),
            ]
        if refused:
            body = error_response(call.asker.ident, errors.INVALID_REQUEST, f"Invalid Request: {why}")
            return [Log("bridge_request_refused", "info", fields), *finish(self._ctx, call, body, 400)]
        body = gateway_fault(call.asker.ident, call.method, why)
        return [Log("bridge_leg_lost", "warning", fields), *finish(self._ctx, call, body, 502)]

    def on_refused(self, leg: str, ref: LegRef, body: bytes, at: float = 0.0) -> Commands:
        """The upstream refused the call's leg itself (a 4xx, no JSON-RPC answer): the asker gets the
        server's status, words and challenge; a parked call's continuation dies as with any lost leg."""
        call = self._ctx.calls.get(ref.owner)
        status = ref.status or 400
        if call is None or call.leg != leg or call.phase == "parked":
            return self.on_lost(leg, ref, f"the upstream refused it (HTTP {status})", at)
        self._ctx.drop_leg(leg)
        call.leg = None
        said = refusal_log(call.method, status, ref.origin, body)
        body_out = refusal(call.asker.ident, status, body)
        return [said, *finish(self._ctx, call, body_out, status, ref.challenge)]

    def on_disconnect(self, call: Call) -> Commands:
        """The asker closed its stream: to a 2026 client that is a cancellation, so cancel upstream."""
        fields = {"call": call.key, "exchange": call.asker.exchange, "phase": call.phase}
        commands = abandon(self._ctx, call, "the client closed its request", "client_disconnected")
        return [Log("bridge_client_left", "info", fields), *commands]

    def _on_notification(self, call: Call, msg: Message) -> Commands:
        method = msg.method
        if is_change(msg):
            return self._broadcast(msg, self._ctx.link_of(call))
        if method == "notifications/elicitation/complete":
            return []  # 2026 URL elicitation has no completion notice; the retry is the signal
        if method == "notifications/cancelled":
            return self.rounds.withdraw(call, msg.params.get("requestId"))
        if call.phase == "parked":
            return self._buffer(call, msg.raw)
        shown = for_client(call, msg.raw)
        return stream(call, shown) if shown is not None else []

    def _buffer(self, call: Call, raw: dict[str, Any]) -> Commands:
        """Keep a notification for the retry's stream (bounded; overflow is counted and reported)."""
        if len(call.buffered) >= self._ctx.max_buffered:
            call.dropped += 1
        else:
            call.buffered.append(raw)
        return []

    def _on_server_request(self, call: Call, msg: Message) -> Commands:
        assert msg.id is not None
        if msg.method == "ping":
            reply = result_response(msg.id, {})
            return [self._ctx.call_notice(call, reply, "pong")]
        if msg.method in INPUT_METHODS and call.method in MRTR_METHODS:
            return self.rounds.on_nested(call, msg)
        text = f"Method not found: a 2026-07-28 client cannot be asked {msg.method} during {call.method}"
        refusal = error_response(msg.id, errors.METHOD_NOT_FOUND, text)
        return [self._ctx.call_notice(call, refusal, f"refuse {msg.method}")]

    def _on_final(self, call: Call, msg: Message) -> Commands:
        self._ctx.drop_leg(call.leg)
        call.leg = None
        error = msg.error
        if call.phase == "parked":
            call.final = msg.raw
            return [Log("bridge_answer_while_parked", "info", {"call": call.key, "kind": str(msg.kind)})]
        if error.get("code") == errors.URL_ELICITATION_REQUIRED and call.method in MRTR_METHODS:
            return self.rounds.url_required(call, error)
        return self.deliver_final(call, msg.raw)

    def deliver_final(self, call: Call, raw: dict[str, Any]) -> Commands:
        """The upstream's final response, in 2026 dress, under the asker's id; the call is over."""
        ident = call.asker.ident
        error = raw.get("error")
        if isinstance(error, dict):
            status, body = relayed_error(ident, error)
            log = round_log(call, "error", error_code=body["error"]["code"])
        else:
            result = raw.get("result")
            link = self._ctx.link_of(call)
            if call.method == "tools/list":
                link.tools.learn(result)
            status, body = 200, as_result(ident, complete_result(call.method, result, server_info(link.init)))
            log = round_log(call, "complete")
        return [log, *finish(self._ctx, call, body, status)]


def with_progress_token(method: str, params: dict[str, Any], token: str) -> dict[str, Any]:
    """The call's params with a `progressToken` of the proxy's own (the leg's id) in place of the
    client's, and added when the client's first request named none for a call that may run over
    several rounds.

    Clients choose tokens that collide (SDK clients use their request id), and several clients'
    calls share one upstream session (every anonymous client's by default, each of a stdio or HTTP+SSE
    server's messages on one stream): under the client's own token the server's progress would name
    another client's call as well. A legacy server reports progress only on a request that asked for
    it, and a later retry may ask; each request sees progress under its own token
    (`exits.for_client`)."""
    meta = params.get("_meta")
    named = isinstance(meta, dict) and "progressToken" in meta
    if method not in MRTR_METHODS and not named:
        return params
    return {**params, "_meta": {**(meta if isinstance(meta, dict) else {}), "progressToken": token}}
