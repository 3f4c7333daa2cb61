"""How a call of the MRTR->legacy bridge speaks to its client and how it ends, in one place.

Every way out (final answer, error, capability refusal, expiry, disconnect, upstream fault) goes
through `finish`, `abort` or `abandon`, which all end in `forget`: the timer stops, the
continuation slot is freed, the leg is no longer tracked, the call stops using its upstream
session and leaves every table. Whether
the upstream must be told (`notifications/cancelled`, because a legacy server does not take a
closed stream as a cancellation) is the only difference between them.

Also here: which upstream notifications a client request may see. Progress goes out under *this*
request's `progressToken` (a retry may carry a new one) and only if it has one; log messages only
to a request that asked with `_meta` `logLevel`, at or above that level.
"""

from __future__ import annotations

import math
from typing import Any, Final, Literal

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
from proxy.engine.modern_client.continuations import Ending
from proxy.engine.modern_client.state import Call, MrtrContext
from proxy.wire import errors
from proxy.wire.jsonrpc import notification

Commands = list[BridgeCommand]

ParkedEnd = Literal["expired", "lost", "stopped"]
"""How a call leaves while parked: nobody came back for it, its upstream went, or the proxy stopped."""

SEVERITY: Final[tuple[str, ...]] = (
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
)
"""RFC 5424 levels, least severe first (the order `logLevel` filtering uses)."""


def stream(call: Call, message: dict[str, Any]) -> Commands:
    """Send one message on the asker's SSE response, starting it first if needed."""
    exchange = call.asker.exchange
    head: Commands = [] if call.streaming else [StartSse(exchange)]
    call.streaming = True
    return [*head, SendSse(exchange, message)]


def answer(
    ctx: MrtrContext,
    call: Call,
    message: dict[str, Any],
    status: int = 200,
    *,
    note: str | None = None,
    headers: tuple[tuple[str, str], ...] = (),
) -> Commands:
    """The asker's last message (JSON unless something streamed already), carrying the call's pending
    notes beside `note`; the asker is then detached."""
    exchange = call.asker.exchange
    ctx.serving.pop(exchange, None)
    if call.notes:
        note = "; ".join([*call.notes, *([note] if note else [])])
        call.notes.clear()
    if call.streaming:
        call.streaming = False
        return [SendSse(exchange, message, note=note), EndClientResponse(exchange)]
    return [ReplyJson(exchange, status, message, headers, note=note)]


def start_timer(ctx: MrtrContext, call: Call, kind: str, seconds: float) -> Commands:
    """Run the call's one timer (`round` window or `ttl`), replacing any other it had."""
    commands = stop_timer(ctx, call)
    timer = f"{kind}:{call.key}"
    call.timer = timer
    ctx.timers[timer] = call.key
    return [*commands, StartTimer(timer, seconds)]


def stop_timer(ctx: MrtrContext, call: Call) -> Commands:
    """Cancel the call's timer if it has one."""
    if call.timer is None:
        return []
    timer, call.timer = call.timer, None
    ctx.timers.pop(timer, None)
    return [CancelTimer(timer)]


def cancel_upstream(ctx: MrtrContext, call: Call, reason: str) -> Commands:
    """Tell the legacy upstream the call is cancelled, then close its leg, observed `cancelled`
    (no-op without a leg)."""
    leg = call.leg
    if leg is None:
        return []
    call.leg = None
    ctx.drop_leg(leg)
    message = notification("notifications/cancelled", {"requestId": leg, "reason": reason})
    send = ctx.call_notice(call, message, f"cancel {leg}")
    return [send, CloseLeg(leg, "cancelled")]


def forget(ctx: MrtrContext, call: Call, at: float = 0.0, *, parked_end: ParkedEnd = "expired") -> Commands:
    """Remove the call from every table (its leg is over or was closed by the caller).

    A call that leaves while parked ends as `parked_end` says: `expired`, never come back for (with
    how long it waited when `at`, the time now, is known); `stopped`, the proxy stopped before its
    client came back, observed as expired and stopped, which fails nothing either; or `lost`, its
    upstream went before the client could (the server's stream or session ended). One that leaves
    after a retry resumed it ran to its end (`ended`: the chain's status tells completed from
    cancelled).
    """
    commands = stop_timer(ctx, call)
    if call.observed == "parked":
        waited = (at - call.parked_at) * 1000.0 if at > 0.0 and call.parked_at > 0.0 else 0.0
        state = "lost" if parked_end == "lost" else "expired"
        ctx.observe_continuation(call, state, max(0.0, waited), stopped=parked_end == "stopped")
    elif call.observed is not None:
        ctx.observe_continuation(call, "ended")
    ctx.table.release(call.continuation)
    ctx.drop_leg(call.leg)
    call.leg = None
    if ctx.serving.get(call.asker.exchange) == call.key:
        del ctx.serving[call.asker.exchange]
    ctx.calls.pop(call.key, None)
    link = ctx.pool.named(call.session) if call.session else None
    if link is not None and ("call", call.key) in link.waiting:
        link.waiting.remove(("call", call.key))
    ctx.pool.release(call.session, call.key)
    call.asked.clear()
    call.collecting.clear()
    call.buffered.clear()
    call.notes.clear()
    return commands


