"""The MRTR->legacy bridge engine, Playbook style: each event in, the exact list of commands out.

Ids come from a deterministic counter (`leg-1`, `call-1`, `continuation-1`, ...) and tokens are
deterministic too (same key, same claims), so expected commands spell everything out; `state()`
computes the token the bridge must mint. `ready_engine()` opens the upstream session first
(`leg-1` initialize, `leg-2` initialized), so a test's first upstream leg is `leg-3`. Every test
ends by checking the engine's tables hold nothing but the upstream session.
"""

from __future__ import annotations

from typing import Any
from unittest.mock import ANY

import orjson
import pytest

from proxy.engine.commands import (
    CancelTimer,
    CloseLeg,
    EndClientResponse,
    Log,
    OpenLegStream,
    ReplyJson,
    SendLeg,
    SendSse,
    StartSse,
    StartTimer,
)
from proxy.engine.events import (
    ClientDisconnected,
    ClientRequestReceived,
    LegEnded,
    LegFailed,
    LegResponded,
    TimerFired,
)
from proxy.engine.modern_client.engine import MrtrToLegacyEngine
from proxy.engine.modern_client.sessions import LOST_THEN, lost_why
from proxy.engine.modern_client.tokens import Claims, StateSealer, binding_for
from proxy.framing.http import parse_upstream
from proxy.wire.jsonrpc import classify_value
from proxy.wire.jsonrpc import error_response as err
from proxy.wire.jsonrpc import notification as note
from proxy.wire.jsonrpc import request as req
from proxy.wire.jsonrpc import result_response as ok
from tests.engine.builders import CUT_HINT, TIMEOUT_HINT, UNREACHABLE_HINT, route, up
from tests.engine.playbook import Playbook, protocol

# -- builders ---------------------------------------------------------------------------------------

UPSTREAM = parse_upstream("http://legacy.internal:8000/mcp")
AUTH = ("Authorization", "Bearer t0k")
KEY = b"state-key-for-tests-0123456789ab"
SESSION = "up-session-1"
SUB = "io.modelcontextprotocol/subscriptionId"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
CAPS: dict[str, Any] = {"elicitation": {"form": {}, "url": {}}, "sampling": {"tools": {}}, "roots": {}}
CLIENT_INFO = {"name": "modern-client", "version": "1.0"}
SERVER_INFO = {"name": "weather", "version": "2.0"}
LEGACY_CAPS = {
    "tools": {"listChanged": True},
    "prompts": {},
    "resources": {"subscribe": True, "listChanged": True},
    "logging": {},
    "tasks": {"list": {}},
}
INIT_RESULT = {
    "protocolVersion": "2025-11-25",
    "capabilities": LEGACY_CAPS,
    "serverInfo": SERVER_INFO,
    "instructions": "Ask about the weather.",
}
ARGS = {"env": "prod"}
FORM = {"mode": "form", "message": "Deploy?", "requestedSchema": {"type": "object", "properties": {}}}
SAMPLE = {"messages": [{"role": "user", "content": {"type": "text", "text": "Capital?"}}], "maxTokens": 9}
URL = {"mode": "url", "message": "Log in", "url": "https://x/a", "elicitationId": "el-7"}
URL_SHOWN = {"mode": "url", "message": "Log in", "url": "https://x/a"}
ACCEPT = {"action": "accept", "content": {"ok": True}}
PARIS = {"role": "assistant", "content": {"type": "text", "text": "Paris"}, "model": "m"}
MY_ROOTS = {"roots": [{"uri": "file:///home/u/proj", "name": "proj"}]}
DONE = {"content": [{"type": "text", "text": "done"}]}

LOST_SESSION = {"session": "upstream-1", "generation": 1, "why": lost_why("404"), "then": LOST_THEN}


class Counter:
    """A deterministic `new_id`: `kind-N`, counted per kind."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def __call__(self, kind: str) -> str:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        return f"{kind}-{self.counts[kind]}"


def meta(caps: dict[str, Any] | None = None, **own: Any) -> dict[str, Any]:
    """A 2026 client's per-request `_meta` (full capabilities by default) plus its own keys."""
    return {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": CAPS if caps is None else caps,
        "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
        **own,
    }


def client_headers(
    method: str, name: str | None = None, *extra: tuple[str, str], auth: tuple[str, str] | None = AUTH
) -> tuple[tuple[str, str], ...]:
    """What a 2026 SDK client sends with a request (plus `extra`)."""
    items = [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", method),
    ]
    if name is not None:
        items.append(("Mcp-Name", name))
    if auth is not None:
        items.append(auth)
    return (*items, *extra)


def raw_post(
    exchange: str, body: Any, headers: tuple[tuple[str, str], ...], at: float = 0.0
) -> ClientRequestReceived:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    return ClientRequestReceived(exchange, route("POST", data, headers), at)


def send(
    exchange: str,
    ident: Any,
    method: str,
    params: dict[str, Any] | None = None,
    *extra: tuple[str, str],
    caps: dict[str, Any] | None = None,
    at: float = 0.0,
    auth: tuple[str, str] | None = AUTH,
) -> ClientRequestReceived:
    """A well-formed 2026 request: `_meta` envelope added (the client's own `_meta` keys kept)."""
    params = dict(params or {})
    params["_meta"] = meta(caps, **params.get("_meta", {}))
    name = params.get("uri") if method == "resources/read" else params.get("name")
    headers = client_headers(method, name if method in _NAMED else None, *extra, auth=auth)
    return raw_post(exchange, req(ident, method, params), headers, at)


_NAMED = ("tools/call", "prompts/get", "resources/read")


def call(
    exchange: str,
    ident: Any,
    *,
    name: str = "deploy",
    arguments: Any = ARGS,
    caps: dict[str, Any] | None = None,
    at: float = 0.0,
    own: dict[str, Any] | None = None,
    auth: tuple[str, str] | None = AUTH,
    **mrtr: Any,
) -> ClientRequestReceived:
    """The client calls a tool; `mrtr` adds `requestState` / `inputResponses` for a retry."""
    params: dict[str, Any] = {"name": name, "arguments": arguments, **mrtr}
    if own:
        params["_meta"] = own
    return send(exchange, ident, "tools/call", params, caps=caps, at=at, auth=auth)


def head(leg_id: str, status: int = 200, content_type: str = "text/event-stream") -> LegResponded:
    return LegResponded(leg_id, status, (("Content-Type", content_type),))


def legacy_headers(
    *relayed: tuple[str, str], auth: tuple[str, str] | None = AUTH, session: str = SESSION
) -> tuple[tuple[str, str], ...]:
    """The headers of every upstream POST after initialize, in the bridge's fixed order."""
    head_items = (
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", "2025-11-25"),
        ("Mcp-Session-Id", session),
    )
    return (*head_items, *((auth,) if auth else ()), *relayed)


def leg(leg_id: str, exchange: str, method: str, params: dict[str, Any], **kw: Any) -> SendLeg:
    """A forwarded request: JSON-RPC id = leg id. A call that may run over rounds, or whose client
    named a progressToken, carries the leg id as its progressToken (unique on a shared session)."""
    meta = params.get("_meta", {})
    if method in ("tools/call", "prompts/get", "resources/read") or "progressToken" in meta:
        params = {**params, "_meta": {**meta, "progressToken": leg_id}}
    return SendLeg(leg_id, exchange, legacy_headers(**kw), req(leg_id, method, params))


def tool_leg(leg_id: str, exchange: str, name: str = "deploy", arguments: Any = ARGS, **own: Any) -> SendLeg:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if own:
        params["_meta"] = own
    return leg(leg_id, exchange, "tools/call", params)


def answer_leg(
    leg_id: str, exchange: str, nested: Any, value: Any, call_leg: str | None = "leg-3"
) -> SendLeg:
    """The bridge answers the upstream's nested request (a POSTed JSON-RPC response)."""
    return SendLeg(leg_id, exchange, legacy_headers(), ok(nested, value), call_leg)


def cancel_leg(leg_id: str, exchange: str, upstream_id: str, reason: str) -> SendLeg:
    """The bridge cancels the call on leg `upstream_id` (filed with that leg)."""
    message = note("notifications/cancelled", {"requestId": upstream_id, "reason": reason})
    return SendLeg(leg_id, exchange, legacy_headers(), message, upstream_id)


def state(
    rnd: int = 1,
    continuation: str = "continuation-1",
    *,
    method: str = "tools/call",
    target: dict[str, Any] | None = None,
    at: float = 0.0,
    ttl: float = 300.0,
    auth: tuple[str, str] | None = AUTH,
) -> str:
    """The requestState the bridge mints for round `rnd` (tokens are deterministic)."""
    params = target if target is not None else {"name": "deploy", "arguments": ARGS}
    binding = binding_for(method, params, (auth,) if auth else ())
    return StateSealer(KEY, "").seal(Claims("", continuation, rnd, at + ttl, binding))


def input_required(ident: Any, entries: dict[str, Any], token: str) -> dict[str, Any]:
    """The interim result that parks a call, naming the upstream as a `complete` one does."""
    result = {
        "resultType": "input_required",
        "inputRequests": entries,
        "requestState": token,
        "_meta": {SERVER_INFO_KEY: SERVER_INFO},
    }
    return ok(ident, result)


def entry(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"method": method, "params": params}


