"""MRTR rounds of the MRTR->legacy bridge: park a live upstream call, resume it on the retry.

Theory of operation. While a call runs, each in-flight `elicitation/create`,
`sampling/createMessage` or `roots/list` on its leg is first gated against the capabilities in the
`_meta` of the client request that caused it (missing -> -32021 with `requiredCapabilities`, and the
upstream call is cancelled). The call's session declared only those capabilities upstream, so a
server that respects its session never trips the gate; one that asks anyway does. Servable ones are
*collected*: the first opens a round window of `round_window` seconds (a timer), so requests a
server sends together reach the client as one round. When the window closes the call *parks*: it
takes a continuation slot (bounded in total and per principal), every collected request becomes an
`inputRequests` entry under a proxy-minted key (`elicitation-1`, `sampling-1`, `roots-1`, ...
counted per call; URL elicitations lose their `elicitationId`, which is remembered), and the asker
is answered `{resultType: "input_required", inputRequests, requestState, _meta}` with a freshly sealed
token and the upstream's `serverInfo` in `_meta`, as a 2026-07-28 server names itself in every
result. The upstream leg stays open; a TTL timer (re-armed every round) cancels it if no retry comes.

The retry must carry a token that verifies (`tokens`), names a continuation that still exists, is
of the call's current round (older rounds are replays: each round mints a new token) and finds the
call parked (not already being resumed by another request). A valid token of a call that ended
while parked (its upstream went, or its client cancelled it) is told how it ended and that it did not
complete (`continuations.EndedContinuations`). Anything else is -32602 "Invalid or
expired requestState" and touches nothing. A valid retry becomes the call's new asker: each answered
key is POSTed upstream as the JSON-RPC response to its nested request, notifications buffered
between rounds are flushed onto the retry's stream, and the leg keeps being drained for this
retry. Keys still unanswered are asked again (with any requests that arrived meanwhile) under a new
token; unknown keys are ignored. A `-32042` (URL elicitation required) from a 2025-11-25 server
becomes a round of URL elicitations whose retry re-sends the original call.

The round window. A round opens when a running call collects its first servable nested request
and closes at the first of two inputs: its `round` timer (TimerFired, `round_window` seconds after
it opened), or an input that makes waiting moot (the call's final response or error, its leg
ending or failing, its client leaving: the call ends and takes the timer with it). Every servable
request the engine is given before then joins the round; one given later opens the next round,
or, while the call is parked, waits for the retry. The engine counts no event-loop turns and reads
no clock: it relies on the executor to feed TimerFired behind every input the transport had
received when the timer fell due (a due timer is an input, queued in arrival order), so a window
of 0 holds exactly the requests that reached the proxy together with the first.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Protocol

from proxy.engine.capabilities import input_kind
from proxy.engine.commands import BridgeCommand, Log, ReplyJson
from proxy.engine.input_answers import answer_fault, json_type
from proxy.engine.modern_client.answers import (
    as_result,
    input_required,
    missing_capability,
    missing_capability_error,
    server_info,
)
from proxy.engine.modern_client.continuations import Ending
from proxy.engine.modern_client.exits import (
    abandon,
    abort,
    answer,
    cancel_upstream,
    finish,
    for_client,
    round_log,
    start_timer,
    stop_timer,
    stream,
)
from proxy.engine.modern_client.state import Asker, Call, MrtrContext, Nested
from proxy.engine.modern_client.tokens import (
    INVALID_STATE_MESSAGE,
    Binding,
    Claims,
    InvalidToken,
    binding_for,
    fingerprint,
)
from proxy.wire import errors
from proxy.wire.jsonrpc import Message, RequestId, error_response, result_response
from proxy.wire.mcp import request_meta

Commands = list[BridgeCommand]


class CallPort(Protocol):
    """What rounds need from the call driver (kept abstract to avoid an import cycle)."""

    def send(self, call: Call) -> Commands:
        """Send the call upstream as a new leg."""
        ...

    def deliver_final(self, call: Call, raw: dict[str, Any]) -> Commands:
        """Deliver the upstream's final response to the asker and end the call."""
        ...


