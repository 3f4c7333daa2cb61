"""The legacy->MRTR bridge engine, Playbook style: each event in, the exact list of commands out.

Ids come from a deterministic counter (`session-1`, `leg-1`, `nested-1`, ...), so expected commands
spell them out. Every client request carries `Authorization`, which must reach every upstream leg.
Each test ends by checking that the engine's tables hold nothing but what legitimately remains.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any
from unittest.mock import ANY

import orjson
import pytest

from proxy.engine.commands import (
    CancelTimer,
    CloseLeg,
    EndClientResponse,
    Log,
    ReplyJson,
    SendLeg,
    SendSse,
    StartSse,
    StartTimer,
)
from proxy.engine.events import (
    AnsweredForClient,
    ClientDisconnected,
    ClientRequestReceived,
    LegEnded,
    LegFailed,
    LegMessage,
    LegResponded,
    TimerFired,
    UpstreamEraProbed,
)
from proxy.engine.legacy_client.engine import LegacyToMrtrEngine
from proxy.framing.http import parse_upstream
from proxy.wire.jsonrpc import classify_value
from proxy.wire.jsonrpc import error_response as err
from proxy.wire.jsonrpc import notification as note
from proxy.wire.jsonrpc import request as req
from proxy.wire.jsonrpc import result_response as ok
from tests.engine.builders import CUT_HINT, UNREACHABLE_HINT, route, up
from tests.engine.playbook import Playbook

# -- builders ---------------------------------------------------------------------------------------

UPSTREAM = parse_upstream("http://upstream.internal:8000/mcp")
AUTH = ("Authorization", "Bearer t0k")
SUB = "io.modelcontextprotocol/subscriptionId"
CLIENT_INFO = {"name": "legacy-client", "version": "1.0"}
SERVER_INFO = {"name": "weather", "version": "2.0"}
SESSION = (("Mcp-Session-Id", "session-1"),)

FULL_CAPS = {
    "elicitation": {"form": {}, "url": {}},
    "sampling": {"tools": {}},
    "roots": {"listChanged": True},
    "tasks": {"requests": {}},
}
"""A 2025-11-25 client that can serve every input kind (and declares legacy tasks)."""

FULL_CAPS_MODERN = {"elicitation": {"form": {}, "url": {}}, "sampling": {"tools": {}}, "roots": {}}
"""FULL_CAPS as declared upstream: legacy `tasks` and `roots.listChanged` dropped."""

DISCOVERY = {
    "resultType": "complete",
    "supportedVersions": ["2026-07-28"],
    "capabilities": {
        "tools": {"listChanged": True},
        "prompts": {},
        "resources": {"subscribe": True, "listChanged": True},
        "completions": {},
        "extensions": {"io.example/x": {}},
    },
    "instructions": "Ask about the weather.",
    "_meta": {"io.modelcontextprotocol/serverInfo": SERVER_INFO},
    "ttlMs": 60000,
    "cacheScope": "public",
}
LEGACY_SERVER_CAPS = {
    "tools": {"listChanged": True},
    "prompts": {},
    "resources": {"subscribe": True, "listChanged": True},
    "completions": {},
    "logging": {},
}
TOOLS = {
    "resultType": "complete",
    "ttlMs": 0,
    "cacheScope": "public",
    "tools": [
        {
            "name": "get_weather",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "x-mcp-header": "City"},
                    "days": {"type": "integer", "x-mcp-header": "Days"},
                    "metric": {"type": "boolean", "x-mcp-header": "Metric"},
                    "note": {"type": "string"},
                },
            },
        }
    ],
}
FORM = {
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "GitHub user?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
    },
}
SAMPLE = {
    "method": "sampling/createMessage",
    "params": {
        "messages": [{"role": "user", "content": {"type": "text", "text": "Capital of France?"}}],
        "maxTokens": 100,
    },
}
ROOTS = {"method": "roots/list", "params": {}}
URL = {"method": "elicitation/create", "params": {"mode": "url", "message": "Log in", "url": "https://x/a"}}
ACCEPT = {"action": "accept", "content": {"name": "octocat"}}
PARIS = {"role": "assistant", "content": {"type": "text", "text": "Paris"}, "model": "m"}
MY_ROOTS = {"roots": [{"uri": "file:///home/u/proj", "name": "proj"}]}
DONE = {"resultType": "complete", "content": [{"type": "text", "text": "done"}]}
DONE_LEGACY = {"content": [{"type": "text", "text": "done"}]}


class Counter:
    """A deterministic `new_id`: `kind-N`, counted per kind."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def __call__(self, kind: str) -> str:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        return f"{kind}-{self.counts[kind]}"


def client_headers(session: str | None, *extra: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    """What a legacy SDK client sends after initialize (plus `extra`)."""
    items = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2025-11-25"),
        AUTH,
    ]
    if session is not None:
        items.append(("Mcp-Session-Id", session))
    return (*items, *extra)


def post(
    exchange: str, message: Any, *extra: tuple[str, str], session: str | None = "session-1"
) -> ClientRequestReceived:
    """The client POSTs one JSON value (a message, a list for a batch, or raw bytes)."""
    body = message if isinstance(message, bytes) else orjson.dumps(message)
    return ClientRequestReceived(exchange, route("POST", body, client_headers(session, *extra)))


def get(exchange: str, session: str | None = "session-1") -> ClientRequestReceived:
    return ClientRequestReceived(exchange, route("GET", b"", client_headers(session)))


def delete(exchange: str, session: str | None = "session-1") -> ClientRequestReceived:
    return ClientRequestReceived(exchange, route("DELETE", b"", client_headers(session)))


def tool_error(ident: Any, text: str) -> dict[str, Any]:
    """How the shims fail a tools/call: a result the model can read."""
    return ok(ident, {"content": [{"type": "text", "text": text}], "isError": True})


def head(leg_id: str, status: int = 200, content_type: str = "application/json") -> LegResponded:
    return LegResponded(leg_id, status, (("Content-Type", content_type),))


def needs_input(requests: dict[str, Any] | None = None, state: str | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {"resultType": "input_required"}
    if requests is not None:
        result["inputRequests"] = requests
    if state is not None:
        result["requestState"] = state
    return result


def meta(caps: dict[str, Any] | None = None, level: str | None = "debug", **own: Any) -> dict[str, Any]:
    """The `_meta` the bridge sends upstream (FULL_CAPS session by default) after the client's own keys;
    `level`: the client's `logging/setLevel`, `debug` (every log message) when it sent none, None on a
    request that asks for no log (`server/discover`)."""
    out: dict[str, Any] = dict(own)
    out["io.modelcontextprotocol/protocolVersion"] = "2026-07-28"
    out["io.modelcontextprotocol/clientCapabilities"] = FULL_CAPS_MODERN if caps is None else caps
    out["io.modelcontextprotocol/clientInfo"] = CLIENT_INFO
    if level is not None:
        out["io.modelcontextprotocol/logLevel"] = level
    return out


def leg(
    leg_id: str,
    exchange: str,
    method: str,
    params: dict[str, Any],
    *,
    param_headers: tuple[tuple[str, str], ...] = (),
    relayed: tuple[tuple[str, str], ...] = (),
) -> SendLeg:
    """The SendLeg the bridge emits: JSON-RPC id = leg id, headers in the bridge's fixed order."""
    headers = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
    ]
    if method in ("tools/call", "prompts/get"):
        headers.append(("Mcp-Name", params["name"]))
    if method == "resources/read":
        headers.append(("Mcp-Name", params["uri"]))
    return SendLeg(leg_id, exchange, (*headers, *param_headers, AUTH, *relayed), req(leg_id, method, params))


