"""Exports of real traffic: the `mcp-proxy` command records SDK peers, then exports the capture as HAR.

A legacy SDK client calls a 2026-07-28 SDK server through the proxy (the legacy_to_mrtr bridge: the
server's `input_required` becomes an `elicitation/create` on the client's SSE stream), and a
2026-07-28 client calls it straight through; both send a bearer token. The capture is exported with
`mcp-proxy export --har`, validated by npm's `har-validator`, read back by PyPI's `haralyzer` (each in
its own environment, `tests/peers/envs.py`), and the entries are checked: methods, statuses, the SSE
events, the `_mcp` field of both sides of the bridge, the token shown as a stand-in and never in
clear. The running proxy's `/api/export.har` passes the same validator, behind the admin token. A
copy of the capture with a corrupt line still exports, naming the line in the log's comment, on
stderr and in the exit status. A legacy client's GET stream and its session's DELETE, relayed or
served by the bridge, are entries of their own method, URL and headers in the running proxy's HAR,
as in the capture's. A 2026-07-28 client bridged to a legacy server that restarted (forgetting the
proxy's session) leaves upstream legs whose entries carry the server's real statuses, in the capture's
HAR and the live one alike: 200s, the session id the server minted as a stand-in, and its 404.
SDK clients of both eras, one over HTTP+SSE, give the live HAR and the capture's the same timings
(a stream's wait ends at its response head), sizes and `_mcp` fields, entry by entry. A 2026-07-28
client bridged to a legacy server, in two runs appending to one capture, leaves its session's GET
streams and DELETEs as entries of those methods, each entry naming its run.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.peers.envs import har_python, har_validator, node_binary
from tests.peers.fixtures import PeerFactory
from tests.peers.runner import REPO_ROOT, PeerServer
from tests.peers.scenarios import CallbackLog, client_for
from tests.sidecar import ProxyProcess, admin_get, admin_json, clean_env, run_mcp_proxy, settings_env

pytestmark = pytest.mark.e2e

SECRET = "export-test-bearer-7f3a91c2"
QUERY_SECRET = "q-" + "in-the-query-77"
TOKEN = "export-admin-token-5521"
RUN_SECONDS = 30


def validate(path: Path) -> dict[str, Any]:
    """har-validator's verdict on a HAR file."""
    done = subprocess.run(
        [node_binary(), str(har_validator()), str(path)],
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
        check=True,
    )
    verdict: dict[str, Any] = json.loads(done.stdout)
    return verdict


def read_back(path: Path) -> dict[str, Any]:
    """What haralyzer reads in a HAR file."""
    done = subprocess.run(
        [str(har_python()), str(REPO_ROOT / "tests" / "peers" / "har_read.py"), str(path)],
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
        check=True,
    )
    read: dict[str, Any] = json.loads(done.stdout)
    return read


async def record(upstream: str, capture: Path) -> bytes:
    """Traffic of both eras through the real `mcp-proxy`; returns its `/api/export.har` answer."""
    env = clean_env(**settings_env(upstream=upstream, capture=capture, admin_token=TOKEN, drain_grace=5))
    with ProxyProcess(env) as proxy:
        auth = {"Authorization": f"Bearer {SECRET}"}
        log = CallbackLog()
        async with client_for(proxy.endpoint(), "legacy", headers=auth, log=log) as legacy:
            asked = await legacy.call_tool("ask_name", {})
        assert not asked.is_error
        assert any(c.startswith("elicitation:") for c in log.callbacks)
        # A credential in the query too: the HAR's url keeps its stand-in percent-encoded, a valid URI.
        url = f"{proxy.endpoint()}?token={QUERY_SECRET}"
        async with client_for(url, "2026-07-28", headers=auth) as modern:
            added = await modern.call_tool("add", {"a": 2, "b": 3})
        assert not added.is_error
        refused, _, _ = await admin_get(proxy.admin + "/api/export.har")
        assert refused == 401
        status, headers, body = await admin_get(proxy.admin + "/api/export.har?method=tools/call", TOKEN)
        assert status == 200
        assert headers["Content-Type"].startswith("application/json")
        proxy.stop()
    return body


def client_calls(read: dict[str, Any], tool: str) -> list[dict[str, Any]]:
    return [
        e
        for e in read["entries"]
        if e["mcp"]["side"] == "client" and f'"name":"{tool}"' in (e["request_text"] or "")
    ]


