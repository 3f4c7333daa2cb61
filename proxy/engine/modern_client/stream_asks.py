"""Server requests that arrive on a legacy session's GET stream, given to a call in flight there.

Theory of operation. A legacy server asks its client in flight on the stream of the request it is
serving, but it may also ask on the session's standalone GET stream: the Python SDK does so for
`list_roots()`, and for `create_message()` / `elicit()` that name no related request. A 2026-07-28
client can only be asked as part of one of its requests, so such a request (elicitation, sampling,
roots) is given to a call of that session whose upstream request is still open and whose method
can end in `input_required` (`tools/call`, `prompts/get`, `resources/read`) and whose client is
waiting for its answer (running, or collecting a round):

- one such call, and no call of the session parked for a retry: it is asked there, exactly as if
  the request had come on its own stream;
- several possible owners (waiting calls, and the session's calls parked for a retry): it is refused
  upstream at once, said in a warning and in a note on each of those calls' answers. Clients
  sending the same credentials, or none with `anonymous_upstream_sessions` = `shared` (the default),
  share one upstream session, so the calls may be different people's: giving the question to any one
  of them could show one client's prompt to another and give its answer to the wrong call. A
  Streamable HTTP server that names the related request, clients with their own `Authorization`, or
  `per_connection` (each anonymous client connection its own upstream session) avoid the refusal.
  An HTTP+SSE or stdio server cannot name it: those transports carry all of a session's messages on
  one stream, so each question asked while several calls wait is refused, and the refusal's text
  says so;
- no waiting call: nobody could answer, so it is refused upstream at once (the server never waits
  for an answer that cannot come).

A parked call never takes such a request: its client already has its `input_required` round and
may never retry (a 2026-07-28 client may stop asking, as the SDK's does when a callback fails), so
giving it there would leave the server waiting up to `continuation_ttl` on a client that may be
gone. But it may own it: its upstream request is still running, and a tool that asks several
questions side by side asks the next while the call waits for its retry. So a parked call counts
among the possible owners: with it and one waiting call the question is refused, never given to
the waiting call, which may be another client's. The parked call keeps its slot until its retry or
its TTL (a later call of the session proves nothing: clients of one principal, or anonymous ones by
default, share the session, and one client may make other calls while a person answers); the log
lines name it (`parked`).

From there it is one of the call's nested requests like any other: it joins the call's round, the
capability gate applies, and the client's answer is POSTed upstream on the session. A
`notifications/cancelled` on the GET stream withdraws the request it names from the call holding it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from proxy.engine.commands import BridgeCommand, Log
from proxy.engine.modern_client.rounds import RoundKeeper
from proxy.engine.modern_client.state import Call, MrtrContext
from proxy.wire import errors
from proxy.wire.jsonrpc import Kind, Message
from proxy.wire.mcp import INPUT_METHODS, MRTR_METHODS

Commands = list[BridgeCommand]
Refuse = Callable[[str, Message, int, str], Commands]
"""Refuses a GET-stream request upstream: its leg, the request, the error's code and text."""
UNPLACED: Final = errors.INTERNAL_ERROR
"""The code of a refused question some call could own. A tool that fails with its client's error
passes the code on as its call's; -32601 there would reach a 2026-07-28 client as HTTP 404 and
"method not found" on a method that exists, where this is an ordinary error of that call."""

HINT = (
    "the server asked on its session's GET stream, naming no request, while several calls waited for "
    "their answers. Behind an HTTP+SSE or stdio server every question comes that way: the transport "
    "carries all of a session's messages on one stream, so none can name its request. Clients sending "
    "the same Authorization, or none with anonymous_upstream_sessions = shared, share one upstream "
    "session (and one client may run calls side by side), so the question could be any of theirs. "
    "anonymous_upstream_sessions = per_connection (clients on separate connections), clients with "
    "their own Authorization, one call at a time, or a Streamable HTTP server that relates its request "
    "(the Python SDK's related_request_id, ctx.elicit in a tool) avoid this"
)
ONE_STREAM = (
    "behind an HTTP+SSE or stdio server every question comes on one stream; "
    "anonymous_upstream_sessions = per_connection, distinct Authorization, or one call at a time "
    "avoid this"
)
"""What the refusal sent upstream (and shown to the client by most servers) says of its cause."""
OWN_CALLS_HINT = (
    "the server asked on its session's GET stream, naming no request, while several calls of one "
    "client connection (its own upstream session, per_connection) could own it, a call of it parked "
    "for a retry among them: the question is refused until that call's retry or continuation_ttl"
)
MAX_CALL_NOTES = 8
"""Refusals noted for one call's next answer (its log lines say every one)."""

