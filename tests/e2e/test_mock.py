"""`mcp-proxy mock`: a capture of real SDK traffic served back to real SDK clients of both eras.

The capture is recorded as a user would: the `mcp-proxy` command between an SDK server and an SDK
client of one era (the legacy server asks in flight; the 2026-07-28 server asks with `input_required`
rounds). Then `mcp-proxy mock CAPTURE` serves it, with no server behind it, and SDK clients of the
same era and of the other era call the same tools: every result equals the recorded one, each
recorded question reaches the client's callback again (one elicitation; two in turn; an elicitation
and a sampling request together), an answer unlike the recorded one is logged and the recorded result
given all the same, and a call the capture never held fails with a JSON-RPC error naming the nearest
recorded call.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp.shared.exceptions import MCPError

from tests.peers.runner import PeerServer
from tests.peers.scenarios import CallbackLog, client_for, normalize_tool_result
from tests.sidecar import ProxyProcess, clean_env, settings_env

pytestmark = pytest.mark.e2e

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("add", {"a": 2, "b": 3}),
    ("ask_name", {}),
    ("ask_twice", {}),
    ("ask_two_at_once", {}),
]
"""Tools called while recording: none, one, two sequential, and two concurrent in-flight questions."""

ERAS = {"legacy-inflight": "legacy", "modern-mrtr": "2026-07-28"}
"""The SDK server recorded, and the era of the client that recorded it."""


@dataclass(frozen=True)
class Recorded:
    """A capture and what the client saw while it was recorded."""

    capture: Path
    era: str
    tools: list[str]
    results: dict[str, dict[str, Any]]
    callbacks: list[str]
    progress: list[float]
    """Progress the client heard during `slow_progress`."""


async def _record(peer: PeerServer, mode: str, capture: Path) -> Recorded:
    env = clean_env(**settings_env(upstream=peer.url, capture=capture, admin_enabled="false", drain_grace=1))
    log = CallbackLog()
    with ProxyProcess(env) as proxy:
        async with client_for(proxy.endpoint(), mode, log=log) as client:
            tools = [tool.name for tool in (await client.list_tools()).tools]
            results = {
                name: normalize_tool_result(await client.call_tool(name, args)) for name, args in CALLS
            }
            progress = await _slow_progress(client)
        assert proxy.stop() == 0
    return Recorded(capture, mode, tools, results, list(log.callbacks), progress)


async def _slow_progress(client: Any) -> list[float]:
    heard = CallbackLog()
    result = await client.call_tool("slow_progress", {"steps": 3}, progress_callback=heard.on_progress)
    assert normalize_tool_result(result)["content"] == ["done 3"]
    return heard.progress


@pytest.fixture(scope="module", params=sorted(ERAS))
def recorded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    """A capture of one SDK server and client of the same era, recorded through `mcp-proxy`."""
    kind: str = request.param
    capture = tmp_path_factory.mktemp(kind) / "run.jsonl"
    with PeerServer(kind) as peer:
        done = asyncio.run(_record(peer, ERAS[kind], capture))
    assert done.callbacks, "the recording asked the client nothing"
    return done


def _mock(capture: Path) -> ProxyProcess:
    """`mcp-proxy mock CAPTURE` on a free port (no upstream: the capture is all it has)."""
    env = clean_env(**settings_env(admin_enabled="false", drain_grace=1))
    return ProxyProcess(env, "mock", str(capture))


@pytest.mark.parametrize("client_era", ["legacy", "2026-07-28"])
async def test_a_mock_gives_every_recorded_result_and_asks_every_recorded_question_in_either_era(
    recorded: Recorded, client_era: str
) -> None:
    log = CallbackLog()
    with _mock(recorded.capture) as mock:
        async with client_for(mock.endpoint(), client_era, log=log) as client:
            tools = [tool.name for tool in (await client.list_tools()).tools]
            results = {
                name: normalize_tool_result(await client.call_tool(name, args)) for name, args in CALLS
            }
        serving = mock.find("mock_serving")
        warnings = [e for e in mock.events() if e.get("level") in ("warning", "error")]
    assert serving is not None
    assert warnings == [], "a mock served as recorded warns of nothing"
    assert serving["era"] == ("legacy" if recorded.era == "legacy" else "modern")
    assert tools == recorded.tools
    assert results == recorded.results
    assert results["ask_two_at_once"]["content"] == ["name=octocat llm=Paris"]
    assert sorted(log.callbacks) == sorted(recorded.callbacks)
    assert log.callbacks.count("elicitation:What is your name?") == 3


@pytest.mark.parametrize("client_era", ["legacy", "2026-07-28"])
async def test_recorded_progress_reaches_the_client_under_its_own_progress_token(
    recorded: Recorded, client_era: str
) -> None:
    with _mock(recorded.capture) as mock:
        async with client_for(mock.endpoint(), client_era) as client:
            progress = await _slow_progress(client)
            quiet = normalize_tool_result(await client.call_tool("slow_progress", {"steps": 3}))

    assert recorded.progress == [1.0, 2.0, 3.0]
    assert progress == recorded.progress
    assert quiet["content"] == ["done 3"]


async def test_an_answer_unlike_the_recorded_one_is_logged_and_the_recorded_result_given(
    recorded: Recorded,
) -> None:
    with _mock(recorded.capture) as mock:
        async with client_for(mock.endpoint(), recorded.era, elicit_action="decline") as client:
            result = normalize_tool_result(await client.call_tool("ask_name", {}))
        differs = await mock.logged("mock_answer_differs")
    assert result == recorded.results["ask_name"]
    assert differs["asked"] == "elicitation/create"
    assert "ask_name" in differs["request"]


@pytest.mark.parametrize("client_era", ["legacy", "2026-07-28"])
async def test_a_call_never_recorded_gets_an_error_naming_the_nearest_recorded_call(
    recorded: Recorded, client_era: str
) -> None:
    with _mock(recorded.capture) as mock:
        async with client_for(mock.endpoint(), client_era) as client:
            with pytest.raises(MCPError) as other_arguments:
                await client.call_tool("add", {"a": 2, "b": 4})
            with pytest.raises(MCPError) as other_method:
                await client.list_prompts()
            still = normalize_tool_result(await client.call_tool("add", {"a": 2, "b": 3}))
        unmatched = await mock.logged("mock_unmatched")
    assert other_arguments.value.error.code == -32602
    assert 'nearest recorded: tools/call add {"a":2,"b":3}' in other_arguments.value.error.message
    assert 'tools/call add {"a":2,"b":4}' in other_arguments.value.error.message
    assert other_method.value.error.code == -32601
    assert "prompts/list was never recorded; nearest recorded:" in other_method.value.error.message
    assert unmatched["method"] == "tools/call"
    assert still == recorded.results["add"]


async def test_a_call_never_recorded_is_named_with_the_users_body_keys_masked_in_the_log_and_the_answer(
    recorded: Recorded,
) -> None:
    secret = "pw-never-in-a-log-123"
    env = clean_env(**settings_env(admin_enabled="false", drain_grace=1, redact_body_keys="password"))
    with ProxyProcess(env, "mock", str(recorded.capture)) as mock:
        async with client_for(mock.endpoint(), "legacy") as client:
            with pytest.raises(MCPError) as missed:
                await client.call_tool("add", {"a": 2, "b": 4, "password": secret})
        unmatched = await mock.logged("mock_unmatched")
    assert '"password":"<redacted len=' in unmatched["message"]
    assert secret not in mock.stderr()
    assert secret not in missed.value.error.message


async def test_a_call_recorded_with_a_redacted_argument_is_served_and_a_miss_names_where_it_differs(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    # The capture keeps the password as its stand-in only, whatever key the mock is given.
    password = "hunter2-PASSWORD"
    capture = tmp_path / "redacted.jsonl"
    settings = {"redact_body_keys": "password", "admin_enabled": "false", "drain_grace": 1}
    with ProxyProcess(
        clean_env(**settings_env(upstream=legacy_server.url, capture=capture, **settings))
    ) as proxy:
        async with client_for(proxy.endpoint(), "legacy") as client:
            added = normalize_tool_result(
                await client.call_tool("add", {"a": 2, "b": 3, "password": password})
            )
        assert proxy.stop() == 0
    assert password not in capture.read_text(encoding="utf-8")

    env = clean_env(**settings_env(admin_enabled="false", drain_grace=1, redact_body_keys="password"))
    with ProxyProcess(env, "mock", str(capture)) as mock:
        async with client_for(mock.endpoint(), "legacy") as client:
            served = normalize_tool_result(
                await client.call_tool("add", {"a": 2, "b": 3, "password": password})
            )
            with pytest.raises(MCPError) as other:
                await client.call_tool("add", {"a": 7, "b": 3, "password": password})
    assert added["content"] == ["5"]
    assert served == added
    assert other.value.error.code == -32602
    assert other.value.error.message.endswith("they differ at arguments.a"), other.value.error.message
    assert password not in mock.stderr()


@pytest.mark.parametrize("recorded", ["legacy-inflight"], indirect=True)
async def test_a_request_without_its_session_or_with_one_unknown_is_refused_as_the_recorded_server_did(
    recorded: Recorded,
) -> None:
    # A raw HTTP client: the client under test is one that loses its session, which no SDK client does.
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    opening = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    with _mock(recorded.capture) as mock:
        async with aiohttp.ClientSession() as http:

            async def post(body: dict[str, Any], session: str | None = None) -> tuple[int, dict[str, Any]]:
                sent = {**headers, "Mcp-Session-Id": session} if session else headers
                async with http.post(mock.endpoint(), json=body, headers=sent) as resp:
                    return resp.status, await resp.json(content_type=None)

            async with http.post(mock.endpoint(), json=opening, headers=headers) as resp:
                session = resp.headers["Mcp-Session-Id"]
            without = await post(listing)
            unknown = await post(listing, "deadbeef")
            within = await post(listing, session)
            async with http.delete(mock.endpoint(), headers={**headers, "Mcp-Session-Id": session}) as resp:
                ended = resp.status
            after_end = await post(listing, session)

    assert without[0] == 400
    assert without[1]["error"]["code"] == -32600
    assert "Missing session ID" in without[1]["error"]["message"]
    assert unknown[0] == 404
    assert "Session not found" in unknown[1]["error"]["message"]
    assert within[0] == 200
    assert [t["name"] for t in within[1]["result"]["tools"]] == recorded.tools
    assert ended == 200
    assert after_end[0] == 404


@pytest.mark.parametrize("recorded", ["legacy-inflight"], indirect=True)
async def test_corrupt_capture_lines_are_named_by_file_and_line_and_the_rest_served(
    recorded: Recorded, tmp_path: Path
) -> None:
    lines = recorded.capture.read_text(encoding="utf-8").splitlines(keepends=True)
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_text("".join([*lines[:-1], "{not json\n", "[]\n", lines[-1]]), encoding="utf-8")
    first, second = len(lines), len(lines) + 1

    with _mock(damaged) as mock:
        async with client_for(mock.endpoint(), "legacy") as client:
            added = normalize_tool_result(await client.call_tool(*CALLS[0]))
        serving = await mock.logged("mock_serving")
        said = mock.stderr()

    assert added == recorded.results["add"]
    assert serving["corrupt_lines"] == 2
    assert f"mcp-proxy mock: skipped {damaged}:{first}: corrupt line (not JSON)" in said
    assert f"mcp-proxy mock: skipped {damaged}:{second}: " in said


async def test_a_recording_cut_at_the_capture_body_limit_answers_an_error_naming_the_setting(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "cut.jsonl"
    settings = {"capture_body_limit": 400, "admin_enabled": "false", "drain_grace": 1}
    with ProxyProcess(
        clean_env(**settings_env(upstream=legacy_server.url, capture=capture, **settings))
    ) as proxy:
        async with client_for(proxy.endpoint(), "legacy") as client:
            added = normalize_tool_result(await client.call_tool("add", {"a": 2, "b": 3}))
            listed = await client.list_tools()  # about 1.7 kB: cut in the capture
        assert proxy.stop() == 0
    assert len(listed.tools) > 3

    with _mock(capture) as mock:
        async with client_for(mock.endpoint(), "legacy") as client:
            with pytest.raises(MCPError) as cut:
                await client.list_tools()
    assert added["content"] == ["5"]
    assert cut.value.error.code == -32603
    assert "recording of tools/list" in cut.value.error.message
    assert "capture_body_limit" in cut.value.error.message


@pytest.mark.parametrize("legacy_recorded", [False, True], ids=["bridged-only", "bridged-then-passthrough"])
async def test_a_capture_a_2026_client_recorded_through_the_bridge_hands_legacy_clients_the_servers_handshake(
    legacy_server: PeerServer, tmp_path: Path, legacy_recorded: bool
) -> None:
    # Behind the modern->legacy bridge the server saw the bridge's own initialize before the call:
    # that handshake is the server's InitializeResult, never the call's answer.
    capture = tmp_path / "bridged.jsonl"
    env = clean_env(
        **settings_env(upstream=legacy_server.url, capture=capture, admin_enabled="false", drain_grace=1)
    )
    with ProxyProcess(env) as proxy:
        async with client_for(proxy.endpoint(), "2026-07-28") as client:
            echoed = normalize_tool_result(await client.call_tool("echo", {"text": "hello"}))
        if legacy_recorded:
            async with client_for(proxy.endpoint(), "legacy") as client:
                await client.call_tool("add", {"a": 2, "b": 3})
        assert proxy.stop() == 0
    async with client_for(legacy_server.url, "legacy") as client:
        server_info = client.server_info

    with _mock(capture) as mock:
        for _ in range(2):  # every legacy client, not only the first, gets the handshake
            async with client_for(mock.endpoint(), "legacy") as client:
                assert client.server_info == server_info
                assert normalize_tool_result(await client.call_tool("echo", {"text": "hello"})) == echoed
        async with client_for(mock.endpoint(), "2026-07-28") as client:
            assert normalize_tool_result(await client.call_tool("echo", {"text": "hello"})) == echoed
        made_up = mock.find("mock_handshake_made")
    assert echoed["content"] == ["hello"]
    assert made_up is None


async def test_a_capture_of_a_dual_era_server_serves_each_client_what_its_era_recorded(
    tmp_path: Path,
) -> None:
    # One capture of the SDK's default dual-era server, listed by a client of each era: a 2026-07-28
    # client of the mock must get the modern answer (with its caching hints), whatever the order.
    capture = tmp_path / "dual.jsonl"
    with PeerServer("dual-mrtr") as peer:
        env = clean_env(
            **settings_env(upstream=peer.url, capture=capture, admin_enabled="false", drain_grace=1)
        )
        with ProxyProcess(env) as proxy:
            async with client_for(proxy.endpoint(), "legacy") as client:
                await client.list_tools()
            async with client_for(proxy.endpoint(), "2026-07-28") as client:
                for _ in range(2):
                    await client.list_tools()
                    await client.call_tool("add", {"a": 1, "b": 2})
            assert proxy.stop() == 0
    with _mock(capture) as mock:
        async with client_for(mock.endpoint(), "2026-07-28") as client:
            listed = [[tool.name for tool in (await client.list_tools()).tools] for _ in range(3)]
        serving = mock.find("mock_serving")
    assert serving is not None
    assert serving["era"] == "modern"
    assert len(listed) == 3
    assert "add" in listed[0]
    assert listed[0] == listed[1] == listed[2]


@pytest.mark.parametrize("recorded", ["modern-mrtr"], indirect=True)
async def test_a_listen_the_capture_cannot_serve_is_acknowledged_with_nothing_and_ended_gracefully(
    recorded: Recorded,
) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "subscriptions/listen",
        "params": {
            "notifications": {"toolsListChanged": True},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"},
        },
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Mcp-Protocol-Version": "2026-07-28",
        "Mcp-Method": "subscriptions/listen",
    }
    with _mock(recorded.capture) as mock:
        async with (
            aiohttp.ClientSession() as http,
            http.post(mock.endpoint(), json=body, headers=headers) as resp,
        ):
            status, kind, text = resp.status, resp.content_type, await resp.text()
        warnings = [e for e in mock.events() if e.get("level") in ("warning", "error")]

    assert (status, kind) == (200, "text/event-stream"), text
    events = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]
    assert [e.get("method") for e in events] == ["notifications/subscriptions/acknowledged", None]
    assert events[0]["params"]["notifications"] == {}
    assert events[1]["id"] == 9
    assert events[1]["result"]["resultType"] == "complete"
    assert events[1]["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 9
    assert warnings == []