def call_params(name: str = "deploy", caps: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """tools/call params as the bridge sends them upstream (first leg unless `extra` adds rounds)."""
    return {"name": name, "arguments": {"env": "prod"}, "_meta": meta(caps), **extra}


def call(exchange: str, ident: Any, name: str = "deploy") -> ClientRequestReceived:
    """The client calls a tool (arguments `{"env": "prod"}`)."""
    return post(exchange, req(ident, "tools/call", {"name": name, "arguments": {"env": "prod"}}))


def initialize(
    exchange: str = "x-init", version: str = "2025-11-25", caps: dict[str, Any] | None = None
) -> ClientRequestReceived:
    params = {
        "protocolVersion": version,
        "capabilities": FULL_CAPS if caps is None else caps,
        "clientInfo": CLIENT_INFO,
    }
    return post(exchange, req(0, "initialize", params), session=None)


def init_result(version: str, caps: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "protocolVersion": version,
        "capabilities": LEGACY_SERVER_CAPS if caps is None else caps,
        "serverInfo": SERVER_INFO,
        "instructions": "Ask about the weather.",
    }


def session_engine(
    version: str = "2025-11-25",
    caps: dict[str, Any] | None = None,
    discovery: dict[str, Any] | None = None,
    **options: Any,
) -> LegacyToMrtrEngine:
    """An engine with `session-1` open (discovery used `leg-1`; test_initialize_* show it in detail)."""
    engine = LegacyToMrtrEngine(UPSTREAM, Counter(), **options)
    engine.handle(initialize(version=version, caps=caps))
    engine.handle(head("leg-1"))
    commands = engine.handle(up("leg-1", ok("leg-1", DISCOVERY if discovery is None else discovery)))
    assert commands[-1] == ReplyJson("x-init", 200, ANY, SESSION)
    return engine


def drained(engine: LegacyToMrtrEngine, **expected: int) -> bool:
    """Every table is empty except the ones named (with those sizes)."""
    sizes = engine.table_sizes()
    want = dict.fromkeys(sizes, 0) | expected
    assert sizes == want, f"tables left behind: {sizes} (expected {want})"
    return True


ROUND_LOG = Log("bridge_round", "info", ANY)
"""Any per-round log line (test_every_round_is_logged_* checks the fields exactly)."""


# -- 1. initialize ---------------------------------------------------------------------------------


def test_initialize_is_answered_locally_from_one_cached_discovery_with_a_new_session_each() -> None:
    engine = LegacyToMrtrEngine(UPSTREAM, Counter())
    discover = req("leg-1", "server/discover", {"_meta": meta(level=None)})
    discover_headers = (
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "server/discover"),
        AUTH,
    )

    assert (
        Playbook(engine)
        >> initialize("x1")
        << SendLeg("leg-1", "x1", discover_headers, discover)
        >> initialize("x2", version="2025-06-18", caps={})
        >> head("leg-1")
        >> up("leg-1", ok("leg-1", DISCOVERY))
        << Log("upstream_discovered", "info", {"server": "weather"})
        << ReplyJson("x1", 200, ok(0, init_result("2025-11-25")), SESSION)
        << ReplyJson("x2", 200, ok(0, init_result("2025-06-18")), (("Mcp-Session-Id", "session-2"),))
        >> LegEnded("leg-1")
        >> initialize("x3", version="2024-11-05")
        << ReplyJson("x3", 200, ok(0, init_result("2024-11-05")), (("Mcp-Session-Id", "session-3"),))
    )
    assert drained(engine, sessions=3)


def test_a_discovery_error_fails_initialize_with_a_readable_internal_error_and_is_not_cached() -> None:
    engine = LegacyToMrtrEngine(UPSTREAM, Counter())
    why = "it answered with error -32601: Method not found"

    assert (
        Playbook(engine)
        >> initialize("x1")
        << ANY
        >> head("leg-1", 404)
        >> up("leg-1", err("leg-1", -32601, "Method not found"))
        << Log("upstream_discovery_failed", "warning", {"why": why})
        << ReplyJson(
            "x1",
            200,
            err(0, -32603, f"Cannot initialize: server/discover to the upstream MCP server failed: {why}"),
        )
        >> LegEnded("leg-1")
        >> initialize("x2")
        << SendLeg("leg-2", "x2", ANY, req("leg-2", "server/discover", {"_meta": meta(level=None)}))
    )
    assert drained(engine, pending_initialize=1, legs=1)


def test_an_unreachable_upstream_fails_every_held_initialize_as_pass_through_fails_a_request() -> None:
    engine = LegacyToMrtrEngine(UPSTREAM, Counter())
    why = "the upstream MCP server is unreachable: connection refused" + UNREACHABLE_HINT
    gone = "upstream_unreachable"

    assert (
        Playbook(engine)
        >> initialize("x1")
        << ANY
        >> initialize("x2")
        >> LegFailed("leg-1", "unreachable", "connection refused")
        << Log("upstream_discovery_failed", "warning", {"why": why})
        << ReplyJson("x1", 502, err(0, -32000, why), outcome=gone)
        << ReplyJson("x2", 502, err(0, -32000, why), outcome=gone)
    )
    assert drained(engine)


def test_a_discovery_is_kept_for_its_ttl_and_for_its_caller_alone_when_private() -> None:
    engine = LegacyToMrtrEngine(UPSTREAM, Counter())
    fetch = SendLeg("leg-2", "x2", ANY, req("leg-2", "server/discover", {"_meta": meta(level=None)}))
    at_time = dataclasses.replace

    assert (
        Playbook(engine)
        >> at_time(initialize("x1"), at=1000.0)
        << ANY
        >> head("leg-1")
        >> LegMessage("leg-1", classify_value(ok("leg-1", {**DISCOVERY, "ttlMs": 5000})), None, 1000.5)
        << Log("upstream_discovered", "info", {"server": "weather"})
        << ReplyJson("x1", 200, ANY, SESSION)
        >> at_time(initialize("x-kept"), at=1005.4)
        << ReplyJson("x-kept", 200, ANY, (("Mcp-Session-Id", "session-2"),))
        >> at_time(initialize("x2"), at=1005.6)  # past its ttlMs: fetched again
        << fetch
    )
    private = LegacyToMrtrEngine(UPSTREAM, Counter())
    mine = {**DISCOVERY, "cacheScope": "private"}
    init = initialize("x-other").route.body.first
    assert init is not None
    other = post("x-other", init.raw, ("Origin", "http://other.example"), session=None)
    assert (
        Playbook(private)
        >> initialize("x1")
        << ANY
        >> head("leg-1")
        >> up("leg-1", ok("leg-1", mine))
        << Log("upstream_discovered", "info", {"server": "weather"})
        << ReplyJson("x1", 200, ANY, SESSION)
        >> initialize("x-same")
        << ReplyJson("x-same", 200, ANY, (("Mcp-Session-Id", "session-2"),))
        >> other  # another caller: its own discovery, private to it
        << SendLeg("leg-2", "x-other", ANY, ANY)
        >> head("leg-2")
        >> up("leg-2", ok("leg-2", mine))
        << Log("upstream_discovered", "info", {"server": "weather"})
        << ReplyJson("x-other", 200, ANY, (("Mcp-Session-Id", "session-3"),))
        >> initialize("x-mine")  # the discovery kept now is the other caller's
        << SendLeg("leg-3", "x-mine", ANY, ANY)
    )