def lose_parked(ctx: MrtrContext, call: Call, why: str, at: float = 0.0) -> Commands:
    """A parked call's upstream went before its client came back (`why`: the stream or session that
    ended): remember that for its retry, which is told the call did not complete, then forget it."""
    text = (
        f"upstream MCP server failed during {call.method}: the upstream call was lost while it waited "
        f"for your answers ({why}); it did not complete, start it again"
    )
    end_parked(ctx, call, errors.UPSTREAM_UNAVAILABLE, text, 502, at)
    return forget(ctx, call, at, parked_end="lost")


def end_parked(ctx: MrtrContext, call: Call, code: int, text: str, status: int, at: float = 0.0) -> None:
    """Record what the retry of a parked call that is ending is told (error `code`, `text`, HTTP
    `status`), for as long as its token is valid."""
    if call.continuation is None:
        return
    expires = call.parked_at + ctx.ttl if call.parked_at > 0.0 else math.inf
    ctx.ended.record(call.continuation, Ending(call.round, expires, code, text, status), at)


def finish(
    ctx: MrtrContext,
    call: Call,
    message: dict[str, Any],
    status: int = 200,
    headers: tuple[tuple[str, str], ...] = (),
) -> Commands:
    """The upstream answered: deliver the answer (with `headers`, when it is a whole response) and
    forget the call."""
    return [*answer(ctx, call, message, status, headers=headers), *forget(ctx, call)]


def abort(
    ctx: MrtrContext,
    call: Call,
    message: dict[str, Any],
    status: int,
    reason: str,
    headers: tuple[tuple[str, str], ...] = (),
) -> Commands:
    """The bridge gives up on a live call: cancel it upstream, tell the client why, forget it."""
    told = answer(ctx, call, message, status, headers=headers)
    return [*cancel_upstream(ctx, call, reason), *told, *forget(ctx, call)]


def abandon(
    ctx: MrtrContext, call: Call, reason: str, outcome: str | None = None, *, at: float = 0.0
) -> Commands:
    """Nobody waits for the call any more (expiry at `at`, client gone): cancel upstream and forget it."""
    attached = ctx.serving.get(call.asker.exchange) == call.key
    commands = [*cancel_upstream(ctx, call, reason), *forget(ctx, call, at)]
    if attached and outcome is not None:
        commands.append(EndClientResponse(call.asker.exchange, outcome))
    return commands


def for_client(call: Call, raw: dict[str, Any]) -> dict[str, Any] | None:
    """The upstream notification as the asker may see it, or None when it must not see it."""
    method = raw.get("method")
    params = raw.get("params")
    params = params if isinstance(params, dict) else {}
    if method == "notifications/progress":
        token = call.asker.progress_token
        return None if token is None else {**raw, "params": {**params, "progressToken": token}}
    if method == "notifications/message":
        return raw if _loud_enough(params.get("level"), call.asker.log_level) else None
    return raw


def _loud_enough(level: Any, wanted: Any) -> bool:
    if wanted is None:
        return False
    if level not in SEVERITY or wanted not in SEVERITY:
        return True
    return SEVERITY.index(level) >= SEVERITY.index(wanted)


def round_log(call: Call, outcome: str, **extra: Any) -> Log:
    """One line per round and per final answer, with the chain-visible facts (never a secret).

    `round` is the number of the client's request the line answers, its first request being round 1,
    as the other bridge counts its upstream requests: `call.round` counts the `input_required`
    answers, this one already included when it is one.
    """
    fields: dict[str, Any] = {
        "exchange": call.asker.exchange,
        "client_id": call.asker.ident,
        "upstream_id": call.upstream_id,
        "method": call.method,
        "name": call.name,
        "round": call.round if outcome == "input_required" else call.round + 1,
        "outcome": outcome,
        **extra,
    }
    return Log("bridge_round", "info", fields)
