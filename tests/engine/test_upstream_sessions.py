"""The MRTR->legacy bridge's upstream sessions, Playbook style: one per principal and capability set.

Builders come from `test_mrtr_to_legacy` (deterministic ids: `upstream-N` sessions, `leg-N` legs).
Alice is the default caller (`AUTH`), Bob has credentials of his own; `open_session` plays the
upstream's side of a handshake and returns what the engine did when it completed.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any
from unittest.mock import ANY

from proxy.engine.commands import (
    CancelTimer,
    CloseLeg,
    DeleteSession,
    Log,
    ObserveSession,
    OpenLegStream,
    ReplyJson,
    SendLeg,
    SendSse,
    StartSse,
    StartTimer,
)
from proxy.engine.events import (
    ClientConnectionClosed,
    ClientRequestReceived,
    LegEnded,
    LegFailed,
    LegResponded,
    Stopping,
    TimerFired,
)
from proxy.engine.modern_client.engine import MrtrToLegacyEngine
from proxy.engine.modern_client.sessions import LOST_THEN, ORPHAN_WHY, SHARED_HINT, lost_why
from tests.engine.builders import UNREACHABLE_HINT
from tests.engine.playbook import Playbook
from tests.engine.test_mrtr_to_legacy import (
    ACCEPT,
    ARGS,
    AUTH,
    DONE,
    FORM,
    KEY,
    LEGACY_CAPS_ALL,
    RESUMED,
    ROUND_LOG,
    SESSION,
    UPSTREAM,
    Counter,
    call,
    complete,
    drained,
    err,
    head,
    idle_timer,
    initialize,
    input_required,
    leg,
    legacy_headers,
    note,
    ok,
    open_session,
    park,
    ready_engine,
    req,
    send,
    state,
    tagged,
    up,
)

BOB = ("Authorization", "Bearer bob")
BOB_SESSION = "up-session-bob"
DEPLOY = {"name": "deploy", "arguments": ARGS}
ALL = "elicitation.form elicitation.url sampling sampling.tools roots"
FULL = (
    "The proxy already holds max_upstream_sessions=1 sessions with the legacy upstream and every one is "
    "in use; retry when a call has finished, or raise max_upstream_sessions (one session per caller, or "
    "per connection of a caller without credentials, and declared capability set)."
)

LOST_SESSION = {"session": "upstream-1", "generation": 1, "why": lost_why("404"), "then": LOST_THEN}


def principal(auth: tuple[str, str] | None) -> str:
    """How views show a caller: the first 16 hex digits of the SHA-256 of its `Authorization`."""
    return hashlib.sha256(auth[1].encode()).hexdigest()[:16] if auth else "anonymous"


def engine_with(**options: Any) -> MrtrToLegacyEngine:
    return MrtrToLegacyEngine(UPSTREAM, Counter(), state_key=KEY, **options)


def delete(leg_id: str, session: str = SESSION, auth: tuple[str, str] | None = AUTH) -> DeleteSession:
    """The DELETE that ends `session` upstream, with the credentials that opened it."""
    head = (("MCP-Protocol-Version", "2025-11-25"), ("Mcp-Session-Id", session))
    return DeleteSession(leg_id, (*head, *((auth,) if auth else ())))


def closed(
    name: str, why: str, caps: str = ALL, auth: tuple[str, str] | None = AUTH, connection: str | None = None
) -> Log:
    fields = {"session": name, "principal": principal(auth), "capabilities": caps, "why": why}
    return Log("upstream_session_closed", "info", fields | ({"connection": connection} if connection else {}))


def on(connection: str, event: ClientRequestReceived) -> ClientRequestReceived:
    """The same request, come on client connection `connection`."""
    return replace(event, connection=connection)


# -- whose session ----------------------------------------------------------------------------------


def test_two_principals_get_two_sessions_each_opened_and_used_with_its_own_credentials() -> None:
    engine = engine_with()

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << idle_timer(1)
        << initialize("leg-1", "x1", LEGACY_CAPS_ALL)
        >> call("x2", 2, auth=BOB)
        << idle_timer(2)
        << initialize("leg-2", "x2", LEGACY_CAPS_ALL, auth=BOB)
    )
    assert open_session(engine, "x1", init="leg-1", notify="leg-3") == [
        leg("leg-4", "x1", "tools/call", DEPLOY)
    ]
    assert open_session(engine, "x2", init="leg-2", notify="leg-5", session=BOB_SESSION) == [
        SendLeg(
            "leg-6",
            "x2",
            legacy_headers(auth=BOB, session=BOB_SESSION),
            leg("leg-6", "x2", "tools/call", DEPLOY).message,
        )
    ]
    view = engine.sessions_view()
    assert [(s["session"], s["principal"], s["capabilities"], s["users"]) for s in view] == [
        ("upstream-1", principal(AUTH), ALL, 1),
        ("upstream-2", principal(BOB), ALL, 1),
    ]
    for secret in (SESSION, BOB_SESSION, "Bearer"):
        assert secret not in repr(view)
    assert drained(engine, upstream_sessions=2, calls=2, serving=2, legs=2)


def test_callers_without_credentials_get_sessions_of_their_own_connection_per_capability_set() -> None:
    """A server keeps state per session (the roots it asked for, say): anonymous clients, known by
    nothing but their connections, never share one."""
    engine = engine_with(anonymous_per_connection=True)
    sampling_only = {"sampling": {}}

    assert (
        Playbook(engine)
        >> on("c1", call("x1", 1, auth=None))
        << idle_timer(1)
        << initialize("leg-1", "x1", LEGACY_CAPS_ALL, auth=None)
        >> on("c1", call("x2", 2, auth=None))
        >> on("c2", call("x3", 3, auth=None))
        << idle_timer(2)
        << initialize("leg-2", "x3", LEGACY_CAPS_ALL, auth=None)
        >> on("c1", call("x4", 4, auth=None, caps=sampling_only))
        << idle_timer(3)
        << initialize("leg-3", "x4", {"sampling": {}}, auth=None)
    )
    assert open_session(engine, "x1", init="leg-1", notify="leg-4") == [
        leg("leg-5", "x1", "tools/call", DEPLOY, auth=None),
        leg("leg-6", "x2", "tools/call", DEPLOY, auth=None),
    ]
    assert [(s["principal"], s["connection"], s["capabilities"]) for s in engine.sessions_view()] == [
        ("anonymous", "c1", ALL),
        ("anonymous", "c2", ALL),
        ("anonymous", "c1", "sampling"),
    ]


def shared_warning(session: str = "upstream-1") -> Log:
    fields = {
        "session": session,
        "capabilities": ALL,
        "anonymous_upstream_sessions": "shared",
        "hint": SHARED_HINT,
    }
    return Log("anonymous_upstream_session_shared", "warning", fields)


def test_by_default_anonymous_callers_share_one_session_and_a_second_connection_is_warned_of_once() -> None:
    """One developer's client keeps the server's per-session state whatever connections it uses; the
    first time two open connections use the session, a warning names the setting that keeps clients
    apart, and never again for that session."""
    engine = engine_with()

    assert (
        Playbook(engine)
        >> on("c1", call("x1", 1, auth=None))
        << idle_timer(1)
        << initialize("leg-1", "x1", LEGACY_CAPS_ALL, auth=None)
        >> on("c1", call("x2", 2, auth=None))
        >> on("c2", call("x3", 3, auth=None))
        << shared_warning()
        >> on("c3", call("x4", 4, auth=None))
        >> on("c2", call("x5", 5, auth=None))
    )
    assert [(s["principal"], s["connection"]) for s in engine.sessions_view()] == [("anonymous", None)]


def test_a_connection_using_the_shared_session_after_the_first_one_closed_is_not_warned_of() -> None:
    """The same client reconnecting (its keep-alive connection closed) is no second client."""
    engine = engine_with()
    engine.handle(on("c1", send("x1", 1, "server/discover", auth=None)))
    open_session(engine, "x1", init="leg-1", notify="leg-2")

    assert (
        Playbook(engine)
        >> ClientConnectionClosed("c1")  # the shared session stays
        >> on("c2", send("x2", 2, "server/discover", auth=None))
        << ReplyJson("x2", 200, ANY)
        >> on("c3", send("x3", 3, "server/discover", auth=None))
        << ReplyJson("x3", 200, ANY)
        << shared_warning()
    )


def test_a_principal_keeps_one_session_whatever_connection_its_requests_come_on() -> None:
    engine = engine_with()

    assert (
        Playbook(engine)
        >> on("c1", call("x1", 1))
        << idle_timer(1)
        << initialize("leg-1", "x1", LEGACY_CAPS_ALL)
        >> on("c2", call("x2", 2))
    )
    assert open_session(engine, "x1", init="leg-1", notify="leg-2") == [
        leg("leg-3", "x1", "tools/call", DEPLOY),
        leg("leg-4", "x2", "tools/call", DEPLOY),
    ]
    assert [(s["principal"], s["connection"]) for s in engine.sessions_view()] == [(principal(AUTH), None)]


def test_the_idle_session_of_a_closed_connection_is_deleted_upstream_at_once() -> None:
    engine = engine_with(anonymous_per_connection=True)
    engine.handle(on("c1", send("x1", 1, "server/discover", auth=None)))
    open_session(engine, "x1", init="leg-1", notify="leg-2")

    assert (
        Playbook(engine, hide=())
        >> ClientConnectionClosed("c2")  # no session of its own: nothing to do
        >> ClientConnectionClosed("c1")
        << closed("upstream-1", ORPHAN_WHY, auth=None, connection="c1")
        << delete("leg-3", auth=None)
        << CancelTimer("session-idle:upstream-1")
        << ObserveSession("upstream-1", "ended", "anonymous", ALL, "2025-11-25")
        >> LegResponded("leg-3", 200, ())
        >> LegEnded("leg-3")
    )
    assert drained(engine, upstream_sessions=0)


def test_a_call_parked_on_a_closed_connections_session_resumes_from_another_and_then_the_session_closes() -> (
    None
):
    engine = engine_with(anonymous_per_connection=True)
    engine.handle(on("c1", send("x0", 0, "server/discover", auth=None)))
    open_session(engine, "x0")
    engine.handle(on("c1", call("x1", 1, auth=None)))
    engine.handle(head("leg-3"))
    engine.handle(up("leg-3", req("e1", "elicitation/create", FORM)))
    engine.handle(TimerFired("round:call-1"))  # parked: its client has its input_required round
    token = state(auth=None)

    assert (
        Playbook(engine)
        >> ClientConnectionClosed("c1")  # the parked call still uses the session
        >> on("c2", call("x2", 2, auth=None, requestState=token, inputResponses={"elicitation-1": ACCEPT}))
        << CancelTimer("ttl:call-1")
        << RESUMED
        << SendLeg("leg-4", "x2", legacy_headers(auth=None), ok("e1", ACCEPT), "leg-3")
        >> up("leg-3", ok("leg-3", DONE))
        << ROUND_LOG
        << ReplyJson("x2", 200, complete(2, DONE))
        << closed("upstream-1", ORPHAN_WHY, auth=None, connection="c1")
        << delete("leg-5", auth=None)
        << CancelTimer("session-idle:upstream-1")
    )
    assert [s["connection"] for s in engine.sessions_view()] == []  # the retry's connection opened none
    assert drained(engine, upstream_sessions=0, legs=2)


def test_a_client_without_elicitation_gets_a_session_whose_server_takes_its_fallback_path() -> None:
    """The session declares sampling only, so a legacy server that checks asks for sampling instead."""
    sampling_only = {"sampling": {}}
    engine = ready_engine(sampling_only)
    question = {"messages": [{"role": "user", "content": {"type": "text", "text": "Say hi"}}], "maxTokens": 5}

    assert (
        Playbook(engine)
        >> call("x1", 1, caps=sampling_only)
        << leg("leg-3", "x1", "tools/call", DEPLOY)
        >> up("leg-3", req("s1", "sampling/createMessage", question))
        << StartTimer("round:call-1", 0.02)
        >> TimerFired("round:call-1")
        << ROUND_LOG
        << ReplyJson(
            "x1",
            200,
            input_required(
                1, {"sampling-1": {"method": "sampling/createMessage", "params": question}}, state()
            ),
        )
        << StartTimer("ttl:call-1", 300.0)
    )
    assert engine.sessions_view()[0]["capabilities"] == "sampling"


# -- bounds ---------------------------------------------------------------------------------------


def test_past_the_bound_the_least_recently_used_idle_session_is_deleted_to_make_room() -> None:
    engine = engine_with(max_sessions=2)
    engine.handle(send("x1", 1, "server/discover"))
    open_session(engine, "x1", init="leg-1", notify="leg-2")
    engine.handle(send("x2", 2, "server/discover", caps={"sampling": {}}))
    open_session(engine, "x2", init="leg-3", notify="leg-4", session="up-session-2")

    assert (
        Playbook(engine, hide=())
        >> send("x3", 3, "server/discover")  # upstream-1 is now the most recently used
        << ReplyJson("x3", 200, ANY)
        >> call("x4", 4, caps={"roots": {}})
        << closed("upstream-2", "evicted: max_upstream_sessions reached", caps="sampling")
        << delete("leg-5", "up-session-2")
        << CancelTimer("session-idle:upstream-2")
        << idle_timer(3)
        << initialize("leg-6", "x4", {"roots": {}})
        << ObserveSession("upstream-2", "ended", principal(AUTH), "sampling", "2025-11-25")
        >> LegResponded("leg-5", 204, ())
        >> LegEnded("leg-5")
    )
    assert [s["session"] for s in engine.sessions_view()] == ["upstream-1", "upstream-3"]
    assert drained(engine, upstream_sessions=2, calls=1, serving=1, waiting=1, legs=1)


def test_when_every_session_is_busy_a_new_caller_is_refused_with_the_setting_named() -> None:
    engine = engine_with(max_sessions=1)
    full = Log("upstream_sessions_full", "warning", {"kind": ANY, "max_upstream_sessions": 1})

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << idle_timer()
        << ANY
        >> call("x2", 2, auth=BOB)
        << full
        << ReplyJson("x2", 503, err(2, -32000, FULL))
        >> send("x3", 3, "server/discover", auth=BOB)
        << full
        << ReplyJson("x3", 503, err(3, -32000, FULL))
        >> send("x4", 4, "subscriptions/listen", {"notifications": {}}, auth=BOB)
        << full
        << ReplyJson("x4", 503, err(4, -32000, FULL))
    )
    assert drained(engine, calls=1, serving=1, waiting=1, legs=1)


# -- idle expiry ----------------------------------------------------------------------------------


def test_a_session_unused_for_a_whole_ttl_is_deleted_and_the_next_caller_opens_a_new_one() -> None:
    engine = ready_engine(session_ttl=30.0)
    idle = TimerFired("session-idle:upstream-1")

    assert (
        Playbook(engine, hide=())
        >> idle  # the discover that opened it used it during this period
        << StartTimer("session-idle:upstream-1", 30.0)
        >> idle
        << closed("upstream-1", "unused for upstream_session_ttl=30s")
        << delete("leg-3")
        << ObserveSession("upstream-1", "expired", principal(AUTH), ALL, "2025-11-25")
        >> LegResponded("leg-3", 405, ())  # a server may not offer DELETE: nothing to report
        >> LegEnded("leg-3")
        >> call("x1", 1)
        << idle_timer(2, 30.0)
        << initialize("leg-4", "x1", LEGACY_CAPS_ALL)
    )


def test_a_session_in_use_is_never_expired_and_its_last_use_restarts_the_count() -> None:
    engine = ready_engine(session_ttl=30.0)
    park(engine)
    idle = TimerFired("session-idle:upstream-1")
    again = StartTimer("session-idle:upstream-1", 30.0)

    assert (
        Playbook(engine)
        >> idle
        << again
        >> idle  # unused for a whole period, but the parked call still uses it
        << again
        >> call("x2", 2, requestState=state(), inputResponses={"elicitation-1": ACCEPT})
        << CancelTimer("ttl:call-1")
        << RESUMED
        << SendLeg("leg-4", "x2", legacy_headers(), ok("e1", ACCEPT), "leg-3")
        >> up("leg-3", ok("leg-3", DONE))
        << ROUND_LOG
        << ReplyJson("x2", 200, complete(2, DONE))
        >> idle  # the call ended during this period
        << again
        >> idle
        << closed("upstream-1", "unused for upstream_session_ttl=30s")
        << delete("leg-5")
    )


def test_a_session_without_an_upstream_id_is_forgotten_without_a_delete() -> None:
    engine = engine_with(session_ttl=30.0)
    engine.handle(send("x0", 0, "server/discover"))
    open_session(engine, session=None)
    idle = TimerFired("session-idle:upstream-1")

    assert (
        Playbook(engine)
        >> idle
        << StartTimer("session-idle:upstream-1", 30.0)
        >> idle
        << closed("upstream-1", "unused for upstream_session_ttl=30s")
    )
    assert drained(engine, upstream_sessions=0)


def test_a_refused_or_failed_delete_is_logged() -> None:
    engine = ready_engine(session_ttl=30.0)
    engine.handle(TimerFired("session-idle:upstream-1"))
    engine.handle(TimerFired("session-idle:upstream-1"))  # DELETE on leg-3
    engine.handle(send("x1", 1, "server/discover", caps={}))
    open_session(engine, "x1", init="leg-4", notify="leg-5", session="up-session-2")
    engine.handle(TimerFired("session-idle:upstream-2"))

    assert (
        Playbook(engine)
        >> LegResponded("leg-3", 500, ())
        << Log("upstream_session_delete_refused", "warning", {"leg": "leg-3", "status": 500})
        >> LegEnded("leg-3")
        >> TimerFired("session-idle:upstream-2")
        << closed("upstream-2", "unused for upstream_session_ttl=30s", caps="none")
        << delete("leg-6", "up-session-2")
        >> LegFailed("leg-6", "unreachable", "refused")
        << Log(
            "upstream_session_delete_failed",
            "warning",
            {"leg": "leg-6", "why": "the upstream MCP server is unreachable: refused" + UNREACHABLE_HINT},
        )
    )
    assert drained(engine, upstream_sessions=0)


def test_when_the_proxy_stops_every_session_is_deleted_upstream_once() -> None:
    engine = ready_engine()
    engine.handle(call("x1", 1, auth=BOB))
    open_session(engine, "x1", init="leg-3", notify="leg-4", session=BOB_SESSION)
    ended = "upstream_session_ended"

    assert (
        Playbook(engine)
        >> Stopping()
        << Log(ended, "info", {"session": "upstream-1", "principal": principal(AUTH), "capabilities": ALL})
        << delete("leg-6")
        << Log(ended, "info", {"session": "upstream-2", "principal": principal(BOB), "capabilities": ALL})
        << delete("leg-7", BOB_SESSION, BOB)
        >> Stopping()
    )


# -- loss -----------------------------------------------------------------------------------------


def test_a_lost_session_kills_only_the_calls_parked_on_it() -> None:
    engine = ready_engine()
    park(engine)  # Alice's call-1 on upstream-1, leg-3
    engine.handle(call("x2", 2, auth=BOB))  # upstream-2: initialize on leg-4
    open_session(engine, "x2", init="leg-4", notify="leg-5", session=BOB_SESSION)  # call on leg-6
    engine.handle(up("leg-6", req("e9", "elicitation/create", FORM)))
    engine.handle(TimerFired("round:call-2"))
    bob_state = state(continuation="continuation-2", auth=BOB)

    assert (
        Playbook(engine)
        >> call("x3", 3, name="other")
        << leg("leg-7", "x3", "tools/call", {"name": "other", "arguments": ARGS})
        >> LegResponded("leg-7", 404, ())
        << CloseLeg("leg-7")
        << Log(
            "upstream_session_lost",
            "warning",
            {"session": "upstream-1", "generation": 1, "why": lost_why("404"), "then": LOST_THEN},
        )
        << Log(
            "bridge_continuation_dead",
            "warning",
            {"call": "call-1", "continuation": "continuation-1", "why": ANY},
        )
        << CancelTimer("ttl:call-1")
        << CloseLeg("leg-3")
        << initialize("leg-8", "x3", LEGACY_CAPS_ALL)
        >> call("x4", 4, auth=BOB, requestState=bob_state, inputResponses={"elicitation-1": ACCEPT})
        << CancelTimer("ttl:call-2")
        << RESUMED
        << SendLeg("leg-9", "x4", legacy_headers(auth=BOB, session=BOB_SESSION), ok("e9", ACCEPT), "leg-6")
        >> call("x5", 5, requestState=state(), inputResponses={"elicitation-1": ACCEPT})
        << Log("bridge_retry_of_ended_call", "info", ANY)
        << ReplyJson("x5", 502, ANY)
    )


NO_SESSION = "Bad Request: No valid session ID provided"
"""What the TypeScript SDK's servers answer, with HTTP 400, to a session they do not know."""