PARKED_HINT = (
    "calls parked for a retry are not asked: their client already has its input_required round and "
    "may never come back, so the server would wait for an answer that may never come"
)


class StreamAsks:
    """Places input requests from a session's GET stream on that session's calls in flight."""

    def __init__(self, ctx: MrtrContext, rounds: RoundKeeper, refuse: Refuse) -> None:
        self._ctx = ctx
        self._rounds = rounds
        self._refuse = refuse

    def on_message(self, leg: str, msg: Message) -> Commands | None:
        """What placing `msg` takes; None when it is not for a call (the listen emulator has it)."""
        ref = self._ctx.legs.get(leg)
        if ref is None:
            return None
        if msg.kind is Kind.REQUEST and msg.method in INPUT_METHODS and msg.id is not None:
            return self._place(leg, ref.owner, msg)
        if msg.kind is Kind.NOTIFICATION and msg.method == "notifications/cancelled":
            return self._withdraw(ref.owner, msg)
        return None

    def placed_on(self, leg: str, msg: Message) -> str | None:
        """The leg of the call a message on the GET stream `leg` is given to (as `on_message` would
        give it, asked before it is), so its observation joins that call's chain; None otherwise."""
        ref = self._ctx.legs.get(leg)
        if ref is None or ref.purpose != "stream":
            return None
        if msg.kind is Kind.REQUEST and msg.method in INPUT_METHODS and msg.id is not None:
            owner = sole_owner(self._ctx, ref.owner)
            return owner.leg if owner is not None else None
        if msg.kind is Kind.NOTIFICATION and msg.method == "notifications/cancelled":
            holder = self._holding(ref.owner, msg.params.get("requestId"))
            return holder.leg if holder is not None else None
        return None

    def _place(self, leg: str, session: str, msg: Message) -> Commands | None:
        waiting = calls_asking(self._ctx, session)
        parked = calls_parked(self._ctx, session)
        if not waiting and not parked:
            return None
        fields: dict[str, Any] = {"leg": leg, "method": msg.method, "id": msg.id, "in_flight": len(waiting)}
        if parked:
            fields["parked"] = [name_of(call) for call in parked]
        if not waiting:
            text = (
                f"{msg.method} came on the session's GET stream, naming no client request, while this "
                "session's only calls wait for their clients' retries: the proxy cannot ask those "
                "clients now"
            )
            said = Log("bridge_unassociated_request", "warning", {**fields, "hint": PARKED_HINT})
            return [said, *self._refuse(leg, msg, UNPLACED, text)]
        if len(waiting) + len(parked) > 1:
            return self._ambiguous(leg, msg, [*waiting, *parked], fields)
        call = waiting[0]
        log = Log("bridge_stream_request_placed", "info", {**fields, "call": name_of(call)})
        return [log, *self._rounds.on_nested(call, msg, None)]

    def _ambiguous(self, leg: str, msg: Message, owners: list[Call], fields: dict[str, Any]) -> Commands:
        """Refuse a question several calls could own (waiting or parked); each notes it in its answer."""
        link = self._ctx.pool.named(owners[0].session or "")
        if link is not None and link.connection:
            text = own_calls_text(msg.method or "", owners, self._ctx.ttl)
        else:
            text = (
                f"{msg.method} came on the session's GET stream, naming no client request, while "
                f"{len(owners)} calls are in flight on this session: the proxy cannot tell whose it is "
                f"({ONE_STREAM})"
            )
        calls = [name_of(call) for call in owners]
        for call in owners:
            if len(call.notes) < MAX_CALL_NOTES:  # a server asking on and on says it once per few
                call.notes.append(
                    f"the server asked {msg.method} on its session's GET stream while {len(owners)} "
                    f"calls were in flight ({', '.join(calls)}); the proxy refused it, since it could "
                    "not tell whose it was"
                )
        hint = OWN_CALLS_HINT if link is not None and link.connection else HINT
        said = Log("bridge_stream_request_ambiguous", "warning", {**fields, "calls": calls, "hint": hint})
        return [said, *self._refuse(leg, msg, UNPLACED, text)]

    def _withdraw(self, session: str, msg: Message) -> Commands | None:
        asked = msg.params.get("requestId")
        holder = self._holding(session, asked)
        return self._rounds.withdraw(holder, asked) if holder is not None else None

    def _holding(self, session: str, asked: object) -> Call | None:
        """The call of `session` in flight that holds the server's request `asked`, if any."""
        for call in calls_in_flight(self._ctx, session):
            if any(n.upstream_id == asked for n in (*call.collecting, *call.asked.values())):
                return call
        return None


