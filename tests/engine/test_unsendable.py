"""What a bridge does with a request no upstream head can carry: the client's 400, never a 502.

Classification already refuses an implausible method, so these feed the engines directly with what
only a future gap could let through: the header builder's refusal, and the pool's (a leg that failed
as `unsendable`). Either way the client hears -32600 with its id and the field, and nothing is left
in the bridge's tables.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from proxy.engine.commands import Log, ReplyJson
from proxy.engine.events import ClientRequestReceived, LegFailed
from proxy.wire.jsonrpc import Body, Kind, Message
from proxy.wire.jsonrpc import request as req
from tests.engine import test_legacy_to_mrtr as legacy
from tests.engine import test_mrtr_to_legacy as modern


def with_method(event: ClientRequestReceived, method: str) -> ClientRequestReceived:
    """The event with its message's method replaced after classification (which would refuse it)."""
    first = event.route.body.first
    assert first is not None
    raw: dict[str, Any] = {**first.raw, "method": method}
    body = Body((Message(Kind.REQUEST, raw, id=first.id, method=method),))
    return dataclasses.replace(event, route=dataclasses.replace(event.route, body=body))


def test_the_legacy_bridge_refuses_a_method_mcp_method_cannot_carry_and_keeps_nothing() -> None:
    engine = legacy.session_engine()
    event = with_method(
        legacy.post("x1", req(5, "tools/call", {"name": "t", "arguments": {}})), "tools/call\r\nX: 1"
    )

    commands = engine.handle(event)

    reply = commands[-1]
    assert isinstance(reply, ReplyJson)
    assert reply.status == 400
    assert reply.message is not None
    assert reply.message["id"] == 5
    assert reply.message["error"]["code"] == -32600
    assert reply.message["error"]["data"] == {"field": "Mcp-Method"}
    assert isinstance(commands[0], Log)
    assert legacy.drained(engine, sessions=1)


def test_a_legacy_bridge_leg_the_pool_could_not_frame_is_the_clients_400() -> None:
    engine = legacy.session_engine()
    engine.handle(legacy.call("x1", 6))

    commands = engine.handle(LegFailed("leg-2", "unsendable", "control character in the value of header X"))

    reply = commands[-1]
    assert isinstance(reply, ReplyJson)
    assert reply.status == 400
    assert reply.message is not None
    assert reply.message["id"] == 6
    assert reply.message["error"]["code"] == -32600
    assert "control character" in reply.message["error"]["message"]
    assert legacy.drained(engine, sessions=1)


def test_a_modern_bridge_leg_the_pool_could_not_frame_is_the_clients_400() -> None:
    engine = modern.ready_engine()
    engine.handle(modern.call("x1", 7))

    commands = engine.handle(LegFailed("leg-3", "unsendable", "control character in the value of header X"))

    reply = next(c for c in commands if isinstance(c, ReplyJson))
    assert reply.status == 400
    assert reply.message is not None
    assert reply.message["id"] == 7
    assert reply.message["error"]["code"] == -32600
    assert modern.drained(engine)
