"""Retries the bridge refuses leave the call's chain as it was.

A 2026-07-28 client's call is parked on a real legacy SDK server's elicitation, through the
`mcp-proxy` command. Three retries carry the call's valid `requestState` but are refused (other
arguments; another principal; an answer that is no result of its question), then the caller's own
retry completes the call. The admin API must show one ok chain with its two rounds (the refused
attempts noted in it, no orphan left parked), and the error counter must not count the call.
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

ANSWER = {"action": "accept", "content": {"name": "octocat"}}
ALICE = {"Authorization": "Bearer alice-token"}
BOB = {"Authorization": "Bearer bob-token"}


async def _call(
    http: aiohttp.ClientSession, url: str, ident: int, params: dict[str, Any], headers: dict[str, str]
) -> tuple[int, dict[str, Any]]:
    return await modern_call(http, url, "tools/call", params, ident=ident, headers=headers)


def _refused(status: int, reply: dict[str, Any]) -> bool:
    return status == 400 and reply.get("error", {}).get("code") == -32602


async def _errors_counted(admin: str) -> float:
    _, _, body = await admin_get(admin + "/metrics")
    lines = body.decode().splitlines()
    counted = [line for line in lines if line.startswith("mcp_proxy_errors_total{") and "tools/call" in line]
    return sum(float(line.rsplit(" ", 1)[1]) for line in counted)


async def _ended_calls(admin: str) -> list[dict[str, Any]]:
    """The tools/call chains, once one has ended (bounded poll: the admin API builds as it reads)."""
    with anyio.fail_after(10):
        while True:
            chains = await admin_json(admin + "/api/chains?limit=20")
            calls = [c for c in chains if c["method"] == "tools/call"]
            if any(c["ended"] is not None for c in calls):
                return calls
            await anyio.sleep(0.05)


async def test_refused_retries_leave_one_ok_chain_with_its_rounds_and_count_no_error(
    legacy_server: PeerServer,
) -> None:
    with ProxyProcess(clean_env(**settings_env(upstream=legacy_server.url))) as proxy:
        url = proxy.endpoint()
        async with aiohttp.ClientSession() as http:
            status, reply = await _call(http, url, 1, {"name": "ask_name", "arguments": {}}, ALICE)
            assert status == 200, reply
            asked = reply["result"]
            assert asked["resultType"] == "input_required", reply
            (key,) = asked["inputRequests"]
            retry = {
                "name": "ask_name",
                "inputResponses": {key: ANSWER},
                "requestState": asked["requestState"],
            }
            other_arguments = await _call(http, url, 2, {**retry, "arguments": {"sneaky": True}}, ALICE)
            other_principal = await _call(http, url, 3, {**retry, "arguments": {}}, BOB)
            no_result = {**retry, "arguments": {}, "inputResponses": {key: {"foo": 1}}}
            malformed_answer = await _call(http, url, 4, no_result, ALICE)
            status, done = await _call(http, url, 5, {**retry, "arguments": {}}, ALICE)
        assert _refused(*other_arguments), other_arguments
        assert _refused(*other_principal), other_principal
        assert _refused(*malformed_answer), malformed_answer
        assert status == 200, done
        assert done["result"]["content"][0]["text"] == "Hello, octocat!", done

        calls = await _ended_calls(proxy.admin)
        errors = await _errors_counted(proxy.admin)

    [chain] = calls
    assert (chain["status"], chain["rounds"], chain["jsonrpc_id"], chain.get("error")) == ("ok", 2, 5, None)
    refused_notes = [n for n in chain["notes"] if "was refused" in n]
    assert [n.split(")")[0] for n in refused_notes] == ["a retry (id 2", "a retry (id 3", "a retry (id 4"]
    assert errors == 0
