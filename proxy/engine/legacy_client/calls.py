"""Driving one forwarded legacy request through a 2026-07-28 upstream, round by round (MRTR).

Theory of operation. A call is one client request the bridge forwards. Each upstream *leg* is one
POST carrying the request with a fresh JSON-RPC id (the leg id) and a fresh `_meta` envelope. A
leg's answer decides the next step:

- `complete` result or an error -> re-addressed to the client's id and delivered (JSON when nothing
  was streamed yet, else the last SSE event), then the call is forgotten;
- `input_required` with `inputRequests` -> gated against the session's declared capabilities (all
  or nothing), then each entry becomes a real JSON-RPC request on the call's SSE stream under a
  proxy-minted id; when the client has POSTed an answer to each, the next leg carries this round's
  bare results as `inputResponses` and the round's `requestState` byte for byte;
- `input_required` with only `requestState` -> a timer paces the retry (load shedding);
- `-32020` on `tools/call` -> one `tools/list` leg refreshes the `x-mcp-header` cache, then the same
  leg is sent again.

Every way out (answer, failure, cancel, disconnect, session end) goes through `_teardown`, which
closes the open leg, stops the timer, withdraws outstanding nested requests and removes the call
from every table.
"""

from __future__ import annotations

from typing import Any

from proxy.engine.capabilities import input_kind, unservable
from proxy.engine.commands import (
    BridgeCommand,
    CancelTimer,
    CloseLeg,
    EndClientResponse,
    Log,
    ReplyJson,
    SendSse,
    StartSse,
    StartTimer,
)
from proxy.engine.input_answers import answer_fault
from proxy.engine.legacy_client.answers import (
    call_failure,
    legacy_failure,
    legacy_result,
    state_fingerprint,
    upstream_fault,
)
from proxy.engine.legacy_client.request import Envelope, with_envelope
from proxy.engine.legacy_client.state import Answerer, BridgeContext, Call, LegRef, Pending, Session
from proxy.engine.origins import refusal, refusal_log
from proxy.wire import errors
from proxy.wire.headers import HeaderRefused
from proxy.wire.jsonrpc import (
    Kind,
    Message,
    RequestId,
    error_response,
    notification,
    request,
    result_response,
)
from proxy.wire.mcp import (
    MRTR_METHODS,
    RESULT_COMPLETE,
    RESULT_INPUT_REQUIRED,
    request_meta,
    result_type,
    target_name,
)
from proxy.wire.versions import is_at_least

Commands = list[BridgeCommand]

_MRTR_KEYS = ("inputResponses", "requestState")