def test_a_discovery_with_ttl_0_or_none_is_fetched_for_each_initialize_and_again_after_an_era_probe() -> None:
    for discovery in ({**DISCOVERY, "ttlMs": 0}, {k: v for k, v in DISCOVERY.items() if k != "ttlMs"}):
        engine = session_engine(discovery=discovery)
        assert (
            Playbook(engine)
            >> initialize("x2")
            << SendLeg("leg-2", "x2", ANY, req("leg-2", "server/discover", {"_meta": meta(level=None)}))
        )
    probed = session_engine()
    assert (
        Playbook(probed)
        >> initialize("x2")
        << ReplyJson("x2", 200, ANY, (("Mcp-Session-Id", "session-2"),))
        >> UpstreamEraProbed(legacy=False, modern=True, label="modern")
        >> initialize("x3")
        << SendLeg("leg-2", "x3", ANY, req("leg-2", "server/discover", {"_meta": meta(level=None)}))
    )


def test_a_discovery_that_ends_without_an_answer_names_the_http_status() -> None:
    engine = LegacyToMrtrEngine(UPSTREAM, Counter())
    why = "the response ended without a JSON-RPC answer (HTTP 502)"

    assert (
        Playbook(engine)
        >> initialize("x1")
        << ANY
        >> head("leg-1", 502, "text/html")
        >> LegEnded("leg-1")
        << Log("upstream_discovery_failed", "warning", {"why": why})
        << ReplyJson(
            "x1",
            200,
            err(0, -32603, f"Cannot initialize: server/discover to the upstream MCP server failed: {why}"),
        )
    )
    assert drained(engine)


def test_a_client_that_leaves_during_discovery_gets_no_session_but_the_discovery_is_cached() -> None:
    engine = LegacyToMrtrEngine(UPSTREAM, Counter())

    assert (
        Playbook(engine)
        >> initialize("x1")
        << ANY
        >> ClientDisconnected("x1")
        << EndClientResponse("x1", "client_disconnected")
        >> up("leg-1", ok("leg-1", DISCOVERY))
        << Log("upstream_discovered", "info", {"server": "weather"})
        >> initialize("x2")
        << ReplyJson("x2", 200, ok(0, init_result("2025-11-25")), SESSION)
    )
    assert drained(engine, sessions=1)


def test_capabilities_without_subscribe_are_not_offered_and_server_info_has_a_fallback() -> None:
    discovery = {"resultType": "complete", "capabilities": {"tools": {}, "resources": {"subscribe": False}}}
    engine = LegacyToMrtrEngine(UPSTREAM, Counter())
    result = {
        "protocolVersion": "2025-06-18",
        "capabilities": {"tools": {}, "resources": {}, "logging": {}},
        "serverInfo": {"name": "unknown-upstream", "version": "unknown"},
    }

    assert (
        Playbook(engine)
        >> initialize("x1", version="2025-06-18")
        << ANY
        >> up("leg-1", ok("leg-1", discovery))
        << Log("upstream_discovered", "info", {"server": "unknown-upstream"})
        << ReplyJson("x1", 200, ok(0, result), SESSION)
    )


# -- 2. sessions and local answers -----------------------------------------------------------------


def test_requests_without_a_session_get_400_and_unknown_sessions_get_404() -> None:
    engine = session_engine()
    missing = "Bad Request: Missing session (send the Mcp-Session-Id header from initialize)"

    assert (
        Playbook(engine)
        >> post("x1", req(1, "tools/list"), session=None)
        << ReplyJson("x1", 400, err(1, -32600, missing))
        >> post("x2", req(2, "tools/list"), session="forged")
        << ReplyJson("x2", 404, err(2, -32001, "Session not found"))
        >> get("x3", session=None)
        << ReplyJson("x3", 400, err(None, -32600, missing))
        >> delete("x4", session="forged")
        << ReplyJson("x4", 404, err(None, -32001, "Session not found"))
        >> post("x5", note("notifications/initialized"), session="forged")
        << ReplyJson("x5", 404, err(None, -32001, "Session not found"))
    )
    assert drained(engine, sessions=1)


def test_ping_initialized_and_roots_changed_are_answered_locally() -> None:
    engine = session_engine()

    assert (
        Playbook(engine)
        >> post("x1", note("notifications/initialized"))
        << ReplyJson("x1", 202, None)
        >> post("x2", req(1, "ping"))
        << ReplyJson("x2", 200, ok(1, {}))
        >> post("x3", note("notifications/roots/list_changed"))
        << ReplyJson("x3", 202, None)
    )
    assert drained(engine, sessions=1)


def test_set_level_is_kept_per_session_and_rides_upstream_as_log_level() -> None:
    engine = session_engine()

    assert (
        Playbook(engine)
        >> post("x1", req(1, "logging/setLevel", {"level": "warning"}))
        << ReplyJson("x1", 200, ok(1, {}))
        >> post("x2", req(2, "logging/setLevel", {"level": "loud"}))
        << ReplyJson("x2", 200, err(2, -32602, "Invalid params: unknown log level 'loud'"))
        >> post("x3", req(3, "tools/list"))
        << leg("leg-2", "x3", "tools/list", {"_meta": meta(level="warning")})
    )


def test_delete_ends_the_session_its_calls_and_its_get_stream() -> None:
    engine = session_engine()

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << leg("leg-2", "x1", "tools/call", call_params())
        >> get("g1")
        << StartSse("g1")
        << ANY
        >> delete("x2")
        << CloseLeg("leg-2", "session_deleted")
        << EndClientResponse("x1", "session_deleted")
        << CloseLeg("leg-3")
        << EndClientResponse("g1", "session_deleted")
        << ReplyJson("x2", 200, None)
        >> up("leg-2", ok("leg-2", DONE))
        >> post("x3", req(2, "ping"))
        << ReplyJson("x3", 404, err(2, -32001, "Session not found"))
    )
    assert drained(engine)


def test_bodies_the_bridge_cannot_route_are_refused_with_the_right_status() -> None:
    engine = session_engine()
    put = ClientRequestReceived("x1", route("PUT", b"", client_headers("session-1")))
    batch_text = "Invalid Request: batched requests are not supported by the bridge; send one per POST"

    assert (
        Playbook(engine)
        >> put
        << ReplyJson(
            "x1", 405, err(None, -32600, "Method not allowed: PUT"), (("Allow", "GET, POST, DELETE"),)
        )
        >> post("x2", b"{nope")
        << ReplyJson("x2", 400, err(None, -32700, ANY))
        >> post("x3", {"jsonrpc": "1.0", "id": 4, "method": "ping"})
        << ReplyJson("x3", 400, err(None, -32600, 'Invalid Request: missing or wrong "jsonrpc" member'))
        >> post("x4", [req(1, "ping"), req(2, "ping")])
        << ReplyJson("x4", 400, err(None, -32600, batch_text))
        >> post("x5", [note("notifications/initialized"), ok("nested-9", {})])
        << ReplyJson("x5", 202, None)
        << Log("bridge_unmatched_response", "warning", {"id": "nested-9", "kind": "result"})
    )
    assert drained(engine, sessions=1)