def complete(ident: Any, result: dict[str, Any], *, cacheable: bool = False) -> dict[str, Any]:
    """A legacy result as the bridge delivers it to a 2026 client."""
    out = {**result, "resultType": "complete"}
    if cacheable:
        out |= {"ttlMs": 0, "cacheScope": "private"}
    out["_meta"] = {**result.get("_meta", {}), SERVER_INFO_KEY: SERVER_INFO}
    return ok(ident, out)


LEGACY_CAPS_ALL: dict[str, Any] = {
    "elicitation": {"form": {}, "url": {}},
    "sampling": {"tools": {}},
    "roots": {},
}
"""What `initialize` declares for a client that declared every input kind (`CAPS`)."""

INIT_HEADERS = (("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream"))


def initialize(
    leg_id: str, exchange: str, declared: dict[str, Any], *, auth: tuple[str, str] | None = AUTH
) -> SendLeg:
    """The bridge opens a session declaring exactly `declared`, with the caller's credentials."""
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": declared,
        "clientInfo": {"name": "mcp-debug-proxy", "version": ANY},
    }
    return SendLeg(
        leg_id, exchange, (*INIT_HEADERS, *((auth,) if auth else ())), req(leg_id, "initialize", params)
    )


def idle_timer(n: int = 1, seconds: float = 300.0) -> StartTimer:
    """The idle timer the bridge starts with its n-th upstream session."""
    return StartTimer(f"session-idle:upstream-{n}", seconds)


def open_session(
    engine: MrtrToLegacyEngine,
    exchange: str = "x0",
    *,
    init: str = "leg-1",
    notify: str = "leg-2",
    session: str | None = SESSION,
) -> list[Any]:
    """Drive a handshake to its end (the request on `exchange` started it on leg `init`).

    Returns what the engine did once the upstream accepted `notifications/initialized` (the
    requests that waited for the session).
    """
    sid = (("Mcp-Session-Id", session),) if session is not None else ()
    engine.handle(LegResponded(init, 200, (("Content-Type", "application/json"), *sid)))
    engine.handle(up(init, ok(init, INIT_RESULT)))
    return protocol(engine.handle(LegResponded(notify, 202, ())))


def ready_engine(caps: dict[str, Any] | None = None, **options: Any) -> MrtrToLegacyEngine:
    """An engine whose upstream session for `caps` (every input kind by default) is open.

    A discover on `x0` opened it, with legs `leg-1` (initialize) and `leg-2` (initialized).
    """
    engine = MrtrToLegacyEngine(UPSTREAM, Counter(), state_key=KEY, **options)
    engine.handle(send("x0", 0, "server/discover", caps=caps))
    open_session(engine)
    return engine


def drained(engine: MrtrToLegacyEngine, **expected: int) -> bool:
    """Every table is empty except the upstream session and its idle timer (and the ones named)."""
    sizes = engine.table_sizes()
    sessions = expected.get("upstream_sessions", 1)
    users = sum(expected.get(table, 0) for table in ("calls", "listeners", "discovers"))
    defaults = {"upstream_sessions": sessions, "session_timers": sessions, "session_users": users}
    want = dict.fromkeys(sizes, 0) | defaults | expected
    assert sizes == want, f"tables left behind: {sizes} (expected {want})"
    return True


ROUND_LOG = Log("bridge_round", "info", ANY)
"""Any per-round log line (test_every_round_is_logged_with_the_chain_facts checks the fields)."""

RESUMED = Log("bridge_resumed", "info", ANY)


def park(engine: MrtrToLegacyEngine, exchange: str = "x1", ident: Any = 1, **kw: Any) -> None:
    """Call `deploy`, get one form elicitation `e1` in flight on leg-3, close the round: parked."""
    engine.handle(call(exchange, ident, **kw))
    engine.handle(head("leg-3"))
    engine.handle(up("leg-3", req("e1", "elicitation/create", FORM)))
    commands = protocol(engine.handle(TimerFired("round:call-1")))
    assert commands[-1] == StartTimer("ttl:call-1", ANY), commands


# -- 1. playing a 2026-07-28 server ---------------------------------------------------------------