def no_session() -> dict[str, Any]:
    return {"jsonrpc": "2.0", "error": {"code": -32000, "message": NO_SESSION}, "id": None}


def test_a_400_whose_error_names_no_request_is_a_lost_session_and_the_call_goes_again() -> None:
    engine = ready_engine()
    park(engine)  # call-1 on upstream-1, leg-3

    assert (
        Playbook(engine)
        >> call("x3", 3, name="other")
        << leg("leg-4", "x3", "tools/call", {"name": "other", "arguments": ARGS})
        >> LegResponded("leg-4", 400, (("Content-Type", "application/json"),))
        >> up("leg-4", no_session())
        << CloseLeg("leg-4")
        << Log(
            "upstream_session_lost",
            "warning",
            {
                "session": "upstream-1",
                "generation": 1,
                "why": lost_why(f"400 ({NO_SESSION})"),
                "then": LOST_THEN,
            },
        )
        << Log(
            "bridge_continuation_dead",
            "warning",
            {"call": "call-1", "continuation": "continuation-1", "why": ANY},
        )
        << CancelTimer("ttl:call-1")
        << CloseLeg("leg-3")
        << initialize("leg-5", "x3", LEGACY_CAPS_ALL)
    )


def test_a_400_again_after_the_new_session_reaches_the_client_in_the_servers_words() -> None:
    engine = ready_engine()
    engine.handle(call("x1", 1))
    engine.handle(LegResponded("leg-3", 400, (("Content-Type", "application/json"),)))
    engine.handle(up("leg-3", no_session()))
    open_session(engine, "x1", init="leg-4", notify="leg-5", session="up-session-2")

    assert (
        Playbook(engine)
        >> LegResponded("leg-6", 400, (("Content-Type", "application/json"),))
        >> up("leg-6", no_session())
        << Log("bridge_upstream_dropped", "warning", {"leg": "leg-6", "why": "a response for id None"})
    )
    replies = [c for c in engine.handle(LegEnded("leg-6")) if isinstance(c, ReplyJson)]
    assert [(r.exchange, r.status) for r in replies] == [("x1", 502)]
    assert f"(HTTP 400: {NO_SESSION})" in replies[0].message["error"]["message"]


