"""Two clients making the same 2026-07-28 call at once, through the `mcp-proxy` command in pass-through.

The real 2026-07-28 SDK server's `ask_name` answers `input_required` without a `requestState`, so a
retry can only be told by its method, tool, arguments and answered keys, which two clients calling
the same tool share. Each client keeps its own connection (as each SDK client has its own HTTP
pool), or sends its own `Authorization` (here over one shared connection, as behind another proxy):
that tells the retries apart. The admin API must show one
chain per call, each holding its own client's answer, and the metrics must count two calls with
nothing left waiting on a client.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import anyio
import pytest

from tests.e2e.modern_raw import modern_call
from tests.peers.runner import PeerServer
from tests.sidecar import ProxyProcess, admin_get, admin_json, clean_env, settings_env

pytestmark = pytest.mark.e2e

CALL = {"name": "ask_name", "arguments": {}}


def _answer(name: str, key: str) -> dict[str, Any]:
    return {**CALL, "inputResponses": {key: {"action": "accept", "content": {"name": name}}}}


async def _metric(admin: str, name: str) -> float:
    _, _, body = await admin_get(admin + "/metrics")
    lines = [line for line in body.decode().splitlines() if line.startswith(name)]
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if "tools/call" in line or "{" not in line)


async def _ended_calls(admin: str, count: int) -> list[dict[str, Any]]:
    """The tools/call chains, once `count` have ended (bounded poll: the admin API builds as it reads)."""
    with anyio.fail_after(10):
        while True:
            chains = await admin_json(admin + "/api/chains?limit=20")
            calls = [c for c in chains if c["method"] == "tools/call"]
            if sum(c.get("ended") is not None for c in calls) >= count:
                return calls
            await anyio.sleep(0.05)


def _greeting(held: dict[str, Any]) -> str:
    """The text of the last answer a chain holds (`/api/chains/{id}`)."""
    bodies = [m.get("body") for m in held["messages"]]
    answers = [b for b in bodies if isinstance(b, dict) and "result" in b]
    return str(answers[-1]["result"]["content"][0]["text"])


async def _two_calls_then_two_retries(
    url: str, headers: list[dict[str, str]], *, one_connection: bool
) -> list[str]:
    """Alice and Bob each call `ask_name` (on a connection each, or both on one); both get
    `input_required` before either retries; Bob retries first. Returns what each was greeted with."""
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as alice,
        aiohttp.ClientSession() as own,
    ):
        bob = alice if one_connection else own
        asked = [
            await modern_call(http, url, "tools/call", CALL, ident=1, headers=extra)
            for http, extra in ((alice, headers[0]), (bob, headers[1]))
        ]
        keys = []
        for status, reply in asked:
            assert status == 200, reply
            result = reply["result"]
            assert result["resultType"] == "input_required", reply
            assert "requestState" not in result, reply
            keys.append(next(iter(result["inputRequests"])))
        _, to_bob = await modern_call(
            bob, url, "tools/call", _answer("bob", keys[1]), ident=2, headers=headers[1]
        )
        _, to_alice = await modern_call(
            alice, url, "tools/call", _answer("alice", keys[0]), ident=2, headers=headers[0]
        )
    return [reply["result"]["content"][0]["text"] for reply in (to_alice, to_bob)]


@pytest.mark.parametrize(
    ("headers", "one_connection"),
    [
        pytest.param([{}, {}], False, id="by their connections"),
        pytest.param(
            [{"Authorization": "Bearer alice-token"}, {"Authorization": "Bearer bob-token"}],
            True,
            id="by their Authorization, on one connection",
        ),
    ],
)
async def test_lookalike_calls_of_two_clients_make_one_chain_each_and_leave_nothing_waiting(
    modern_server: PeerServer, headers: list[dict[str, str]], one_connection: bool
) -> None:
    with ProxyProcess(clean_env(**settings_env(upstream=modern_server.url))) as proxy:
        greeted = await _two_calls_then_two_retries(proxy.endpoint(), headers, one_connection=one_connection)
        calls = await _ended_calls(proxy.admin, 2)
        held = [await admin_json(f"{proxy.admin}/api/chains/{c['id']}") for c in calls]
        chains_total = await _metric(proxy.admin, "mcp_proxy_chains_total")
        waiting = await _metric(proxy.admin, "mcp_proxy_waiting_on_client")

    assert greeted == ["Hello, alice!", "Hello, bob!"]
    assert sorted((c["status"], c["rounds"]) for c in calls) == [("ok", 2), ("ok", 2)], calls
    # each chain holds its own client's answer and the greeting it got: Alice's call (the older) Alice's
    assert [_greeting(chain) for chain in sorted(held, key=lambda c: c["chain"]["started"])] == greeted
    assert chains_total == 2
    assert waiting == 0