def test_requests_are_validated_like_a_2026_server_in_ladder_order() -> None:
    engine = ready_engine()
    good = req(1, "tools/call", {"name": "deploy", "arguments": ARGS, "_meta": meta()})
    no_caps = req(2, "tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}})
    old = req(3, "tools/list", {"_meta": meta() | {"io.modelcontextprotocol/protocolVersion": "2025-11-25"}})
    old_headers = (
        *client_headers("tools/list")[:2],
        ("MCP-Protocol-Version", "2025-11-25"),
        ("Mcp-Method", "tools/list"),
    )
    envelope = (
        "params._meta must be an object carrying the required 'io.modelcontextprotocol/protocolVersion' "
        "and 'io.modelcontextprotocol/clientCapabilities' envelope keys"
    )

    assert (
        Playbook(engine)
        >> raw_post("x1", req(1, "tools/list"), client_headers("tools/list"))
        << ReplyJson("x1", 400, err(1, -32602, envelope))
        >> raw_post("x2", no_caps, client_headers("tools/list"))
        << ReplyJson(
            "x2",
            400,
            err(
                2,
                -32602,
                "params._meta is missing the required envelope key(s): "
                "io.modelcontextprotocol/clientCapabilities",
            ),
        )
        >> raw_post(
            "x3",
            good,
            client_headers("tools/call", "deploy")[:2] + client_headers("tools/call", "deploy")[3:],
        )
        << ReplyJson(
            "x3",
            400,
            err(
                1,
                -32020,
                "MCP-Protocol-Version header does not match the request envelope's protocol version",
            ),
        )
        >> raw_post("x4", good, client_headers("tools/list", "deploy"))
        << ReplyJson("x4", 400, err(1, -32020, "Mcp-Method header does not match the request body's method"))
        >> raw_post("x5", good, client_headers("tools/call", "other"))
        << ReplyJson(
            "x5", 400, err(1, -32020, "Mcp-Name header does not match the request body's 'name' parameter")
        )
        >> raw_post("x6", good, client_headers("tools/call"))
        << ReplyJson(
            "x6", 400, err(1, -32020, "Mcp-Name header does not match the request body's 'name' parameter")
        )
        >> raw_post("x7", good, client_headers("tools/call", "deploy", ("mcp-method", "tools/call")))
        << ReplyJson("x7", 400, err(1, -32020, "mcp-method header appears more than once"))
        >> raw_post("x8", old, old_headers)
        << ReplyJson(
            "x8",
            400,
            err(
                3,
                -32022,
                "Unsupported protocol version",
                {"supported": ["2026-07-28"], "requested": "2025-11-25"},
            ),
        )
    )
    assert drained(engine)


def test_an_unsupported_version_error_lists_what_discover_offers_and_echoes_what_was_asked() -> None:
    """2026-07-28's -32022 layout: `data.supported` (non-empty, all in discover's supportedVersions)
    and `data.requested` (the version asked for, as sent), answered with HTTP 400."""
    engine = ready_engine()
    discovered = engine.handle(send("x1", 1, "server/discover"))
    (reply,) = discovered
    assert isinstance(reply, ReplyJson)
    assert reply.message is not None
    offered = reply.message["result"]["supportedVersions"]
    future = meta() | {"io.modelcontextprotocol/protocolVersion": "v999.0.0"}
    headers = (*client_headers("server/discover")[:2], ("MCP-Protocol-Version", "v999.0.0"))
    headers = (*headers, ("Mcp-Method", "server/discover"))

    (refusal,) = engine.handle(raw_post("x2", req(301, "server/discover", {"_meta": future}), headers))

    assert refusal == ReplyJson(
        "x2",
        400,
        err(
            301,
            -32022,
            "Unsupported protocol version",
            {"supported": ["2026-07-28"], "requested": "v999.0.0"},
        ),
    )
    assert refusal.message is not None
    supported = refusal.message["error"]["data"]["supported"]
    assert supported
    assert set(supported) <= set(offered)
    assert drained(engine)


def test_a_base64_mcp_name_is_decoded_before_it_is_compared() -> None:
    engine = ready_engine()
    params = {"name": "déploy", "arguments": ARGS, "_meta": meta()}
    headers = client_headers("tools/call", "=?base64?ZMOpcGxveQ==?=")
    broken = client_headers("tools/call", "=?base64?***?=")

    assert (
        Playbook(engine)
        >> raw_post("x1", req(1, "tools/call", params), headers)
        << tool_leg("leg-3", "x1", name="déploy")
        >> raw_post("x2", req(2, "tools/call", params), broken)
        << ReplyJson(
            "x2", 400, err(2, -32020, "Mcp-Name header does not match the request body's 'name' parameter")
        )
    )


def test_removed_methods_get_404_and_anything_but_post_gets_405() -> None:
    engine = ready_engine()
    get = ClientRequestReceived("x3", route("GET", b"", client_headers("tools/list")))
    delete = ClientRequestReceived("x4", route("DELETE", b"", client_headers("tools/list")))
    not_allowed = (("Allow", "POST"),)

    assert (
        Playbook(engine)
        >> send("x1", 1, "initialize", {"protocolVersion": "2026-07-28", "capabilities": {}})
        << ReplyJson("x1", 404, err(1, -32601, "Method not found: initialize"))
        >> send("x2", 2, "ping")
        << ReplyJson("x2", 404, err(2, -32601, "Method not found: ping"))
        >> get
        << ReplyJson(
            "x3", 405, err(None, -32600, "Method not allowed: GET (2026-07-28 serves POST only)"), not_allowed
        )
        >> delete
        << ReplyJson(
            "x4",
            405,
            err(None, -32600, "Method not allowed: DELETE (2026-07-28 serves POST only)"),
            not_allowed,
        )
        >> send("x5", 5, "logging/setLevel", {"level": "info"})
        << ReplyJson("x5", 404, err(5, -32601, "Method not found: logging/setLevel"))
        >> send("x6", 6, "resources/subscribe", {"uri": "file:///a"})
        << ReplyJson("x6", 404, err(6, -32601, "Method not found: resources/subscribe"))
    )
    assert drained(engine)


def test_bodies_a_2026_server_cannot_serve_are_refused_and_notifications_acknowledged() -> None:
    engine = ready_engine()
    headers = client_headers("tools/list")

    assert (
        Playbook(engine)
        >> raw_post("x1", b"{nope", headers)
        << ReplyJson("x1", 400, err(None, -32700, ANY))
        >> raw_post("x2", [req(1, "tools/list")], headers)
        << ReplyJson("x2", 400, err(None, -32600, "Invalid Request: 2026-07-28 has no batches"))
        >> raw_post("x3", ok(7, {}), headers)
        << ReplyJson(
            "x3", 400, err(None, -32600, "Invalid Request: a 2026-07-28 client must not POST responses")
        )
        >> raw_post("x4", {"jsonrpc": "1.0", "id": 1, "method": "tools/list"}, headers)
        << ReplyJson("x4", 400, err(None, -32600, 'Invalid Request: missing or wrong "jsonrpc" member'))
        >> raw_post("x5", note("notifications/cancelled", {"requestId": 1}), headers)
        << ReplyJson("x5", 202, None)
    )
    assert drained(engine)


def test_mcp_param_headers_must_match_the_arguments_the_relayed_tool_schema_names() -> None:
    engine = ready_engine()
    tools = {
        "tools": [
            {
                "name": "get_weather",
                "inputSchema": {
                    "type": "object",
                    "properties": {
                        "city": {"type": "string", "x-mcp-header": "City"},
                        "days": {"type": "integer", "x-mcp-header": "Days"},
                    },
                },
            }
        ]
    }
    arguments = {"city": "São Paulo", "days": 3}
    params = {"name": "get_weather", "arguments": arguments}
    city = ("Mcp-Param-City", "=?base64?U8OjbyBQYXVsbw==?=")

    assert (
        Playbook(engine)
        >> send("x1", 1, "tools/list")
        << leg("leg-3", "x1", "tools/list", {})
        >> up("leg-3", ok("leg-3", tools))
        << ROUND_LOG
        << ReplyJson("x1", 200, complete(1, tools, cacheable=True))
        >> send("x2", 2, "tools/call", params, ("Mcp-Param-City", "Oslo"))
        << ReplyJson(
            "x2",
            400,
            err(2, -32020, "Mcp-Param-City header does not match the request body's 'city' argument"),
        )
        >> send("x3", 3, "tools/call", params, ("mcp-param-days", "=?base64?***?="))
        << ReplyJson(
            "x3", 400, err(3, -32020, "mcp-param-days header carries a malformed base64 sentinel value")
        )
        >> send("x5", 5, "tools/call", params, city)
        << ReplyJson(
            "x5",
            400,
            err(
                5,
                -32020,
                "Mcp-Param-days header is missing; the request body has the 'days' argument it mirrors",
            ),
        )
        >> send("x6", 6, "tools/call", {"name": "get_weather", "arguments": {"city": "São Paulo"}}, city)
        << leg("leg-4", "x6", "tools/call", {"name": "get_weather", "arguments": {"city": "São Paulo"}})
        >> send("x4", 4, "tools/call", params, city, ("Mcp-Param-Days", "3"), ("Mcp-Param-Unknown", "x"))
        << leg("leg-5", "x4", "tools/call", params)
    )
    assert drained(engine, calls=2, serving=2, legs=2, session_param_headers=1)


# -- 2. the upstream session --------------------------------------------------------------------


def test_the_first_request_opens_the_upstream_session_and_waiting_requests_follow_in_order() -> None:
    engine = MrtrToLegacyEngine(UPSTREAM, Counter(), state_key=KEY)
    fields = {
        "session": "upstream-1",
        "server": "weather",
        "version": "2025-11-25",
        "capabilities": "elicitation.form elicitation.url sampling sampling.tools roots",
        "upstream_session": True,
        "generation": 0,
    }
    own = {"progressToken": "p", "traceparent": "00-1-2-01"}

    assert (
        Playbook(engine)
        >> call("x1", 1, own=own)
        << idle_timer()
        << initialize("leg-1", "x1", LEGACY_CAPS_ALL)
        >> send("x2", 2, "server/discover", {}, ("X-Tenant", "acme"))
        >> LegResponded("leg-1", 200, (("Content-Type", "application/json"), ("mcp-session-id", SESSION)))
        >> up("leg-1", ok("leg-1", INIT_RESULT))
        << Log("upstream_initialized", "info", fields)
        << SendLeg("leg-2", "x1", legacy_headers(), note("notifications/initialized"))
        >> LegEnded("leg-1")
        >> LegResponded("leg-2", 202, ())
        << tool_leg("leg-3", "x1", **own)
        << ReplyJson("x2", 200, ANY)
        >> LegEnded("leg-2")
    )
    assert drained(engine, calls=1, serving=1, legs=1)


def test_discover_is_answered_from_the_initialize_result_in_2026_shape() -> None:
    engine = ready_engine()
    result = {
        "resultType": "complete",
        "supportedVersions": ["2026-07-28"],
        "capabilities": {k: v for k, v in LEGACY_CAPS.items() if k != "tasks"},
        "instructions": "Ask about the weather.",
        "_meta": {SERVER_INFO_KEY: SERVER_INFO},
        "ttlMs": 0,
        "cacheScope": "private",
    }

    assert Playbook(engine) >> send("x1", 1, "server/discover") << ReplyJson("x1", 200, ok(1, result))
    assert drained(engine)


def test_client_2026_headers_and_meta_never_reach_the_upstream_but_credentials_and_custom_ones_do() -> None:
    engine = ready_engine()
    params = {
        "name": "deploy",
        "arguments": ARGS,
        "_meta": {
            "progressToken": 9,
            "io.modelcontextprotocol/logLevel": "info",
            "io.modelcontextprotocol/x": 1,
        },
    }
    extra = (
        ("X-Tenant", "acme"),
        ("Mcp-Param-Env", "prod"),
        ("Last-Event-ID", "e-1"),
        ("Mcp-Session-Id", "forged"),
    )

    assert (
        Playbook(engine)
        >> send("x1", 1, "tools/call", params, *extra)
        << SendLeg(
            "leg-3",
            "x1",
            legacy_headers(("X-Tenant", "acme")),
            req(
                "leg-3",
                "tools/call",
                {"name": "deploy", "arguments": ARGS, "_meta": {"progressToken": "leg-3"}},
            ),
        )
    )
    quiet = {"_meta": {"io.modelcontextprotocol/logLevel": "info"}}
    anonymous = send("x2", 2, "tools/list", quiet, auth=None)
    assert (
        Playbook(engine)
        >> anonymous
        << idle_timer(2)
        << initialize("leg-4", "x2", LEGACY_CAPS_ALL, auth=None)
    )
    assert open_session(engine, "x2", init="leg-4", notify="leg-5") == [
        SendLeg("leg-6", "x2", legacy_headers(auth=None), req("leg-6", "tools/list", {}))
    ]


def test_an_initialize_failure_fails_every_waiting_request_and_the_next_request_tries_again() -> None:
    engine = MrtrToLegacyEngine(UPSTREAM, Counter(), state_key=KEY)
    why = "initialize failed with error -32602: Unsupported protocol version"
    text = f"cannot open a session with the legacy upstream: {why}"
    listen = send("x3", 3, "subscriptions/listen", {"notifications": {"toolsListChanged": True}})

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << idle_timer()
        << ANY
        >> send("x2", 2, "server/discover")
        >> listen
        >> up("leg-1", err("leg-1", -32602, "Unsupported protocol version"))
        << Log("upstream_initialize_failed", "warning", {"session": "upstream-1", "why": why})
        << ReplyJson("x1", 502, err(1, -32000, f"upstream MCP server failed during tools/call: {text}"))
        << ReplyJson("x2", 502, err(2, -32000, f"upstream MCP server failed during server/discover: {text}"))
        << ReplyJson(
            "x3", 502, err(3, -32000, f"upstream MCP server failed during subscriptions/listen: {text}")
        )
        << CancelTimer("session-idle:upstream-1")
        >> LegEnded("leg-1")
        >> send("x4", 4, "tools/list")
        << idle_timer(2)
        << initialize("leg-2", "x4", LEGACY_CAPS_ALL)
    )
    assert drained(engine, waiting=1, calls=1, serving=1, legs=1)


def test_an_unreachable_upstream_during_initialize_is_a_gateway_fault() -> None:
    engine = MrtrToLegacyEngine(UPSTREAM, Counter(), state_key=KEY)
    why = "the upstream MCP server is unreachable: connection refused" + UNREACHABLE_HINT

    assert (
        Playbook(engine)
        >> send("x1", 1, "server/discover")
        << idle_timer()
        << ANY
        >> LegFailed("leg-1", "unreachable", "connection refused")
        << Log("upstream_initialize_failed", "warning", {"session": "upstream-1", "why": why})
        << ReplyJson(
            "x1",
            502,
            err(
                1,
                -32000,
                f"upstream MCP server failed during server/discover: cannot open a session with "
                f"the legacy upstream: {why}",
            ),
            outcome="upstream_unreachable",  # the cause, as pass-through records its own 502
        )
        << CancelTimer("session-idle:upstream-1")
    )
    assert drained(engine, upstream_sessions=0)


