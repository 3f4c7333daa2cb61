"""A legacy SDK server that asks on its session's GET stream, behind `mrtr_to_legacy`.

The Python SDK sends `ctx.session.list_roots()` (and `elicit()` / `create_message()` without a
related request) on the session's standalone GET stream, not on the tool call's stream. A legacy
client answers it there; a 2026-07-28 client through the bridge must be asked it as part of its
call's round, and get the same result as a legacy client talking to the server directly.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from proxy.flows.events import Mode
from tests.peers.runner import PeerServer
from tests.peers.scenarios import CallbackLog, client_for, normalize_tool_result
from tests.sidecar import ProxyProcess, admin_json, clean_env, run_mcp_proxy, settings_env

pytestmark = pytest.mark.e2e

MODERN = "2026-07-28"
TOOLS = ("session_roots", "session_ask_name")
"""Peer tools that ask on the GET stream (`tests.peers.apps`), callable but not listed."""


async def call_tools(url: str, mode: str) -> list[dict[str, Any]]:
    """Each tool of `TOOLS` on one client: its normalized result and the callbacks it caused."""
    log = CallbackLog()
    outcomes = []
    async with client_for(url, mode, log=log, read_timeout=10.0) as client:
        for tool in TOOLS:
            log.clear()
            with anyio.fail_after(15):
                result = normalize_tool_result(await client.call_tool(tool, {}))
            outcomes.append({"tool": tool, "result": result, "callbacks": list(log.callbacks)})
    return outcomes


async def test_a_question_on_the_get_stream_reaches_a_modern_client_as_a_legacy_client_gets_it(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    direct = await call_tools(legacy_server.url, "legacy")
    assert [o["result"]["content"] for o in direct] == [["file:///home/u/proj"], ["Hello, octocat!"]]
    assert [o["callbacks"] for o in direct] == [["roots"], ["elicitation:What is your name?"]]
    capture = tmp_path / "run.jsonl"
    with ProxyProcess(clean_env(**settings_env(upstream=legacy_server.url, capture=capture))) as proxy:
        bridged = await call_tools(proxy.endpoint(), MODERN)
        exported = await admin_json(proxy.admin + "/api/export.json")
    assert bridged == direct
    assert _round_keys(exported["chains"]) == [["roots-1"], ["elicitation-1"]]  # each in its call's round
    asked = {"session_roots": (1, ["roots/list"]), "session_ask_name": (1, ["elicitation/create"])}
    assert _asked(exported["chains"]) == asked  # and each question in its call's chain, counted there once
    replayed = run_mcp_proxy("export", "--json", "-", str(capture))
    assert replayed.returncode == 0, replayed.stderr
    assert _asked(json.loads(replayed.stdout)["chains"]) == asked  # the capture files them alike


async def test_the_session_keeps_its_get_stream_while_it_lives(
    legacy_server: PeerServer, proxy_for: Callable[..., Any]
) -> None:
    async with proxy_for(legacy_server.url) as proxy:
        await call_tools(proxy.endpoint(), MODERN)
        bridge = proxy.router.bridges[Mode.MRTR_TO_LEGACY]
        sizes = bridge.engine.table_sizes()  # type: ignore[attr-defined]
        assert sizes["session_streams"] == sizes["upstream_sessions"] == 1
        assert bridge.table_sizes()["session_streams"] == 1


async def test_a_get_stream_question_while_two_clients_calls_are_in_flight_is_asked_of_neither(
    legacy_server: PeerServer,
) -> None:
    """Two clients with the same credentials share the bridge's upstream session: a question the
    server asks on its GET stream while both calls wait could be either's, so neither client is asked
    it (giving it to one could show it another client's prompt); the server gets a refusal at once."""
    logs = [CallbackLog(), CallbackLog()]
    shared = {"Authorization": "Bearer team-token"}

    async def one_client(url: str, log: CallbackLog) -> str:
        async with client_for(url, MODERN, headers=shared, log=log, read_timeout=10.0) as client:
            with anyio.fail_after(15):
                try:
                    await client.call_tool("session_ask_name_later", {"wait": 1.0})
                except MCPError as exc:  # the server's elicit failed with the proxy's refusal
                    return str(exc)
        return "answered"

    with ProxyProcess(clean_env(**settings_env(upstream=legacy_server.url))) as proxy:
        results = ["", ""]

        async def run(i: int) -> None:
            results[i] = await one_client(proxy.endpoint(), logs[i])

        async with anyio.create_task_group() as group:
            group.start_soon(run, 0)
            group.start_soon(run, 1)
        ambiguous = proxy.wait_events(
            lambda lines: sum(e.get("event") == "bridge_stream_request_ambiguous" for e in lines) >= 2
        )
    assert [log.callbacks for log in logs] == [[], []]  # nobody was asked another's question
    assert all("the proxy cannot tell whose it is" in r for r in results), results
    said = [e for e in ambiguous if e.get("event") == "bridge_stream_request_ambiguous"]
    assert {e["in_flight"] for e in said} == {2}
    assert all(e["level"] == "warning" for e in said)


async def test_two_anonymous_clients_calls_in_flight_are_each_asked_their_own_get_stream_question(
    legacy_server: PeerServer,
) -> None:
    """With `per_connection`, clients without credentials get upstream sessions of their own
    connections: the question each server session asks on its GET stream while both calls wait is its
    own call's, so each client is asked exactly its own and gets its answer back."""
    logs = [CallbackLog(), CallbackLog()]
    results: list[Any] = [None, None]

    async def run(url: str, i: int) -> None:
        async with client_for(url, MODERN, log=logs[i], read_timeout=10.0) as client:
            with anyio.fail_after(15):
                results[i] = normalize_tool_result(
                    await client.call_tool("session_ask_name_later", {"wait": 1.0})
                )

    env = settings_env(upstream=legacy_server.url, anonymous_upstream_sessions="per_connection")
    with ProxyProcess(clean_env(**env)) as proxy:
        async with anyio.create_task_group() as group:
            group.start_soon(run, proxy.endpoint(), 0)
            group.start_soon(run, proxy.endpoint(), 1)
        ambiguous = proxy.find("bridge_stream_request_ambiguous")
    assert [log.callbacks for log in logs] == [["elicitation:What is your name?"]] * 2
    assert [r["content"] for r in results] == [["Hello, octocat!"]] * 2, results
    assert ambiguous is None


def _asked(chains: list[dict[str, Any]]) -> dict[str, tuple[int, list[str]]]:
    """Each session_* call's `nested` count and the requests its chain holds from the server."""
    return {
        chain["chain"]["name"]: (
            chain["chain"]["nested"],
            [
                m["method"]
                for m in chain["messages"]
                if m["side"] == "upstream" and m["direction"] == "to_client" and m["kind"] == "request"
            ],
        )
        for chain in chains
        if chain["chain"].get("name") in TOOLS
    }


def _round_keys(chains: list[dict[str, Any]]) -> list[list[str]]:
    """The input keys each session_* call was asked in its rounds, from the admin API's chains."""
    keys = []
    for chain in chains:
        if chain["chain"].get("name") not in TOOLS:
            continue
        for message in chain["messages"]:
            body = message.get("body")
            result = body.get("result") if isinstance(body, dict) else None
            if isinstance(result, dict) and result.get("resultType") == "input_required":
                keys.append(sorted(result["inputRequests"]))
    return keys
