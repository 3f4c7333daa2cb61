"""A question asked while one client's call is parked for its retry never reaches another client.

The 1.3.0 SDK's FastMCP server (`Sdk2024Sse`, and the same server on stdio) carries every question
of a session on one stream, naming no request. Client A's `ask_twice` asks two questions side by
side: the first parks A's call (A gets its `input_required` round), and the second comes while A's
call waits for A's retry. Client B, another anonymous 2026-07-28 client on the shared upstream
session, has a call running then. The second question could be A's or B's, so the proxy refuses it:
B is never shown A's question, and no answer of B's goes into A's result. With `per_connection`
each client has a session of its own, and A is asked both of its questions. So is A alone on the
shared session: its parked call is the only one the second question can be for, and it is asked in
A's next round.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError

from tests.e2e.channel_peers import Sdk2024Sse, sdk2024_stdio_command
from tests.peers.runner import DEFAULT_START_TIMEOUT, DEFAULT_STOP_TIMEOUT
from tests.sidecar import ProxyProcess, clean_env, settings_env

pytestmark = pytest.mark.e2e

MODERN = "2026-07-28"
GAP = 0.3
"""Seconds between A's two questions: A's call is parked when the second comes."""
SLOW = 3.0
"""How long B's call runs: the whole time A's second question is asked."""


class Asked:
    """What each client was asked, and when A was first asked (B calls then)."""

    def __init__(self) -> None:
        self.questions: dict[str, list[str]] = {"A": [], "B": []}
        self.a_asked = anyio.Event()


async def _client(url: str, me: str, tool: str, arguments: dict[str, Any], asked: Asked) -> Any:
    """`me`'s result (its text blocks), or the error's message its call got; it answers every
    question with its own name, a moment later, as a person or an LLM would."""

    async def sampling(
        context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        content = params.messages[0].content
        asked.questions[me].append(content.text if isinstance(content, types.TextContent) else repr(content))
        if me == "A":
            asked.a_asked.set()
        await anyio.sleep(0.8)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(text=me), model="m", stop_reason="endTurn"
        )

    client = Client(url, mode=MODERN, sampling_callback=sampling, cache=None, read_timeout_seconds=20)
    async with client:
        if me == "B":
            await asked.a_asked.wait()  # B calls once A's call is parked on its first question
        try:
            result = await client.call_tool(tool, arguments)
        except MCPError as error:
            return error.message
        return [block.text for block in result.content if isinstance(block, types.TextContent)]


async def _a_asks_twice_while_b_runs(url: str) -> tuple[dict[str, Any], Asked]:
    asked = Asked()
    results: dict[str, Any] = {}

    async def run(me: str, tool: str, arguments: dict[str, Any]) -> None:
        results[me] = await _client(url, me, tool, {"who": me, **arguments}, asked)

    with anyio.fail_after(40):
        async with anyio.create_task_group() as group:
            group.start_soon(run, "A", "ask_twice", {"gap": GAP})
            group.start_soon(run, "B", "slow", {"seconds": SLOW})
    return results, asked


def _proxy(upstream: dict[str, str], **settings: str) -> ProxyProcess:
    return ProxyProcess(clean_env(**settings_env(upstream_era="legacy", **upstream, **settings)))


def _assert_refused_not_crossed(results: dict[str, Any], asked: Asked, proxy: ProxyProcess) -> None:
    said = proxy.find("bridge_stream_request_ambiguous")
    assert asked.questions["B"] == [], (asked.questions, results)  # B never sees A's question
    assert asked.questions["A"] == ["question 1 of A"], (asked.questions, results)
    assert results["B"] == ["B: slow done"], results
    assert "answered by B" not in str(results["A"]), results  # no answer of B's in A's result
    assert results["A"] == [
        "Error executing tool ask_twice: unhandled errors in a TaskGroup (1 sub-exception)"
    ]
    assert said is not None
    assert len(said["parked"]) == 1, said
    assert said["parked"][0].startswith("leg-"), said  # A's upstream id, which A's chain carries
    assert proxy.find("bridge_stream_request_placed") is None


async def test_behind_http_sse_a_question_a_parked_call_could_own_is_not_given_to_another_client() -> None:
    server = Sdk2024Sse(start_timeout=DEFAULT_START_TIMEOUT, stop_timeout=DEFAULT_STOP_TIMEOUT)
    with server, _proxy({"upstream": server.sse_url, "upstream_transport": "sse"}) as proxy:
        results, asked = await _a_asks_twice_while_b_runs(proxy.endpoint("/sse"))
        _assert_refused_not_crossed(results, asked, proxy)


async def test_behind_stdio_a_question_a_parked_call_could_own_is_refused_not_given_to_another_client() -> (
    None
):
    with _proxy({"upstream_cmd": " ".join(sdk2024_stdio_command())}) as proxy:
        results, asked = await _a_asks_twice_while_b_runs(proxy.endpoint())
        _assert_refused_not_crossed(results, asked, proxy)


async def test_per_connection_asks_each_client_only_its_own_questions_while_its_call_is_parked() -> None:
    server = Sdk2024Sse(start_timeout=DEFAULT_START_TIMEOUT, stop_timeout=DEFAULT_STOP_TIMEOUT)
    with (
        server,
        _proxy(
            {"upstream": server.sse_url, "upstream_transport": "sse"},
            anonymous_upstream_sessions="per_connection",
        ) as proxy,
    ):
        results, asked = await _a_asks_twice_while_b_runs(proxy.endpoint("/sse"))
        said = proxy.find("bridge_stream_request_ambiguous")
    assert asked.questions == {"A": ["question 1 of A", "question 2 of A"], "B": []}, results
    assert results == {"A": ["A: 1 answered by A, 2 answered by A"], "B": ["B: slow done"]}
    assert said is None


async def _a_alone_asks_twice(url: str, proxy: ProxyProcess) -> None:
    asked = Asked()
    with anyio.fail_after(40):
        result = await _client(url, "A", "ask_twice", {"who": "A", "gap": GAP}, asked)
    assert asked.questions["A"] == ["question 1 of A", "question 2 of A"], result
    assert result == ["A: 1 answered by A, 2 answered by A"]
    assert proxy.find("bridge_stream_request_ambiguous") is None
    assert proxy.find("bridge_unassociated_request") is None


async def test_behind_http_sse_a_lone_clients_parked_call_is_asked_its_next_question_in_its_next_round() -> (
    None
):
    server = Sdk2024Sse(start_timeout=DEFAULT_START_TIMEOUT, stop_timeout=DEFAULT_STOP_TIMEOUT)
    with server, _proxy({"upstream": server.sse_url, "upstream_transport": "sse"}) as proxy:
        await _a_alone_asks_twice(proxy.endpoint("/sse"), proxy)


async def test_behind_stdio_a_lone_clients_parked_call_is_asked_its_next_question_in_its_next_round() -> None:
    with _proxy({"upstream_cmd": " ".join(sdk2024_stdio_command())}) as proxy:
        await _a_alone_asks_twice(proxy.endpoint(), proxy)