def test_a_request_id_already_in_flight_is_refused() -> None:
    engine = session_engine()
    text = "Invalid Request: id 1 is already in use by a request in flight"

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> call("x2", 1)
        << ReplyJson("x2", 200, err(1, -32600, text))
    )
    assert drained(engine, sessions=1, calls=1, session_calls=1, legs=1)


# -- 3. forwarded requests: envelope, headers, x-mcp-header, -32020 --------------------------------


def test_forwarded_requests_carry_the_envelope_and_headers_and_keep_the_clients_meta() -> None:
    engine = session_engine()
    arguments = {"city": "São Paulo", "days": 3, "metric": True, "note": "n", "unused": None}
    client_params = {"name": "get_weather", "arguments": arguments, "_meta": {"progressToken": 7}}
    param_headers = (
        ("Mcp-Param-City", "=?base64?U8OjbyBQYXVsbw==?="),
        ("Mcp-Param-Days", "3"),
        ("Mcp-Param-Metric", "true"),
    )
    tools_legacy = {"tools": TOOLS["tools"]}

    assert (
        Playbook(engine)
        >> post("x1", req(1, "tools/list", {}), ("Last-Event-ID", "e-1"), ("X-Tenant", "acme"))
        << leg("leg-2", "x1", "tools/list", {"_meta": meta()}, relayed=(("X-Tenant", "acme"),))
        >> head("leg-2")
        >> up("leg-2", ok("leg-2", TOOLS))
        << ROUND_LOG
        << ReplyJson("x1", 200, ok(1, tools_legacy))
        >> post("x2", req(2, "tools/call", client_params))
        << leg(
            "leg-3",
            "x2",
            "tools/call",
            {"name": "get_weather", "arguments": arguments, "_meta": meta(progressToken=7)},
            param_headers=param_headers,
        )
    )
    assert drained(engine, sessions=1, calls=1, session_calls=1, legs=1, tool_headers=1)


def test_a_header_mismatch_refreshes_tools_list_once_and_resends_the_same_call() -> None:
    engine = session_engine()
    params = {"name": "get_weather", "arguments": {"city": "Oslo"}}

    assert (
        Playbook(engine)
        >> post("x1", req(1, "tools/call", params))
        << leg("leg-2", "x1", "tools/call", {**params, "_meta": meta()})
        >> head("leg-2", 400)
        >> up("leg-2", err("leg-2", -32020, "Mcp-Param-City header missing"))
        << ROUND_LOG
        << leg("leg-3", "x1", "tools/list", {"_meta": meta()})
        >> up("leg-3", ok("leg-3", TOOLS))
        << leg(
            "leg-4",
            "x1",
            "tools/call",
            {**params, "_meta": meta()},
            param_headers=(("Mcp-Param-City", "Oslo"),),
        )
        >> up("leg-4", ok("leg-4", DONE))
        << ROUND_LOG
        << ReplyJson("x1", 200, ok(1, DONE_LEGACY))
    )
    assert drained(engine, sessions=1, tool_headers=1)


def test_a_second_header_mismatch_reaches_the_client_as_an_internal_error() -> None:
    engine = session_engine()
    text = "upstream rejected the bridged request's Mcp-* headers: still wrong"

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> up("leg-2", err("leg-2", -32020, "wrong"))
        << ROUND_LOG
        << ANY
        >> up("leg-3", ok("leg-3", {"tools": []}))
        << ANY
        >> up("leg-4", err("leg-4", -32020, "still wrong"))
        << ROUND_LOG
        << ReplyJson("x1", 200, err(1, -32603, text))
    )
    assert drained(engine, sessions=1)


# -- 4. answers and errors back to the legacy client -----------------------------------------------


def test_removed_methods_come_back_as_http_200_method_not_found_never_404() -> None:
    engine = session_engine()

    assert (
        Playbook(engine)
        >> post("x1", req(1, "tasks/list", {}))
        << leg("leg-2", "x1", "tasks/list", {"_meta": meta()})
        >> head("leg-2", 404)
        >> up("leg-2", err("leg-2", -32601, "Method not found"))
        << ROUND_LOG
        << ReplyJson("x1", 200, err(1, -32601, "Method not found"))
    )
    assert drained(engine, sessions=1)


def test_2026_only_error_codes_never_reach_the_client_and_a_missing_capability_fails_the_tool() -> None:
    engine = session_engine()
    missing = {"requiredCapabilities": {"elicitation": {"url": {}}, "sampling": {}}}

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> up("leg-2", err("leg-2", -32021, "Missing capability", missing))
        << ROUND_LOG
        << ReplyJson(
            "x1",
            200,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "result": {
                    "content": [
                        {
                            "type": "text",
                            "text": "upstream needs client capability elicitation.url, sampling, which the "
                            "client did not declare: Missing capability",
                        }
                    ],
                    "isError": True,
                },
            },
        )
        >> call("x2", 2)
        << ANY
        >> up("leg-3", err("leg-3", -32022, "Unsupported", {"supported": ["2027-01-01"]}))
        << ROUND_LOG
        << ReplyJson(
            "x2",
            200,
            err(
                2,
                -32603,
                "upstream does not accept protocol 2026-07-28 (it supports ['2027-01-01']): Unsupported",
            ),
        )
    )
    assert drained(engine, sessions=1)


def test_upstream_notifications_stream_to_the_client_and_the_result_ends_the_stream() -> None:
    engine = session_engine()
    log = note("notifications/message", {"level": "info", "data": "checking the sky"})
    progress = note("notifications/progress", {"progressToken": "p", "progress": 50, "total": 100})
    params = {"name": "get_weather", "arguments": {}, "_meta": {"progressToken": "p"}}
    result = {**DONE, "structuredContent": {"t": 21}, "ttlMs": 0}

    assert (
        Playbook(engine)
        >> post("x1", req(1, "logging/setLevel", {"level": "info"}))
        << ANY
        >> post("x2", req(2, "tools/call", params))
        << leg("leg-2", "x2", "tools/call", {**params, "_meta": meta(level="info", progressToken="p")})
        >> head("leg-2", 200, "text/event-stream")
        >> up("leg-2", log)
        << StartSse("x2")
        << SendSse("x2", log)
        >> up("leg-2", progress)
        << SendSse("x2", progress)
        >> up("leg-2", req("srv-1", "ping"))
        << Log(
            "bridge_upstream_dropped", "warning", {"leg": "leg-2", "why": "server request on a 2026 stream"}
        )
        >> up("leg-2", ok("leg-2", result))
        << ROUND_LOG
        << SendSse("x2", ok(2, {**DONE_LEGACY, "structuredContent": {"t": 21}}))
        << EndClientResponse("x2")
        >> LegEnded("leg-2")
    )
    assert drained(engine, sessions=1)


def test_input_required_for_a_method_that_may_not_have_it_is_an_upstream_fault() -> None:
    engine = session_engine()
    text = (
        "upstream MCP server failed during tools/list: it answered with resultType 'input_required', "
        "which the bridge cannot use for tools/list"
    )

    assert (
        Playbook(engine)
        >> post("x1", req(1, "tools/list"))
        << ANY
        >> up("leg-2", ok("leg-2", needs_input({"a": FORM}, "S")))
        << ROUND_LOG
        << ReplyJson("x1", 200, err(1, -32603, text))
        >> call("x2", 2)
        << ANY
        >> up("leg-3", ok("leg-3", needs_input({"a": 5})))
        << ROUND_LOG
        << ReplyJson(
            "x2",
            200,
            err(
                2,
                -32603,
                "upstream MCP server failed during tools/call: it sent an input_required result without "
                "valid inputRequests or requestState",
            ),
        )
    )
    assert drained(engine, sessions=1)


