"""What a legacy server sends on its session's GET stream between calls, behind `mrtr_to_legacy`.

server-everything asks `roots/list` on its session's GET stream 350 ms after the handshake, and logs
on that stream once it has the roots. When no call is waiting there, the bridge refuses the question
upstream (-32601) and the log notification belongs to no call. Every message line of the capture
is still in a chain, in the running proxy's JSON export and the capture's alike: the stream has a
chain of its own (`GET stream`) holding the question and the bridge's answer to it. The same
capture as a proxy of format 1.6 wrote it (no `leg_opened`, no link from the answer's leg to the
stream) still places the question; the answer, which nothing there ties to a chain, is counted and
named in the export's report.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.peers.runner import NodeServer
from tests.peers.scenarios import client_for
from tests.sidecar import ProxyProcess, admin_json, clean_env, run_mcp_proxy, settings_env

pytestmark = pytest.mark.e2e

Line = tuple[str, float, str]
"""A message as the capture and the chains both name it: exchange or leg, time, direction."""


@pytest.fixture
def everything() -> Iterator[NodeServer]:
    """A fresh server-everything: it asks a session's roots once, on its GET stream."""
    with NodeServer("everything") as server:
        yield server


async def record(url: str, capture: Path) -> dict[str, Any]:
    """A 2026-07-28 client's calls before and after the server's unasked question; the live export."""
    with ProxyProcess(clean_env(**settings_env(upstream=url, capture=capture))) as proxy:
        async with client_for(proxy.endpoint(), "2026-07-28") as client:
            with anyio.fail_after(20):
                assert not (await client.call_tool("echo", {"message": "hi"})).is_error
                await proxy.logged("bridge_unassociated_request")  # asked while no call waited
                listed = await client.call_tool("get-roots-list", {})
        assert not listed.is_error
        live: dict[str, Any] = await admin_json(proxy.admin + "/api/export.json")
    return live


def message_lines(capture: Path) -> list[Line]:
    lines = [json.loads(text) for text in capture.read_text().splitlines()[1:]]
    return [
        (line.get("leg") or line["exchange"], line["t"], line["direction"])
        for line in lines
        if line.get("kind") in ("message", "leg_message")
    ]


def in_chains(exported: dict[str, Any]) -> set[Line]:
    return {(m["exchange"], m["ts"], m["direction"]) for c in exported["chains"] for m in c["messages"]}


def stream_chain(exported: dict[str, Any]) -> dict[str, Any]:
    (chain,) = [c for c in exported["chains"] if c["chain"]["method"] == "GET stream"]
    return chain


def compact(line: dict[str, Any]) -> str:
    """A line as the proxy writes it (a reader tells an observation line by its first bytes)."""
    return json.dumps(line, separators=(",", ":"), ensure_ascii=False)


def as_written_by_1_6(capture: Path, target: Path) -> None:
    """The capture as format 1.6 wrote it: no `leg_opened`, no `leg_linked`, a GET stream's `sse`."""
    lines = capture.read_text().splitlines()
    header = json.loads(lines[0]) | {"version": "1.6"}
    kept = [compact(header)]
    for text in lines[1:]:
        line = json.loads(text)
        if line.get("kind") in ("leg_opened", "leg_linked"):
            continue
        if line.get("channel") == "get_sse":
            line["channel"] = "sse"
        kept.append(compact(line))
    target.write_text("\n".join(kept) + "\n")


async def test_a_get_stream_question_no_call_took_and_its_refusal_are_in_a_chain_live_and_recorded(
    everything: NodeServer, tmp_path: Path
) -> None:
    capture = tmp_path / "run.jsonl"
    live = await record(everything.url, capture)
    done = run_mcp_proxy("export", "--json", "-", str(capture))
    assert done.returncode == 0, done.stderr
    exported = json.loads(done.stdout)

    lines = message_lines(capture)
    assert set(lines) - in_chains(live) == set()
    assert set(lines) - in_chains(exported) == set()
    for chains in (live, exported):
        stream = stream_chain(chains)
        assert stream["chain"]["mode"] == "mrtr_to_legacy"
        asked, refused = [m for m in stream["messages"] if m["kind"] != "http"][:2]
        assert (asked["direction"], asked["method"]) == ("to_client", "roots/list")
        assert (refused["direction"], refused["body"]["error"]["code"]) == ("to_server", -32601)

    old = tmp_path / "run-1.6.jsonl"
    as_written_by_1_6(capture, old)
    done = run_mcp_proxy("export", "--json", "-", str(old))
    assert done.returncode == 1, done.stderr  # a line is left out, and said so
    exported = json.loads(done.stdout)
    (answer,) = set(message_lines(old)) - in_chains(exported)
    assert stream_chain(exported)["messages"][0]["method"] == "roots/list"
    assert exported["skipped"]["unplaced"] == [
        {"exchange": answer[0], "lines": 1, "after_line": None, "leg": True}
    ]
    assert f"left out 1 line of upstream leg {answer[0]}: it joined no chain" in done.stderr