def test_a_client_leaving_while_the_session_opens_is_forgotten() -> None:
    engine = MrtrToLegacyEngine(UPSTREAM, Counter(), state_key=KEY)

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << idle_timer()
        << ANY
        >> send("x2", 2, "server/discover")
        >> send("x3", 3, "subscriptions/listen", {"notifications": {}})
        >> ClientDisconnected("x1")
        << Log("bridge_client_left", "info", {"call": "call-1", "exchange": "x1", "phase": "queued"})
        << EndClientResponse("x1", "client_disconnected")
        >> ClientDisconnected("x2")
        << EndClientResponse("x2", "client_disconnected")
        >> ClientDisconnected("x3")
        << EndClientResponse("x3", "client_disconnected")
    )
    open_session(engine, "x1")
    assert drained(engine)


def test_a_404_reinitializes_the_session_and_resends_the_request_once() -> None:
    engine = ready_engine()
    new_session = (("Content-Type", "application/json"), ("Mcp-Session-Id", "up-session-2"))
    resent = SendLeg(
        "leg-6",
        "x1",
        (*legacy_headers()[:3], ("Mcp-Session-Id", "up-session-2"), AUTH),
        req(
            "leg-6", "tools/call", {"name": "deploy", "arguments": ARGS, "_meta": {"progressToken": "leg-6"}}
        ),
    )

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << tool_leg("leg-3", "x1")
        >> LegResponded("leg-3", 404, ())
        << CloseLeg("leg-3")
        << Log(
            "upstream_session_lost",
            "warning",
            {"session": "upstream-1", "generation": 1, "why": lost_why("404"), "then": LOST_THEN},
        )
        << initialize("leg-4", "x1", LEGACY_CAPS_ALL)
        >> LegEnded("leg-3")
        >> LegResponded("leg-4", 200, new_session)
        >> up("leg-4", ok("leg-4", INIT_RESULT))
        << Log("upstream_initialized", "info", ANY)
        << SendLeg("leg-5", "x1", ANY, note("notifications/initialized"))
        >> LegResponded("leg-5", 202, ())
        << resent
        >> LegResponded("leg-6", 404, ())
        >> up("leg-6", err("leg-6", -32600, "Session not found"))
        << ROUND_LOG
        << ReplyJson("x1", 400, err(1, -32600, "Session not found"))
    )
    assert drained(engine)


# -- 3. forwarded requests and their answers -----------------------------------------------------


def test_list_and_read_results_get_result_type_caching_hints_and_server_info() -> None:
    engine = ready_engine()
    prompts = {"prompts": [{"name": "p"}], "_meta": {"x": 1}}
    read = {"contents": [{"uri": "file:///a", "text": "hi"}]}

    assert (
        Playbook(engine)
        >> send("x1", 1, "prompts/list", {"cursor": "c1"})
        << leg("leg-3", "x1", "prompts/list", {"cursor": "c1"})
        >> head("leg-3", 200, "application/json")
        >> up("leg-3", ok("leg-3", prompts))
        << ROUND_LOG
        << ReplyJson("x1", 200, complete(1, prompts, cacheable=True))
        >> LegEnded("leg-3")
        >> send("x2", 2, "resources/read", {"uri": "file:///a"})
        << leg("leg-4", "x2", "resources/read", {"uri": "file:///a"})
        >> up("leg-4", ok("leg-4", read))
        << ROUND_LOG
        << ReplyJson("x2", 200, complete(2, read, cacheable=True))
        >> send("x3", 3, "completion/complete", {"ref": {"type": "ref/prompt", "name": "p"}})
        << leg("leg-5", "x3", "completion/complete", {"ref": {"type": "ref/prompt", "name": "p"}})
        >> up("leg-5", ok("leg-5", {"completion": {"values": []}}))
        << ROUND_LOG
        << ReplyJson("x3", 200, complete(3, {"completion": {"values": []}}))
    )
    assert drained(engine)


def test_upstream_errors_are_readdressed_with_2026_codes_and_statuses() -> None:
    engine = ready_engine()

    assert (
        Playbook(engine)
        >> send("x1", 1, "resources/read", {"uri": "file:///gone"})
        << ANY
        >> up("leg-3", err("leg-3", -32002, "Resource not found", {"uri": "file:///gone"}))
        << Log("bridge_round", "info", ANY)
        << ReplyJson("x1", 400, err(1, -32602, "Resource not found", {"uri": "file:///gone"}))
        >> send("x2", 2, "tasks/list")
        << ANY
        >> up("leg-4", err("leg-4", -32601, "Method not found"))
        << ROUND_LOG
        << ReplyJson("x2", 404, err(2, -32601, "Method not found"))
        >> call("x3", 3)
        << ANY
        >> up("leg-5", err("leg-5", -32603, "tool crashed"))
        << ROUND_LOG
        << ReplyJson("x3", 200, err(3, -32603, "tool crashed"))
        >> send("x4", 4, "tools/list")
        << ANY
        >> up("leg-6", err("leg-6", -32042, "needs login", {"elicitations": []}))
        << ROUND_LOG
        << ReplyJson(
            "x4",
            200,
            err(
                4,
                -32603,
                "upstream required a URL elicitation the bridge could not relay: needs login",
                {"elicitations": []},
            ),
        )
    )
    assert drained(engine)


def test_notifications_stream_before_the_result_under_the_clients_token_and_log_level() -> None:
    engine = ready_engine()
    own = {"progressToken": "p1", "io.modelcontextprotocol/logLevel": "warning"}
    quiet = note("notifications/message", {"level": "info", "data": "detail"})
    loud = note("notifications/message", {"level": "error", "data": "smoke"})
    progress = note("notifications/progress", {"progressToken": "p1", "progress": 1, "total": 2})
    upstream_progress = note("notifications/progress", {"progressToken": "leg-3", "progress": 1, "total": 2})
    changed = note("notifications/tools/list_changed")

    assert (
        Playbook(engine)
        >> call("x1", 1, own=own)
        << tool_leg("leg-3", "x1", progressToken="p1")
        >> head("leg-3")
        >> up("leg-3", quiet)
        >> up("leg-3", upstream_progress)
        << StartSse("x1")
        << SendSse("x1", progress)
        >> up("leg-3", loud)
        << SendSse("x1", loud)
        >> up("leg-3", changed)
        >> up("leg-3", note("notifications/elicitation/complete", {"elicitationId": "x"}))
        >> up("leg-3", note("notifications/custom", {"a": 1}))
        << SendSse("x1", note("notifications/custom", {"a": 1}))
        >> up("leg-3", ok("leg-3", DONE))
        << ROUND_LOG
        << SendSse("x1", complete(1, DONE))
        << EndClientResponse("x1")
        >> LegEnded("leg-3")
        >> call("x2", 2)
        << tool_leg("leg-4", "x2")
        >> up("leg-4", progress)
        >> up("leg-4", loud)
        >> up("leg-4", ok("leg-4", DONE))
        << ROUND_LOG
        << ReplyJson("x2", 200, complete(2, DONE))
    )
    assert drained(engine)


def test_a_call_whose_first_request_named_no_progress_token_still_reports_progress_to_a_retry_that_does() -> (
    None
):
    """The upstream call outlives its first request: it carries a token of the proxy's own, so a
    legacy server reports progress, which each request hears under its own token, or not at all."""
    engine = ready_engine()
    sent = protocol(engine.handle(call("x1", 1)))  # names no progressToken
    assert sent[-1].message["params"]["_meta"] == {"progressToken": "leg-3"}  # the proxy's own
    engine.handle(head("leg-3"))
    engine.handle(up("leg-3", req("e1", "elicitation/create", FORM)))
    engine.handle(TimerFired("round:call-1"))
    progress = note("notifications/progress", {"progressToken": "leg-3", "progress": 1, "total": 2})
    shown = note("notifications/progress", {"progressToken": "p2", "progress": 1, "total": 2})
    assert (
        Playbook(engine)
        >> call(
            "x2",
            2,
            own={"progressToken": "p2"},
            requestState=state(),
            inputResponses={"elicitation-1": ACCEPT},
        )
        << CancelTimer("ttl:call-1")
        << RESUMED
        << answer_leg("leg-4", "x2", "e1", ACCEPT)
        >> up("leg-3", progress)
        << StartSse("x2")
        << SendSse("x2", shown)
    )