def name_of(call: Call) -> str:
    """How log lines and notes name a call: its upstream request's id, which its chain's upstream
    messages carry (a chain search finds it) and `/api/continuations` lists beside its chain id."""
    return str(call.upstream_id or call.key)


def own_calls_text(method: str, owners: list[Call], ttl: float) -> str:
    """The refusal's text on a session of one client connection (`per_connection`): the calls are
    that client's own, so it says which are parked and until when, and what clears it."""
    parked = [call for call in owners if call.phase == "parked"]
    text = (
        f"{method} came on the session's GET stream, naming no client request, while {len(owners)} "
        "calls of this connection are in flight on its own upstream session: the proxy cannot tell "
        "which it is for"
    )
    if not parked:
        return f"{text} (one call at a time avoids this)"
    said = ", ".join(
        f"{name_of(call)}, parked at {_clock(call.parked_at)} until {_clock(call.parked_at + ttl)} "
        "at the latest (continuation_ttl)"
        if call.parked_at > 0.0
        else name_of(call)
        for call in parked
    )
    return (
        f"{text}; {len(parked)} of them this connection's own call waiting for the retry of its "
        f"input_required round ({said}): retrying that round clears this, and so does its expiry"
    )


def _clock(epoch: float) -> str:
    """The time of day (UTC) of an epoch time, as log lines show times (no clock is read)."""
    seconds = int(epoch) % 86400
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d} UTC"


def calls_in_flight(ctx: MrtrContext, session: str, *, any_method: bool = False) -> list[Call]:
    """The calls of `session` that may hold a GET-stream request, oldest first: upstream request
    open, method able to ask the client (`input_required`; every method with `any_method`), running
    or parked."""
    return [
        call
        for call in ctx.calls.values()
        if call.session == session and call.leg is not None and (any_method or call.method in MRTR_METHODS)
    ]


def calls_asking(ctx: MrtrContext, session: str, *, any_method: bool = False) -> list[Call]:
    """The calls of `session` a GET-stream request may join, oldest first: in flight, and their
    client waiting for the answer (not parked for a retry)."""
    in_flight = calls_in_flight(ctx, session, any_method=any_method)
    return [call for call in in_flight if call.phase in ("running", "collecting")]


def calls_parked(ctx: MrtrContext, session: str) -> list[Call]:
    """The calls of `session` parked for a retry whose upstream request may still ask, oldest first:
    never asked a GET-stream question, but each could be its owner."""
    return [call for call in calls_in_flight(ctx, session) if call.phase == "parked"]


def sole_owner(ctx: MrtrContext, session: str) -> Call | None:
    """The call a GET-stream question of `session` is given to: the one waiting call, when no other
    call (waiting, or parked for a retry) could own it; None otherwise."""
    waiting = calls_asking(ctx, session)
    if len(waiting) != 1 or calls_parked(ctx, session):
        return None
    return waiting[0]
