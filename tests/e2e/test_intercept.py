"""Intercept: messages held until a decision, with the official Python SDK on both sides, in both eras.

The proxy is the `mcp-proxy` command with default settings (tests.e2e.commanded: one per upstream,
shared by the module's tests). A test puts its rule in force and drives the held desk as a script
would, through the admin API with its token (`/api/intercepts/wait` to learn of a held message,
`POST /api/intercepts/held/{id}` to decide) while the client runs in its own process; what the
client gets, what the server answered, the chain's note, the JSON log line and /metrics show what
each decision did.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proxy.transport.tasks import spawn
from tests.conftest import running_proxy
from tests.e2e.commanded import Commanded, ProxyFleet, own_proxy
from tests.e2e.gated_runs import ERAS, client_run
from tests.e2e.recording_upstream import SESSION, RecordingUpstream, recording_upstream
from tests.peers.clients import ClientKind, ClientRun, run_client, run_plan
from tests.peers.runner import PeerServer
from tests.sidecar import run_mcp_proxy, until
from tests.transport.helpers import client_session, dead_port

pytestmark = pytest.mark.asyncio


async def next_held(
    http: aiohttp.ClientSession, proxy: Commanded, after: str | None = None
) -> dict[str, Any]:
    """The next message held after `after`, by the long poll a script uses."""
    url = f"{proxy.admin_url}/api/intercepts/wait?timeout=30" + (f"&after={after}" if after else "")
    async with http.get(url) as resp:
        assert resp.status == 200, await resp.text()
        held: list[dict[str, Any]] = (await resp.json())["held"]
    assert held, "nothing was held within 30 s"
    return held[0]


async def decide(
    http: aiohttp.ClientSession, proxy: Commanded, held: str, body: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    async with http.post(f"{proxy.admin_url}/api/intercepts/held/{held}", json=body) as resp:
        answer: dict[str, Any] = await resp.json()
        return resp.status, answer


async def with_desk(
    proxy: Commanded, client: Awaitable[ClientRun], desk: Callable[[aiohttp.ClientSession], Awaitable[None]]
) -> ClientRun:
    """Run the client and the desk (an admin session with the token) together; the client's run."""
    async with proxy.http() as http:
        run, _ = await asyncio.gather(client, desk(http))
    return run


async def chain_notes(proxy: Commanded) -> list[str]:
    """The notes of the chains this test's traffic made (`GET /api/chains`)."""
    return await proxy.notes()


async def legs_of(proxy: Commanded, tool: str, direction: str) -> list[tuple[str, Any, str | None]]:
    """The records of the `tools/call tool` chain's call (`to_server`) or answer (`to_client`), by
    its JSON-RPC id: (side, body, note) each, in order."""
    (chain,) = [c for c in await proxy.chains() if c.get("method") == "tools/call" and c.get("name") == tool]
    return [
        (m["side"], m["body"], m.get("note"))
        for m in await proxy.messages(chain["id"])
        if m["direction"] == direction and m.get("jsonrpc_id") == chain["jsonrpc_id"]
    ]


def tool_result(modern: bool, text: str) -> dict[str, Any]:
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}], "isError": False}
    if modern:
        result["resultType"] = "complete"
    return result