class CallDriver:
    """Starts, advances and ends calls; owns no state of its own beyond the shared context."""

    def __init__(self, ctx: BridgeContext, max_rounds: int, state_only_delay: float) -> None:
        self._ctx = ctx
        self._max_rounds = max_rounds
        self._delay = state_only_delay

    # -- starting and sending ------------------------------------------------------------------

    def start(
        self, exchange: str, session: Session, msg: Message, headers: tuple[tuple[str, str], ...]
    ) -> Commands:
        """Register a client request and send its first leg."""
        assert msg.id is not None
        assert msg.method is not None
        params = {k: v for k, v in msg.params.items() if k not in _MRTR_KEYS}
        call = Call(exchange, session.id, msg.id, msg.method, params, headers)
        self._ctx.calls[exchange] = call
        session.calls[msg.id] = exchange
        return self._send(call)

    def _send(self, call: Call) -> Commands:
        """Send the call's next leg: original params, fresh `_meta`, this round's answers and state."""
        params = with_envelope(call.params, self._envelope(call))
        if call.answers is not None:
            params["inputResponses"] = call.answers
        if call.round_state is not None:
            params["requestState"] = call.round_state
        call.legs_sent += 1
        call.sent_state = call.round_state is not None
        call.progress_base = None  # decided by the round's first progress (`_rebase_progress`)
        try:
            send = self._ctx.open_leg("call", call.exchange, call.exchange, call.method, params, call.headers)
        except HeaderRefused as exc:
            return self._refuse(call, f"Invalid Request: {exc}", exc.field)
        call.leg = send.leg
        return [send]

    def _refuse(self, call: Call, text: str, field: str) -> Commands:
        """The request holds what no upstream header can carry: the client's input, so -32600 (400)."""
        error = error_response(call.ident, errors.INVALID_REQUEST, text, {"field": field})
        fields = {"exchange": call.exchange, "field": field, "why": text}
        commands = [Log("bridge_request_refused", "info", fields), *self._teardown(call, "the request ended")]
        if call.streaming:
            return [*commands, SendSse(call.exchange, error), EndClientResponse(call.exchange)]
        return [*commands, ReplyJson(call.exchange, 400, error)]

    def _envelope(self, call: Call) -> Envelope:
        session = self._ctx.sessions.get(call.session)
        return session.envelope() if session is not None else Envelope({})

    # -- what arrives on a leg -----------------------------------------------------------------

    def on_leg_message(self, leg: str, ref: LegRef, msg: Message) -> Commands:
        """One message on a call's (or its refresh's) leg: relay notifications, act on the answer."""
        call = self._ctx.calls.get(ref.owner)
        if call is None:
            self._ctx.drop_leg(leg)
            return []
        if msg.kind is Kind.NOTIFICATION:
            return self._relay(call, msg)
        if not msg.is_response:
            why = "server request on a 2026 stream" if msg.kind is Kind.REQUEST else msg.problem
            return [Log("bridge_upstream_dropped", "warning", {"leg": leg, "why": why})]
        self._ctx.drop_leg(leg)
        call.leg = None
        if ref.purpose == "refresh":
            if msg.kind is Kind.RESULT:
                self._ctx.tools.learn(msg.result)
            return self._send(call)
        return [self._round_log(call, leg, ref, msg), *self._on_answer(call, msg)]

    def on_leg_lost(self, leg: str, ref: LegRef, why: str, *, refused: bool = False) -> Commands:
        """A call's leg ended or failed before answering: the client gets a -32603 naming the fault.

        `refused` (the head could not be framed: the client's input) gets -32600 with HTTP 400.
        """
        self._ctx.drop_leg(leg)
        call = self._ctx.calls.get(ref.owner)
        if call is None:
            return []
        call.leg = None
        if refused:
            return self._refuse(call, f"Invalid Request: {why}", "head")
        fields = {"exchange": call.exchange, "leg": leg, "round": call.legs_sent, "why": why}
        fault = upstream_fault(call.ident, call.method, f"{why} (round {call.legs_sent})")
        return [Log("bridge_leg_lost", "warning", fields), *self._finish(call, fault)]

    def on_refused(self, leg: str, ref: LegRef, body: bytes) -> Commands:
        """The upstream refused a call's leg itself (a 4xx, no JSON-RPC answer): the client gets the
        server's status, words and challenge (on the stream, when one is open, as the last event)."""
        self._ctx.drop_leg(leg)
        call = self._ctx.calls.get(ref.owner)
        if call is None:
            return []
        call.leg = None
        status = ref.status or 400
        said = refusal_log(call.method, status, ref.origin, body)
        return [said, *self._finish(call, refusal(call.ident, status, body), status, ref.challenge)]

    def _on_answer(self, call: Call, msg: Message) -> Commands:
        if msg.kind is Kind.ERROR:
            return self._on_error(call, msg.error)
        result = msg.result
        kind = result_type(result)
        if kind == RESULT_COMPLETE:
            if call.method == "tools/list":
                self._ctx.tools.learn(result)
            return self._finish(call, result_response(call.ident, legacy_result(result)))
        if kind == RESULT_INPUT_REQUIRED and call.method in MRTR_METHODS:
            return self._on_input_required(call, result)
        text = f"it answered with resultType {kind!r}, which the bridge cannot use for {call.method}"
        return self._finish(call, upstream_fault(call.ident, call.method, text))

    def _on_error(self, call: Call, error: dict[str, Any]) -> Commands:
        if error.get("code") == errors.HEADER_MISMATCH and call.method == "tools/call" and not call.refreshed:
            call.refreshed = True
            params = with_envelope({}, self._envelope(call))
            send = self._ctx.open_leg(
                "refresh", call.exchange, call.exchange, "tools/list", params, call.headers
            )
            call.leg = send.leg
            return [send]
        return self._finish(call, legacy_failure(call.method, call.ident, error, sent_state=call.sent_state))

    def _relay(self, call: Call, msg: Message) -> Commands:
        """Forward a notification of the call's leg on the call's SSE stream (progress re-based)."""
        raw = msg.raw
        if msg.method == "notifications/progress":
            rebased = self._rebase_progress(call, msg.params)
            if rebased is None:
                return []
            raw = notification("notifications/progress", rebased)
        return [*self._stream(call), SendSse(call.exchange, raw)]

    def _rebase_progress(self, call: Call, params: dict[str, Any]) -> dict[str, Any] | None:
        """The progress under the client's token, as the server sent it while it keeps rising past
        what the client was last sent; a round (a new upstream request) whose first value starts at or
        below that is offset by it for the whole round, total included, since the client's token must
        see rising values. A value that would not rise is dropped."""
        token = request_meta(call.params).get("progressToken")
        value = params.get("progress")
        if token is None or not isinstance(value, int | float) or isinstance(value, bool):
            return None
        if call.progress_base is None:
            last = call.progress_last
            call.progress_base = last if last is not None and value <= last else 0
        progress = call.progress_base + value
        if call.progress_last is not None and progress <= call.progress_last:
            return None
        call.progress_last = progress
        out = {**params, "progressToken": token, "progress": progress}
        total = params.get("total")
        if isinstance(total, int | float) and not isinstance(total, bool):
            out["total"] = call.progress_base + total
        return out

    # -- input_required rounds -----------------------------------------------------------------

    def _on_input_required(self, call: Call, result: dict[str, Any]) -> Commands:
        requests = result.get("inputRequests")
        state = result.get("requestState")
        if not _valid_round(requests, state):
            text = "it sent an input_required result without valid inputRequests or requestState"
            return self._finish(call, upstream_fault(call.ident, call.method, text))
        if call.legs_sent >= self._max_rounds:
            text = (
                f"The server still required input after {call.legs_sent} rounds; "
                f"the proxy stops at max_rounds={self._max_rounds}."
            )
            return self._fail(call, text)
        session = self._ctx.sessions[call.session]
        problems = unservable(requests or {}, session.capabilities, session.version)
        if problems:
            return self._fail(
                call, "The client cannot provide the input the server requires: " + "; ".join(problems)
            )
        call.round_state = state
        if not requests:
            return self._pace(call)
        return self._ask(call, session, requests)

    def _pace(self, call: Call) -> Commands:
        """A state-only round: retry after a short delay, carrying only the `requestState`."""
        call.answers = None
        timer = f"pace:{call.exchange}"
        call.timer = timer
        self._ctx.timers[timer] = call.exchange
        return [StartTimer(timer, self._delay)]

    def on_timer(self, timer: str) -> Commands:
        """The pacing delay of a state-only round ran out: send the retry."""
        exchange = self._ctx.timers.pop(timer, None)
        call = self._ctx.calls.get(exchange) if exchange is not None else None
        if call is None:
            return []
        call.timer = None
        return self._send(call)

    def _ask(self, call: Call, session: Session, requests: dict[str, Any]) -> Commands:
        """Put each entry on the call's SSE stream as a real request under a proxy-minted id."""
        commands = self._stream(call)
        call.answers = {}
        for key, entry in requests.items():
            nested = self._ctx.new_id("nested")
            method = entry["method"]
            params = _nested_params(entry, nested, session.version)
            session.nested[nested] = call.exchange
            call.outstanding[nested] = Pending(key, method)
            commands.append(SendSse(call.exchange, request(nested, method, params)))
        return commands

    def on_client_answer(self, session: Session, msg: Message, made: Answerer | None = None) -> Commands:
        """The client POSTed a response to a nested request (or the proxy `made` one in its place):
        collect it, retry when the round is full."""
        exchange = session.nested.pop(msg.id, None) if msg.id is not None else None
        call = self._ctx.calls.get(exchange) if exchange is not None else None
        if call is None or msg.id not in call.outstanding:
            return [Log("bridge_unmatched_response", "warning", {"id": msg.id, "kind": str(msg.kind)})]
        pending = call.outstanding.pop(msg.id)
        if msg.kind is Kind.ERROR:
            return self._fail(call, refusal_text(pending, msg.error, made))
        fault = answer_fault(repr(pending.key), pending.method, msg.result)
        if fault is not None:  # the server would fail the call on it without saying which answer
            return self._fail(call, f"The client's answer is no result of its request: {fault}")
        assert call.answers is not None
        call.answers[pending.key] = msg.result
        return [] if call.outstanding else self._send(call)

    # -- ways out ------------------------------------------------------------------------------

    def cancel(self, session: Session, ident: Any) -> Commands:
        """The client cancelled its request: abort upstream, withdraw nested requests, no answer."""
        exchange = session.calls.get(ident) if isinstance(ident, str | int) else None
        call = self._ctx.calls.get(exchange) if exchange is not None else None
        if call is None:
            return []
        commands = self._teardown(call, "the client cancelled the request", "cancelled")
        return [*commands, EndClientResponse(call.exchange, "cancelled")]

    def drop(self, exchange: str, outcome: str) -> Commands:
        """End a call whose client cannot hear an answer any more (disconnect, session deleted)."""
        call = self._ctx.calls.get(exchange)
        if call is None:
            return []
        return [*self._teardown(call, None, outcome), EndClientResponse(exchange, outcome)]

    def stop_all(self, text: str) -> Commands:
        """The proxy is stopping: every call still running fails with `text`, so no client is left
        waiting on a stream the proxy is about to close (its nested requests are cancelled first)."""
        commands: Commands = []
        for call in list(self._ctx.calls.values()):
            commands.extend(self._fail(call, text))
        return commands

    def _fail(self, call: Call, text: str) -> Commands:
        """Fail the call as the SDK shims do (tool error result, or -32603 for prompts/resources)."""
        return self._finish(call, call_failure(call.method, call.ident, text))

    def _finish(
        self,
        call: Call,
        message: dict[str, Any],
        status: int = 200,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> Commands:
        """Answer the call and forget it (`headers` go with a whole JSON answer; a stream has its head)."""
        commands = self._teardown(call, "the request ended")
        if call.streaming:
            return [*commands, SendSse(call.exchange, message), EndClientResponse(call.exchange)]
        return [*commands, ReplyJson(call.exchange, status, message, headers)]

    def _teardown(self, call: Call, reason: str | None, outcome: str | None = None) -> Commands:
        """Remove the call from every table; with a `reason`, tell the client its nested requests are void.
        A leg still running closes with `outcome`, why the call ended before its answer (the client's)."""
        commands: Commands = []
        if call.leg is not None:
            commands.append(CloseLeg(call.leg, outcome))
            self._ctx.drop_leg(call.leg)
        if call.timer is not None:
            commands.append(CancelTimer(call.timer))
            self._ctx.timers.pop(call.timer, None)
        session = self._ctx.sessions.get(call.session)
        for nested in call.outstanding:
            if session is not None:
                session.nested.pop(nested, None)
            if reason is not None:
                params = {"requestId": nested, "reason": reason}
                commands.append(SendSse(call.exchange, notification("notifications/cancelled", params)))
        call.outstanding.clear()
        if session is not None:
            session.calls.pop(call.ident, None)
        self._ctx.calls.pop(call.exchange, None)
        return commands

    def _stream(self, call: Call) -> Commands:
        """Start the call's SSE response if it is not streaming yet."""
        if call.streaming:
            return []
        call.streaming = True
        return [StartSse(call.exchange)]

    def _round_log(self, call: Call, leg: str, ref: LegRef, msg: Message) -> Log:
        """One line per upstream answer with the chain-visible facts (never the requestState value); its
        `outcome` (`input_required`, `complete`, `error`) is named as the other bridge names it."""
        fields: dict[str, Any] = {
            "exchange": call.exchange,
            "client_id": call.ident,
            "upstream_id": leg,
            "method": call.method,
            "name": target_name(call.method, call.params),
            "round": call.legs_sent,
            "http_status": ref.status,
            "content_type": ref.content_type,
        }
        if msg.kind is Kind.ERROR:
            fields["outcome"] = "error"
            fields["error_code"] = msg.error.get("code")
            return Log("bridge_round", "info", fields)
        result = msg.result
        fields["outcome"] = result_type(result)
        if fields["outcome"] == RESULT_INPUT_REQUIRED and isinstance(result, dict):
            requests = result.get("inputRequests")
            if isinstance(requests, dict):
                fields["input_keys"] = {key: input_kind(entry) for key, entry in requests.items()}
            state = result.get("requestState")
            fields["request_state"] = state_fingerprint(state if isinstance(state, str) else None)
        return Log("bridge_round", "info", fields)


def _valid_round(requests: Any, state: Any) -> bool:
    """An input_required result the bridge can act on: well-formed entries and/or a string state."""
    if state is not None and not isinstance(state, str):
        return False
    if requests is None:
        return state is not None
    if not isinstance(requests, dict):
        return False
    entries_ok = all(isinstance(e, dict) and isinstance(e.get("method"), str) for e in requests.values())
    return entries_ok and (bool(requests) or state is not None)


def _nested_params(entry: dict[str, Any], nested: RequestId, version: str) -> dict[str, Any] | None:
    """An embedded request's params in the client's era: URL mode gains an `elicitationId`
    (2025-11-25); form mode loses the `mode` field older clients never saw."""
    params = entry.get("params")
    if not isinstance(params, dict):
        return None
    out = dict(params)
    if entry["method"] == "elicitation/create":
        if out.get("mode") == "url":
            out["elicitationId"] = f"elicitation-{nested}"
        elif not is_at_least(version, "2025-11-25"):
            out.pop("mode", None)
    return out


def refusal_text(pending: Pending, err: dict[str, Any], made: Answerer | None) -> str:
    """Why a call failed on an error answer to its input request, naming who really answered."""
    asked = f"{pending.method} (input request {pending.key!r})"
    if made is not None and made.dropped:
        return f"{made.by} dropped {asked} before it reached the client"
    who = "The client answered" if made is None else f"{made.by} answered, in the client's place,"
    return f"{who} {asked} with error {err.get('code')}: {err.get('message')}"
