"""Fault injection on pass-through, with the official Python SDK on both sides, in both eras.

The proxy is the `mcp-proxy` command with default settings (tests.e2e.commanded: one per upstream,
shared by the module's tests). Each action is checked by what the client gets, and by the marks a
fault leaves: the chain's note (`/api/chains`), the round-trip JSON log line's `fault` field, the
/metrics counter. Rules come from the admin API (with its token) or, as a user gives them at start,
`--fault` flags.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.conftest import running_proxy
from tests.e2e.commanded import Commanded, ProxyFleet, own_proxy
from tests.e2e.gated_runs import ERAS, client_run
from tests.e2e.legacy_raw import HEADERS, initialize, session_headers
from tests.e2e.recording_upstream import SESSION, recording_upstream
from tests.peers.clients import ClientKind, run_client, run_plan
from tests.peers.runner import PeerServer
from tests.sidecar import ProxyProcess, admin_json, clean_env, run_mcp_proxy, settings_env, start_refusal
from tests.transport.helpers import client_session, dead_port, wait_until

pytestmark = pytest.mark.asyncio


async def chains(proxy: Commanded) -> list[dict[str, Any]]:
    """The chains this test's traffic made (`GET /api/chains`)."""
    return await proxy.chains()


def call_chain(found: list[dict[str, Any]], name: str) -> dict[str, Any]:
    calls = [c for c in found if c.get("method") == "tools/call" and c.get("name") == name]
    assert calls, found
    return calls[-1]


async def answers(proxy: Commanded, chain: dict[str, Any]) -> list[tuple[str, str, Any, str | None]]:
    """The records of the answers to a chain's call, in order: (side, kind, body, note) each."""
    return [
        (m["side"], m["kind"], m["body"], m.get("note"))
        for m in await proxy.messages(chain["id"])
        if m["direction"] == "to_client" and m.get("jsonrpc_id") == chain["jsonrpc_id"]
    ]


async def upstream_seconds(proxy: Commanded) -> float:
    """The upstream latency /metrics has summed for tools/call so far, in seconds (any mode)."""
    text = await proxy.metrics()
    sums = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("mcp_proxy_upstream_latency_seconds_sum{") and 'method="tools/call"' in line
    ]
    return sum(sums)