async def test_a_recorded_capture_exports_to_a_valid_har_with_sse_events_bridge_sides_and_no_secret(
    modern_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    live = await record(modern_server.url, capture)

    out = tmp_path / "run.har"
    done = run_mcp_proxy("export", "--har", str(out), str(capture))
    assert done.returncode == 0, done.stderr
    assert "wrote" in done.stderr
    assert validate(out) == {"valid": True}
    text = out.read_text()
    assert SECRET not in text
    assert QUERY_SECRET not in text
    assert "?token=%3Credacted%20len=" in text
    read = read_back(out)
    assert read["creator"]["name"] == "mcp-debug-proxy"
    assert read["version"] == "1.2"

    (asked,) = client_calls(read, "ask_name")
    assert asked["method"] == "POST"
    assert asked["status"] == 200
    assert asked["mime"].startswith("text/event-stream")
    mcp = asked["mcp"]
    assert mcp["mode"] == "legacy_to_mrtr"
    assert mcp["era"] == {"client": "legacy", "upstream": "modern"}
    (chain,) = mcp["chains"]
    events = [m for m in mcp["messages"] if m["channel"] == "sse"]
    assert [m.get("method") or m["kind"] for m in events] == ["elicitation/create", "result"]
    assert all(m["chain"] == chain and m["side"] == "client" for m in events)
    assert '"method":"elicitation/create"' in asked["text"]
    assert asked["text"].count("data: ") == len(events)
    ids = mcp["jsonrpc_ids"]
    assert events[0]["jsonrpc_id"] in ids

    auth = {h["name"].lower(): h["value"] for h in asked["request_headers"]}["authorization"]
    assert auth.startswith("Bearer <redacted len=")
    assert auth.endswith(">")

    legs = [e for e in read["entries"] if e["mcp"]["side"] == "upstream" and chain in e["mcp"]["chains"]]
    assert legs, "the bridge's upstream requests are entries of the same chain"
    assert all(e["mcp"]["mode"] == "legacy_to_mrtr" for e in legs)
    retried = [e for e in legs if '"inputResponses"' in (e["request_text"] or "")]
    assert retried, "the retry carrying the client's answer is an upstream entry"

    (added,) = client_calls(read, "add")
    assert added["mcp"]["mode"] == "passthrough"
    assert added["status"] == 200
    assert added["mcp"]["era"]["client"] == "modern"

    live_file = tmp_path / "live.har"
    live_file.write_bytes(live)
    assert validate(live_file) == {"valid": True}
    assert SECRET.encode() not in live
    live_read = read_back(live_file)
    live_calls = [e for e in live_read["entries"] if '"name":"ask_name"' in (e["request_text"] or "")]
    assert any(e["mime"].startswith("text/event-stream") for e in live_calls)
    assert all(e["mcp"]["mode"] == "legacy_to_mrtr" for e in live_calls)

    lines = capture.read_bytes().splitlines(keepends=True)
    middle = len(lines) // 2
    lines[middle] = b'{"type":"obs","kind":"message", this line is damaged\n'
    damaged = tmp_path / "damaged.jsonl"
    damaged.write_bytes(b"".join(lines))
    bad_out = tmp_path / "damaged.har"
    done = run_mcp_proxy("export", "--har", str(bad_out), str(damaged))
    assert done.returncode == 1
    assert f"{damaged}:{middle + 1}" in done.stderr
    assert validate(bad_out) == {"valid": True}
    har = json.loads(bad_out.read_text())
    assert f"{damaged}:{middle + 1}: corrupt observation line" in har["log"]["comment"]
    assert len(har["log"]["entries"]) >= len(read["entries"]) - 1


def bodiless(entries: list[dict[str, Any]]) -> dict[str, tuple[str, str, dict[str, str]]]:
    """The GET and DELETE entries of a HAR's client exchanges: exchange -> method, URL, request headers."""
    return {
        e["_mcp"]["exchange"]: (
            e["request"]["method"],
            e["request"]["url"],
            {h["name"].lower(): h["value"] for h in e["request"]["headers"]},
        )
        for e in entries
        if e["_mcp"]["side"] == "client" and e["request"]["method"] in ("GET", "DELETE")
    }


async def both_ended(admin: str) -> None:
    """Poll the chains (bounded) until the session's GET stream and its DELETE have ended."""
    wanted = {"GET stream", "DELETE session"}
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        chains = await admin_json(admin + "/api/chains?method=GET%20stream,DELETE%20session", TOKEN)
        if {c["method"] for c in chains if c.get("ended") is not None} == wanted:
            return
        assert asyncio.get_running_loop().time() < deadline, (
            f"the GET stream and the DELETE never ended: {chains}"
        )
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("server", ["legacy_server", "modern_server"], ids=["passthrough", "legacy_to_mrtr"])
async def test_a_get_stream_and_a_delete_are_their_own_entries_in_the_live_har_as_in_the_captures(
    server: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    upstream: PeerServer = request.getfixturevalue(server)
    capture = tmp_path / "capture.jsonl"
    env = clean_env(**settings_env(upstream=upstream.url, capture=capture, admin_token=TOKEN))
    with ProxyProcess(env) as proxy:
        # the SDK's legacy client opens the session's GET stream, and DELETEs the session on leaving
        async with client_for(proxy.endpoint(), "legacy") as legacy:
            assert not (await legacy.call_tool("echo", {"text": "hi"})).is_error
        await both_ended(proxy.admin)
        status, _, body = await admin_get(proxy.admin + "/api/export.har", TOKEN)
        assert status == 200
        proxy.stop()

    live = bodiless(json.loads(body)["log"]["entries"])
    assert {method for method, _, _ in live.values()} == {"GET", "DELETE"}
    for method, url, headers in live.values():
        assert url == proxy.endpoint(), method
        assert headers["mcp-session-id"].startswith("<redacted len="), method
    out = tmp_path / "capture.har"
    done = run_mcp_proxy("export", "--har", str(out), str(capture))
    assert done.returncode == 0, done.stderr
    exported = bodiless(json.loads(out.read_text())["log"]["entries"])
    assert {x: (m, u) for x, (m, u, _) in live.items()} == {x: (m, u) for x, (m, u, _) in exported.items()}


def leg_heads(entries: list[dict[str, Any]]) -> dict[str, tuple[int, str, dict[str, str]]]:
    """A HAR's upstream legs as haralyzer reads them: leg -> status, its text, response headers."""
    return {
        e["mcp"]["exchange"]: (
            e["status"],
            e["status_text"],
            {h["name"].lower(): h["value"] for h in e["response_headers"]},
        )
        for e in entries
        if e["mcp"]["side"] == "upstream"
    }


async def test_a_bridged_runs_legs_carry_the_upstreams_statuses_in_both_hars_its_404_included(
    peer_factory: PeerFactory, tmp_path: Path
) -> None:
    first = peer_factory("legacy-inflight")
    capture = tmp_path / "capture.jsonl"
    env = clean_env(**settings_env(upstream=first.url, capture=capture, admin_token=TOKEN, drain_grace=5))
    with ProxyProcess(env) as proxy:
        async with client_for(proxy.endpoint(), "2026-07-28") as modern:
            assert not (await modern.call_tool("echo", {"text": "before"})).is_error
        # The server restarts and forgets every session: the bridge's next call on its session is refused.
        await anyio.to_thread.run_sync(first.stop)
        await anyio.to_thread.run_sync(lambda: peer_factory("legacy-inflight", port=first.port))
        async with client_for(proxy.endpoint(), "2026-07-28") as modern:
            again = await modern.call_tool("echo", {"text": "after"})
        assert not again.is_error
        status, _, live = await admin_get(proxy.admin + "/api/export.har", TOKEN)
        assert status == 200
        proxy.stop()

    out = tmp_path / "run.har"
    done = run_mcp_proxy("export", "--har", str(out), str(capture))
    assert done.returncode == 0, done.stderr
    live_file = tmp_path / "live.har"
    live_file.write_bytes(live)
    for har in (out, live_file):
        assert validate(har) == {"valid": True}
        legs = leg_heads(read_back(har)["entries"])
        statuses = sorted(status for status, _, _ in legs.values())
        assert 0 not in statuses, legs
        assert 404 in statuses, legs
        assert 200 in statuses, legs
        assert all(text == HTTP_TEXT[status] for status, text, _ in legs.values() if status in HTTP_TEXT)
        minted = [h["mcp-session-id"] for _, _, h in legs.values() if "mcp-session-id" in h]
        assert minted, "the initialize legs' heads hold the session the server minted"
        assert all(value.startswith("<redacted len=") for value in minted)
    # The running proxy exports chains: a leg that joined none (an idle GET stream, a DELETE) is
    # in the capture's HAR only.
    chained = [e for e in read_back(out)["entries"] if e["mcp"]["chains"]]
    assert leg_heads(chained) == leg_heads(read_back(live_file)["entries"])


HTTP_TEXT = {200: "OK", 202: "Accepted", 404: "Not Found"}


async def settled_har(admin: str) -> list[dict[str, Any]]:
    """The running proxy's HAR entries once no exchange in it is open (bounded)."""
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        status, _, body = await admin_get(admin + "/api/export.har", TOKEN)
        assert status == 200
        entries: list[dict[str, Any]] = json.loads(body)["log"]["entries"]
        if not any(e["_mcp"].get("open") for e in entries):
            return entries
        assert asyncio.get_running_loop().time() < deadline, [e["_mcp"]["exchange"] for e in entries]
        await asyncio.sleep(0.1)


def same_as_capture(live: dict[str, Any], exported: dict[str, Any]) -> None:
    """One exchange's entry from the running proxy against the capture's: timings within 0.01 ms,
    sizes, bodies and `_mcp` (chain ids aside: a running proxy's are `c…`, a capture's `r…`) alike."""
    key = live["_mcp"]["exchange"]
    assert live["startedDateTime"] == exported["startedDateTime"], key
    for name in ("wait", "receive"):
        assert live["timings"][name] == pytest.approx(exported["timings"][name], abs=0.01), (key, name)
    assert live["time"] == pytest.approx(exported["time"], abs=0.01), key
    for side in ("request", "response"):
        assert live[side]["bodySize"] == exported[side]["bodySize"], (key, side)
    assert live["request"].get("postData") == exported["request"].get("postData"), key
    assert live["response"]["content"] == exported["response"]["content"], key
    assert live["response"]["status"] == exported["response"]["status"], key
    assert live.get("comment") == exported.get("comment"), key

    def mcp(entry: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in entry["_mcp"].items() if k != "chains"}
        out["messages"] = [{k: v for k, v in m.items() if k != "chain"} for m in out["messages"]]
        out["chains"] = len(entry["_mcp"]["chains"])
        return out

    assert mcp(live) == mcp(exported), key


@pytest.mark.parametrize("server", ["legacy_server", "modern_server"], ids=["to_legacy", "to_modern"])
async def test_the_live_har_gives_each_exchange_the_timings_sizes_and_mcp_fields_of_the_captures(
    server: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Real SDK clients of both eras, one of them over HTTP+SSE, through the `mcp-proxy` command: its
    `/api/export.har` and `export --har` of its capture agree entry by entry. The calls that ask the
    client (`ask_name`) park an upstream call (a 2026-07-28 client to a legacy server) or stream the
    question on an SSE response after a priming event (a legacy client to a 2026-07-28 server)."""
    upstream: PeerServer = request.getfixturevalue(server)
    capture = tmp_path / "capture.jsonl"
    env = clean_env(**settings_env(upstream=upstream.url, capture=capture, admin_token=TOKEN, drain_grace=5))
    with ProxyProcess(env) as proxy:
        for mode, transport in (("legacy", "http"), ("2026-07-28", "http"), ("legacy", "sse")):
            url = proxy.endpoint("/sse") if transport == "sse" else proxy.endpoint()
            async with client_for(url, mode, transport=transport) as client:  # type: ignore[arg-type]
                assert not (await client.call_tool("ask_name", {})).is_error
                assert not (await client.call_tool("echo", {"text": "hi"})).is_error
        await both_ended(proxy.admin)
        live = await settled_har(proxy.admin)
        proxy.stop()

    out = tmp_path / "capture.har"
    done = run_mcp_proxy("export", "--har", str(out), str(capture))
    assert done.returncode == 0, done.stderr
    exported = {e["_mcp"]["exchange"]: e for e in json.loads(out.read_text())["log"]["entries"]}
    assert live, "the running proxy exported its exchanges"
    for entry in live:
        same_as_capture(entry, exported[entry["_mcp"]["exchange"]])

    streams = [e for e in live if e["request"]["method"] == "GET" and e["_mcp"]["side"] == "client"]
    assert streams, "the legacy client's GET stream is an entry"
    for stream in streams:  # wait is request to response head, the stream's life is receive
        assert stream["timings"]["wait"] < stream["timings"]["receive"], stream["timings"]
    for entry in live:
        content = entry["response"]["content"]
        assert content["size"] == len(content["text"].encode()), entry["_mcp"]["exchange"]
    transports = {e["_mcp"]["client_transport"] for e in live if e["_mcp"]["side"] == "client"}
    assert transports == {"http", "sse"}
    for entry in live:
        internal = "the proxy's internal Streamable HTTP form" in entry.get("comment", "")
        assert internal == (entry["_mcp"]["side"] == "client" and entry["_mcp"]["client_transport"] == "sse")
    legs = [e for e in live if e["_mcp"]["side"] == "upstream"]
    # To a legacy server, the 2026-07-28 client's answer goes up on a leg linked to the parked call's;
    # to a 2026-07-28 one, the bridge's SSE answer to the legacy client streams the upstream's priming
    # event too.
    if server == "legacy_server":
        assert any("related" in e["_mcp"] for e in legs), "no leg is related"
    else:
        sse = [e for e in live if e["response"]["content"]["mimeType"].startswith("text/event-stream")]
        assert any(e["response"]["bodySize"] != e["response"]["content"]["size"] for e in sse)


def capture_legs(capture: Path) -> set[tuple[str, str]]:
    """(run, leg) of every leg the capture holds a response head for, each in the run it was made in."""
    run, legs = "", set()
    for line in capture.read_text().splitlines():
        item = json.loads(line)
        if item.get("type") == "proxy_info":
            run = item["run"]
        elif item.get("kind") == "leg_head":
            legs.add((run, item["leg"]))
    return legs


async def test_a_bridges_session_streams_and_deletes_are_entries_of_their_own_method_in_each_run(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    """A 2026-07-28 client bridged to a legacy SDK server, in two runs of the proxy that append to one
    capture: the session's GET stream (one carrying the server's `roots/list`, one carrying nothing)
    and its DELETE when the proxy stops are HAR entries with their real methods, the bridge's mode and
    eras and a wait of their own; each entry names its run, so ids that start again stay apart."""
    capture = tmp_path / "capture.jsonl"
    env = clean_env(**settings_env(upstream=legacy_server.url, capture=capture, drain_grace=5))
    for tool in ("session_roots", "echo"):
        with ProxyProcess(env) as proxy:
            async with client_for(proxy.endpoint(), "2026-07-28", read_timeout=10.0) as modern:
                arguments = {"text": "hi"} if tool == "echo" else {}
                with anyio.fail_after(15):
                    assert not (await modern.call_tool(tool, arguments)).is_error
            proxy.stop()

    out = tmp_path / "run.har"
    done = run_mcp_proxy("export", "--har", str(out), str(capture))
    assert done.returncode == 0, done.stderr
    assert validate(out) == {"valid": True}
    entries = json.loads(out.read_text())["log"]["entries"]
    read = read_back(out)["entries"]
    legs = [(raw, e) for raw, e in zip(entries, read, strict=True) if e["mcp"]["side"] == "upstream"]
    assert {(e["mcp"]["run"], e["mcp"]["exchange"]) for _, e in legs} >= capture_legs(capture)
    keys = [(e["mcp"]["run"], e["mcp"]["exchange"]) for e in read]
    assert len(set(keys)) == len(keys), "an exchange id repeats within a run"
    assert len({run for run, _ in keys}) == 2

    by_method: dict[str, list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for raw, e in legs:
        by_method.setdefault(e["method"], []).append((raw, e))
        assert e["mcp"]["mode"] == "mrtr_to_legacy", e["mcp"]
        assert e["mcp"]["era"] == {"client": "modern", "upstream": "legacy"}, e["mcp"]
    assert all(e["request_text"] for _, e in by_method["POST"]), "a POST leg without a body"
    streams = by_method["GET"]
    assert len(streams) == 2, [e["mcp"]["exchange"] for _, e in streams]  # one session per run
    for raw, e in streams:
        assert e["status"] == 200
        assert e["mime"].startswith("text/event-stream")
        assert "postData" not in raw["request"]
        assert 0 < raw["timings"]["wait"] < raw["timings"]["receive"], raw["timings"]
    carried = [e["mcp"]["messages"] for _, e in streams]
    assert sorted(len(m) for m in carried) == [0, 1]
    (asked,) = [m for messages in carried for m in messages]
    assert (asked["method"], asked["channel"]) == ("roots/list", "get_sse")
    deletes = by_method["DELETE"]
    assert len(deletes) == 2, [e["mcp"]["exchange"] for _, e in deletes]
    assert all(e["status"] in (200, 204) and not e["mcp"]["messages"] for _, e in deletes)