# -- 5. MRTR driving -------------------------------------------------------------------------------


def test_one_round_becomes_a_nested_request_and_the_retry_echoes_the_state() -> None:
    engine = session_engine()
    params = {"name": "deploy", "arguments": {"env": "prod"}, "_meta": {"progressToken": "p"}}
    first = {**params, "_meta": meta(progressToken="p")}

    assert (
        Playbook(engine)
        >> post("x1", req(1, "tools/call", params))
        << leg("leg-2", "x1", "tools/call", first)
        >> head("leg-2", 200, "text/event-stream")
        >> up("leg-2", note("notifications/progress", {"progressToken": "p", "progress": 1, "total": 2}))
        << StartSse("x1")
        << SendSse("x1", note("notifications/progress", {"progressToken": "p", "progress": 1, "total": 2}))
        >> up("leg-2", ok("leg-2", needs_input({"github_login": FORM}, "S1")))
        << ROUND_LOG
        << SendSse("x1", req("nested-1", "elicitation/create", FORM["params"]))
        >> LegEnded("leg-2")
        >> post("a1", ok("nested-1", ACCEPT))
        << ReplyJson("a1", 202, None)
        << leg(
            "leg-3",
            "x1",
            "tools/call",
            {**first, "inputResponses": {"github_login": ACCEPT}, "requestState": "S1"},
        )
        >> up("leg-3", note("notifications/progress", {"progressToken": "p", "progress": 0, "total": 2}))
        >> up("leg-3", note("notifications/progress", {"progressToken": "p", "progress": 2, "total": 2}))
        << SendSse("x1", note("notifications/progress", {"progressToken": "p", "progress": 3, "total": 3}))
        >> up("leg-3", ok("leg-3", DONE))
        << ROUND_LOG
        << SendSse("x1", ok(1, DONE_LEGACY))
        << EndClientResponse("x1")
    )
    assert drained(engine, sessions=1)


def test_progress_that_keeps_rising_across_rounds_reaches_the_client_as_the_server_sent_it() -> None:
    engine = session_engine()
    params = {"name": "deploy", "arguments": {"env": "prod"}, "_meta": {"progressToken": "p"}}
    first = {**params, "_meta": meta(progressToken="p")}

    def step(n: int) -> dict[str, Any]:
        return note("notifications/progress", {"progressToken": "p", "progress": n, "total": 4})

    assert (
        Playbook(engine)
        >> post("x1", req(1, "tools/call", params))
        << leg("leg-2", "x1", "tools/call", first)
        >> head("leg-2", 200, "text/event-stream")
        >> up("leg-2", step(1))
        << StartSse("x1")
        << SendSse("x1", step(1))
        >> up("leg-2", ok("leg-2", needs_input({"github_login": FORM}, "S1")))
        << ROUND_LOG
        << SendSse("x1", req("nested-1", "elicitation/create", FORM["params"]))
        >> LegEnded("leg-2")
        >> post("a1", ok("nested-1", ACCEPT))
        << ReplyJson("a1", 202, None)
        << leg(
            "leg-3",
            "x1",
            "tools/call",
            {**first, "inputResponses": {"github_login": ACCEPT}, "requestState": "S1"},
        )
        >> up("leg-3", step(2))
        << SendSse("x1", step(2))
        >> up("leg-3", step(4))
        << SendSse("x1", step(4))
        >> up("leg-3", ok("leg-3", DONE))
        << ROUND_LOG
        << SendSse("x1", ok(1, DONE_LEGACY))
        << EndClientResponse("x1")
    )
    assert drained(engine, sessions=1)


def test_several_kinds_in_one_round_are_all_asked_and_retried_together() -> None:
    engine = session_engine()
    state = "opaque+/=state"
    answers = {"user_name": ACCEPT, "greeting": PARIS, "client_roots": MY_ROOTS}

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> up(
            "leg-2",
            ok("leg-2", needs_input({"user_name": FORM, "greeting": SAMPLE, "client_roots": ROOTS}, state)),
        )
        << ROUND_LOG
        << StartSse("x1")
        << SendSse("x1", req("nested-1", "elicitation/create", FORM["params"]))
        << SendSse("x1", req("nested-2", "sampling/createMessage", SAMPLE["params"]))
        << SendSse("x1", req("nested-3", "roots/list", {}))
        >> post("a1", ok("nested-3", MY_ROOTS))
        << ReplyJson("a1", 202, None)
        >> post("a2", ok("nested-1", ACCEPT))
        << ReplyJson("a2", 202, None)
        >> post("a3", ok("nested-2", PARIS))
        << ReplyJson("a3", 202, None)
        << leg("leg-3", "x1", "tools/call", call_params(inputResponses=answers, requestState=state))
        >> up("leg-3", ok("leg-3", DONE))
        << ROUND_LOG
        << SendSse("x1", ok(1, DONE_LEGACY))
        << EndClientResponse("x1")
    )
    assert drained(engine, sessions=1)


def test_multi_round_prompts_carry_only_the_latest_answers_and_state() -> None:
    engine = session_engine()
    prompt = {"name": "test_input_required_result_prompt", "arguments": {"topic": "x"}}
    sent = {**prompt, "_meta": meta()}
    messages = {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}]}

    assert (
        Playbook(engine)
        >> post("x1", req(1, "prompts/get", prompt))
        << leg("leg-2", "x1", "prompts/get", sent)
        >> up("leg-2", ok("leg-2", needs_input({"step1": FORM}, "S1")))
        << ROUND_LOG
        << StartSse("x1")
        << SendSse("x1", req("nested-1", "elicitation/create", FORM["params"]))
        >> post("a1", ok("nested-1", ACCEPT))
        << ReplyJson("a1", 202, None)
        << leg(
            "leg-3", "x1", "prompts/get", {**sent, "inputResponses": {"step1": ACCEPT}, "requestState": "S1"}
        )
        >> up("leg-3", ok("leg-3", needs_input({"step2": ROOTS}, "S2")))
        << ROUND_LOG
        << SendSse("x1", req("nested-2", "roots/list", {}))
        >> post("a2", ok("nested-2", MY_ROOTS))
        << ReplyJson("a2", 202, None)
        << leg(
            "leg-4",
            "x1",
            "prompts/get",
            {**sent, "inputResponses": {"step2": MY_ROOTS}, "requestState": "S2"},
        )
        >> up("leg-4", ok("leg-4", {"resultType": "complete", **messages}))
        << ROUND_LOG
        << SendSse("x1", ok(1, messages))
        << EndClientResponse("x1")
    )
    assert drained(engine, sessions=1)


def test_a_round_without_request_state_is_retried_without_one() -> None:
    engine = session_engine()

    assert (
        Playbook(engine)
        >> post("x1", req(1, "resources/read", {"uri": "file:///a"}))
        << leg("leg-2", "x1", "resources/read", {"uri": "file:///a", "_meta": meta()})
        >> up("leg-2", ok("leg-2", needs_input({"r": ROOTS})))
        << ROUND_LOG
        << StartSse("x1")
        << SendSse("x1", req("nested-1", "roots/list", {}))
        >> post("a1", ok("nested-1", MY_ROOTS))
        << ReplyJson("a1", 202, None)
        << leg(
            "leg-3",
            "x1",
            "resources/read",
            {"uri": "file:///a", "_meta": meta(), "inputResponses": {"r": MY_ROOTS}},
        )
    )


