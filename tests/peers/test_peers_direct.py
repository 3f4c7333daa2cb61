"""The SDK test peers, run directly (no proxy): the baseline every proxy end-to-end test relies on.

Checks that each scenario gives the expected normalized result against each peer in its own era,
that the in-flight and MRTR styles agree exactly, that the era wrappers refuse the other era the
way single-era servers do, and a few SDK behaviours the proxy depends on (sealed requestState,
capability gating, in-flight requests riding the originating POST's SSE stream).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx
import mcp_types as types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from tests.peers.runner import PeerServer, arun_peer, run_peer
from tests.peers.scenarios import SCENARIOS, ElicitAction, client_for, expected_result, run_scenario

pytestmark = pytest.mark.e2e

ALL_SCENARIOS = sorted(SCENARIOS)
LEGACY = "2025-11-25"
MODERN = "2026-07-28"
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def _mcp_error(exc: BaseException) -> MCPError:
    """The `MCPError` inside `exc`, unwrapping (nested) exception groups."""
    if isinstance(exc, MCPError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            try:
                return _mcp_error(inner)
            except LookupError:
                continue
    raise LookupError(f"no MCPError in {exc!r}") from exc


def _modern_headers(method: str, name: str | None = None) -> dict[str, str]:
    headers = {**ACCEPT, "mcp-protocol-version": MODERN, "mcp-method": method}
    if name is not None:
        headers["mcp-name"] = name
    return headers


def _envelope(capabilities: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities or {},
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
    }


async def _sse_messages(response: httpx.Response) -> AsyncIterator[dict[str, Any]]:
    """JSON-RPC messages from an SSE body (priming events with empty data are skipped)."""
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif line == "" and data:
            payload = "\n".join(data)
            data = []
            if payload.strip():
                yield json.loads(payload)


# ------------------------------------------------------------------------------------------
# Scenarios, each era against its own single-era server and against the dual-era SDK default.
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ALL_SCENARIOS)
async def test_scenario_legacy_inflight(legacy_server: PeerServer, scenario: str) -> None:
    assert await run_scenario(legacy_server.url, "legacy", scenario) == expected_result(scenario)


@pytest.mark.parametrize("scenario", ALL_SCENARIOS)
async def test_scenario_modern_mrtr(modern_server: PeerServer, scenario: str) -> None:
    assert await run_scenario(modern_server.url, MODERN, scenario) == expected_result(scenario)


@pytest.mark.parametrize("scenario", ALL_SCENARIOS)
async def test_inflight_and_mrtr_styles_agree(
    legacy_server: PeerServer, modern_server: PeerServer, scenario: str
) -> None:
    inflight = await run_scenario(legacy_server.url, "legacy", scenario)
    mrtr = await run_scenario(modern_server.url, MODERN, scenario)
    assert inflight == mrtr


@pytest.mark.parametrize("scenario", ALL_SCENARIOS)
async def test_scenario_dual_era_defaults(
    dual_inflight_server: PeerServer, dual_mrtr_server: PeerServer, scenario: str
) -> None:
    expected = expected_result(scenario)
    assert await run_scenario(dual_inflight_server.url, "legacy", scenario) == expected
    assert await run_scenario(dual_mrtr_server.url, MODERN, scenario) == expected


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_refused_elicitation_agrees(
    legacy_server: PeerServer, modern_server: PeerServer, action: ElicitAction
) -> None:
    inflight = await run_scenario(legacy_server.url, "legacy", "ask_twice", elicit_action=action)
    mrtr = await run_scenario(modern_server.url, MODERN, "ask_twice", elicit_action=action)
    assert inflight == mrtr
    assert inflight["result"]["content"] == [f"name=({action}) color=({action})"]
    name = await run_scenario(modern_server.url, MODERN, "ask_name", elicit_action=action)
    assert name["result"]["content"] == [f"No name ({action})"]


async def test_echo_logs_only_on_request(legacy_server: PeerServer, modern_server: PeerServer) -> None:
    with_logs = expected_result("echo", log_level="info")
    assert with_logs["logs"] == ["info:echo: hello"]
    assert await run_scenario(legacy_server.url, "legacy", "echo", log_level="info") == with_logs
    assert await run_scenario(modern_server.url, MODERN, "echo", log_level="info") == with_logs
    assert "logs" not in await run_scenario(modern_server.url, MODERN, "echo")


# ------------------------------------------------------------------------------------------
# Version negotiation: auto mode and a pinned older handshake version.
# ------------------------------------------------------------------------------------------


async def test_auto_mode_picks_each_servers_era(legacy_server: PeerServer, modern_server: PeerServer) -> None:
    async with client_for(legacy_server.url, "auto") as client:
        assert client.protocol_version == LEGACY
    async with client_for(modern_server.url, "auto") as client:
        assert client.protocol_version == MODERN
    assert await run_scenario(legacy_server.url, "auto", "ask_twice") == expected_result("ask_twice")
    assert await run_scenario(modern_server.url, "auto", "ask_twice") == expected_result("ask_twice")


@pytest.mark.parametrize("scenario", ["ask_name", "ask_llm", "list_client_roots", "prompts", "progress"])
async def test_pinned_2025_06_18(legacy_server: PeerServer, scenario: str) -> None:
    async with client_for(legacy_server.url, "2025-06-18") as client:
        assert client.protocol_version == "2025-06-18"
    assert await run_scenario(legacy_server.url, "2025-06-18", scenario) == expected_result(scenario)


async def test_pinned_version_is_on_the_wire(legacy_server: PeerServer) -> None:
    seen: list[tuple[str | None, Any]] = []

    async def record(request: httpx.Request) -> None:
        body = json.loads(request.content) if request.content else None
        seen.append((request.headers.get("mcp-protocol-version"), body))

    # Same handshake as the client sends, replayed by hand to see exactly what the server negotiates.
    async with httpx.AsyncClient(timeout=10, event_hooks={"request": [record]}) as http:
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "r", "version": "0"},
            },
        }
        async with http.stream("POST", legacy_server.url, json=init, headers=ACCEPT) as response:
            assert response.status_code == 200
            messages = [m async for m in _sse_messages(response)]
            session_id = response.headers["mcp-session-id"]
        assert messages[0]["result"]["protocolVersion"] == "2025-06-18"
        await http.delete(
            legacy_server.url, headers={"mcp-session-id": session_id, "mcp-protocol-version": "2025-06-18"}
        )


# ------------------------------------------------------------------------------------------
# Era wrappers: single-era servers refuse the other era.
# ------------------------------------------------------------------------------------------


async def test_legacy_only_refuses_2026_requests(legacy_server: PeerServer) -> None:
    async with httpx.AsyncClient(timeout=10) as http:
        for method in ("server/discover", "tools/list"):
            body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": {"_meta": _envelope()}}
            response = await http.post(legacy_server.url, json=body, headers=_modern_headers(method))
            assert response.status_code == 400
            payload = response.json()
            assert payload["error"]["code"] == types.INVALID_REQUEST == -32600
            assert payload["error"]["message"] == "Unsupported protocol version"
            assert payload["id"] is None
    async with Client(legacy_server.url, mode=MODERN, cache=None) as client:
        with pytest.raises(MCPError) as refused:
            await client.list_tools()
    assert refused.value.error.code == -32600


async def test_modern_only_refuses_initialize_get_and_delete(modern_server: PeerServer) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(modern_server.url, json=init, headers=ACCEPT)
        assert response.status_code == 400
        assert response.json() == {
            "jsonrpc": "2.0",
            "id": 1,
            "error": {
                "code": -32022,
                "message": "Unsupported protocol version",
                "data": {"supported": [MODERN], "requested": LEGACY},
            },
        }
        for method in ("GET", "DELETE"):
            response = await http.request(method, modern_server.url, headers={"accept": "text/event-stream"})
            assert response.status_code == 405
            assert response.headers["allow"] == "POST"
    # The failed handshake surfaces from the client's task groups, wrapped in exception groups.
    with pytest.raises(BaseException) as refused:  # noqa: PT011 - unwrapped below
        async with Client(modern_server.url, mode="legacy", cache=None):
            pass
    assert _mcp_error(refused.value).error.code == types.UNSUPPORTED_PROTOCOL_VERSION


async def test_modern_only_serves_2026_posts(modern_server: PeerServer) -> None:
    body = {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": _envelope()}}
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(modern_server.url, json=body, headers=_modern_headers("tools/list"))
    assert response.status_code == 200
    assert response.json()["result"]["resultType"] == "complete"


# ------------------------------------------------------------------------------------------
# Wire shapes each style produces.
# ------------------------------------------------------------------------------------------


async def test_inflight_request_rides_the_originating_post_stream(legacy_server: PeerServer) -> None:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY,
            "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
    async with httpx.AsyncClient(timeout=10) as http:
        async with http.stream("POST", legacy_server.url, json=init, headers=ACCEPT) as response:
            [init_result] = [m async for m in _sse_messages(response)]
            session = {"mcp-session-id": response.headers["mcp-session-id"], "mcp-protocol-version": LEGACY}
        assert init_result["result"]["protocolVersion"] == LEGACY
        headers = {**ACCEPT, **session}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await http.post(legacy_server.url, json=initialized, headers=headers)).status_code == 202
        call = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "ask_name", "arguments": {}},
        }
        async with http.stream("POST", legacy_server.url, json=call, headers=headers) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            messages = _sse_messages(response)
            nested = await anext(messages)
            assert nested["method"] == "elicitation/create"
            assert nested["params"]["message"] == "What is your name?"
            answer = {
                "jsonrpc": "2.0",
                "id": nested["id"],
                "result": {"action": "accept", "content": {"name": "raw"}},
            }
            assert (await http.post(legacy_server.url, json=answer, headers=headers)).status_code == 202
            final = await anext(messages)
        assert final["id"] == 2
        assert final["result"]["content"] == [{"type": "text", "text": "Hello, raw!"}]
        await http.delete(legacy_server.url, headers=session)


async def test_mrtr_rounds_carry_sealed_changing_state(modern_server: PeerServer) -> None:
    async with client_for(modern_server.url, MODERN) as client:
        first = await client.session.call_tool("ask_twice", {}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        assert list(first.input_requests or {}) == ["name"]
        state1 = first.request_state
        assert state1 is not None
        with pytest.raises(ValueError, match="Expecting value"):
            json.loads(state1)  # sealed: an opaque token, not the server's JSON

        name = types.ElicitResult(action="accept", content={"name": "octocat"})
        second = await client.session.call_tool(
            "ask_twice", {}, input_responses={"name": name}, request_state=state1, allow_input_required=True
        )
        assert isinstance(second, types.InputRequiredResult)
        assert list(second.input_requests or {}) == ["color"]
        assert second.request_state not in (None, state1)

        with pytest.raises(MCPError) as tampered:
            await client.session.call_tool(
                "ask_twice", {}, request_state=f"{second.request_state}-TAMPERED", allow_input_required=True
            )
        assert tampered.value.error.code == types.INVALID_PARAMS
        assert tampered.value.error.message == "Invalid or expired requestState"

        color = types.ElicitResult(action="accept", content={"color": "green"})
        final = await client.session.call_tool(
            "ask_twice", {}, input_responses={"color": color}, request_state=second.request_state
        )
        assert isinstance(final, types.CallToolResult)
        assert final.content == [types.TextContent(text="name=octocat color=green")]


async def test_state_only_round_has_no_input_requests(modern_server: PeerServer) -> None:
    async with client_for(modern_server.url, MODERN) as client:
        first = await client.session.call_tool("state_only", {}, allow_input_required=True)
        assert isinstance(first, types.InputRequiredResult)
        assert first.input_requests is None
        assert first.request_state is not None


async def test_unsealed_state_is_plain_json(peer_factory: Any) -> None:
    peer = peer_factory("modern-mrtr", seal_state=False)
    async with client_for(peer.url, MODERN) as client:
        first = await client.session.call_tool("ask_twice", {}, allow_input_required=True)
    assert isinstance(first, types.InputRequiredResult)
    assert json.loads(first.request_state or "") == {"step": 1}


async def test_mrtr_refuses_undeclared_capability(modern_server: PeerServer) -> None:
    async with Client(modern_server.url, mode=MODERN, cache=None) as client:  # no callbacks: no capabilities
        with pytest.raises(MCPError) as refused:
            await client.call_tool("ask_name", {})
    assert refused.value.error.code == types.MISSING_REQUIRED_CLIENT_CAPABILITY
    assert refused.value.error.data == {"requiredCapabilities": {"elicitation": {"form": {}}}}


async def test_dual_era_default_does_not_mix_styles(
    dual_inflight_server: PeerServer, dual_mrtr_server: PeerServer
) -> None:
    # Why the proxy's bridges matter even in front of a dual-era server: the SDK does not mix styles.
    async with client_for(dual_mrtr_server.url, "legacy") as client:
        with pytest.raises(MCPError) as invalid:
            await client.call_tool("ask_name", {})
    assert invalid.value.error.code == types.INTERNAL_ERROR
    # A low-level handler's NoBackChannelError is an MCPError, so it reaches the wire as a JSON-RPC
    # error (-32600), not as an isError tool result; the client re-raises it from its task group.
    with pytest.raises(BaseException) as no_back_channel:  # noqa: PT011 - unwrapped below
        async with client_for(dual_inflight_server.url, MODERN) as client:
            await client.call_tool("ask_name", {})
    error = _mcp_error(no_back_channel.value).error
    assert error.code == types.INVALID_REQUEST
    assert "no back-channel" in error.message


# ------------------------------------------------------------------------------------------
# Runner hygiene.
# ------------------------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_run_peer_stops_its_process() -> None:
    with run_peer("legacy-inflight") as peer:
        pid = peer.pid
        assert pid is not None
        assert _alive(pid)
        assert peer.url == f"http://127.0.0.1:{peer.port}/mcp"
    assert not _alive(pid)


async def test_arun_peer_stops_its_process() -> None:
    async with arun_peer("modern-mrtr") as peer:
        pid = peer.pid
        assert pid is not None
        assert await run_scenario(peer.url, MODERN, "add") == expected_result("add")
    assert not _alive(pid)


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown peer kind"):
        PeerServer("nope")