class CallEnded(Exception):
    """A verified retry of a call that ended while parked: `ending` says what the retry is told."""

    def __init__(self, continuation: str, ending: Ending) -> None:
        super().__init__(continuation)
        self.continuation = continuation
        self.ending = ending


class RoundKeeper:
    """Collects, parks, expires and resumes calls."""

    def __init__(self, ctx: MrtrContext, calls: CallPort) -> None:
        self._ctx = ctx
        self._calls = calls

    # -- collecting and parking ----------------------------------------------------------------

    def on_nested(self, call: Call, msg: Message, note: str | None = None) -> Commands:
        """An input request arrived for the call (on its leg, or placed from the session's GET
        stream with `note` saying why when that was a guess): gate it, then collect it into a round."""
        assert msg.method is not None
        needed = missing_capability(msg.method, msg.params, call.asker.capabilities)
        if needed is not None:
            return self._refuse(call, msg.method, needed)
        link = self._ctx.pool.named(call.session) if call.session else None
        if link is not None and link.session_id is None:
            return self._unanswerable(call, msg.method)
        params = dict(msg.params)
        elicitation_id = None
        if msg.method == "elicitation/create" and params.get("mode") == "url":
            elicitation_id = params.pop("elicitationId", None)
        nested = Nested(msg.id, call.mint_key(msg.method), msg.method, params, elicitation_id, note)
        call.collecting.append(nested)
        if call.phase != "running":
            return []  # joins the open round, or the next one when the call is parked
        call.phase = "collecting"
        return start_timer(self._ctx, call, "round", self._ctx.round_window)

    def _refuse(self, call: Call, method: str, needed: str) -> Commands:
        """The asker did not declare what the server needs: -32021, and the upstream call is cancelled."""
        body = missing_capability_error(call.asker.ident, method, needed)
        fields = {"call": call.key, "client_id": call.asker.ident, "method": method, "needed": needed}
        log = Log("bridge_capability_refused", "warning", fields)
        if call.phase == "parked":  # nobody waits now: the retry will be told
            call.final = body
            return [log, *cancel_upstream(self._ctx, call, f"the client lacks capability {needed}")]
        return [log, *abort(self._ctx, call, body, 400, f"the client lacks capability {needed}")]

    def _unanswerable(self, call: Call, method: str) -> Commands:
        """A server without sessions (stateless: no `Mcp-Session-Id`) asked in flight: its answer could
        reach no request of its (a legacy client hangs there), so the call fails at once, saying why."""
        text = (
            f"The server asked {method} in flight, but it runs without sessions (it gave no "
            "Mcp-Session-Id), so no answer can reach it and the call would wait forever; serve it with "
            "sessions (the Python SDK: stateless_http=False) for tools that ask the client."
        )
        fields = {"call": call.key, "method": method}
        log = Log("bridge_stateless_server_asked", "warning", fields)
        if call.phase == "parked":  # nobody waits now: the retry will be told
            call.final = error_response(call.asker.ident, errors.INTERNAL_ERROR, text)
            return [log, *cancel_upstream(self._ctx, call, "the server cannot receive answers")]
        body = error_response(call.asker.ident, errors.INTERNAL_ERROR, text)
        return [log, *abort(self._ctx, call, body, 200, "the server cannot receive answers")]

    def on_timer(self, timer: str, at: float = 0.0) -> Commands:
        """A round window closed (park) or a parked call's TTL ran out (expire, with how long it
        waited when `at`, the time it fell due, is known)."""
        key = self._ctx.timers.pop(timer, None)
        call = self._ctx.calls.get(key) if key is not None else None
        if call is None or call.timer != timer:
            return []
        call.timer = None
        if call.phase == "collecting":
            return self.park(call)
        if call.phase == "parked":
            fields = {"call": call.key, "continuation": call.continuation, "round": call.round}
            reason = "the client did not retry within continuation_ttl"
            return [
                Log("bridge_continuation_expired", "info", fields),
                *abandon(self._ctx, call, reason, at=at),
            ]
        return []

    def park(self, call: Call) -> Commands:
        """Answer the asker `input_required` for everything asked and collected; keep the leg open."""
        ctx = self._ctx
        refusal = self._cannot_park(call)
        if refusal is not None:
            return refusal
        ctx.ended.prune(call.asker.at)
        notes = [nested.note for nested in call.collecting if nested.note is not None]
        for nested in call.collecting:
            call.asked[nested.key] = nested
        call.collecting.clear()
        call.round += 1
        assert call.continuation is not None
        claims = Claims(
            ctx.sealer.instance, call.continuation, call.round, call.asker.at + ctx.ttl, call.binding
        )
        token = ctx.sealer.seal(claims)
        call.token = fingerprint(token)
        call.parked_at = call.asker.at
        entries = {key: {"method": n.method, "params": n.params} for key, n in call.asked.items()}
        log = self._round_log(call)
        call.phase = "parked"
        call.parker = call.parker or call.asker.exchange
        ctx.observe_continuation(call, "parked")
        info = server_info(ctx.link_of(call).init)
        body = as_result(call.asker.ident, input_required(entries, token, info))
        note = "; ".join(notes) or None
        return [log, *answer(ctx, call, body, note=note), *start_timer(ctx, call, "ttl", ctx.ttl)]

    def _cannot_park(self, call: Call) -> Commands | None:
        """Refuse a round past `max_rounds` or a new continuation past the table's bounds."""
        ctx = self._ctx
        ident = call.asker.ident
        if call.round >= ctx.max_rounds:
            text = (
                f"The upstream server still required input after {call.round} rounds; "
                f"the proxy stops at max_rounds={ctx.max_rounds} and cancelled the call."
            )
            log = Log("bridge_rounds_exhausted", "warning", {"call": call.key, "round": call.round})
            return [log, *abort(ctx, call, error_response(ident, errors.INTERNAL_ERROR, text), 200, text)]
        if call.continuation is not None:
            return None
        refused_by = ctx.table.refusal(call.binding.principal, call.client)
        if refused_by is not None:
            why = refused_by.why
            text = f"The proxy cannot hold this call for a retry: {why}."
            body = error_response(ident, errors.UPSTREAM_UNAVAILABLE, text)
            wait = retry_after(ctx, call, refused_by.holders)
            refused = abort(ctx, call, body, 503, why, (("Retry-After", str(wait)),))
            said = ctx.full_line(call.asker.at, {"call": call.key, "why": why, "retry_after": wait})
            return [said, *refused] if said is not None else refused
        call.continuation = ctx.new_id("continuation")
        ctx.table.take(call.continuation, call.key, call.binding.principal, call.client)
        return None

    def _round_log(self, call: Call) -> Log:
        asked = call.asked.values()
        return round_log(
            call,
            "input_required",
            continuation=call.continuation,
            input_keys={n.key: input_kind({"method": n.method, "params": n.params}) for n in asked},
            nested_ids={n.key: n.upstream_id for n in asked},
            elicitation_ids={n.key: n.elicitation_id for n in asked if n.elicitation_id is not None},
            capabilities="declared",
            request_state=call.token,
        )

    def url_required(self, call: Call, error: dict[str, Any]) -> Commands:
        """A `-32042` ended the upstream request: ask the URL elicitations, re-send the call on retry."""
        data = error.get("data")
        items = data.get("elicitations") if isinstance(data, dict) else None
        entries = [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []
        if not entries:
            return self._calls.deliver_final(call, {"error": error})
        needed = missing_capability("elicitation/create", {"mode": "url"}, call.asker.capabilities)
        if needed is not None:
            body = missing_capability_error(call.asker.ident, "elicitation/create", needed)
            return finish(self._ctx, call, body, 400)
        commands = stop_timer(self._ctx, call)
        call.collecting.clear()  # in-flight requests of the ended upstream request are moot
        for item in entries:
            params = {k: v for k, v in item.items() if k != "elicitationId"}
            params.setdefault("mode", "url")
            eid = item.get("elicitationId")
            key = call.mint_key("elicitation/create")
            nested = Nested(None, key, "elicitation/create", params, eid if isinstance(eid, str) else None)
            call.collecting.append(nested)
        call.restart = True
        return [*commands, *self.park(call)]

    def withdraw(self, call: Call, request_id: Any) -> Commands:
        """The upstream cancelled one of its nested requests: stop asking for it."""
        call.collecting = [n for n in call.collecting if n.upstream_id != request_id]
        for key in [k for k, n in call.asked.items() if n.upstream_id == request_id]:
            del call.asked[key]
        if call.phase == "collecting" and not call.collecting:
            call.phase = "running"
            return stop_timer(self._ctx, call)
        return []

    # -- the retry -----------------------------------------------------------------------------

    def resume(
        self, exchange: str, msg: Message, headers: tuple[tuple[str, str], ...], at: float
    ) -> Commands:
        """A retry carrying `requestState`: verify it, then continue the parked call for this request."""
        assert msg.id is not None
        assert msg.method is not None
        token = msg.params.get("requestState")
        try:
            call = self._claim(token, binding_for(msg.method, msg.params, headers), at)
        except InvalidToken as exc:
            return self._reject(exchange, msg.id, exc.reason, token)
        except CallEnded as ended:
            return self._ended(exchange, msg.id, ended)
        problem = malformed_answer(call, msg.params.get("inputResponses"))
        if problem is not None:  # refused before anything moves: the call stays parked for a good retry
            fields = {"call": call.key, "exchange": exchange, "client_id": msg.id, "problem": problem}
            data = {"reason": errors.INVALID_ANSWERS_REASON}  # a chain builder reads: the call still waits
            body = error_response(msg.id, errors.INVALID_PARAMS, f"Invalid inputResponses: {problem}", data)
            return [Log("bridge_answer_refused", "warning", fields), ReplyJson(exchange, 400, body)]
        commands = stop_timer(self._ctx, call)
        call.asker = Asker(exchange, msg.id, request_meta(msg.params), headers, at)
        call.streaming = False
        call.phase = "running"
        self._ctx.serving[exchange] = call.key
        # The retry is the client's request number (rounds answered so far) + 1, as `round_log` counts.
        fields = {"call": call.key, "exchange": exchange, "client_id": msg.id, "round": call.round + 1}
        commands.append(Log("bridge_resumed", "info", fields))
        commands.extend(self._post_answers(call, msg.params.get("inputResponses")))
        commands.extend(self._flush(call))
        self._ctx.observe_continuation(call, "resumed", max(0.0, at - call.parked_at) * 1000.0)
        return [*commands, *self._continue(call)]

    def _claim(self, token: Any, binding: Binding, now: float) -> Call:
        """The parked call `token` may resume (raises InvalidToken with the reason otherwise)."""
        if not isinstance(token, str):
            raise InvalidToken("not_a_string")
        claims = self._ctx.sealer.verify(token, binding, now)
        key = self._ctx.table.call_of(claims.continuation)
        call = self._ctx.calls.get(key) if key is not None else None
        if call is None:
            ending = self._ctx.ended.take(claims.continuation, now)
            if ending is not None:
                raise CallEnded(claims.continuation, ending)
            raise InvalidToken("unknown_continuation")
        if claims.round != call.round:
            raise InvalidToken("replayed")
        if call.phase != "parked":
            raise InvalidToken("concurrent_resume")
        return call

    def _reject(self, exchange: str, ident: RequestId, reason: str, token: Any) -> Commands:
        shown = fingerprint(token) if isinstance(token, str) else None
        fields = {"exchange": exchange, "client_id": ident, "reason": reason, "request_state": shown}
        data = {"reason": errors.INVALID_STATE_REASON}
        body = error_response(ident, errors.INVALID_PARAMS, INVALID_STATE_MESSAGE, data)
        return [Log("bridge_state_rejected", "warning", fields), ReplyJson(exchange, 400, body)]

    def _ended(self, exchange: str, ident: RequestId, ended: CallEnded) -> Commands:
        """The retry of a call that ended while parked: say how it ended (once; later retries of the
        same token are unknown)."""
        ending = ended.ending
        fields = {"exchange": exchange, "client_id": ident, "continuation": ended.continuation}
        body = error_response(ident, ending.code, ending.message, ending.data)
        return [Log("bridge_retry_of_ended_call", "info", fields), ReplyJson(exchange, ending.status, body)]

    def _post_answers(self, call: Call, responses: Any) -> Commands:
        """POST each answered key upstream as the response to its nested request (202 expected)."""
        answers = responses if isinstance(responses, dict) else {}
        commands: Commands = []
        for key, nested in list(call.asked.items()):
            value = answers.get(key)
            if not isinstance(value, dict):
                continue  # not answered yet: asked again (`malformed_answer` refused any other)
            del call.asked[key]
            if nested.upstream_id is None or call.leg is None:
                continue  # a URL round after -32042, or the upstream already answered
            message = result_response(nested.upstream_id, value)
            commands.append(self._ctx.call_notice(call, message, f"answer {key}"))
        return commands

    def _flush(self, call: Call) -> Commands:
        """Deliver what arrived between rounds on the retry's stream (what this retry may see)."""
        commands: Commands = []
        for raw in call.buffered:
            shown = for_client(call, raw)
            if shown is not None:
                commands.extend(stream(call, shown))
        call.buffered.clear()
        if call.dropped:
            fields = {"call": call.key, "dropped": call.dropped, "limit": self._ctx.max_buffered}
            commands.append(Log("bridge_notifications_dropped", "warning", fields))
            call.dropped = 0
        return commands

    def _continue(self, call: Call) -> Commands:
        """After the answers: the stored final answer, a re-ask, a re-send, or more draining."""
        if call.final is not None:
            return self._calls.deliver_final(call, call.final)
        if call.asked:
            return self.park(call)
        if call.restart:
            call.restart = False
            return self._calls.send(call)
        if call.collecting:
            call.phase = "collecting"
            return start_timer(self._ctx, call, "round", self._ctx.round_window)
        return []


def malformed_answer(call: Call, responses: Any) -> str | None:
    """What is wrong with the retry's answers, or None: `inputResponses` that is no object, or an
    answer to one of the call's questions that is no result of its request's kind (a server would
    fail the call on it). A key left out is no answer yet (asked again); one nobody asked is ignored."""
    if responses is None:
        return None
    if not isinstance(responses, dict):
        return f"inputResponses must be an object of answers by key, got {json_type(responses)}"
    for key, nested in call.asked.items():
        if key not in responses:
            continue
        if (problem := answer_fault(key, nested.method, responses[key])) is not None:
            return problem
    return None


def retry_after(ctx: MrtrContext, call: Call, holders: Iterable[str]) -> int:
    """Whole seconds a call refused a parking slot is told to wait (`Retry-After`): until the oldest
    of the `holders` of the bound that refused it whose `continuation_ttl` runs (parked, waiting for
    its client's retry) reaches it, when its slot is let go at the latest (at least 1). A holder that
    was resumed and runs another round has no TTL running and may keep its slot past that, so it is
    not counted; the whole TTL is told when no holder is parked or arrival times are not known. It
    is a hint: a parked holder resumed before then keeps its slot too."""
    longest = max(1, math.ceil(ctx.ttl))
    held = (ctx.calls.get(key) for key in holders)
    parked = [c.parked_at for c in held if c is not None and c.phase == "parked" and c.parked_at > 0.0]
    now = call.asker.at
    if not parked or now <= 0.0:
        return longest
    return min(longest, max(1, math.ceil(min(parked) + ctx.ttl - now)))
