"""A question a stdio server asks while several 2026-07-28 clients' calls run on its one shared child.

stdio carries no address: a server request names no client request it belongs to. Every 2026-07-28
client shares the one child, so with two clients' calls in flight the question could be either's;
the proxy refuses it upstream at once (as the modern->legacy bridge refuses such a question on a
session's stream) instead of giving it to the newest call, which may be another client's. No real
server asks in flight during a 2026-07-28 request (the Python SDK refuses to), so the hand-written
FAKE server's ``ask_roots`` asks while another client's call runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest

from tests.e2e.modern_raw import modern_messages
from tests.e2e.test_stdio_faults import fake_command
from tests.sidecar import ProxyProcess, clean_env, settings_env, until

pytestmark = pytest.mark.e2e


async def _call(url: str, tool: str) -> tuple[list[dict[str, Any]], Any]:
    """The requests the client's stream carried (it stops reading at the first) and the call's result."""
    asked: list[dict[str, Any]] = []
    result: Any = None
    params = {"name": tool, "arguments": {}}
    async with aiohttp.ClientSession() as http:
        async for message in modern_messages(http, url, "tools/call", params, ident=1):
            if "method" in message and "id" in message:
                asked.append(message)
                break  # a 2026-07-28 client is never asked in flight; it gives up the call
            if "result" in message or "error" in message:
                result = message.get("result", message.get("error"))
    return asked, result


async def test_a_question_while_two_clients_calls_run_on_the_shared_child_is_refused_not_given_to_one(
    tmp_path: Path,
) -> None:
    record = tmp_path / "heard.jsonl"
    record.touch()
    env = settings_env(upstream_cmd=fake_command("--record", str(record)), upstream_era="modern")
    seen: dict[str, tuple[list[dict[str, Any]], Any]] = {}
    with ProxyProcess(clean_env(**env)) as proxy:

        async def run(who: str, tool: str) -> None:
            seen[who] = await _call(proxy.endpoint(), tool)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(run, "A", "ask_roots")
                await until(lambda: b"ask_roots" in record.read_bytes(), what="A's call reached the server")
                group.start_soon(run, "B", "echo")
        said = proxy.find("upstream_request_refused")
    assert seen["A"][0] == [], seen  # nobody is asked the question
    assert seen["B"][0] == [], seen
    assert "cannot tell whose it is" in seen["A"][1]["content"][0]["text"], seen
    assert seen["B"][1]["content"][0]["text"] == "held", seen
    assert said is not None
    assert said["in_flight"] == 2, said