def test_url_elicitation_gets_a_synthetic_elicitation_id_for_a_2025_11_25_client() -> None:
    engine = session_engine()
    asked = {**URL["params"], "elicitationId": "elicitation-nested-1"}

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> up("leg-2", ok("leg-2", needs_input({"login": URL}, "S")))
        << ROUND_LOG
        << StartSse("x1")
        << SendSse("x1", req("nested-1", "elicitation/create", asked))
        >> post("a1", ok("nested-1", {"action": "accept"}))
        << ReplyJson("a1", 202, None)
        << leg(
            "leg-3",
            "x1",
            "tools/call",
            call_params(inputResponses={"login": {"action": "accept"}}, requestState="S"),
        )
    )


def test_a_2025_06_18_client_gets_form_elicitation_without_mode_and_cannot_do_url_mode() -> None:
    engine = session_engine(version="2025-06-18", caps={"elicitation": {}, "roots": {}})
    caps = {"elicitation": {}, "roots": {}}
    text = (
        "The client cannot provide the input the server requires: input request 'login' needs client "
        "capability elicitation.url, which protocol 2025-06-18 cannot express"
    )
    form_params = {k: v for k, v in FORM["params"].items() if k != "mode"}

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << leg("leg-2", "x1", "tools/call", call_params(caps=caps))
        >> up("leg-2", ok("leg-2", needs_input({"name": FORM})))
        << ROUND_LOG
        << StartSse("x1")
        << SendSse("x1", req("nested-1", "elicitation/create", form_params))
        >> post("a1", ok("nested-1", ACCEPT))
        << ReplyJson("a1", 202, None)
        << ANY
        >> up("leg-3", ok("leg-3", needs_input({"login": URL}, "S2")))
        << ROUND_LOG
        << SendSse("x1", tool_error(1, text))
        << EndClientResponse("x1")
    )
    assert drained(engine, sessions=1)


def test_a_state_only_round_is_paced_by_a_timer_then_retried_with_the_state_alone() -> None:
    engine = session_engine(state_only_delay=0.5)

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> up("leg-2", ok("leg-2", needs_input(state="busy-1")))
        << ROUND_LOG
        << StartTimer("pace:x1", 0.5)
        >> TimerFired("pace:x1")
        << leg("leg-3", "x1", "tools/call", call_params(requestState="busy-1"))
        >> up("leg-3", ok("leg-3", DONE))
        << ROUND_LOG
        << ReplyJson("x1", 200, ok(1, DONE_LEGACY))
        >> TimerFired("pace:x1")
    )
    assert drained(engine, sessions=1)


def test_an_undeclared_capability_fails_tools_with_is_error_and_prompts_with_an_internal_error() -> None:
    engine = session_engine(caps={"sampling": {}})
    caps = {"sampling": {}}
    text = (
        "The client cannot provide the input the server requires: input request 'user_name' needs client "
        "capability elicitation.form, which the client did not declare at initialize"
    )
    tools_text = (
        "The client cannot provide the input the server requires: input request 'pick' needs client "
        "capability sampling.tools, which the client did not declare at initialize"
    )
    with_tools = {"method": "sampling/createMessage", "params": {**SAMPLE["params"], "tools": []}}

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << leg("leg-2", "x1", "tools/call", call_params(caps=caps))
        >> up("leg-2", ok("leg-2", needs_input({"user_name": FORM}, "S")))
        << ROUND_LOG
        << ReplyJson("x1", 200, tool_error(1, text))
        >> post("x2", req(2, "prompts/get", {"name": "p"}))
        << ANY
        >> up("leg-3", ok("leg-3", needs_input({"user_name": FORM})))
        << ROUND_LOG
        << ReplyJson("x2", 200, err(2, -32603, text))
        >> call("x3", 3)
        << ANY
        >> up("leg-4", ok("leg-4", needs_input({"pick": with_tools})))
        << ROUND_LOG
        << ReplyJson("x3", 200, tool_error(3, tools_text))
    )
    assert drained(engine, sessions=1)


def test_the_round_cap_fails_the_call_before_asking_the_client_again() -> None:
    engine = session_engine(max_rounds=2)
    text = "The server still required input after 2 rounds; the proxy stops at max_rounds=2."

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> up("leg-2", ok("leg-2", needs_input({"a": ROOTS}, "S1")))
        << ROUND_LOG
        << StartSse("x1")
        << SendSse("x1", req("nested-1", "roots/list", {}))
        >> post("a1", ok("nested-1", MY_ROOTS))
        << ReplyJson("a1", 202, None)
        << ANY
        >> up("leg-3", ok("leg-3", needs_input({"b": ROOTS}, "S2")))
        << ROUND_LOG
        << SendSse("x1", tool_error(1, text))
        << EndClientResponse("x1")
    )
    assert drained(engine, sessions=1)


def test_a_client_error_answer_fails_the_call_and_withdraws_the_other_nested_requests() -> None:
    engine = session_engine()
    text = "The client answered elicitation/create (input request 'a') with error -1: User rejected"
    withdrawn = note("notifications/cancelled", {"requestId": "nested-2", "reason": "the request ended"})

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> up("leg-2", ok("leg-2", needs_input({"a": FORM, "b": ROOTS}, "S")))
        << ROUND_LOG
        << StartSse("x1")
        << SendSse("x1", req("nested-1", "elicitation/create", FORM["params"]))
        << SendSse("x1", req("nested-2", "roots/list", {}))
        >> post("a1", err("nested-1", -1, "User rejected"))
        << ReplyJson("a1", 202, None)
        << SendSse("x1", withdrawn)
        << SendSse("x1", tool_error(1, text))
        << EndClientResponse("x1")
        >> post("a2", ok("nested-2", MY_ROOTS))
        << ReplyJson("a2", 202, None)
        << Log("bridge_unmatched_response", "warning", {"id": "nested-2", "kind": "result"})
    )
    assert drained(engine, sessions=1)


def test_a_client_answer_that_is_no_result_of_its_request_fails_the_call_naming_it() -> None:
    engine = session_engine()
    text = (
        "The client's answer is no result of its request: 'a' (elicitation/create): "
        "'action' must be one of accept, decline, cancel, got None"
    )

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> up("leg-2", ok("leg-2", needs_input({"a": FORM}, "S")))
        << ROUND_LOG
        << StartSse("x1")
        << SendSse("x1", req("nested-1", "elicitation/create", FORM["params"]))
        >> post("a1", ok("nested-1", {"content": {"ok": True}}))
        << ReplyJson("a1", 202, None)
        << SendSse("x1", tool_error(1, text))
        << EndClientResponse("x1")
    )
    assert drained(engine, sessions=1)


INTERCEPT = "the proxy's intercept (i2)"