def fault_lines(logs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [entry for entry in logs if entry.get("event") == "exchange" and entry.get("fault")]


@pytest.mark.parametrize(("client", "server"), ERAS)
async def test_an_error_fault_answers_the_call_without_the_server_and_says_so_everywhere(
    client: ClientKind, server: str, request: pytest.FixtureRequest, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(request.getfixturevalue(server))
    rule = "tool:echo => error=-32050:staging says no"
    await proxy.add_faults(rule)
    run = await client_run(proxy, client, ["echo", "add"])
    found = await chains(proxy)
    injected = await proxy.counted('mcp_proxy_faults_injected_total{action="error"}')
    logs = proxy.lines()
    assert run.lines["echo"]["error"]["code"] == -32050, run.lines
    assert run.lines["echo"]["error"]["message"] == "staging says no"
    assert "error" not in run.lines["add"], run.lines  # the rule picks echo only
    notes = call_chain(found, "echo")["notes"]
    assert any(
        n.startswith("fault injected by the proxy: error -32050 on the client's tools/call") for n in notes
    )
    assert not any("fault" in n for n in call_chain(found, "add").get("notes", []))
    (line,) = fault_lines(logs)
    assert line["fault"] == "error -32050"
    assert line["carried"] == "tools/call echo"
    assert injected == 1


@pytest.mark.parametrize(("client", "server"), ERAS)
async def test_a_dropped_request_gets_an_error_saying_the_proxy_dropped_it(
    client: ClientKind, server: str, request: pytest.FixtureRequest, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(request.getfixturevalue(server))
    await proxy.add_faults("method:tools/call tool:add => drop")
    run = await client_run(proxy, client, ["add"])
    found = await chains(proxy)
    error = run.lines["add"]["error"]
    assert error["code"] == -32000, run.lines
    assert "the proxy dropped this request" in error["message"]
    notes = call_chain(found, "add")["notes"]
    assert any("fault injected by the proxy: drop" in n for n in notes), notes


async def test_a_dropped_json_answer_says_the_server_got_the_request(
    modern_server: PeerServer, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(modern_server)
    # The server ran the call: the client must not read the error as "safe to send again".
    await proxy.add_faults("tool:echo dir:server => drop")
    run = await client_run(proxy, "python-2026", ["echo"])
    found = await chains(proxy)
    error = run.lines["echo"]["error"]
    assert error["code"] == -32000, run.lines
    assert "dropped the server's answer" in error["message"]
    assert "server received the request" in error["message"]
    assert "never saw" not in error["message"]
    notes = call_chain(found, "echo")["notes"]
    assert any("fault injected by the proxy: drop" in n for n in notes), notes
    # The server's answer (a JSON body here) stays on its leg; the client got the proxy's error.
    (server_leg, client_leg) = await answers(proxy, call_chain(found, "echo"))
    assert server_leg[:2] == ("upstream", "result"), server_leg
    assert client_leg[:2] == ("client", "error"), client_leg
    assert {k: client_leg[2]["error"][k] for k in ("code", "message")} == error, client_leg
    assert str(client_leg[3]).startswith("fault injected by the proxy: drop"), client_leg


async def test_a_clients_answer_to_a_servers_request_is_picked_by_the_method_it_answers(
    legacy_server: PeerServer, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(legacy_server)
    # The POST carrying the client's answer holds no method: it answers the server's elicitation/create.
    rule = "method:elicitation/create dir:client => delay=300ms"
    await proxy.add_faults(rule)
    run = await client_run(proxy, "python-legacy", ["ask_name"])
    logs = proxy.lines()
    assert run.lines["ask_name"]["result"]["content"] == ["Hello, octocat!"], run.lines
    (line,) = fault_lines(logs)
    assert line["fault"] == "delay 300 ms"
    assert line["carried"] == "result of elicitation/create (accept)"
    assert line["duration_ms"] >= 300


@pytest.mark.parametrize(("client", "server"), ERAS)
async def test_a_delay_holds_the_call_and_the_answer_is_unchanged(
    client: ClientKind, server: str, request: pytest.FixtureRequest, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(request.getfixturevalue(server))
    await proxy.add_faults("tool:echo dir:client => delay=400ms")
    before = await upstream_seconds(proxy)
    run = await client_run(proxy, client, ["echo"])
    found = await chains(proxy)
    logs = proxy.lines()
    assert "error" not in run.lines["echo"], run.lines
    chain = call_chain(found, "echo")
    assert chain["duration_ms"] >= 400, chain
    assert chain["held_ms"] == 400.0, chain  # the proxy's hold, told apart from the server's time
    assert chain["upstream_ms"] < 400.0, chain
    parts = chain["upstream_ms"] + chain["client_wait_ms"] + chain["held_ms"]
    assert parts == pytest.approx(chain["duration_ms"], abs=0.01), chain
    assert await upstream_seconds(proxy) - before < 0.4  # the hold is not the upstream's latency
    assert any("fault injected by the proxy: delay 400 ms" in n for n in chain["notes"])
    (line,) = fault_lines(logs)
    assert line["fault"] == "delay 400 ms"
    assert line["duration_ms"] >= 400


async def test_a_server_answer_replaced_by_an_error_reaches_the_client_as_that_error(
    legacy_server: PeerServer, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(legacy_server)
    # dir:server: the call reaches the server, its answer (an SSE event on this server) is replaced.
    await proxy.add_faults("tool:add dir:server => error=-32099")
    run = await client_run(proxy, "python-legacy", ["add"])
    found = await chains(proxy)
    assert run.lines["add"]["error"]["code"] == -32099, run.lines
    notes = call_chain(found, "add")["notes"]
    assert any("error -32099 on the server's answer to tools/call" in n for n in notes), notes
    # The server's answer (an SSE event here) stays on its leg, never shown as what the client got.
    chain = call_chain(found, "add")
    assert chain["status"] == "error", chain
    (server_leg, client_leg) = await answers(proxy, chain)
    assert server_leg[:2] == ("upstream", "result"), server_leg
    assert server_leg[2]["result"]["structuredContent"] == {"result": 5}, server_leg
    assert client_leg[:2] == ("client", "error"), client_leg
    assert client_leg[2]["error"]["code"] == -32099, client_leg
    assert str(client_leg[3]).startswith("fault injected by the proxy: error -32099"), client_leg
    # The HAR entry is the client's exchange: its SSE body carries the error, not the server's result.
    (entry,) = [e for e in await proxy.har_entries() if "-32099" in e["response"]["content"]["text"]]
    assert "structuredContent" not in entry["response"]["content"]["text"], entry["response"]


async def test_a_duplicated_server_event_reaches_the_client_twice(
    legacy_server: PeerServer, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(legacy_server)
    rule = "method:notifications/progress => duplicate count=1"
    await proxy.add_faults(rule)
    run = await client_run(proxy, "python-legacy", ["progress"])
    found = await chains(proxy)
    assert "error" not in run.lines["progress"], run.lines
    assert run.lines["progress"]["progress"] == [1.0, 1.0, 2.0, 3.0], run.lines  # the first one twice
    notes = call_chain(found, "slow_progress")["notes"]
    assert any(
        "duplicate on the server's notifications/progress (the event written twice)" in n for n in notes
    )


async def test_a_duplicated_request_reaches_the_server_twice_and_the_client_once(
    legacy_server: PeerServer, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(legacy_server)
    await proxy.add_faults("tool:echo dir:client => duplicate")
    run = await client_run(proxy, "python-legacy", ["echo"])
    found = await chains(proxy)
    assert "error" not in run.lines["echo"], run.lines
    notes = call_chain(found, "echo")["notes"]
    assert any("duplicate on the client's tools/call (sent upstream twice" in n for n in notes), notes


async def test_a_cut_stream_leaves_the_client_without_its_answer_and_the_chain_says_why(
    legacy_server: PeerServer, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(legacy_server)
    await proxy.add_faults("tool:slow_progress => cut_after=1")
    run = await client_run(proxy, "python-legacy", ["progress"])
    found = await chains(proxy)
    logs = proxy.lines()
    assert "result" not in run.lines["progress"], run.lines
    assert run.lines["progress"].get("progress", [1.0]) == [1.0]
    chain = call_chain(found, "slow_progress")
    assert any("fault injected by the proxy: cut after 1 event" in n for n in chain["notes"]), chain
    (line,) = fault_lines(logs)
    assert line["outcome"] == "cut_by_fault"


async def raw_call_bytes(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> bytes:
    """The body a raw legacy client reads for one `slow_progress` call (no progress token), to its end."""
    params = {"name": "slow_progress", "arguments": {"steps": 3}}
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
    async with http.post(url, json=call, headers=headers) as resp:
        assert resp.status == 200
        return await resp.read()


async def test_a_cut_after_the_final_answer_is_recorded_as_not_injected_and_the_answer_goes_out_whole(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    rule = "tool:slow_progress => cut_after=1"
    async with own_proxy(legacy_server.url, "--capture", str(capture)) as proxy, client_session() as http:
        url = proxy.endpoint()
        async with http.post(url, json=initialize(), headers=HEADERS) as resp:
            session = resp.headers["Mcp-Session-Id"]
            await resp.read()
        headers = session_headers(session)
        unfaulted = await raw_call_bytes(http, url, headers)
        await proxy.add_faults(rule)
        faulted = await raw_call_bytes(http, url, headers)
        run = await client_run(proxy, "python-legacy", ["slow_progress"])
        found = await chains(proxy)
        logs = fault_lines(proxy.lines())
        injected = await proxy.counted('mcp_proxy_faults_injected_total{action="cut_after"}')
        not_injected = await proxy.counted('mcp_proxy_faults_injected_total{action="not_injected"}')
    assert faulted == unfaulted  # the one event, the answer, and the stream's proper end
    assert b"done 3" in faulted
    assert run.lines["slow_progress"]["result"]["content"] == ["done 3"], run.lines
    calls = [c for c in found if c.get("name") == "slow_progress"]
    assert [c["status"] for c in calls] == ["ok", "ok", "ok"], calls
    for chain in calls[1:]:  # the two calls made with the rule in force
        assert not any("fault injected" in n for n in chain["notes"]), chain["notes"]
        assert any(
            n.startswith("fault not injected") and "a cut after the answer changes nothing" in n
            for n in chain["notes"]
        ), chain["notes"]
    assert [(line["fault"], line["outcome"], line["trouble"]) for line in logs] == [
        ("cut after 1 event not injected", None, None),
        ("cut after 1 event not injected", None, None),
    ], logs
    assert (injected, not_injected) == (0.0, 2.0)
    lines = [json.loads(line) for line in capture.read_text().splitlines()]
    faults = [line for line in lines if line.get("kind") == "fault"]
    assert [line["applied"] for line in faults] == [False, False], faults
    assert not [line for line in lines if line.get("outcome") == "cut_by_fault"]


async def test_a_fault_not_injected_leaves_its_count_for_one_that_is_and_every_view_agrees(
    legacy_server: PeerServer, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(legacy_server)
    await proxy.add_faults("tool:slow_progress => cut_after=1 count=1")
    # Without a progress token the stream carries only the answer: the cut would change nothing.
    quiet = await client_run(proxy, "python-legacy", ["slow_progress"])
    status, listed = await proxy.call("GET", "/api/faults")
    assert status == 200, listed
    assert [rule["injected"] for rule in listed["rules"]] == [0], listed
    cut = await client_run(proxy, "python-legacy", ["progress"])
    status, after = await proxy.call("GET", "/api/faults")
    assert status == 200, after
    assert quiet.lines["slow_progress"]["result"]["content"] == ["done 3"], quiet.lines
    assert "result" not in cut.lines["progress"], cut.lines  # the count was left for this call
    assert [rule["injected"] for rule in after["rules"]] == [1], after
    assert await proxy.counted('mcp_proxy_faults_injected_total{action="cut_after"}') == 1.0
    assert await proxy.counted('mcp_proxy_faults_injected_total{action="not_injected"}') == 1.0


async def test_a_cut_rule_for_a_json_answer_is_recorded_as_not_injected(
    modern_server: PeerServer, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(modern_server)
    await proxy.add_faults("tool:echo => cut_after=1")
    run = await client_run(proxy, "python-2026", ["echo"])
    found = await chains(proxy)
    if "error" in run.lines["echo"]:  # the server streamed its answer: the cut did happen
        pytest.fail(f"expected a JSON answer from this server: {run.lines}")
    notes = call_chain(found, "echo")["notes"]
    assert any(n.startswith("fault not injected") and "JSON body" in n for n in notes), notes


async def test_a_corrupted_request_state_is_refused_by_the_server_that_sealed_it(
    modern_server: PeerServer, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(modern_server)
    await proxy.add_faults("tool:state_only round:>1 => corrupt_state")
    run = await client_run(proxy, "python-2026", ["state_only"])
    found = await chains(proxy)
    assert run.lines["state_only"].get("error", {}).get("code") == -32602, run.lines
    noted = [n for c in found for n in c.get("notes", []) if "corrupt state" in n]
    assert noted, found
    assert "requestState" in noted[0], noted


async def test_a_fixed_seed_injects_the_faults_its_draws_say(legacy_server: PeerServer) -> None:
    seed, calls = 7, 8
    draws = random.Random(seed)
    wanted = [draws.random() < 0.5 for _ in range(calls)]
    assert any(wanted)
    assert not all(wanted)
    plan = [{"id": f"c{i}", "op": "call", "tool": "echo", "arguments": {"text": "hi"}} for i in range(calls)]
    # Its own proxy: the seed is a setting, and the draws start from it when the proxy starts.
    args = ("--fault", "tool:echo dir:client => error=-32001 p=0.5", "--fault-seed", str(seed))
    async with own_proxy(legacy_server.url, *args) as proxy:
        run = await asyncio.to_thread(run_plan, "python-legacy", proxy.endpoint(), plan, timeout=40.0)
    assert ["error" in run.lines[f"c{i}"] for i in range(calls)] == wanted, run.lines


async def test_rules_come_and_go_through_the_admin_api(legacy_server: PeerServer) -> None:
    # Its own proxy: the first rule a proxy is given is f1.
    async with own_proxy(legacy_server.url) as proxy, proxy.http() as http:
        api = proxy.admin_url + "/api/faults"
        async with http.post(api, json={"rule": "tool:echo => error=-32042"}) as resp:
            assert resp.status == 201, await resp.text()
            (added,) = (await resp.json())["rules"]
        assert added["id"] == "f1"
        assert added["action"] == "error=-32042"
        run = await client_run(proxy, "python-legacy", ["echo"])
        assert run.lines["echo"]["error"]["code"] == -32042
        async with http.get(api) as resp:
            listing = await resp.json()
        assert listing["rules"][0]["injected"] == 1
        async with http.post(api, json={"rule": "tool:echo => cut_after=two"}) as resp:
            assert resp.status == 400
            assert "cut_after= is a number of SSE events" in (await resp.json())["message"]
        async with http.post(api, json={"rule": "dir:server => corrupt_state"}) as resp:
            assert resp.status == 400
            assert "picks the client's request" in (await resp.json())["message"]
        async with http.delete(api + "/f9") as resp:
            assert resp.status == 404
        async with http.delete(api + "/f1") as resp:
            assert resp.status == 200
        run = await client_run(proxy, "python-legacy", ["echo"])
        assert "error" not in run.lines["echo"], run.lines


async def test_the_last_fault_rule_deleted_by_id_takes_the_gate_off_the_traffic() -> None:
    # In-process on purpose: whether the traffic consults the gate is the proxy's own state; a user
    # sees the same answers either way (the test above shows those through the command), only the
    # cost per message differs.
    upstream = f"http://127.0.0.1:{dead_port()}/mcp"
    async with (
        running_proxy(upstream, admin_enabled=True, admin="127.0.0.1:0") as proxy,
        client_session() as http,
    ):
        api = f"{proxy.admin_url}/api/faults"
        assert proxy.relays.gate is None
        async with http.post(api, json={"rule": "tool:echo => error=-32042"}) as resp:
            assert resp.status == 201, await resp.text()
        assert proxy.relays.gate is not None
        async with http.delete(api + "/f1") as resp:
            assert resp.status == 200
        assert proxy.relays.gate is None  # no rule in force: the traffic no longer consults the gate


async def test_the_mcp_proxy_command_takes_rules_as_repeated_flags_and_marks_each_fault(
    legacy_server: PeerServer,
) -> None:
    env = clean_env(**settings_env(upstream=legacy_server.url))
    args = (
        "--fault",
        "tool:echo => error=-32050:no, not now",
        "--fault",
        "tool:add dir:client => delay=50ms",
    )
    with ProxyProcess(env, *args) as proxy:
        run = await asyncio.to_thread(
            run_client, "python-legacy", proxy.endpoint(), ["echo", "add"], timeout=40.0
        )
        lines = await until_logged(proxy, 2)
        listing = await admin_json(proxy.admin + "/api/faults")
    assert run.lines["echo"]["error"] == {"code": -32050, "message": "no, not now"}, run.lines
    assert "error" not in run.lines["add"], run.lines
    assert sorted(line["fault"] for line in lines) == ["delay 50 ms", "error -32050"]
    assert [rule["rule"] for rule in listing["rules"]] == [
        "tool:echo => error=-32050:no, not now",
        "tool:add dir:client => delay=50ms",
    ]
    added = [e for e in proxy.events() if e.get("event") == "fault_rule_added"]
    assert len(added) == 2  # a warning each at start: nobody runs faults unawares


async def until_logged(proxy: ProxyProcess, count: int) -> list[dict[str, Any]]:
    def faulted() -> list[dict[str, Any]]:
        return [e for e in proxy.events() if e.get("event") == "exchange" and e.get("fault")]

    await wait_until(lambda: len(faulted()) >= count, what=f"{count} exchange lines with a fault")
    return faulted()


async def test_a_rule_that_cannot_work_stops_the_command_with_exit_2_naming_the_flag() -> None:
    argv = ("--upstream", "http://127.0.0.1:9/mcp", "--fault", "method:tools/call => cut_after=x")
    done = await asyncio.to_thread(run_mcp_proxy, *argv)
    assert done.returncode == 2
    assert start_refusal(done) == (
        "mcp-proxy: faults (flag --fault): fault rule 'method:tools/call => cut_after=x': "
        "action: cut_after= is a number of SSE events (0 or more), got 'x'"
    )


NEVER_ACTS = "method:notifications/progress => error=-32099"
NEVER_ACTS_WHY = "error answers a client's request, or replaces a server's answer: "


async def test_a_rule_whose_action_cannot_act_on_what_it_picks_is_refused_by_flag_toml_and_admin_api(
    legacy_server: PeerServer, fleet: ProxyFleet, tmp_path: Path
) -> None:
    flag = await asyncio.to_thread(
        run_mcp_proxy, "--upstream", "http://127.0.0.1:9/mcp", "--fault", NEVER_ACTS, "--print-config"
    )
    assert flag.returncode == 2
    assert start_refusal(flag) == (
        f"mcp-proxy: faults (flag --fault): fault rule {NEVER_ACTS!r}: {NEVER_ACTS_WHY}"
        "method:notifications/progress picks only notifications"
    )
    config = tmp_path / "proxy.toml"
    config.write_text(
        'upstream = "http://127.0.0.1:9/mcp"\n'
        'faults = ["method:elicitation/create dir:client => error=-32001:nope"]\n'
    )
    toml = await asyncio.to_thread(run_mcp_proxy, "--config", str(config), "--print-config")
    assert toml.returncode == 2
    assert "proxy.toml" in toml.stderr
    assert "picks only the client's answer to a server's request" in toml.stderr
    proxy = await fleet.at(legacy_server)
    status, answer = await proxy.call(
        "POST",
        "/api/faults",
        {"rules": ["tool:echo => delay=1ms", "method:notifications/initialized => corrupt_state"]},
    )
    assert status == 400, answer
    assert "alters the requestState a client's retry carries" in json.dumps(answer), answer
    status, listed = await proxy.call("GET", "/api/faults")
    assert listed["rules"] == []  # all or none


async def test_a_file_with_two_bad_settings_names_each_of_them(tmp_path: Path) -> None:
    config = tmp_path / "proxy.toml"
    config.write_text(
        'upstream = "http://127.0.0.1:9/mcp"\nfaults = ["tool:echo => delay=1h"]\nfault_seed = "abc"\n'
    )
    done = await asyncio.to_thread(run_mcp_proxy, "--config", str(config), "--print-config")
    assert done.returncode == 2
    said = start_refusal(done).removeprefix("mcp-proxy: ").split("; ")
    assert said == [
        f"faults (file {config}): fault rule 'tool:echo => delay=1h': action: delay= is a duration such "
        "as 200ms, 1.5s or 1m, got '1h'",
        f"fault_seed (file {config}): input should be a valid integer, unable to parse string as an "
        "integer, got 'abc'",
    ], done.stderr


async def test_an_empty_fault_rule_is_refused_as_a_flag_and_in_toml(tmp_path: Any) -> None:
    # An empty rule is a slip (an unset shell variable, say), not "no rule": it is refused naming it.
    flag = await asyncio.to_thread(run_mcp_proxy, "--upstream", "http://127.0.0.1:9/mcp", "--fault", "")
    assert flag.returncode == 2
    assert "faults (flag --fault): a fault rule is empty" in flag.stderr
    suggested = flag.stderr.split("such as '", 1)[1].split("'", 1)[0]  # the rule it suggests is one
    taken = await asyncio.to_thread(
        run_mcp_proxy, "--upstream", "http://127.0.0.1:9/mcp", "--fault", suggested, "--print-config"
    )
    assert taken.returncode == 0, taken.stderr
    config = tmp_path / "proxy.toml"
    config.write_text('upstream = "http://127.0.0.1:9/mcp"\nfaults = ["tool:a => drop", "  "]\n')
    toml = await asyncio.to_thread(run_mcp_proxy, "--config", str(config), "--print-config")
    assert toml.returncode == 2
    assert "a fault rule is empty" in toml.stderr
    assert "proxy.toml" in toml.stderr


@pytest.mark.parametrize(
    ("client", "server", "mode"),
    [
        pytest.param("python-legacy", "modern_server", "legacy_to_mrtr", id="legacy-client-modern-server"),
        pytest.param("python-2026", "legacy_server", "mrtr_to_legacy", id="modern-client-legacy-server"),
    ],
)
async def test_on_a_bridge_the_clients_message_is_delayed_or_answered_before_the_bridge_takes_it(
    client: ClientKind, server: str, mode: str, request: pytest.FixtureRequest, fleet: ProxyFleet
) -> None:
    proxy = await fleet.at(request.getfixturevalue(server))
    rules = [
        "tool:echo => error=-32051:bridged no",
        f"tool:add mode:{mode} => delay=300ms",
        "tool:ask_name => duplicate",  # not what a bridge takes: recorded as not injected
        "tool:fail => drop",
    ]
    await proxy.add_faults(*rules)
    run = await client_run(proxy, client, ["echo", "add", "ask_name", "fail"])
    found = await chains(proxy)
    logs = proxy.lines()
    timed = await proxy.counted(
        f'mcp_proxy_upstream_latency_seconds_count{{method="tools/call",mode="{mode}"}}'
    )
    assert timed == 2.0  # add and ask_name went upstream; echo and fail the proxy answered
    for answered in (call_chain(found, "echo"), call_chain(found, "fail")):
        assert answered["upstream_ms"] is None, answered
    assert run.lines["echo"]["error"]["code"] == -32051, run.lines
    assert "error" not in run.lines["add"], run.lines
    assert run.lines["ask_name"]["result"]["content"] == ["Hello, octocat!"], run.lines
    add = call_chain(found, "add")
    assert add["mode"] == mode
    assert add["duration_ms"] >= 300, add
    assert any("fault injected by the proxy: delay 300 ms" in n for n in add["notes"]), add
    echo = call_chain(found, "echo")
    assert any("fault injected by the proxy: error -32051" in n for n in echo["notes"]), echo
    ((side, kind, _, note),) = await answers(proxy, echo)  # marked as the proxy's, as pass-through's are
    assert (side, kind) == ("client", "error"), note
    assert str(note).startswith("fault injected by the proxy:"), note
    ask = [n for c in found if c.get("name") == "ask_name" for n in c.get("notes", [])]
    assert any(n.startswith("fault not injected") and "on a bridged exchange" in n for n in ask), ask
    faults = sorted(str(line["fault"]) for line in fault_lines(logs))
    assert {"delay 300 ms", "drop", "duplicate not injected", "error -32051"} == set(faults), faults


LEGACY_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": "2025-11-25",
}
BODY_SECRET = "victim-bodysecret-424242"


async def test_session_and_body_rules_match_what_the_chains_show_so_hit_counts_reveal_no_secret() -> None:
    # The reviewer's oracle: harmless rules whose counts would say whether a guessed prefix is right.
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    call = {"name": "store", "arguments": {"api_token": BODY_SECRET}}
    async with (
        recording_upstream("legacy") as upstream,
        own_proxy(upstream.url("/mcp"), "--redact-body-keys", "api_token") as proxy,
        client_session() as mcp,
    ):
        url = proxy.endpoint()
        opened = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}
        async with mcp.post(url, json=opened, headers=LEGACY_HEADERS) as resp:
            assert resp.headers["Mcp-Session-Id"] == SESSION
        (chain,) = await chains(proxy)
        shown = chain["session"]  # <redacted len=14 hmac:xxxxxxxx>
        assert shown.startswith("<redacted len=14 hmac:"), shown
        rules = [  # the first that picks a message is the one that counts it
            "body:*victim-b* => delay=1ms",  # a guess at the masked argument
            "body:*api_token*redacted* => delay=1ms",  # the argument as the chains show it: the call
            "session:fake-sess* => delay=1ms",  # a guess at the id in clear
            f"session:{shown[-9:-1]} => delay=1ms",  # the hmac the chains show: the answer
        ]
        await proxy.add_faults(*rules)
        headers = {**LEGACY_HEADERS, "Mcp-Session-Id": SESSION}
        message = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}
        async with mcp.post(url, json=message, headers=headers) as resp:
            assert resp.status == 200
        status, listing = await proxy.call("GET", "/api/faults")
    assert status == 200
    injected = {rule["rule"]: rule["injected"] for rule in listing["rules"]}
    assert [injected[rule] for rule in rules] == [0, 1, 0, 1], injected