def test_a_400_that_answers_the_call_is_its_answer_and_the_session_stays() -> None:
    engine = ready_engine()
    engine.handle(call("x1", 1))
    refused = err("leg-3", -32602, "Invalid params")

    assert (
        Playbook(engine)
        >> LegResponded("leg-3", 400, (("Content-Type", "application/json"),))
        >> up("leg-3", refused)
        << Log("bridge_round", "info", ANY)
        << ReplyJson(
            "x1", 400, {"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "Invalid params"}}
        )
    )
    assert engine.table_sizes()["upstream_sessions"] == 1


# -- listen streams -------------------------------------------------------------------------------


def test_listeners_hear_only_their_own_sessions_notifications() -> None:
    engine = ready_engine()
    engine.handle(send("x9", 9, "server/discover", auth=BOB))
    open_session(engine, "x9", init="leg-3", notify="leg-4", session=BOB_SESSION)
    changed = note("notifications/tools/list_changed")
    ack = tagged(
        note("notifications/subscriptions/acknowledged", {"notifications": {"toolsListChanged": True}}), 1
    )
    bob_stream = (
        ("Accept", "text/event-stream"),
        ("MCP-Protocol-Version", "2025-11-25"),
        ("Mcp-Session-Id", BOB_SESSION),
        BOB,
    )

    assert (
        Playbook(engine)
        >> send("x1", 1, "subscriptions/listen", {"notifications": {"toolsListChanged": True}})
        << StartSse("x1")
        << SendSse("x1", ack)
        << OpenLegStream("leg-5", "x1", ANY)
        >> send("x2", 1, "subscriptions/listen", {"notifications": {"toolsListChanged": True}}, auth=BOB)
        << StartSse("x2")
        << SendSse("x2", ack)
        << OpenLegStream("leg-6", "x2", bob_stream)
        >> up("leg-6", changed)
        << SendSse("x2", tagged(changed, 1))
        >> call("x3", 3)
        << leg("leg-7", "x3", "tools/call", DEPLOY)
        >> up("leg-7", changed)
        << SendSse("x1", tagged(changed, 1))
    )
    assert drained(engine, upstream_sessions=2, listeners=2, stream_legs=2, legs=3, calls=1, serving=1)


def test_a_stream_that_answered_and_then_could_not_be_reached_quotes_no_status_with_that() -> None:
    engine = ready_engine()
    engine.handle(send("x1", 1, "subscriptions/listen", {"notifications": {"toolsListChanged": True}}))
    engine.handle(LegResponded("leg-3", 200, (("Content-Type", "text/event-stream"),)))

    lost = engine.handle(LegFailed("leg-3", "unreachable", "[Errno 111] Connection refused"))

    (ended,) = [c for c in lost if isinstance(c, Log) and c.event == "bridge_listen_stream_ended"]
    assert ended.fields["why"].startswith("the upstream MCP server is unreachable: [Errno 111]")
    assert "HTTP" not in ended.fields["why"]
