"""What a draining proxy still serves: a conversation's next step, never a new one."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.engine.gate.drain import RETRY_AFTER_S, continues_work, draining_refusal
from proxy.framing.classify import Route, classify

SESSION = ("Mcp-Session-Id", "5b1e0c2d9f")
MODERN = ("MCP-Protocol-Version", "2026-07-28")


def route(http_method: str, body: Any = None, *headers: tuple[str, str]) -> Route:
    raw = orjson.dumps(body) if body is not None else b""
    outcome = classify(http_method, "/mcp", headers, raw, max_body=1 << 20)
    assert isinstance(outcome, Route)
    return outcome


def request(method: str, params: dict[str, Any] | None = None, ident: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "method": method, "params": params or {}}


CALL = {"name": "echo", "arguments": {"text": "hi"}}

SERVED = {
    "an answer to an in-flight elicitation": route(
        "POST", {"jsonrpc": "2.0", "id": "srv-1", "result": {"action": "accept"}}, SESSION
    ),
    "a client's error answer, sessionless (a bridged client)": route(
        "POST", {"jsonrpc": "2.0", "id": 3, "error": {"code": -32601, "message": "no"}}
    ),
    "a cancellation": route(
        "POST", {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}, SESSION
    ),
    "a legacy session's tools/list (the SDK's output-schema check)": route(
        "POST", request("tools/list"), SESSION
    ),
    "a legacy session's call": route("POST", request("tools/call", CALL), SESSION),
    "a legacy session's GET stream": route("GET", None, SESSION),
    "a legacy session's DELETE": route("DELETE", None, SESSION),
    "a GET stream's resumption": route("GET", None, ("Last-Event-ID", "ev-7")),
    "an MRTR retry with requestState": route(
        "POST", request("tools/call", {**CALL, "requestState": "opaque"}), MODERN
    ),
    "an MRTR retry with inputResponses only": route(
        "POST", request("tools/call", {**CALL, "inputResponses": {"k": {"action": "accept"}}}), MODERN
    ),
    "a modern tools/list": route("POST", request("tools/list"), MODERN),
    "a modern server/discover": route("POST", request("server/discover"), MODERN),
}

REFUSED = {
    "a new initialize": route(
        "POST", request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}})
    ),
    "an initialize naming an old session": route("POST", request("initialize"), SESSION),
    "a modern call that is no retry": route("POST", request("tools/call", CALL), MODERN),
    "a modern resources/read": route("POST", request("resources/read", {"uri": "res://x"}), MODERN),
    "a modern subscriptions/listen": route("POST", request("subscriptions/listen"), MODERN),
    "a batch with one call that is no retry": route(
        "POST", [request("tools/list"), request("tools/call", CALL, 2)], MODERN
    ),
    "a GET naming no session": route("GET"),
    "a DELETE naming no session": route("DELETE"),
    "an empty POST": route("POST"),
}


@pytest.mark.parametrize("case", SERVED.values(), ids=SERVED.keys())
def test_a_draining_proxy_serves_what_carries_on_a_conversation(case: Route) -> None:
    assert continues_work(case)


@pytest.mark.parametrize("case", REFUSED.values(), ids=REFUSED.keys())
def test_a_draining_proxy_refuses_new_work(case: Route) -> None:
    assert not continues_work(case)


def test_the_refusal_is_503_naming_the_drain_with_the_requests_id() -> None:
    refusal = draining_refusal(REFUSED["a new initialize"], 10.0)
    assert refusal.status == 503
    assert refusal.reason == "draining"
    assert refusal.body["id"] == 1
    assert refusal.body["error"]["code"] == -32000
    assert "draining" in refusal.body["error"]["message"]
    assert refusal.body["error"]["data"] == {
        "reason": "draining",
        "retryAfter": RETRY_AFTER_S,
        "setting": "drain_grace",
        "grace": 10.0,
    }
    assert draining_refusal(None, 1.0).body["id"] is None
