"""The legacy-client bridge answers `initialize` from its cached discovery only for a caller the
upstream accepted (its `Origin` and credentials), Playbook style.

Builders and ids come from `test_legacy_to_mrtr` (`leg-N`, `session-N`); the caller with `AUTH` is
the one the server serves, one without `Authorization` (or with another token) is not yet known.
"""

from __future__ import annotations

from typing import Any, Final
from unittest.mock import ANY

import orjson

from proxy.engine.commands import Log, ReplyJson, SendLeg
from proxy.engine.events import ClientRequestReceived, LegEnded, LegResponded
from proxy.engine.legacy_client.engine import LegacyToMrtrEngine
from proxy.engine.origins import refusal
from proxy.wire.jsonrpc import request as req
from proxy.wire.jsonrpc import result_response as ok
from tests.engine.builders import route, up
from tests.engine.playbook import Playbook
from tests.engine.test_legacy_to_mrtr import (
    AUTH,
    CLIENT_INFO,
    DISCOVERY,
    SESSION,
    UPSTREAM,
    Counter,
    head,
    init_result,
    initialize,
    meta,
)

CHALLENGE: Final = ("WWW-Authenticate", 'Bearer error="invalid_token", resource_metadata="http://u/prm"')
WORDS: Final = b'{"error": "invalid_token"}'


def initialize_as(exchange: str, *extra: tuple[str, str]) -> ClientRequestReceived:
    """An `initialize` with only `extra` beside the media headers (no `Authorization` unless given)."""
    params = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": CLIENT_INFO}
    headers = (
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        *extra,
    )
    return ClientRequestReceived(exchange, route("POST", orjson.dumps(req(0, "initialize", params)), headers))


def refused_head(leg: str) -> LegResponded:
    return LegResponded(leg, 401, (("Content-Type", "application/json"), CHALLENGE))


def discover(leg: str) -> dict[str, Any]:
    return req(leg, "server/discover", {"_meta": meta(caps={}, level=None)})


def served() -> LegacyToMrtrEngine:
    """An engine whose discovery the `AUTH` caller fetched (`leg-1`, `session-1`)."""
    engine = LegacyToMrtrEngine(UPSTREAM, Counter())
    engine.handle(initialize("x-init"))
    engine.handle(head("leg-1"))
    assert engine.handle(up("leg-1", ok("leg-1", DISCOVERY)))[-1] == ReplyJson("x-init", 200, ANY, SESSION)
    return engine


def test_a_caller_without_credentials_is_asked_about_upstream_and_gets_the_servers_401_and_challenge() -> (
    None
):
    engine = served()
    said = Log(
        "upstream_refused", "info", {"method": "server/discover", "status": 401, "origin": None, "said": ANY}
    )

    assert (
        Playbook(engine)
        >> initialize_as("x2")
        << SendLeg("leg-2", "x2", ANY, discover("leg-2"))
        >> initialize_as("x3")  # the same caller: it waits for the same discovery
        >> refused_head("leg-2")
        >> LegEnded("leg-2", 0.0, WORDS)
        << said
        << ReplyJson("x2", 401, refusal(0, 401, WORDS), (CHALLENGE,))
        << ReplyJson("x3", 401, refusal(0, 401, WORDS), (CHALLENGE,))
    )


def test_another_token_is_another_caller_and_the_known_one_is_answered_from_the_cache() -> None:
    engine = served()
    other = ("Authorization", "Bearer someone-else")

    assert (
        Playbook(engine)
        >> initialize_as("x2", other)
        << SendLeg("leg-2", "x2", ANY, discover("leg-2"))
        >> initialize_as("x3", AUTH)
        << ReplyJson("x3", 200, ok(0, init_result("2025-11-25", ANY)), (("Mcp-Session-Id", "session-2"),))
        >> head("leg-2")
        >> up("leg-2", ok("leg-2", DISCOVERY))
        << Log("upstream_discovered", "info", {"server": "weather"})
        << ReplyJson("x2", 200, ANY, (("Mcp-Session-Id", "session-3"),))
        >> initialize_as("x4", other)  # accepted now: answered from the cache
        << ReplyJson("x4", 200, ANY, (("Mcp-Session-Id", "session-4"),))
    )