def test_the_proxy_answers_upstream_pings_and_refuses_requests_a_2026_client_cannot_get() -> None:
    engine = ready_engine()
    refusal = "Method not found: a 2026-07-28 client cannot be asked elicitation/create during tools/list"
    odd = "Method not found: a 2026-07-28 client cannot be asked tasks/get during tools/call"

    assert (
        Playbook(engine)
        >> send("x1", 1, "tools/list")
        << ANY
        >> up("leg-3", req("s1", "ping"))
        << answer_leg("leg-4", "x1", "s1", {})
        >> up("leg-3", req("s2", "elicitation/create", FORM))
        << SendLeg("leg-5", "x1", legacy_headers(), err("s2", -32601, refusal), "leg-3")
        >> LegResponded("leg-4", 202, ())
        >> LegResponded("leg-5", 500, ())
        << Log(
            "bridge_notice_refused",
            "warning",
            {"leg": "leg-5", "what": "refuse elicitation/create", "status": 500},
        )
        >> up("leg-3", ok("leg-3", {"tools": []}))
        << ROUND_LOG
        << ReplyJson("x1", 200, complete(1, {"tools": []}, cacheable=True))
        >> call("x2", 2)
        << ANY
        >> up("leg-6", req("s3", "tasks/get", {"taskId": "t"}))
        << SendLeg("leg-7", "x2", legacy_headers(), err("s3", -32601, odd), "leg-6")
        >> LegFailed("leg-7", "unreachable", "refused")
        << Log(
            "bridge_notice_failed",
            "warning",
            {
                "leg": "leg-7",
                "what": "refuse tasks/get",
                "why": "the upstream MCP server is unreachable: refused" + UNREACHABLE_HINT,
            },
        )
        >> up("leg-6", {"jsonrpc": "2.0", "id": "other", "result": {}})
        << Log("bridge_upstream_dropped", "warning", {"leg": "leg-6", "why": "a response for id 'other'"})
    )
    assert drained(engine, calls=1, serving=1, legs=1)


def test_a_leg_that_fails_while_the_client_waits_is_a_gateway_fault_naming_it() -> None:
    engine = ready_engine()
    cut = "the upstream MCP server cut the response stream: reset" + CUT_HINT
    ended = "the response ended without a JSON-RPC answer (HTTP 502)"

    assert (
        Playbook(engine)
        >> call("x1", 1, own={"progressToken": 1})
        << ANY
        >> head("leg-3")
        >> up("leg-3", note("notifications/progress", {"progressToken": 1, "progress": 1}))
        << StartSse("x1")
        << SendSse("x1", note("notifications/progress", {"progressToken": 1, "progress": 1}))
        >> LegFailed("leg-3", "cut", "reset")
        << Log(
            "bridge_leg_lost",
            "warning",
            {"call": "call-1", "leg": "leg-3", "phase": "running", "why": f"{cut} (HTTP 200)"},
        )
        << SendSse("x1", err(1, -32000, f"upstream MCP server failed during tools/call: {cut} (HTTP 200)"))
        << EndClientResponse("x1", "upstream_cut")
        >> send("x2", 2, "tools/list")
        << ANY
        >> head("leg-4", 502, "text/html")
        >> LegEnded("leg-4")
        << Log("bridge_leg_lost", "warning", ANY)
        << ReplyJson("x2", 502, err(2, -32000, f"upstream MCP server failed during tools/list: {ended}"))
    )
    assert drained(engine)


def test_a_client_that_closes_its_request_cancels_the_upstream_call() -> None:
    engine = ready_engine()

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> ClientDisconnected("x1")
        << Log("bridge_client_left", "info", {"call": "call-1", "exchange": "x1", "phase": "running"})
        << cancel_leg("leg-4", "x1", "leg-3", "the client closed its request")
        << CloseLeg("leg-3", "cancelled")
        << EndClientResponse("x1", "client_disconnected")
        >> up("leg-3", ok("leg-3", DONE))
        >> LegResponded("leg-4", 202, ())
        >> ClientDisconnected("x1")
    )
    assert drained(engine)


# -- 4. rounds: park, resume, stream on -----------------------------------------------------------


def test_an_in_flight_question_parks_the_call_and_the_retry_answers_it_and_gets_the_result() -> None:
    engine = ready_engine()
    token = state()
    asked = {"elicitation-1": entry("elicitation/create", FORM)}
    progress = note("notifications/progress", {"progressToken": "p2", "progress": 3})

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << tool_leg("leg-3", "x1")
        >> head("leg-3")
        >> up("leg-3", req("e1", "elicitation/create", FORM))
        << StartTimer("round:call-1", 0.02)
        >> TimerFired("round:call-1")
        << ROUND_LOG
        << ReplyJson("x1", 200, input_required(1, asked, token))
        << StartTimer("ttl:call-1", 300.0)
        >> call(
            "x2", 2, own={"progressToken": "p2"}, requestState=token, inputResponses={"elicitation-1": ACCEPT}
        )
        << CancelTimer("ttl:call-1")
        << RESUMED
        << answer_leg("leg-4", "x2", "e1", ACCEPT)
        >> LegResponded("leg-4", 202, ())
        >> up("leg-3", note("notifications/progress", {"progressToken": None, "progress": 3}))
        << StartSse("x2")
        << SendSse("x2", progress)
        >> up("leg-3", ok("leg-3", DONE))
        << ROUND_LOG
        << SendSse("x2", complete(2, DONE))
        << EndClientResponse("x2")
        >> LegEnded("leg-3")
    )
    assert drained(engine)


def test_questions_arriving_together_are_one_round_with_proxy_minted_keys() -> None:
    engine = ready_engine()
    token = state()
    asked = {
        "elicitation-1": entry("elicitation/create", FORM),
        "sampling-1": entry("sampling/createMessage", SAMPLE),
        "roots-1": entry("roots/list", {}),
        "elicitation-2": entry("elicitation/create", URL_SHOWN),
    }
    answers = {
        "roots-1": MY_ROOTS,
        "elicitation-1": ACCEPT,
        "sampling-1": PARIS,
        "elicitation-2": {"action": "accept"},
    }

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> up("leg-3", req("e1", "elicitation/create", FORM))
        << StartTimer("round:call-1", 0.02)
        >> up("leg-3", req(7, "sampling/createMessage", SAMPLE))
        >> up("leg-3", req("r1", "roots/list", {}))
        >> up("leg-3", req("u1", "elicitation/create", URL))
        >> TimerFired("round:call-1")
        << ROUND_LOG
        << ReplyJson("x1", 200, input_required(1, asked, token))
        << StartTimer("ttl:call-1", 300.0)
        >> call("x2", 2, requestState=token, inputResponses={**answers, "stray": {"x": 1}})
        << CancelTimer("ttl:call-1")
        << RESUMED
        << answer_leg("leg-4", "x2", "e1", ACCEPT)
        << answer_leg("leg-5", "x2", 7, PARIS)
        << answer_leg("leg-6", "x2", "r1", MY_ROOTS)
        << answer_leg("leg-7", "x2", "u1", {"action": "accept"})
        >> up("leg-3", ok("leg-3", DONE))
        << ROUND_LOG
        << ReplyJson("x2", 200, complete(2, DONE))
    )
    assert drained(engine, legs=4)


def test_a_question_after_the_answers_is_a_second_round_under_a_new_token_for_the_same_call() -> None:
    engine = ready_engine()
    park(engine)
    second = {"sampling-1": entry("sampling/createMessage", SAMPLE)}

    assert (
        Playbook(engine)
        >> call("x2", 2, requestState=state(), inputResponses={"elicitation-1": ACCEPT}, at=10.0)
        << CancelTimer("ttl:call-1")
        << RESUMED
        << answer_leg("leg-4", "x2", "e1", ACCEPT)
        >> up("leg-3", req("s1", "sampling/createMessage", SAMPLE))
        << StartTimer("round:call-1", 0.02)
        >> TimerFired("round:call-1")
        << ROUND_LOG
        << ReplyJson("x2", 200, input_required(2, second, state(2, at=10.0)))
        << StartTimer("ttl:call-1", 300.0)
        >> call("x3", 3, requestState=state(2, at=10.0), inputResponses={"sampling-1": PARIS}, at=20.0)
        << CancelTimer("ttl:call-1")
        << RESUMED
        << answer_leg("leg-5", "x3", "s1", PARIS)
        >> up("leg-3", ok("leg-3", DONE))
        << ROUND_LOG
        << ReplyJson("x3", 200, complete(3, DONE))
    )
    assert drained(engine, legs=2)


