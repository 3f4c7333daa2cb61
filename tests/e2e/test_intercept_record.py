"""What a capture keeps of a message an intercept changed, read back by `mock`, `export` and `replay`.

A user runs the `mcp-proxy` command with `--capture` between the SDK's legacy in-flight server and an
SDK client, holds a message through the admin API and decides on it, as a script would
(tests.e2e.test_intercept drives the desk the same way). The capture is then read by the other
commands: each must take the message as the server had it, since the server answered that.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp.shared.exceptions import MCPError

from tests.e2e.commanded import own_proxy
from tests.e2e.gated_runs import client_run
from tests.e2e.test_intercept import decide, next_held, with_desk
from tests.peers.runner import PeerServer
from tests.peers.scenarios import client_for, normalize_tool_result
from tests.sidecar import ProxyProcess, clean_env, run_mcp_proxy, settings_env

pytestmark = pytest.mark.asyncio


def _mock(capture: Path) -> ProxyProcess:
    """`mcp-proxy mock CAPTURE` on a free port (no upstream: the capture is all it has)."""
    return ProxyProcess(clean_env(**settings_env(admin_enabled="false", drain_grace=1)), "mock", str(capture))


async def test_a_mock_answers_an_edited_call_for_what_the_server_got_not_what_the_client_sent(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    async with own_proxy(
        legacy_server.url, "--intercept", "tool:add dir:client", "--capture", str(capture)
    ) as proxy:

        async def desk(http: aiohttp.ClientSession) -> None:
            held = await next_held(http, proxy)
            edited = json.loads(json.dumps(held["message"]))
            assert edited["params"]["arguments"] == {"a": 2, "b": 3}
            edited["params"]["arguments"]["a"] = 40
            assert (await decide(http, proxy, held["id"], {"decision": "forward", "message": edited}))[
                0
            ] == 200

        run = await with_desk(proxy, client_run(proxy, "python-legacy", ["add"]), desk)
    assert run.lines["add"]["result"]["content"] == ["43"], run.lines  # the server added 40 and 3

    with _mock(capture) as mock:
        async with client_for(mock.endpoint(), "legacy") as client:
            served = normalize_tool_result(await client.call_tool("add", {"a": 40, "b": 3}))
            with pytest.raises(MCPError) as as_sent:
                await client.call_tool("add", {"a": 2, "b": 3})
    assert served["content"] == ["43"]
    assert as_sent.value.error.code == -32602
    assert 'nearest recorded: tools/call add {"a":40,"b":3}' in as_sent.value.error.message


ASKED = [
    pytest.param("python-legacy", "", "answer", id="pass-through-answer"),
    pytest.param("python-legacy", "", "drop", id="pass-through-drop"),
    pytest.param("python-2026", " mode:mrtr_to_legacy", "answer", id="bridged-answer"),
]
"""(client, what the rule adds, decision): a legacy server's `elicitation/create` answered at the desk."""

DESK = {"action": "accept", "content": {"name": "the desk"}}


def _server_got(messages: list[dict[str, Any]]) -> list[tuple[str, Any, str | None]]:
    """Answers the server got to its questions in a chain's records: (side, body, note) each."""
    return [
        (m["side"], m["body"], m.get("note"))
        for m in messages
        if m["direction"] == "to_server" and m["kind"] in ("result", "error") and m["side"] == "upstream"
    ]


@pytest.mark.parametrize(("client", "scope", "verb"), ASKED)
async def test_the_answer_an_intercept_gave_a_server_is_in_the_chain_live_and_from_the_capture_and_replayed(
    client: str, scope: str, verb: str, legacy_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    rule = f"method:elicitation/create dir:server{scope}"
    async with own_proxy(legacy_server.url, "--intercept", rule, "--capture", str(capture)) as proxy:

        async def desk(http: aiohttp.ClientSession) -> None:
            held = await next_held(http, proxy)
            body: dict[str, Any] = {"decision": verb} | ({"result": DESK} if verb == "answer" else {})
            assert (await decide(http, proxy, held["id"], body))[0] == 200

        run = await with_desk(proxy, client_run(proxy, client, ["ask_name"]), desk)  # type: ignore[arg-type]
        (chain,) = [c for c in await proxy.chains() if c.get("name") == "ask_name"]
        live = await proxy.messages(chain["id"])
    line = run.lines["ask_name"]
    assert line.get("callbacks", []) == [], line  # the client never saw the question

    # The chain shows what the server got, as the proxy's: live, and from the capture alike.
    ((side, got, note),) = _server_got(live)
    assert side == "upstream"
    if verb == "answer":
        assert got["result"] == DESK
        assert note == "typed at the proxy's intercept (i1), sent in the client's place"
        assert line["result"]["content"] == ["Hello, the desk!"], line
    else:
        assert got["error"]["data"] == {
            "interceptedBy": "mcp-debug-proxy intercept",
            "rule": "i1",
            "decision": "drop",
        }
        assert note == "a drop error from the proxy's intercept (i1), sent in the client's place"
    exported = await asyncio.to_thread(run_mcp_proxy, "export", "--json", "-", str(capture))
    assert exported.returncode == 0, exported.stderr
    (item,) = [c for c in json.loads(exported.stdout)["chains"] if c["chain"].get("name") == "ask_name"]
    assert _server_got(item["messages"]) == _server_got(live)

    # A replay answers the server's question with what the server got when recorded. Its client is
    # asked the question the recording's never saw (a difference the proxy's change explains); left
    # out, a pass-through chain is the same: the server heard the same answer and said the same.
    replayed = await asyncio.to_thread(
        run_mcp_proxy,
        *("replay", str(capture), "--chain", item["chain"]["id"], "--json"),
        *("--ignore", "elicitation/create*"),
        timeout=60,
    )
    (report,) = json.loads(replayed.stdout)["chains"]
    assert "asked nothing" not in replayed.stdout + replayed.stderr
    assert report["proxy_changes"], report
    assert report["status"] == ("differs" if scope else "same"), report