@pytest.mark.parametrize(("client", "server"), ERAS)
async def test_a_held_call_answered_by_the_desk_gets_the_typed_result(
    client: ClientKind, server: str, request: pytest.FixtureRequest, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(request.getfixturevalue(server))
    rule = await proxy.add_intercept("tool:echo dir:client")

    async def desk(http: aiohttp.ClientSession) -> None:
        held = await next_held(http, proxy)
        assert {k: held[k] for k in ("direction", "kind", "method", "mode", "side")} == {
            "direction": "client",
            "kind": "request",
            "method": "tools/call",
            "mode": "passthrough",
            "side": "upstream",
        }
        assert held["message"]["params"]["name"] == "echo"
        assert held["deadline"] - held["held_at"] == pytest.approx(60.0)
        assert str(held["chain"]).startswith("c"), held  # its chain, built for the admin API
        body = {"decision": "answer", "result": tool_result(client == "python-2026", "from the desk")}
        assert await decide(http, proxy, held["id"], body) == (200, {"id": held["id"], "decision": "answer"})

    run = await with_desk(proxy, client_run(proxy, client, ["echo"]), desk)
    notes = await chain_notes(proxy)
    assert run.lines["echo"]["result"]["content"] == ["from the desk"], run.lines
    assert any(n.startswith(f"the client's tools/call held by intercept {rule} for") for n in notes), notes
    assert any(n.endswith(", answered in its place by api") for n in notes), notes
    (line,) = [e for e in proxy.lines() if e.get("event") == "exchange" and e.get("intercept")]
    assert line["intercept"].endswith("answer by api")
    assert await proxy.counted("mcp_proxy_intercepts_held_total") == 1
    assert await proxy.counted('mcp_proxy_intercepts_released_total{decision="answer"}') == 1


@pytest.mark.parametrize(("client", "server"), ERAS)
async def test_a_held_call_forwarded_edited_reaches_the_server_as_edited(
    client: ClientKind, server: str, request: pytest.FixtureRequest, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(request.getfixturevalue(server))
    await proxy.add_intercept("tool:echo dir:client")

    async def desk(http: aiohttp.ClientSession) -> None:
        held = await next_held(http, proxy)
        edited = json.loads(json.dumps(held["message"]))
        edited["params"]["arguments"]["text"] = "edited at the desk"
        assert (await decide(http, proxy, held["id"], {"decision": "forward", "message": edited}))[0] == 200

    run = await with_desk(proxy, client_run(proxy, client, ["echo"]), desk)
    notes = await chain_notes(proxy)
    assert run.lines["echo"]["result"]["content"] == ["edited at the desk"], run.lines
    assert any("forwarded edited by api" in n for n in notes), notes
    # The chain holds each leg as it went: the client's call reached the proxy only, the edit the server.
    (client_leg, server_leg) = await legs_of(proxy, "echo", "to_server")
    assert client_leg[0] == "client"
    assert client_leg[1]["params"]["arguments"]["text"] == "hello"
    assert server_leg[0] == "upstream"
    assert server_leg[1]["params"]["arguments"]["text"] == "edited at the desk"
    assert server_leg[2] is not None
    assert server_leg[2].startswith("edited by the proxy's intercept ")
    # The HAR entry is the client's exchange: its request body is what the client sent.
    (entry,) = [
        e for e in await proxy.har_entries() if "edited at the desk" in e["response"]["content"]["text"]
    ]
    assert '"hello"' in entry["request"]["postData"]["text"], entry["request"]
    assert "edited at the desk" not in entry["request"]["postData"]["text"]


async def test_a_held_call_sent_back_unchanged_as_an_edit_is_recorded_as_forwarded_unchanged(
    legacy_server: PeerServer, fleet: ProxyFleet
) -> None:
    # A script that always posts the message (edited or not) must not mark every hold as an edit.
    proxy = await fleet.at(legacy_server)
    await proxy.add_intercept("tool:echo dir:client")

    async def desk(http: aiohttp.ClientSession) -> None:
        held = await next_held(http, proxy)
        same = json.loads(json.dumps(held["message"]))
        status, answer = await decide(http, proxy, held["id"], {"decision": "forward", "message": same})
        assert (status, answer["decision"]) == (200, "forward")

    run = await with_desk(proxy, client_run(proxy, "python-legacy", ["echo"]), desk)
    notes = await chain_notes(proxy)
    assert run.lines["echo"]["result"]["content"] == ["hello"], run.lines
    assert any("forwarded unchanged by api" in n for n in notes), notes
    assert await proxy.counted('mcp_proxy_intercepts_released_total{decision="forward"}') == 1
    assert await proxy.counted('mcp_proxy_intercepts_released_total{decision="forward_edited"}') == 0


@pytest.mark.parametrize(("client", "server"), ERAS)
async def test_a_dropped_call_gets_an_error_naming_the_intercept(
    client: ClientKind, server: str, request: pytest.FixtureRequest, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(request.getfixturevalue(server))
    rule = await proxy.add_intercept("tool:add")

    async def desk(http: aiohttp.ClientSession) -> None:
        held = await next_held(http, proxy)
        assert (await decide(http, proxy, held["id"], {"decision": "drop", "by": "tui"}))[0] == 200

    run = await with_desk(proxy, client_run(proxy, client, ["add"]), desk)
    notes = await chain_notes(proxy)
    error = run.lines["add"]["error"]
    assert error["code"] == -32000, run.lines
    assert f"the proxy's intercept ({rule}) dropped this request" in error["message"]
    assert any("dropped by tui" in n for n in notes), notes


@pytest.mark.parametrize(("client", "server"), ERAS)
async def test_a_held_server_answer_is_replaced_by_the_typed_error(
    client: ClientKind, server: str, request: pytest.FixtureRequest, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(request.getfixturevalue(server))
    rule = await proxy.add_intercept("tool:add dir:server")

    async def desk(http: aiohttp.ClientSession) -> None:
        held = await next_held(http, proxy)
        assert (held["direction"], held["kind"], held["method"], held["side"]) == (
            "server",
            "response",
            "tools/call",
            "client",
        )
        assert held["message"]["result"]["structuredContent"] == {"result": 5}  # the server did act
        body = {"decision": "answer", "error": {"code": -32077, "message": "the desk says no"}}
        assert (await decide(http, proxy, held["id"], body))[0] == 200

    run = await with_desk(proxy, client_run(proxy, client, ["add"]), desk)
    notes = await chain_notes(proxy)
    assert run.lines["add"]["error"] == {"code": -32077, "message": "the desk says no"}, run.lines
    assert any(n.startswith(f"the server's answer to tools/call held by intercept {rule}") for n in notes), (
        notes
    )
    # What the server answered stays on its leg; the client's answer is marked as the proxy's.
    (server_leg, client_leg) = await legs_of(proxy, "add", "to_client")
    assert server_leg[0] == "upstream"
    assert server_leg[1]["result"]["structuredContent"] == {"result": 5}
    assert client_leg[:2] == (
        "client",
        {
            "jsonrpc": "2.0",
            "id": client_leg[1]["id"],
            "error": {"code": -32077, "message": "the desk says no"},
        },
    )
    assert client_leg[2] == f"in place of the server's answer: one typed at the proxy's intercept ({rule})"


@pytest.mark.parametrize("verb", ["answer", "drop"])
async def test_a_servers_elicitation_held_is_answered_upstream_and_never_reaches_the_client(
    verb: str, legacy_server: PeerServer, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(legacy_server)
    rule = await proxy.add_intercept("method:elicitation/create dir:server")

    async def desk(http: aiohttp.ClientSession) -> None:
        held = await next_held(http, proxy)
        assert (held["direction"], held["kind"], held["method"]) == (
            "server",
            "request",
            "elicitation/create",
        )
        body: dict[str, Any] = {"decision": verb}
        if verb == "answer":
            body["result"] = {"action": "accept", "content": {"name": "the desk"}}
        assert (await decide(http, proxy, held["id"], body))[0] == 200

    run = await with_desk(proxy, client_run(proxy, "python-legacy", ["ask_name"]), desk)
    notes = await chain_notes(proxy)
    assert any(n.startswith(f"the server's elicitation/create held by intercept {rule}") for n in notes), (
        notes
    )
    line = run.lines["ask_name"]
    assert line.get("callbacks", []) == [], line  # the client never saw the question
    if verb == "answer":
        assert line["result"]["content"] == ["Hello, the desk!"], line
    else:  # the server got an error as the client's answer
        assert "error" in line or line["result"]["isError"], line


async def test_a_server_notification_has_no_answer_and_dropped_it_never_reaches_the_client(
    legacy_server: PeerServer, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(legacy_server)
    await proxy.add_intercept("method:notifications/progress dir:server")

    async def desk(http: aiohttp.ClientSession) -> None:
        first = await next_held(http, proxy)
        status, answer = await decide(http, proxy, first["id"], {"decision": "answer", "result": {}})
        assert status == 409
        assert "a notification has no answer" in answer["message"]
        assert (await decide(http, proxy, first["id"], {"decision": "drop"}))[0] == 200
        after = first["id"]
        for _ in range(2):
            held = await next_held(http, proxy, after)
            assert (await decide(http, proxy, held["id"], {"decision": "forward"}))[0] == 200
            after = held["id"]
        status, _ = await decide(http, proxy, first["id"], {"decision": "forward"})
        assert status == 404  # released already

    run = await with_desk(proxy, client_run(proxy, "python-legacy", ["progress"]), desk)
    assert "error" not in run.lines["progress"], run.lines
    assert run.lines["progress"]["progress"] == [2.0, 3.0], run.lines


async def test_a_forgotten_hold_goes_on_unchanged_when_its_timeout_passes(
    legacy_server: PeerServer, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(legacy_server)
    await proxy.add_intercept("tool:echo timeout=300ms")
    run = await client_run(proxy, "python-legacy", ["echo"])
    notes = await chain_notes(proxy)
    assert run.lines["echo"]["result"]["content"] == ["hello"], run.lines
    assert any("forwarded unchanged by timeout" in n for n in notes), notes
    lines = [e["intercept"] for e in proxy.lines() if e.get("event") == "exchange" and e.get("intercept")]
    assert any(text.endswith("forward by timeout") for text in lines), lines


async def test_past_the_bound_a_picked_message_goes_on_and_is_recorded_as_not_held(
    legacy_server: PeerServer,
) -> None:
    # Its own proxy: the bound is a setting (--intercept-max-held), and the rule comes as a user's flag.
    args = ("--intercept", "tool:echo dir:client", "--intercept-max-held", "1")
    async with own_proxy(legacy_server.url, *args) as proxy:

        async def desk(http: aiohttp.ClientSession) -> None:
            held = await next_held(http, proxy)
            second = await asyncio.to_thread(  # not held: one is already
                run_client, "python-legacy", proxy.endpoint(), ["echo"], timeout=40.0
            )
            assert second.lines["echo"]["result"]["content"] == ["hello"], second.lines
            assert (await decide(http, proxy, held["id"], {"decision": "forward"}))[0] == 200

        first = client_run(proxy, "python-legacy", ["echo"])
        run = await with_desk(proxy, first, desk)
        notes = await chain_notes(proxy)
    assert run.lines["echo"]["result"]["content"] == ["hello"], run.lines
    not_held = "not held by intercept (i1: tool:echo dir:client): the client's tools/call: "
    assert not_held + "1 message already held (intercept_max_held)" in notes, notes


async def test_a_drain_releases_every_held_message_unchanged(
    modern_server: PeerServer, tmp_path: Path
) -> None:
    # Its own proxy, ended by SIGTERM while a message is held: the chain's note is read afterwards
    # from its capture, as `mcp-proxy export --json` shows it.
    capture = tmp_path / "capture.jsonl"
    async with own_proxy(modern_server.url, "--intercept", "tool:echo", "--capture", str(capture)) as proxy:

        async def desk(http: aiohttp.ClientSession) -> None:
            await next_held(http, proxy)
            proxy.process.signal(signal.SIGTERM)  # a drain releases what is held first

        # One step on one client: its answer is reported as it arrives; what the client does after
        # (ending its session) may find the proxy already gone: nothing was in flight, so the drain ended.
        plan = [{"id": "echo", "op": "call", "tool": "echo", "arguments": {"text": "hello"}}]
        client = asyncio.to_thread(run_plan, "python-2026", proxy.endpoint(), plan, timeout=40.0)
        run = await with_desk(proxy, client, desk)
        # The held message went on unchanged at once: the client has its answer, and the drain
        # (which waits for open exchanges) ends well inside its grace.
        assert await proxy.process.exited(seconds=15) == 0
    assert [part["text"] for part in run.lines["echo"]["result"]["content"]] == ["hello"], run.lines
    lines = [e["intercept"] for e in proxy.lines() if e.get("event") == "exchange" and e.get("intercept")]
    # The call went on released by the drain, and its answer was not held again: nothing is held
    # once the proxy drains.
    (line,) = lines
    assert re.fullmatch(r"held [0-9.]+ s, forward by drain; not held: the proxy is draining", line), lines
    exported = await asyncio.to_thread(run_mcp_proxy, "export", "--json", "-", str(capture))
    assert exported.returncode == 0, exported.stderr
    notes = [n for item in json.loads(exported.stdout)["chains"] for n in item["chain"].get("notes", [])]
    assert any("forwarded unchanged by drain" in n for n in notes), notes


BRIDGES = [
    pytest.param("python-legacy", "modern_server", "legacy_to_mrtr", id="legacy-client-modern-server"),
    pytest.param("python-2026", "legacy_server", "mrtr_to_legacy", id="modern-client-legacy-server"),
]


@pytest.mark.parametrize(("client", "server", "mode"), BRIDGES)
async def test_on_a_bridge_the_clients_call_is_held_before_the_bridge_and_edited(
    client: ClientKind, server: str, mode: str, request: pytest.FixtureRequest, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(request.getfixturevalue(server))
    rule = await proxy.add_intercept("tool:echo mode:bridged")
    sides: list[tuple[str, str, str]] = []

    async def desk(http: aiohttp.ClientSession) -> None:
        held = await next_held(http, proxy)
        assert (held["mode"], held["side"], held["method"]) == (mode, "upstream", "tools/call")
        edited = json.loads(json.dumps(held["message"]))
        edited["params"]["arguments"]["text"] = "bridged edit"
        assert (await decide(http, proxy, held["id"], {"decision": "forward", "message": edited}))[0] == 200
        # Then the bridge's own messages of the same call, each held in turn: its call upstream, the
        # upstream's answer to it, its answer to the client.
        after = held["id"]
        for _ in range(3):
            held = await next_held(http, proxy, after)
            sides.append((held["direction"], held["kind"], held["side"]))
            assert (await decide(http, proxy, held["id"], {"decision": "forward"}))[0] == 200
            after = held["id"]

    run = await with_desk(proxy, client_run(proxy, client, ["echo"]), desk)
    assert run.lines["echo"]["result"]["content"] == ["bridged edit"], run.lines
    assert sides == [
        ("client", "request", "upstream"),
        ("server", "response", "client"),
        ("server", "response", "client"),
    ]
    # The chain holds the client's call as it sent it, and the bridge's call upstream made from the
    # edit, noted as pass-through notes its edited leg.
    (chain,) = [c for c in await proxy.chains() if c.get("name") == "echo"]
    calls = [
        (m["side"], m["body"]["params"]["arguments"]["text"], m.get("note"))
        for m in await proxy.messages(chain["id"])
        if m["direction"] == "to_server" and m.get("method") == "tools/call"
    ]
    assert calls == [
        ("client", "hello", None),
        (
            "upstream",
            "bridged edit",
            f"edited by the proxy's intercept ({rule}), sent in place of the client's",
        ),
    ], calls


@pytest.mark.parametrize("verb", ["answer", "drop"])
async def test_an_elicitation_the_bridge_makes_is_held_and_answered_in_the_clients_place(
    verb: str, modern_server: PeerServer, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(modern_server)
    rule = await proxy.add_intercept("method:elicitation/create dir:server mode:legacy_to_mrtr")

    async def desk(http: aiohttp.ClientSession) -> None:
        held = await next_held(http, proxy)
        assert (held["direction"], held["kind"], held["method"], held["side"], held["mode"]) == (
            "server",
            "request",
            "elicitation/create",
            "client",
            "legacy_to_mrtr",
        )
        body: dict[str, Any] = {"decision": verb}
        if verb == "answer":
            body["result"] = {"action": "accept", "content": {"name": "the desk"}}
        assert (await decide(http, proxy, held["id"], body))[0] == 200

    run = await with_desk(proxy, client_run(proxy, "python-legacy", ["ask_name"]), desk)
    line = run.lines["ask_name"]
    assert line.get("callbacks", []) == [], line  # the client never saw the bridge's question
    if verb == "answer":
        assert line["result"]["content"] == ["Hello, the desk!"], line
    else:  # the bridge fails the call saying who kept the question from the client
        assert line["result"]["isError"], line
        assert line["result"]["content"] == [
            f"the proxy's intercept ({rule}) dropped elicitation/create (input request 'name') "
            "before it reached the client"
        ], line


async def test_a_bridges_retry_upstream_is_held_and_its_input_responses_edited(
    modern_server: PeerServer, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(modern_server)
    await proxy.add_intercept("round:>1 mode:legacy_to_mrtr")

    async def desk(http: aiohttp.ClientSession) -> None:
        held = await next_held(http, proxy)
        assert (held["direction"], held["side"], held["method"]) == ("client", "upstream", "tools/call")
        edited = json.loads(json.dumps(held["message"]))
        (key,) = edited["params"]["inputResponses"]
        edited["params"]["inputResponses"][key]["content"]["name"] = "edited upstream"
        assert (await decide(http, proxy, held["id"], {"decision": "forward", "message": edited}))[0] == 200

    run = await with_desk(proxy, client_run(proxy, "python-legacy", ["ask_name"]), desk)
    assert run.lines["ask_name"]["result"]["content"] == ["Hello, edited upstream!"], run.lines


async def test_an_upstreams_elicitation_to_the_bridge_is_answered_upstream_in_the_clients_place(
    legacy_server: PeerServer, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(legacy_server)
    await proxy.add_intercept("method:elicitation/create dir:server mode:mrtr_to_legacy")

    async def desk(http: aiohttp.ClientSession) -> None:
        held = await next_held(http, proxy)
        assert (held["direction"], held["kind"], held["method"], held["mode"]) == (
            "server",
            "request",
            "elicitation/create",
            "mrtr_to_legacy",
        )
        body = {"decision": "answer", "result": {"action": "accept", "content": {"name": "the desk"}}}
        assert (await decide(http, proxy, held["id"], body))[0] == 200

    run = await with_desk(proxy, client_run(proxy, "python-2026", ["ask_name"]), desk)
    line = run.lines["ask_name"]
    assert line.get("callbacks", []) == [], line
    assert line["result"]["content"] == ["Hello, the desk!"], line


LEGACY = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
STATE = "s3cret-state-the-server-sealed"


async def post(
    http: aiohttp.ClientSession, url: str, body: Any, session: str | None = None, token: str | None = None
) -> Any:
    headers = {**LEGACY, "MCP-Protocol-Version": "2025-11-25"}
    if session:
        headers["Mcp-Session-Id"] = session
    if token:
        headers["Authorization"] = f"Bearer {token}"
    async with http.post(url, json=body, headers=headers) as resp:
        text = await resp.text()
        return resp.status, resp.headers.get("Mcp-Session-Id"), json.loads(text) if text else None


async def test_an_edit_refused_is_never_sent_and_a_secret_left_in_place_is_restored() -> None:
    # Its own proxy, in front of a recording fake (a server that hands over the bytes it received);
    # the rule is a user's flag, so its listing is exactly the one rule.
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"n": 1}, "requestState": STATE},
    }
    async with (
        recording_upstream("legacy") as upstream,
        own_proxy(upstream.url("/mcp"), "--intercept", "tool:echo dir:client") as proxy,
        client_session() as mcp,
        proxy.http() as http,
    ):
        url = proxy.endpoint()
        _, session, _ = await post(
            mcp, url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}
        )
        assert session == SESSION
        calling = spawn(post(mcp, url, call, session), name="held-call")
        held = await next_held(http, proxy)
        async with http.get(f"{proxy.admin_url}/api/intercepts") as resp:
            listing = await resp.text()
        assert STATE not in listing  # shown redacted, as /api/chains shows messages
        stand_in = held["message"]["params"]["requestState"]
        assert stand_in.startswith("<requestState len=30 hmac:")
        assert json.loads(listing)["rules"] == [
            {
                "id": "i1",
                "match": "tool:echo dir:client",
                "rule": "tool:echo dir:client",
                "timeout_s": 60.0,
                "held": 1,
                "picked": 1,
            }
        ]
        shown = held["message"]
        refusals = [
            ({"decision": "forward", "message": [shown]}, "is a JSON object"),
            ({"decision": "forward", "message": {**shown, "id": 3}}, "keeps the held message's id 2"),
            ({"decision": "forward", "message": {**shown, "jsonrpc": "1.0"}}, '"jsonrpc" must be "2.0"'),
            (
                {
                    "decision": "forward",
                    "message": {**shown, "params": {"name": "echo", "arguments": {"n": stand_in}}},
                },
                "was shown at params.requestState",
            ),
            ({"decision": "sideways"}, "decision is forward"),
            ({"decision": "answer"}, "exactly one of"),
            ({"decision": "forward", "by": "cron"}, "by is one of api, tui"),
        ]
        for body, reason in refusals:
            status, answer = await decide(http, proxy, held["id"], body)
            assert (status, answer["error"]) == (400, "bad_request"), (body, answer)
            assert reason in answer["message"], (body, answer)
        assert "tools/call" not in [h.method for h in upstream.heads]  # nothing was sent
        edited = {**shown, "params": {**shown["params"], "arguments": {"n": 2}}}
        assert (await decide(http, proxy, held["id"], {"decision": "forward", "message": edited}))[0] == 200
        status, _, answer = await bounded_result(calling)
        async with http.get(f"{proxy.admin_url}/api/chains?limit=50") as resp:
            chains_text = await resp.text()
    assert status == 200
    assert answer["result"]["content"][0]["text"] == "echoed"
    sent = json.loads(upstream.heads[-1].body)
    assert sent["params"] == {"name": "echo", "arguments": {"n": 2}, "requestState": STATE}
    assert STATE not in chains_text


TOKEN = "sk-live-PARTIAL-0123456789"
"""A client's bearer token, which its call's argument also carries inside a longer string."""

NOTE = f"configure with {TOKEN} please"


@contextlib.asynccontextmanager
async def held_token_call() -> AsyncIterator[tuple[Commanded, aiohttp.ClientSession, RecordingUpstream, Any]]:
    """A default `mcp-proxy` (no capture, nobody watching) holding a call whose argument echoes the
    client's bearer token: the proxy, an admin session, the upstream and the call's future."""
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"note": NOTE, "n": 1}},
    }
    async with (
        recording_upstream("legacy") as upstream,
        own_proxy(upstream.url("/mcp"), "--intercept", "tool:echo dir:client") as proxy,
        client_session() as mcp,
        proxy.http() as http,
    ):
        url = proxy.endpoint()
        opening = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}
        _, session, _ = await post(mcp, url, opening, token=TOKEN)
        yield proxy, http, upstream, spawn(post(mcp, url, call, session, TOKEN), name="held-call")


async def test_a_held_message_masks_the_clients_token_where_it_echoes_it_with_no_capture_running() -> None:
    async with held_token_call() as (proxy, http, _upstream, calling):
        held = await next_held(http, proxy)
        async with http.get(f"{proxy.admin_url}/api/intercepts") as resp:
            listing = await resp.text()
        assert (await decide(http, proxy, held["id"], {"decision": "forward"}))[0] == 200
        await bounded_result(calling)

    assert TOKEN not in listing
    note = held["message"]["params"]["arguments"]["note"]
    assert re.fullmatch(r"configure with <redacted len=26 hmac:[0-9a-f]{8}> please", note), note


async def test_an_edit_leaving_a_string_as_shown_sends_the_token_echoed_inside_it_not_its_stand_in() -> None:
    async with held_token_call() as (proxy, http, upstream, calling):
        held = await next_held(http, proxy)
        shown = held["message"]
        arguments = shown["params"]["arguments"]
        changed = {
            **shown,
            "params": {**shown["params"], "arguments": {**arguments, "note": arguments["note"] + "!"}},
        }
        refused = await decide(http, proxy, held["id"], {"decision": "forward", "message": changed})
        edited = {**shown, "params": {**shown["params"], "arguments": {**arguments, "n": 2}}}
        forwarded = await decide(http, proxy, held["id"], {"decision": "forward", "message": edited})
        status, _, _ = await bounded_result(calling)

    assert refused[0] == 400
    assert refused[1]["message"].startswith(
        "not sent: params.arguments.note holds a redacted stand-in inside"
    )
    assert (forwarded[0], status) == (200, 200)
    sent = json.loads(upstream.heads[-1].body)
    assert sent["params"]["arguments"] == {"note": NOTE, "n": 2}


BODY_SECRET = "VICTIM-BODYSECRET-424242"


async def test_a_secret_goes_back_only_into_its_own_call_and_is_masked_where_the_answer_echoes_it() -> None:
    # The client's api_token is masked (--redact-body-keys); `dump` answers its arguments as text.
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    flags = ("--redact-body-keys", "api_token", "--intercept", "dir:client method:tools/call")
    async with (
        recording_upstream("legacy") as upstream,
        own_proxy(upstream.url("/mcp"), *flags) as proxy,
        client_session() as mcp,
        proxy.http() as http,
    ):
        url = proxy.endpoint()
        _, session, _ = await post(
            mcp, url, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}
        )
        store = {"name": "store", "arguments": {"api_token": BODY_SECRET}}
        storing = spawn(
            post(mcp, url, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": store}, session),
            name="store",
        )
        held = await next_held(http, proxy)
        shown = held["message"]
        assert shown["params"]["arguments"]["api_token"].startswith("<redacted len=24 hmac:")
        renamed = {**shown, "params": {**shown["params"], "name": "dump"}}  # a tool that echoes them
        status, answer = await decide(http, proxy, held["id"], {"decision": "forward", "message": renamed})
        assert (status, answer["error"]) == (400, "bad_request"), answer
        assert (
            "params.arguments.api_token holds a redacted stand-in and the edit changes params.name "
            '("store" -> "dump")'
        ) in answer["message"]
        assert "tools/call" not in [h.method for h in upstream.heads]  # nothing was sent
        assert (await decide(http, proxy, held["id"], {"decision": "forward"}))[0] == 200
        assert (await bounded_result(storing))[0] == 200

        dump = {"name": "dump", "arguments": {"api_token": BODY_SECRET, "n": 1}}
        dumping = spawn(
            post(mcp, url, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": dump}, session),
            name="dump",
        )
        held = await next_held(http, proxy, held["id"])
        edited = json.loads(json.dumps(held["message"]))
        edited["params"]["arguments"]["n"] = 2
        assert (await decide(http, proxy, held["id"], {"decision": "forward", "message": edited}))[0] == 200
        status, _, answer = await bounded_result(dumping)
        async with http.get(f"{proxy.admin_url}/api/chains?limit=50") as resp:
            chains = await resp.json()
        shown_chains = []
        for chain in chains:
            async with http.get(f"{proxy.admin_url}/api/chains/{chain['id']}") as resp:
                shown_chains.append(await resp.text())
    assert status == 200
    assert json.loads(answer["result"]["content"][0]["text"]) == {"api_token": BODY_SECRET, "n": 2}
    assert json.loads(upstream.heads[-1].body)["params"]["arguments"] == {"api_token": BODY_SECRET, "n": 2}
    assert '\\"n\\": 2' in "".join(shown_chains)  # the echo is in the chain ...
    assert BODY_SECRET not in "".join(shown_chains)  # ... with the secret masked


async def bounded_result(future: Awaitable[Any]) -> Any:
    async with asyncio.timeout(30):
        return await future


async def test_rules_come_and_go_through_the_admin_api_and_a_deleted_rule_lets_its_messages_go(
    legacy_server: PeerServer, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(legacy_server)

    async def desk(http: aiohttp.ClientSession) -> None:
        api = f"{proxy.admin_url}/api/intercepts"
        async with http.post(api, json={"rule": "tool:echo", "timeout": "45s"}) as resp:
            assert resp.status == 201, await resp.text()
            added = await resp.json()
            assert added["timeout_s"] == 45.0
        async with http.post(api, json={"rule": "tool:echo => drop"}) as resp:
            assert resp.status == 400
            assert "has no action" in (await resp.json())["message"]
        run = spawn(client_run(proxy, "python-legacy", ["echo"]), name="held-client")
        await next_held(http, proxy)
        async with http.delete(f"{api}/{added['id']}") as resp:
            assert await resp.json() == {"removed": 1, "released": 1}
        async with http.delete(f"{api}/{added['id']}") as resp:
            assert resp.status == 404
        done = await bounded_result(run)
        assert done.lines["echo"]["result"]["content"] == ["hello"], done.lines

    async with proxy.http() as http:
        await desk(http)
    notes = await chain_notes(proxy)
    assert any("forwarded unchanged by rule_deleted" in n for n in notes), notes


async def test_the_last_intercept_rule_deleted_by_id_takes_the_gate_off_the_traffic() -> None:
    # In-process on purpose: whether the traffic consults the gate is the proxy's own state; a user
    # sees the same answers either way (the test above shows those through the command), only the
    # cost per message differs.
    upstream = f"http://127.0.0.1:{dead_port()}/mcp"
    async with (
        running_proxy(upstream, admin_enabled=True, admin="127.0.0.1:0") as proxy,
        client_session() as http,
    ):
        api = f"{proxy.admin_url}/api/intercepts"
        assert proxy.relays.gate is None
        async with http.post(api, json={"rule": "tool:echo"}) as resp:
            assert resp.status == 201, await resp.text()
        assert proxy.relays.gate is not None
        async with http.delete(api + "/i1") as resp:
            assert await resp.json() == {"removed": 1, "released": 0}
        assert proxy.relays.gate is None  # no rule of either kind: the traffic no longer asks


async def test_the_mcp_proxy_command_takes_intercept_flags_and_shows_them_in_print_config() -> None:
    argv = (
        "--upstream",
        "http://127.0.0.1:9/mcp",
        "--intercept",
        "tool:a timeout=5s",
        "--intercept",
        "dir:server",
    )
    done = await asyncio.to_thread(run_mcp_proxy, "--print-config", *argv)
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("intercepts")]
    assert "tool:a timeout=5s" in line, line
    assert "dir:server" in line, line
    assert "--intercept" in line, line
    bad = await asyncio.to_thread(
        run_mcp_proxy, "--upstream", "http://127.0.0.1:9/mcp", "--intercept", "x => y"
    )
    assert bad.returncode == 2
    assert "intercepts (flag --intercept): intercept rule 'x => y'" in bad.stderr


async def test_an_empty_intercept_rule_is_refused_as_a_flag_and_in_toml(tmp_path: Any) -> None:
    # An empty rule is a slip (an unset shell variable, say), not "no rule": it is refused naming it.
    flag = await asyncio.to_thread(run_mcp_proxy, "--upstream", "http://127.0.0.1:9/mcp", "--intercept", "")
    assert flag.returncode == 2
    assert "intercepts (flag --intercept): an intercept rule is empty" in flag.stderr
    config = tmp_path / "proxy.toml"
    config.write_text('upstream = "http://127.0.0.1:9/mcp"\nintercepts = ["tool:a", "  "]\n')
    toml = await asyncio.to_thread(run_mcp_proxy, "--config", str(config), "--print-config")
    assert toml.returncode == 2
    assert "an intercept rule is empty" in toml.stderr
    assert "proxy.toml" in toml.stderr


async def test_a_rules_text_as_the_api_shows_it_is_taken_back_as_the_same_rule(
    legacy_server: PeerServer, fleet: ProxyFleet
) -> None:
    # A script saves the rules it reads and restores them later: the text must parse back.
    proxy = await fleet.at(legacy_server)
    written = (
        ("/api/intercepts", "tool:echo timeout=1h", "tool:echo timeout=3600000ms"),
        ("/api/faults", "tool:echo => delay=10m p=0.00001", "tool:echo => delay=600000ms p=0.00001"),
    )
    for path, rule, shown in written:
        status, added = await proxy.call("POST", path, {"rule": rule})
        assert status == 201, added
        listed = added if path == "/api/intercepts" else added["rules"][0]
        assert listed["rule"] == shown, listed
        assert (await proxy.call("DELETE", path))[0] == 200
        status, again = await proxy.call("POST", path, {"rule": listed["rule"]})
        assert status == 201, again
        relisted = again if path == "/api/intercepts" else again["rules"][0]
        assert relisted["rule"] == shown, relisted

    def logged() -> list[str]:
        added = ("intercept_rule_added", "fault_rule_added")
        return [e["rule"].partition(": ")[2] for e in proxy.lines() if e.get("event") in added]

    await until(lambda: len(logged()) >= 4, what="the four rule lines logged")  # read as they come
    assert logged() == [shown for _, _, shown in written for _ in (1, 2)]


async def test_a_decision_with_a_key_it_does_not_take_is_refused_and_the_call_stays_held(
    legacy_server: PeerServer, fleet: ProxyFleet
) -> None:
    # A misspelled `message` ignored would send the call unedited behind a 200.
    proxy = await fleet.at(legacy_server)
    await proxy.add_intercept("tool:echo dir:client")

    async def desk(http: aiohttp.ClientSession) -> None:
        held = await next_held(http, proxy)
        edited = json.loads(json.dumps(held["message"]))
        edited["params"]["arguments"]["text"] = "edited at the desk"
        refusals = [
            ({"decision": "forward", "mesage": edited}, "'mesage' (did you mean message?)"),
            ({"decision": "forward", "result": {}}, "decision forward takes no key 'result'"),
            ({"decision": "drop", "result": {}}, "decision drop takes no key 'result'"),
        ]
        for body, reason in refusals:
            status, answer = await decide(http, proxy, held["id"], body)
            assert (status, answer["error"]) == (400, "bad_request"), (body, answer)
            assert reason in answer["message"], (body, answer)
        for path, body, reason in (
            ("/api/intercepts", {"rule": "tool:x", "timout": "5s"}, "'timout' (did you mean timeout?)"),
            ("/api/faults", {"rule": "tool:x => drop", "count": 1}, "takes no key 'count'"),
        ):
            async with http.post(proxy.admin_url + path, json=body) as resp:
                assert resp.status == 400, await resp.text()
                assert reason in (await resp.json())["message"]
        async with http.get(f"{proxy.admin_url}/api/intercepts") as resp:
            listing = await resp.json()
        assert [h["id"] for h in listing["held"]] == [held["id"]]  # still held, nothing decided
        assert [r["match"] for r in listing["rules"]] == ["tool:echo dir:client"]
        assert (await decide(http, proxy, held["id"], {"decision": "forward", "message": edited}))[0] == 200

    run = await with_desk(proxy, client_run(proxy, "python-legacy", ["echo"]), desk)
    assert run.lines["echo"]["result"]["content"] == ["edited at the desk"], run.lines
    assert any("forwarded edited by api" in n for n in await chain_notes(proxy))
    assert await proxy.counted('mcp_proxy_intercepts_released_total{decision="forward"}') == 0
    assert (await proxy.call("GET", "/api/faults"))[1]["rules"] == []


async def test_a_rules_timeout_is_one_number_format_and_a_doubled_wait_parameter_is_refused(
    legacy_server: PeerServer, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(legacy_server)
    api = f"{proxy.admin_url}/api/intercepts"
    async with proxy.http() as http:
        async with http.post(api, json={"rule": "tool:echo"}) as resp:
            added = await resp.read()
        async with http.get(api) as resp:
            listed = await resp.read()
        async with http.get(api + "/wait?timeout=0&timeout=1") as resp:
            doubled = (resp.status, await resp.json())
    assert b'"timeout_s":60.0,' in added, added
    assert b'"timeout_s":60.0,' in listed, listed
    assert doubled == (
        400,
        {"error": "bad_request", "message": "parameter 'timeout' given more than once; give each once"},
    )