@pytest.mark.parametrize(
    ("dropped", "text"),
    [
        (True, f"{INTERCEPT} dropped elicitation/create (input request 'a') before it reached the client"),
        (
            False,
            f"{INTERCEPT} answered, in the client's place, elicitation/create (input request 'a') "
            "with error -32001: typed at the desk",
        ),
    ],
)
def test_an_error_the_proxy_made_in_the_clients_place_fails_the_call_naming_who_made_it(
    dropped: bool, text: str
) -> None:
    engine = session_engine()
    made = AnsweredForClient(
        "session-1", classify_value(err("nested-1", -32001, "typed at the desk")), INTERCEPT, dropped
    )

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> up("leg-2", ok("leg-2", needs_input({"a": FORM}, "S")))
        << ROUND_LOG
        << StartSse("x1")
        << SendSse("x1", req("nested-1", "elicitation/create", FORM["params"]))
        >> made
        << SendSse("x1", tool_error(1, text))
        << EndClientResponse("x1")
    )
    assert drained(engine, sessions=1)


def test_a_client_error_answer_fails_resources_read_with_an_internal_error() -> None:
    engine = session_engine()
    text = "The client answered roots/list (input request 'r') with error -32601: Method not found"

    assert (
        Playbook(engine)
        >> post("x1", req(1, "resources/read", {"uri": "file:///a"}))
        << ANY
        >> up("leg-2", ok("leg-2", needs_input({"r": ROOTS})))
        << ROUND_LOG
        << StartSse("x1")
        << ANY
        >> post("a1", err("nested-1", -32601, "Method not found"))
        << ReplyJson("a1", 202, None)
        << SendSse("x1", err(1, -32603, text))
        << EndClientResponse("x1")
    )
    assert drained(engine, sessions=1)


# -- 6. cancellation, vanishing peers, upstream faults ---------------------------------------------


def test_a_cancel_mid_round_withdraws_the_nested_requests_and_sends_no_answer() -> None:
    engine = session_engine()
    withdrawn = note(
        "notifications/cancelled", {"requestId": "nested-1", "reason": "the client cancelled the request"}
    )

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> up("leg-2", ok("leg-2", needs_input({"a": FORM}, "S")))
        << ROUND_LOG
        << StartSse("x1")
        << ANY
        >> post("c1", note("notifications/cancelled", {"requestId": 1, "reason": "user"}))
        << ReplyJson("c1", 202, None)
        << SendSse("x1", withdrawn)
        << EndClientResponse("x1", "cancelled")
        >> post("a1", ok("nested-1", ACCEPT))
        << ReplyJson("a1", 202, None)
        << Log("bridge_unmatched_response", "warning", {"id": "nested-1", "kind": "result"})
    )
    assert drained(engine, sessions=1)


def test_a_cancel_while_a_leg_is_open_closes_it_which_cancels_upstream() -> None:
    engine = session_engine()

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> head("leg-2", 200, "text/event-stream")
        >> post("c1", note("notifications/cancelled", {"requestId": 1}))
        << ReplyJson("c1", 202, None)
        << CloseLeg("leg-2", "cancelled")
        << EndClientResponse("x1", "cancelled")
        >> up("leg-2", ok("leg-2", DONE))
        >> LegEnded("leg-2")
        >> post("c2", note("notifications/cancelled", {"requestId": 99}))
        << ReplyJson("c2", 202, None)
    )
    assert drained(engine, sessions=1)


def test_a_cancel_during_a_paced_round_stops_the_timer() -> None:
    engine = session_engine()

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> up("leg-2", ok("leg-2", needs_input(state="busy")))
        << ROUND_LOG
        << StartTimer("pace:x1", 0.25)
        >> post("c1", note("notifications/cancelled", {"requestId": 1}))
        << ReplyJson("c1", 202, None)
        << CancelTimer("pace:x1")
        << EndClientResponse("x1", "cancelled")
        >> TimerFired("pace:x1")
    )
    assert drained(engine, sessions=1)


def test_a_client_that_vanishes_aborts_the_upstream_leg_without_notifications() -> None:
    engine = session_engine()

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> ClientDisconnected("x1")
        << CloseLeg("leg-2", "client_disconnected")
        << EndClientResponse("x1", "client_disconnected")
        >> call("x2", 2)
        << ANY
        >> up("leg-3", ok("leg-3", needs_input({"a": FORM}, "S")))
        << ROUND_LOG
        << StartSse("x2")
        << ANY
        >> ClientDisconnected("x2")
        << EndClientResponse("x2", "client_disconnected")
        >> ClientDisconnected("x2")
    )
    assert drained(engine, sessions=1)


def test_an_upstream_that_fails_mid_chain_gets_an_internal_error_naming_the_fault() -> None:
    engine = session_engine()
    fields = {"exchange": "x1", "leg": "leg-3", "round": 2, "why": ANY}
    text = (
        "upstream MCP server failed during tools/call: the upstream MCP server cut the response stream: "
        "connection reset (the MCP server's own log says why it stopped) (HTTP 200) (round 2)"
    )

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> up("leg-2", ok("leg-2", needs_input({"a": ROOTS}, "S")))
        << ROUND_LOG
        << StartSse("x1")
        << ANY
        >> post("a1", ok("nested-1", MY_ROOTS))
        << ReplyJson("a1", 202, None)
        << ANY
        >> head("leg-3", 200, "text/event-stream")
        >> LegFailed("leg-3", "cut", "connection reset")
        << Log("bridge_leg_lost", "warning", fields)
        << SendSse("x1", err(1, -32603, text))
        << EndClientResponse("x1", "upstream_cut")  # how pass-through ends it
    )
    assert drained(engine, sessions=1)


def test_an_upstream_answer_without_json_rpc_is_an_internal_error_with_the_status() -> None:
    engine = session_engine()
    text = (
        "upstream MCP server failed during tools/list: the response ended without a JSON-RPC answer "
        "(HTTP 500) (round 1)"
    )

    assert (
        Playbook(engine)
        >> post("x1", req(1, "tools/list"))
        << ANY
        >> head("leg-2", 500, "text/html")
        >> LegMessage("leg-2", classify_value("<html>"))
        << Log("bridge_upstream_dropped", "warning", {"leg": "leg-2", "why": "not a JSON object"})
        >> LegEnded("leg-2")
        << Log("bridge_leg_lost", "warning", ANY)
        << ReplyJson("x1", 200, err(1, -32603, text))
    )
    assert drained(engine, sessions=1)


def test_a_rejected_request_state_ends_the_call_with_an_internal_error() -> None:
    engine = session_engine()
    text = (
        "upstream rejected the echoed requestState, so the call cannot resume: "
        "Invalid or expired requestState"
    )

    assert (
        Playbook(engine)
        >> post("x1", req(1, "prompts/get", {"name": "p"}))
        << ANY
        >> up("leg-2", ok("leg-2", needs_input({"a": ROOTS}, "S1")))
        << ROUND_LOG
        << StartSse("x1")
        << ANY
        >> post("a1", ok("nested-1", MY_ROOTS))
        << ReplyJson("a1", 202, None)
        << ANY
        >> head("leg-3", 400)
        >> up("leg-3", err("leg-3", -32602, "Invalid or expired requestState"))
        << ROUND_LOG
        << SendSse("x1", err(1, -32603, text))
        << EndClientResponse("x1")
    )
    assert drained(engine, sessions=1)


def test_invalid_params_on_a_first_leg_pass_through_unchanged() -> None:
    engine = session_engine()

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> up("leg-2", err("leg-2", -32602, "Invalid requestState", {"field": "x"}))
        << ROUND_LOG
        << ReplyJson("x1", 200, err(1, -32602, "Invalid requestState", {"field": "x"}))
    )


