"""Log messages on the MRTR->legacy bridge's session GET stream, Playbook style.

The TypeScript SDK 1.x's `server.sendLoggingMessage(params, sessionId)` logs on the session's GET
stream, naming no request. A 2026-07-28 client is sent a log message only on a request that asked
(`_meta` `logLevel`), so such a message goes to the session's one call whose client waits for its
answer when that call's level admits it, filed in its chain (`joins`); with several such calls, none
(they may be different clients'), and on the shared anonymous session none at all (its one call may
be another client's than the one whose call logged); what no call takes stays on the stream. The
session, its GET stream (`leg-3`) and the first call's leg (`leg-4`) are as in `test_session_stream`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from unittest.mock import ANY

from proxy.engine.commands import SendSse, StartSse
from proxy.engine.modern_client.engine import MrtrToLegacyEngine
from proxy.wire.jsonrpc import classify_value
from proxy.wire.jsonrpc import notification as note
from proxy.wire.jsonrpc import result_response as ok
from tests.engine.builders import up
from tests.engine.playbook import Playbook, protocol
from tests.engine.test_mrtr_to_legacy import (
    DONE,
    KEY,
    ROUND_LOG,
    UPSTREAM,
    Counter,
    call,
    complete,
    head,
    open_session,
    send,
    tool_leg,
)
from tests.engine.test_session_stream import STREAM, engine, parked_on_leg_4

LEVEL = "io.modelcontextprotocol/logLevel"


def log(level: str, data: str) -> dict[str, Any]:
    """A legacy server's log message."""
    return note("notifications/message", {"level": level, "data": data})


def joins(bridge: MrtrToLegacyEngine, message: dict[str, Any]) -> str | None:
    """The leg whose chain the message on the GET stream would join (asked before it is handled)."""
    return bridge.joins(STREAM, classify_value(message))


def test_a_log_on_the_get_stream_reaches_the_only_call_in_flight_at_the_level_it_asked() -> None:
    bridge = engine()
    first, second = log("info", "Sending first greeting"), log("info", "Sending second greeting")
    chatter = log("debug", "Starting multi-greet")
    assert (
        Playbook(bridge)
        >> head(STREAM)
        >> call("x1", 1, own={LEVEL: "info"})
        << tool_leg("leg-4", "x1")
        >> head("leg-4")
    )
    assert joins(bridge, chatter) is None  # below the call's level: nobody's, it stays on the stream
    assert joins(bridge, first) == "leg-4"  # filed in the call's chain
    assert (
        Playbook(bridge)
        >> up(STREAM, chatter)
        >> up(STREAM, first)
        << StartSse("x1")
        << SendSse("x1", first)
        >> up(STREAM, second)
        << SendSse("x1", second)
        >> up("leg-4", ok("leg-4", DONE))
        << ROUND_LOG
        << SendSse("x1", complete(1, DONE))
        << ANY  # the response ends
    )
    assert joins(bridge, first) is None  # the call is over: a later log is nobody's


def test_a_get_stream_log_goes_to_no_call_that_did_not_ask_for_logs() -> None:
    bridge = engine()
    assert Playbook(bridge) >> head(STREAM) >> call("x1", 1) << tool_leg("leg-4", "x1")
    assert joins(bridge, log("emergency", "disk on fire")) is None
    assert protocol(bridge.handle(up(STREAM, log("emergency", "disk on fire")))) == []


def test_with_several_calls_in_flight_a_get_stream_log_goes_to_none_since_it_could_be_anyones() -> None:
    """Clients with the same credentials share an upstream session: a log message that names no
    request, while two calls that asked for logs are in flight, could be either client's."""
    bridge = engine()
    assert (
        Playbook(bridge)
        >> head(STREAM)
        >> call("x1", 1, own={LEVEL: "debug"})
        << tool_leg("leg-4", "x1")
        >> send("x2", 2, "tools/list", {"_meta": {LEVEL: "debug"}})
        << ANY  # tools/list on leg-5: its handler may log as well as any tool's
    )
    assert joins(bridge, log("info", "whose?")) is None
    assert protocol(bridge.handle(up(STREAM, log("info", "whose?")))) == []


def test_a_call_parked_for_a_retry_takes_no_get_stream_log_and_the_running_call_does() -> None:
    """A parked call's client has its round and no open response; its server request awaits its
    own answers, so a log on the stream meanwhile is the running call's."""
    bridge = engine()
    parked_on_leg_4(bridge)
    message = log("warning", "late")
    assert joins(bridge, message) is None
    assert protocol(bridge.handle(up(STREAM, message))) == []
    assert (
        Playbook(bridge)
        >> call("x2", 2, name="other", own={LEVEL: "warning"})
        << tool_leg("leg-5", "x2", "other")
        >> head("leg-5")
    )
    assert joins(bridge, message) == "leg-5"
    assert Playbook(bridge) >> up(STREAM, message) << StartSse("x2") << SendSse("x2", message)


def anonymous_engine(connection: str = "") -> MrtrToLegacyEngine:
    """A bridge whose session a caller without `Authorization` opened: shared by every such caller,
    or, given a `connection`, that connection's own (`per_connection`)."""
    bridge = MrtrToLegacyEngine(
        UPSTREAM, Counter(), state_key=KEY, keep_streams=True, anonymous_per_connection=bool(connection)
    )
    bridge.handle(replace(send("x0", 0, "server/discover", auth=None), connection=connection))
    open_session(bridge)
    assert Playbook(bridge) >> head(STREAM)
    return bridge


def test_on_the_shared_anonymous_session_a_get_stream_log_goes_to_no_call_not_even_the_only_one() -> None:
    """Anonymous clients share that session, and the GET stream is not ordered with a call's own: a
    log of client A's call may arrive after A's answer, while client B's call is the only one left."""
    bridge = anonymous_engine()
    assert (
        Playbook(bridge)
        >> call("x1", 1, own={LEVEL: "debug"}, auth=None)
        << ANY  # tools/call on leg-4
        >> head("leg-4")
    )
    message = log("info", "the first client's secret")
    assert joins(bridge, message) is None
    assert protocol(bridge.handle(up(STREAM, message))) == []


def test_on_an_anonymous_session_of_one_connection_a_get_stream_log_reaches_its_only_call() -> None:
    bridge = anonymous_engine("c1")
    asked = replace(call("x1", 1, own={LEVEL: "debug"}, auth=None), connection="c1")
    assert Playbook(bridge) >> asked << ANY >> head("leg-4")
    message = log("info", "mine")
    assert joins(bridge, message) == "leg-4"
    assert Playbook(bridge) >> up(STREAM, message) << StartSse("x1") << SendSse("x1", message)