def test_missing_answers_are_asked_again_alone_and_unknown_ones_ignored() -> None:
    engine = ready_engine()
    engine.handle(call("x1", 1))
    engine.handle(up("leg-3", req("e1", "elicitation/create", FORM)))
    engine.handle(up("leg-3", req("r1", "roots/list")))
    engine.handle(TimerFired("round:call-1"))
    again = {"roots-1": entry("roots/list", {})}

    assert (
        Playbook(engine)
        >> call("x2", 2, requestState=state(), inputResponses={"elicitation-1": ACCEPT, "x": {}})
        << CancelTimer("ttl:call-1")
        << RESUMED
        << answer_leg("leg-4", "x2", "e1", ACCEPT)
        << ROUND_LOG
        << ReplyJson("x2", 200, input_required(2, again, state(2)))
        << StartTimer("ttl:call-1", 300.0)
        >> call("x3", 3, requestState=state(2), inputResponses=None)
        << CancelTimer("ttl:call-1")
        << RESUMED
        << ROUND_LOG
        << ReplyJson("x3", 200, input_required(3, again, state(3)))
        << StartTimer("ttl:call-1", 300.0)
        >> call("x4", 4, requestState=state(3), inputResponses={"roots-1": MY_ROOTS})
        << CancelTimer("ttl:call-1")
        << RESUMED
        << answer_leg("leg-5", "x4", "r1", MY_ROOTS)
    )
    assert drained(engine, calls=1, serving=1, legs=3, continuations=1, principals=1)


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        ({"foo": 1}, "'action' must be one of accept, decline, cancel, got None"),
        (
            {"jsonrpc": "2.0", "id": "e1", "result": ACCEPT},
            "a whole JSON-RPC response, where the bare result",
        ),
        ({"action": "accept", "content": "octocat"}, "'content' must be an object"),
        ("accept", "an answer is its result object, got a string"),
        (None, "an answer is its result object, got null"),
    ],
    ids=["no-action", "json-rpc-wrapped", "content-not-object", "a-string", "null"],
)
def test_an_answer_that_is_no_result_of_its_question_is_refused_and_the_call_waits_for_a_good_retry(
    answer: Any, problem: str
) -> None:
    """A server fails the whole call on an answer its schema refuses: the bridge refuses the retry
    instead (-32602 naming the key), touching nothing, so the same requestState can try again."""
    engine = ready_engine()
    park(engine)
    refused = protocol(
        engine.handle(call("x2", 2, requestState=state(), inputResponses={"elicitation-1": answer}))
    )
    assert isinstance(refused[0], Log)
    assert refused[0].event == "bridge_answer_refused"
    reply = refused[1]
    assert isinstance(reply, ReplyJson)
    assert reply.status == 400
    error = reply.message
    assert error is not None
    assert error["error"]["code"] == -32602
    assert error["error"]["message"].startswith(
        "Invalid inputResponses: elicitation-1 (elicitation/create): "
    )
    assert problem in error["error"]["message"]
    assert len(refused) == 2  # nothing went upstream, no timer moved
    assert (
        Playbook(engine)
        >> call("x3", 3, requestState=state(), inputResponses={"elicitation-1": ACCEPT})
        << CancelTimer("ttl:call-1")
        << RESUMED
        << answer_leg("leg-4", "x3", "e1", ACCEPT)
    )


def test_input_responses_that_are_no_object_are_refused() -> None:
    engine = ready_engine()
    park(engine)
    refused = protocol(engine.handle(call("x2", 2, requestState=state(), inputResponses=[1])))
    reply = refused[1]
    assert isinstance(reply, ReplyJson)
    assert reply.message is not None
    assert reply.message["error"]["message"] == (
        "Invalid inputResponses: inputResponses must be an object of answers by key, got an array"
    )


def test_every_round_is_logged_with_the_chain_facts() -> None:
    engine = ready_engine()
    engine.handle(call("x1", 1))
    engine.handle(up("leg-3", req("u1", "elicitation/create", URL)))
    engine.handle(up("leg-3", req(5, "sampling/createMessage", {**SAMPLE, "tools": []})))
    token = state()
    fields = {
        "exchange": "x1",
        "client_id": 1,
        "upstream_id": "leg-3",
        "method": "tools/call",
        "name": "deploy",
        "round": 1,
        "outcome": "input_required",
        "continuation": "continuation-1",
        "input_keys": {"elicitation-1": "elicitation/create:url", "sampling-1": "sampling/createMessage"},
        "nested_ids": {"elicitation-1": "u1", "sampling-1": 5},
        "elicitation_ids": {"elicitation-1": "el-7"},
        "capabilities": "declared",
        "request_state": {"length": len(token), "sha256": ANY},
    }

    assert engine.handle(TimerFired("round:call-1"))[0] == Log("bridge_round", "info", fields)


def test_notifications_between_rounds_are_buffered_and_flushed_on_the_retry_stream() -> None:
    engine = ready_engine()
    park(engine, own={"progressToken": "p1", "io.modelcontextprotocol/logLevel": "debug"})
    log = note("notifications/message", {"level": "info", "data": "waiting"})
    own = {"progressToken": "p2", "io.modelcontextprotocol/logLevel": "info"}

    assert (
        Playbook(engine)
        >> up("leg-3", note("notifications/progress", {"progressToken": "p1", "progress": 1}))
        >> up("leg-3", log)
        >> up("leg-3", note("notifications/message", {"level": "debug", "data": "chatter"}))
        >> call("x2", 2, own=own, requestState=state(), inputResponses={"elicitation-1": ACCEPT})
        << CancelTimer("ttl:call-1")
        << RESUMED
        << answer_leg("leg-4", "x2", "e1", ACCEPT)
        << StartSse("x2")
        << SendSse("x2", note("notifications/progress", {"progressToken": "p2", "progress": 1}))
        << SendSse("x2", log)
        >> up("leg-3", ok("leg-3", DONE))
        << ROUND_LOG
        << SendSse("x2", complete(2, DONE))
        << EndClientResponse("x2")
    )
    assert drained(engine, legs=1)


def test_the_buffer_is_bounded_and_overflow_is_counted_and_reported() -> None:
    engine = ready_engine()
    park(engine)
    for n in range(103):
        engine.handle(up("leg-3", note("notifications/custom", {"n": n})))
    assert engine.table_sizes()["buffered"] == 100

    retry = call("x2", 2, requestState=state(), inputResponses={"elicitation-1": ACCEPT})
    commands = protocol(engine.handle(retry))

    assert commands.count(SendSse("x2", note("notifications/custom", {"n": 0}))) == 1
    assert SendSse("x2", note("notifications/custom", {"n": 100})) not in commands
    assert commands[-1] == Log(
        "bridge_notifications_dropped", "warning", {"call": "call-1", "dropped": 3, "limit": 100}
    )


def test_a_final_answer_that_arrives_while_parked_is_delivered_on_the_retry() -> None:
    engine = ready_engine()
    park(engine)

    assert (
        Playbook(engine)
        >> up("leg-3", req("s1", "ping"))
        << answer_leg("leg-4", "x1", "s1", {})
        >> up("leg-3", ok("leg-3", DONE))
        << Log("bridge_answer_while_parked", "info", {"call": "call-1", "kind": "result"})
        >> LegEnded("leg-3")
        >> call("x2", 2, requestState=state(), inputResponses={"elicitation-1": ACCEPT})
        << CancelTimer("ttl:call-1")
        << RESUMED
        << ROUND_LOG
        << ReplyJson("x2", 200, complete(2, DONE))
    )
    assert drained(engine, legs=1)


def test_a_question_that_arrives_while_parked_is_asked_on_the_next_round() -> None:
    engine = ready_engine()
    park(engine)
    both = {"roots-1": entry("roots/list", {})}

    assert (
        Playbook(engine)
        >> up("leg-3", req("r1", "roots/list"))
        >> call("x2", 2, requestState=state(), inputResponses={"elicitation-1": ACCEPT})
        << CancelTimer("ttl:call-1")
        << RESUMED
        << answer_leg("leg-4", "x2", "e1", ACCEPT)
        << StartTimer("round:call-1", 0.02)
        >> TimerFired("round:call-1")
        << ROUND_LOG
        << ReplyJson("x2", 200, input_required(2, both, state(2)))
        << StartTimer("ttl:call-1", 300.0)
    )


def test_the_upstream_withdrawing_a_question_removes_it_from_the_round() -> None:
    engine = ready_engine()
    engine.handle(call("x1", 1))

    assert (
        Playbook(engine)
        >> up("leg-3", req("e1", "elicitation/create", FORM))
        << StartTimer("round:call-1", 0.02)
        >> up("leg-3", note("notifications/cancelled", {"requestId": "e1"}))
        << CancelTimer("round:call-1")
        >> TimerFired("round:call-1")
        >> up("leg-3", ok("leg-3", DONE))
        << ROUND_LOG
        << ReplyJson("x1", 200, complete(1, DONE))
    )
    assert drained(engine)


def test_a_result_during_the_round_window_wins_over_the_collected_questions() -> None:
    engine = ready_engine()
    engine.handle(call("x1", 1))

    assert (
        Playbook(engine)
        >> up("leg-3", req("e1", "elicitation/create", FORM))
        << StartTimer("round:call-1", 0.02)
        >> up("leg-3", ok("leg-3", DONE))
        << ROUND_LOG
        << ReplyJson("x1", 200, complete(1, DONE))
        << CancelTimer("round:call-1")
        >> TimerFired("round:call-1")
    )
    assert drained(engine)


def test_prompts_get_and_resources_read_park_too_bound_to_their_name_or_uri() -> None:
    engine = ready_engine()
    target = {"uri": "file:///secret"}
    token = state(method="resources/read", target=target)

    assert (
        Playbook(engine)
        >> send("x1", 1, "resources/read", target)
        << leg("leg-3", "x1", "resources/read", target)
        >> up("leg-3", req("r1", "roots/list"))
        << StartTimer("round:call-1", 0.02)
        >> TimerFired("round:call-1")
        << ROUND_LOG
        << ReplyJson("x1", 200, input_required(1, {"roots-1": entry("roots/list", {})}, token))
        << StartTimer("ttl:call-1", 300.0)
        >> send(
            "x2",
            2,
            "resources/read",
            {**target, "requestState": token, "inputResponses": {"roots-1": MY_ROOTS}},
        )
        << CancelTimer("ttl:call-1")
        << RESUMED
        << answer_leg("leg-4", "x2", "r1", MY_ROOTS)
        >> up("leg-3", ok("leg-3", {"contents": []}))
        << ROUND_LOG
        << ReplyJson("x2", 200, complete(2, {"contents": []}, cacheable=True))
        >> send("x3", 3, "prompts/get", {"name": "greet", "arguments": {"who": "x"}})
        << leg("leg-5", "x3", "prompts/get", {"name": "greet", "arguments": {"who": "x"}})
        >> up("leg-5", req("e9", "elicitation/create", FORM))
        << StartTimer("round:call-2", 0.02)
    )