# -- 7. GET stream and resources/subscribe via subscriptions/listen --------------------------------


def listen(leg_id: str, exchange: str, **extra: Any) -> SendLeg:
    wanted = {"toolsListChanged": True, "resourcesListChanged": True, **extra}
    return leg(leg_id, exchange, "subscriptions/listen", {"notifications": wanted, "_meta": meta()})


def test_the_get_stream_is_fed_by_an_upstream_listen_without_its_2026_tags() -> None:
    engine = session_engine()
    ack = note("notifications/subscriptions/acknowledged", {"notifications": {}, "_meta": {SUB: "leg-2"}})
    conflict = "Conflict: only one SSE stream is allowed per session"

    assert (
        Playbook(engine)
        >> get("g1")
        << StartSse("g1")
        << listen("leg-2", "g1")
        >> head("leg-2", 200, "text/event-stream")
        >> up("leg-2", ack)
        >> up("leg-2", note("notifications/tools/list_changed", {"_meta": {SUB: "leg-2"}}))
        << SendSse("g1", note("notifications/tools/list_changed", {}))
        >> get("g2")
        << ReplyJson("g2", 409, err(None, -32600, conflict))
        >> ClientDisconnected("g1")
        << CloseLeg("leg-2")
        << EndClientResponse("g1", "client_disconnected")
    )
    assert drained(engine, sessions=1)


def test_subscribe_and_unsubscribe_restart_the_listen_with_the_new_set() -> None:
    engine = session_engine()
    updated = {"uri": "file:///a", "_meta": {SUB: "leg-3", "other": 1}}

    assert (
        Playbook(engine)
        >> get("g1")
        << StartSse("g1")
        << listen("leg-2", "g1")
        >> post("s1", req(1, "resources/subscribe", {"uri": "file:///a"}))
        << CloseLeg("leg-2")
        << listen("leg-3", "g1", resourceSubscriptions=["file:///a"])
        << ReplyJson("s1", 200, ok(1, {}))
        >> up("leg-3", note("notifications/resources/updated", updated))
        << SendSse("g1", note("notifications/resources/updated", {"uri": "file:///a", "_meta": {"other": 1}}))
        >> post("s2", req(2, "resources/subscribe", {"uri": "file:///a"}))
        << ReplyJson("s2", 200, ok(2, {}))
        >> post("s3", req(3, "resources/unsubscribe", {"uri": "file:///a"}))
        << CloseLeg("leg-3")
        << listen("leg-4", "g1")
        << ReplyJson("s3", 200, ok(3, {}))
        >> up("leg-4", ok("leg-4", {"resultType": "complete", "_meta": {SUB: "leg-4"}}))
        << Log("bridge_listen_ended", "info", {"leg": "leg-4", "why": "the upstream ended the subscription"})
        >> up("leg-4", note("notifications/tools/list_changed"))
    )
    assert drained(engine, sessions=1, get_streams=1)


def test_subscriptions_made_before_the_get_stream_are_listened_for_when_it_opens() -> None:
    engine = session_engine()

    assert (
        Playbook(engine)
        >> post("s1", req(1, "resources/subscribe", {"uri": "file:///b"}))
        << ReplyJson("s1", 200, ok(1, {}))
        >> post("s2", req(2, "resources/subscribe", {"uri": 5}))
        << ReplyJson("s2", 200, err(2, -32602, "Invalid params: uri must be a string"))
        >> get("g1")
        << StartSse("g1")
        << listen("leg-2", "g1", resourceSubscriptions=["file:///b"])
        >> LegFailed("leg-2", "cut", "reset")
        << Log(
            "bridge_listen_ended",
            "warning",
            {"leg": "leg-2", "why": "the upstream MCP server cut the response stream: reset" + CUT_HINT},
        )
        >> delete("d1")
        << EndClientResponse("g1", "session_deleted")
        << ReplyJson("d1", 200, None)
    )
    assert drained(engine)


def test_a_listen_the_upstream_refuses_leaves_the_get_stream_open_and_quiet() -> None:
    engine = session_engine()

    assert (
        Playbook(engine)
        >> get("g1")
        << StartSse("g1")
        << listen("leg-2", "g1")
        >> head("leg-2", 404)
        >> up("leg-2", err("leg-2", -32601, "Method not found"))
        << Log("bridge_listen_ended", "warning", {"leg": "leg-2", "why": "error -32601: Method not found"})
        >> LegEnded("leg-2")
    )
    assert drained(engine, sessions=1, get_streams=1)


def test_without_upstream_support_subscribe_is_method_not_found_and_get_stays_quiet() -> None:
    discovery = {"resultType": "complete", "capabilities": {"tools": {}}}
    engine = session_engine(discovery=discovery)
    text = "Method not found: the upstream server does not support resource subscriptions"

    assert (
        Playbook(engine)
        >> post("s1", req(1, "resources/subscribe", {"uri": "file:///a"}))
        << ReplyJson("s1", 200, err(1, -32601, text))
        >> get("g1")
        << StartSse("g1")
    )
    assert drained(engine, sessions=1, get_streams=1)


# -- 8. logging and state visibility ---------------------------------------------------------------


def test_every_round_is_logged_with_chain_facts_and_never_the_state_itself() -> None:
    engine = session_engine()
    state = "secret-state-value"
    fingerprint = {"length": len(state), "sha256": hashlib.sha256(state.encode()).hexdigest()[:8]}
    common = {"exchange": "x1", "client_id": 1, "method": "tools/call", "name": "deploy"}

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> head("leg-2", 200, "text/event-stream; charset=utf-8")
        >> up("leg-2", ok("leg-2", needs_input({"who": URL, "sky": SAMPLE}, state)))
        << Log(
            "bridge_round",
            "info",
            {
                **common,
                "upstream_id": "leg-2",
                "round": 1,
                "http_status": 200,
                "content_type": "text/event-stream",
                "outcome": "input_required",
                "input_keys": {"who": "elicitation/create:url", "sky": "sampling/createMessage"},
                "request_state": fingerprint,
            },
        )
        << ANY
        << ANY
        << ANY
        >> post("a1", ok("nested-1", {"action": "decline"}))
        << ReplyJson("a1", 202, None)
        >> post("a2", ok("nested-2", PARIS))
        << ReplyJson("a2", 202, None)
        << ANY
        >> head("leg-3", 400)
        >> up("leg-3", err("leg-3", -32021, "no"))
        << Log(
            "bridge_round",
            "info",
            {
                **common,
                "upstream_id": "leg-3",
                "round": 2,
                "http_status": 400,
                "content_type": "application/json",
                "outcome": "error",
                "error_code": -32021,
            },
        )
        << ANY
        << ANY
    )
    assert drained(engine, sessions=1)


def test_repr_shows_the_state_of_each_table_but_no_session_id() -> None:
    engine = session_engine()
    engine.handle(call("x1", 1))
    engine.handle(up("leg-2", ok("leg-2", needs_input({"a": ROOTS}))))

    text = repr(engine)

    assert text == (
        "LegacyToMrtrEngine(upstream='http://upstream.internal:8000/mcp', discovered=True, sessions=1, "
        "pending_initialize=[], calls=[x1:<tools/call #1 round=1 leg=None waiting=['a']>], legs=[], "
        "timers=[], get_streams=[])"
    )
    assert "session-1" not in text
    assert drained(engine, sessions=1, calls=1, session_calls=1, nested=1, outstanding=1)