# -- 5. capability gate, round limit, URL elicitation --------------------------------------------


def missing(ident: Any, method: str, needed: str, shape: dict[str, Any]) -> dict[str, Any]:
    text = f"Missing required client capability {needed} (the server sent {method} in flight)"
    return err(ident, -32021, text, {"requiredCapabilities": shape})


def test_a_question_this_request_did_not_declare_a_capability_for_is_refused_and_cancelled() -> None:
    """The session declares only what the caller declared; a server that asks anyway meets the gate."""
    form_only: dict[str, Any] = {"elicitation": {}}
    with_tools = {**SAMPLE, "tools": [{"name": "t", "inputSchema": {}}]}
    context = {**SAMPLE, "includeContext": "thisServer"}
    cases: list[tuple[dict[str, Any], dict[str, Any], str, str, dict[str, Any]]] = [
        (
            form_only,
            req("u1", "elicitation/create", URL),
            "elicitation/create",
            "elicitation.url",
            {"elicitation": {"url": {}}},
        ),
        (
            form_only,
            req("s1", "sampling/createMessage", SAMPLE),
            "sampling/createMessage",
            "sampling",
            {"sampling": {}},
        ),
        (form_only, req("r1", "roots/list"), "roots/list", "roots", {"roots": {}}),
        (
            {"sampling": {}},
            req("s2", "sampling/createMessage", with_tools),
            "sampling/createMessage",
            "sampling.tools",
            {"sampling": {"tools": {}}},
        ),
        (
            {"sampling": {"tools": {}}},
            req("s3", "sampling/createMessage", context),
            "sampling/createMessage",
            "sampling.context",
            {"sampling": {"context": {}}},
        ),
        (
            {"elicitation": {"url": {}}},
            req("e1", "elicitation/create", {"message": "no mode means form"}),
            "elicitation/create",
            "elicitation.form",
            {"elicitation": {"form": {}}},
        ),
    ]
    for caps, question, method, needed, shape in cases:
        engine = ready_engine(caps)
        fields = {"call": "call-1", "client_id": 1, "method": method, "needed": needed}
        assert (
            Playbook(engine)
            >> call("x1", 1, caps=caps)
            << tool_leg("leg-3", "x1")
            >> up("leg-3", question)
            << Log("bridge_capability_refused", "warning", fields)
            << cancel_leg("leg-4", "x1", "leg-3", f"the client lacks capability {needed}")
            << CloseLeg("leg-3", "cancelled")
            << ReplyJson("x1", 400, missing(1, method, needed, shape))
        )
        assert drained(engine, legs=1)


def test_each_session_declares_exactly_the_input_kinds_its_callers_declared() -> None:
    engine = MrtrToLegacyEngine(UPSTREAM, Counter(), state_key=KEY)
    cases: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({}, {}),
        ({"sampling": {}}, {"sampling": {}}),
        ({"elicitation": {}}, {"elicitation": {"form": {}}}),
        ({"elicitation": {"url": {}}}, {"elicitation": {"url": {}}}),
        (
            {"elicitation": {"form": {}, "url": {}}, "sampling": {"tools": {}, "context": {}}},
            {"elicitation": {"form": {}, "url": {}}, "sampling": {"tools": {}, "context": {}}},
        ),
        ({"roots": {"listChanged": True}, "experimental": {"x": {}}, "tasks": {}}, {"roots": {}}),
    ]
    for n, (declared, legacy) in enumerate(cases, 1):
        assert (
            Playbook(engine)
            >> send(f"x{n}", n, "server/discover", caps=declared)
            << idle_timer(n)
            << initialize(f"leg-{n}", f"x{n}", legacy)
        )
    # The same set spelled differently is the same session: `{}` elicitation is form.
    assert Playbook(engine) >> send("x9", 9, "server/discover", caps={"elicitation": {"form": {}}})
    assert drained(engine, upstream_sessions=6, waiting=7, discovers=7, legs=6)


def test_a_refused_question_while_parked_cancels_upstream_and_the_retry_hears_why() -> None:
    engine = ready_engine({"elicitation": {}})
    park(engine, caps={"elicitation": {}})

    assert (
        Playbook(engine)
        >> up("leg-3", req("r1", "roots/list"))
        << Log("bridge_capability_refused", "warning", ANY)
        << cancel_leg("leg-4", "x1", "leg-3", "the client lacks capability roots")
        << CloseLeg("leg-3", "cancelled")
        >> call(
            "x2", 2, caps={"elicitation": {}}, requestState=state(), inputResponses={"elicitation-1": ACCEPT}
        )
        << CancelTimer("ttl:call-1")
        << RESUMED
        << ROUND_LOG
        << ReplyJson("x2", 400, missing(2, "roots/list", "roots", {"roots": {}}))
    )
    assert drained(engine, legs=1)


def test_the_round_limit_cancels_the_upstream_call_instead_of_asking_again() -> None:
    engine = ready_engine(max_rounds=1)
    park(engine)
    text = (
        "The upstream server still required input after 1 rounds; the proxy stops at max_rounds=1 and "
        "cancelled the call."
    )

    assert (
        Playbook(engine)
        >> call("x2", 2, requestState=state(), inputResponses={"elicitation-1": ACCEPT})
        << CancelTimer("ttl:call-1")
        << RESUMED
        << answer_leg("leg-4", "x2", "e1", ACCEPT)
        >> up("leg-3", req("e2", "elicitation/create", FORM))
        << StartTimer("round:call-1", 0.02)
        >> TimerFired("round:call-1")
        << Log("bridge_rounds_exhausted", "warning", {"call": "call-1", "round": 1})
        << cancel_leg("leg-5", "x2", "leg-3", text)
        << CloseLeg("leg-3", "cancelled")
        << ReplyJson("x2", 200, err(2, -32603, text))
    )
    assert drained(engine, legs=2)


def test_url_elicitation_required_becomes_a_url_round_and_the_retry_sends_the_call_again() -> None:
    engine = ready_engine()
    data = {
        "elicitations": [
            {"mode": "url", "elicitationId": "el-1", "url": "https://x/login", "message": "Log in"}
        ]
    }
    asked = {
        "elicitation-1": entry(
            "elicitation/create", {"mode": "url", "url": "https://x/login", "message": "Log in"}
        )
    }

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> up("leg-3", err("leg-3", -32042, "URL elicitation required", data))
        << ROUND_LOG
        << ReplyJson("x1", 200, input_required(1, asked, state()))
        << StartTimer("ttl:call-1", 300.0)
        >> LegEnded("leg-3")
        >> call("x2", 2, requestState=state(), inputResponses={"elicitation-1": {"action": "accept"}})
        << CancelTimer("ttl:call-1")
        << RESUMED
        << tool_leg("leg-4", "x2")
        >> up("leg-4", ok("leg-4", DONE))
        << ROUND_LOG
        << ReplyJson("x2", 200, complete(2, DONE))
    )
    assert drained(engine)
    form_only = ready_engine({"elicitation": {}})
    assert (
        Playbook(form_only)
        >> call("x3", 3, caps={"elicitation": {}})
        << ANY
        >> up("leg-3", err("leg-3", -32042, "URL elicitation required", data))
        << ReplyJson(
            "x3", 400, missing(3, "elicitation/create", "elicitation.url", {"elicitation": {"url": {}}})
        )
    )
    assert drained(form_only)


# -- 6. subscriptions/listen ----------------------------------------------------------------------


def listen(exchange: str, ident: Any, **wanted: Any) -> ClientRequestReceived:
    return send(exchange, ident, "subscriptions/listen", {"notifications": wanted})


def tagged(message: dict[str, Any], ident: Any) -> dict[str, Any]:
    params = dict(message.get("params", {}))
    params["_meta"] = {**params.get("_meta", {}), SUB: ident}
    return {**message, "params": params}


ACK = "notifications/subscriptions/acknowledged"
STREAM_HEADERS = (
    ("Accept", "text/event-stream"),
    ("MCP-Protocol-Version", "2025-11-25"),
    ("Mcp-Session-Id", SESSION),
    AUTH,
)


PROMPTS_NOT_OFFERED = (
    "not honoured, the server did not declare them: promptsListChanged (prompts.listChanged)"
)
"""The acknowledgement's note when a listen asks for prompt-list changes (`INIT_RESULT` declares none)."""


def test_listen_acknowledges_what_the_upstream_can_deliver_and_forwards_it_tagged() -> None:
    engine = ready_engine()
    honoured = {"toolsListChanged": True, "resourceSubscriptions": ["file:///a"]}
    tools_changed = note("notifications/tools/list_changed")
    updated_a = note("notifications/resources/updated", {"uri": "file:///a"})

    assert (
        Playbook(engine)
        >> listen(
            "x1", "L1", toolsListChanged=True, promptsListChanged=True, resourceSubscriptions=["file:///a"]
        )
        << StartSse("x1")
        << SendSse("x1", tagged(note(ACK, {"notifications": honoured}), "L1"), note=PROMPTS_NOT_OFFERED)
        << leg("leg-3", "x1", "resources/subscribe", {"uri": "file:///a"})
        << OpenLegStream("leg-4", "x1", STREAM_HEADERS)
        >> LegResponded("leg-3", 200, ())
        >> listen("x2", 9, resourcesListChanged=True, resourceSubscriptions=["file:///a", "file:///b"])
        << StartSse("x2")
        << SendSse(
            "x2",
            tagged(
                note(
                    ACK,
                    {
                        "notifications": {
                            "resourcesListChanged": True,
                            "resourceSubscriptions": ["file:///a", "file:///b"],
                        }
                    },
                ),
                9,
            ),
        )
        << leg("leg-5", "x2", "resources/subscribe", {"uri": "file:///b"})
        >> head("leg-4")
        >> up("leg-4", tools_changed)
        << SendSse("x1", tagged(tools_changed, "L1"))
        >> up("leg-4", updated_a)
        << SendSse("x1", tagged(updated_a, "L1"))
        << SendSse("x2", tagged(updated_a, 9))
        >> up("leg-4", note("notifications/message", {"level": "error", "data": "never on listen"}))
        >> up("leg-4", note("notifications/prompts/list_changed"))
        >> ClientDisconnected("x1")
        << EndClientResponse("x1", "client_disconnected")
        >> ClientDisconnected("x2")
        << leg("leg-6", "x2", "resources/unsubscribe", {"uri": "file:///a"})
        << leg("leg-7", "x2", "resources/unsubscribe", {"uri": "file:///b"})
        << CloseLeg("leg-4")
        << EndClientResponse("x2", "client_disconnected")
    )
    assert drained(engine, legs=3)


def test_change_notifications_on_a_call_stream_go_to_listeners_not_to_the_call() -> None:
    engine = ready_engine()
    changed = note("notifications/tools/list_changed")

    assert (
        Playbook(engine)
        >> listen("x1", 1, toolsListChanged=True)
        << StartSse("x1")
        << SendSse("x1", tagged(note(ACK, {"notifications": {"toolsListChanged": True}}), 1))
        << OpenLegStream("leg-3", "x1", STREAM_HEADERS)
        >> call("x2", 2)
        << tool_leg("leg-4", "x2")
        >> up("leg-4", changed)
        << SendSse("x1", tagged(changed, 1))
    )


def test_unassociated_server_requests_on_the_get_stream_are_refused_and_pings_answered() -> None:
    engine = ready_engine()
    text = "Method not found: roots/list is not associated with a client request"

    assert (
        Playbook(engine)
        >> listen("x1", 1, toolsListChanged=True)
        << ANY
        << ANY
        << ANY
        >> up("leg-3", req("g1", "roots/list"))
        << Log("bridge_unassociated_request", "warning", {"leg": "leg-3", "method": "roots/list", "id": "g1"})
        << SendLeg("leg-4", "x1", legacy_headers(), err("g1", -32601, text), "leg-3")
        >> up("leg-3", req("g2", "ping"))
        << answer_leg("leg-5", "x1", "g2", {}, call_leg="leg-3")
        >> up("leg-3", ok("zz", {}))
    )


def test_when_the_get_stream_ends_every_listener_ends_gracefully() -> None:
    engine = ready_engine()
    done = {"resultType": "complete", "_meta": {SUB: 1}}

    assert (
        Playbook(engine)
        >> listen("x1", 1, toolsListChanged=True)
        << ANY
        << ANY
        << ANY
        >> LegResponded("leg-3", 405, ())
        << Log("bridge_listen_stream_refused", "warning", {"leg": "leg-3", "status": 405})
        >> LegEnded("leg-3")
        << Log(
            "bridge_listen_stream_ended",
            "warning",
            {"leg": "leg-3", "why": "the response ended without a JSON-RPC answer (HTTP 405)"},
        )
        << SendSse("x1", ok(1, done))
        << EndClientResponse("x1", None)
    )
    assert drained(engine)


def test_a_change_notification_no_listener_gets_is_said_undelivered_and_why() -> None:
    """The server sends what it never declared (the Python SDK's `MCPServer` does): a listener that
    asked for it was not granted it, so it goes nowhere, and observation is told why."""
    engine = ready_engine()
    prompts_changed = note("notifications/prompts/list_changed")
    tools_changed = note("notifications/tools/list_changed")
    updated = note("notifications/resources/updated", {"uri": "file:///a"})
    assert (
        Playbook(engine)
        >> listen("x1", 1, toolsListChanged=True, promptsListChanged=True)
        << ANY
        << ANY
        << ANY
    )

    said = {
        name: engine.undelivered("leg-3", classify_value(message))
        for name, message in (("prompts", prompts_changed), ("tools", tools_changed), ("updated", updated))
    }
    assert said == {
        "prompts": "not delivered to the listening client: the server did not declare prompts.listChanged",
        "tools": None,  # delivered
        "updated": "not delivered: no client listens for it",
    }
    log = classify_value(note("notifications/message", {"level": "info", "data": "x"}))
    assert engine.undelivered("leg-3", log) is None  # no change notification: never a listener's
    assert engine.undelivered("leg-1", classify_value(prompts_changed)) is None  # no GET stream
    assert (
        Playbook(engine)
        >> head("leg-3")
        >> up("leg-3", prompts_changed)
        >> up("leg-3", tools_changed)
        << SendSse("x1", tagged(tools_changed, 1))
    )


def test_listen_without_anything_deliverable_is_acknowledged_empty_and_stays_quiet() -> None:
    engine = ready_engine()

    assert (
        Playbook(engine)
        >> listen("x1", 1, promptsListChanged=True, resourceSubscriptions=[])
        << StartSse("x1")
        << SendSse("x1", tagged(note(ACK, {"notifications": {}}), 1), note=PROMPTS_NOT_OFFERED)
        >> send("x2", 2, "subscriptions/listen", {"notifications": "all"})
        << ReplyJson(
            "x2", 400, err(2, -32602, "Invalid params: subscriptions/listen needs a notifications object")
        )
        >> ClientDisconnected("x1")
        << EndClientResponse("x1", "client_disconnected")
    )
    assert drained(engine)


# -- 7. identity ---------------------------------------------------------------------------------


def test_the_bridge_owns_no_client_sessions_and_its_repr_shows_state_but_no_secrets() -> None:
    engine = ready_engine()
    park(engine)

    assert SESSION not in engine.client_sessions
    text = repr(engine)
    assert "parked round=1" in text
    assert "ttl:call-1" in text
    assert SESSION not in text
    assert "Bearer" not in text


# -- 8. odd upstream behaviour -------------------------------------------------------------------


def test_a_refused_or_failed_initialized_notification_still_releases_the_waiting_requests() -> None:
    for event, log in [
        (LegResponded("leg-2", 400, ()), Log("upstream_initialized_refused", "warning", {"status": 400})),
        (
            LegFailed("leg-2", "timeout", "slow"),
            Log(
                "upstream_initialized_refused",
                "warning",
                {"why": "the upstream MCP server did not answer in time: slow" + TIMEOUT_HINT},
            ),
        ),
    ]:
        engine = MrtrToLegacyEngine(UPSTREAM, Counter(), state_key=KEY)
        engine.handle(call("x1", 1))
        engine.handle(LegResponded("leg-1", 200, (("Mcp-Session-Id", SESSION),)))
        engine.handle(up("leg-1", ok("leg-1", INIT_RESULT)))

        assert Playbook(engine) >> event << log << tool_leg("leg-3", "x1")


def test_a_404_from_a_sessionless_upstream_is_an_answer_not_a_lost_session() -> None:
    engine = MrtrToLegacyEngine(UPSTREAM, Counter(), state_key=KEY)
    engine.handle(call("x0", 0))
    engine.handle(LegResponded("leg-1", 200, ()))
    engine.handle(up("leg-1", ok("leg-1", INIT_RESULT)))
    engine.handle(LegResponded("leg-2", 202, ()))
    headers = (*legacy_headers()[:3], AUTH)

    assert (
        Playbook(engine)
        >> send("x1", 1, "tools/list")
        << SendLeg("leg-4", "x1", headers, req("leg-4", "tools/list", {}))
        >> LegResponded("leg-4", 404, ())
        >> LegEnded("leg-4")
        << Log("bridge_leg_lost", "warning", ANY)
        << ReplyJson(
            "x1",
            502,
            err(
                1,
                -32000,
                "upstream MCP server failed during tools/list: the response ended without a "
                "JSON-RPC answer (HTTP 404)",
            ),
        )
    )
    assert drained(engine, calls=1, serving=1, legs=1)


def test_a_url_elicitation_required_without_elicitations_is_an_internal_error() -> None:
    engine = ready_engine()

    assert (
        Playbook(engine)
        >> call("x1", 1)
        << ANY
        >> up("leg-3", err("leg-3", -32042, "go away"))
        << ROUND_LOG
        << ReplyJson(
            "x1",
            200,
            err(1, -32603, "upstream required a URL elicitation the bridge could not relay: go away"),
        )
    )
    assert drained(engine)


def test_a_question_the_upstream_withdraws_while_parked_is_no_longer_posted() -> None:
    engine = ready_engine()
    park(engine)

    assert (
        Playbook(engine)
        >> up("leg-3", note("notifications/cancelled", {"requestId": "e1", "reason": "timeout"}))
        >> call("x2", 2, requestState=state(), inputResponses={"elicitation-1": ACCEPT})
        << CancelTimer("ttl:call-1")
        << RESUMED
        >> up("leg-3", ok("leg-3", DONE))
        << ROUND_LOG
        << ReplyJson("x2", 200, complete(2, DONE))
    )
    assert drained(engine)
