"""Every reader of a capture takes its `proxy_info` lines alike: the endpoint, and the run.

The capture holds an OAuth discovery beside `/mcp` and a call left open, then the `proxy_info` of a
restarted proxy appending to it. Its proxy was told no endpoint when it wrote it, so a reader learns
the endpoint from `proxy_info` alone; and the restart ends the earlier run's open call. The readers:
the JSON and HAR exports, `find_chain` (replay, curl), `read_tail` (a big capture's newest part) and
the feed `tui --open` runs. Each must judge the discovery plain HTTP and end the call `incomplete`.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.flows.events import (
    ChainChanged,
    ChainOpened,
    Channel,
    Direction,
    FlowEvent,
    MessageRecorded,
    ProxyInfo,
)
from proxy.record.export import Format, export_capture, find_chain
from proxy.record.index import read_tail
from proxy.record.run_ends import OPEN_AT_RUN_END, RUN_REPLACED
from proxy.wire.jsonrpc import classify_value
from tests.record.captures import record_play
from ui.feeds import CaptureFeed, FeedItem

Read = dict[str, tuple[str, str | None, set[str]]]
"""What a reader shows of each chain, keyed by its first request's path or method: its status, its
last note, and the kinds of its messages."""

CALL = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "add", "arguments": {}}}


def _login_then_a_call(obs: Any, clock: Any) -> None:
    obs.open_exchange(
        "w1", http_method="GET", path="/.well-known/oauth-protected-resource", headers={}, session=None
    )
    obs.response_head("w1", status=200, content_type="application/json", headers={})
    metadata = classify_value({"resource": "http://127.0.0.1:18201/mcp"})
    obs.message("w1", metadata, size=40, direction=Direction.TO_CLIENT, channel=Channel.JSON)
    clock.now += 0.01
    obs.close_exchange("w1")
    obs.open_exchange("x1", http_method="POST", path="/mcp", headers={}, session=None, body_size=90)
    obs.message("x1", classify_value(CALL), size=90, direction=Direction.TO_SERVER, channel=Channel.POST)


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The play's capture, its run tagged, with a restarted proxy's `proxy_info` appended."""
    path = tmp_path_factory.mktemp("readers") / "restarted.jsonl"
    record_play(_login_then_a_call, path)
    lines = path.read_bytes().splitlines(keepends=True)
    info = ProxyInfo.model_validate(orjson.loads(lines[1]))
    lines[1] = info.model_copy(update={"run": "first"}).model_dump_json().encode() + b"\n"
    restarted = info.model_copy(update={"run": "second", "ts": info.ts + 60})
    path.write_bytes(b"".join(lines) + restarted.model_dump_json().encode() + b"\n")
    return path


def _from_events(events: Iterable[FlowEvent]) -> Read:
    heads: dict[str, Any] = {}
    kinds: dict[str, set[str]] = {}
    for event in events:
        if isinstance(event, ChainOpened | ChainChanged):
            heads[event.chain.id] = event.chain
        elif isinstance(event, MessageRecorded):
            kinds.setdefault(event.chain_id, set()).add(event.message.kind)
    return {
        str(s.method or s.name or s.id): (s.status.value, (s.notes or [None])[-1], kinds.get(s.id, set()))
        for s in heads.values()
    }


def _json_export(capture: Path) -> Read:
    out = io.BytesIO()
    export_capture([capture], Format.JSON, out)
    read: Read = {}
    for item in orjson.loads(out.getvalue())["chains"]:
        chain = item["chain"]
        key = str(chain.get("method") or chain.get("name") or chain["id"])
        read[key] = (chain["status"], (chain["notes"] or [None])[-1], {m["kind"] for m in item["messages"]})
    return read


def _feed(capture: Path) -> Read:
    items: list[FeedItem] = []

    async def sink(item: FeedItem) -> None:
        items.append(item)

    asyncio.run(CaptureFeed(capture).run(sink))
    return _from_events(i for i in items if isinstance(i, ChainOpened | ChainChanged | MessageRecorded))


def _call_and_login(read: Read) -> tuple[Any, Any]:
    (call,) = [v for k, v in read.items() if k == "tools/call"]
    (login,) = [v for k, v in read.items() if k != "tools/call"]
    return call, login


@pytest.mark.parametrize(
    "reader",
    [
        _json_export,
        lambda capture: _from_events(read_tail(capture, 1 << 20)),
        _feed,
    ],
    ids=["export-json", "read-tail", "tui-feed"],
)
def test_every_chain_reader_judges_plain_http_by_the_endpoint_and_ends_the_earlier_runs_call(
    reader: Any, capture: Path
) -> None:
    call, login = _call_and_login(reader(capture))

    assert call[:2] == ("incomplete", RUN_REPLACED)
    assert login[0] != "pending"
    assert login[2] == {"http"}  # the discovery's JSON body is no JSON-RPC message


def test_find_chain_judges_plain_http_by_the_endpoint_and_ends_the_earlier_runs_call(capture: Path) -> None:
    found = [find_chain([capture], chain_id).chain for chain_id in ("r1", "r2")]

    (call,) = [c for c in found if c is not None and c.summary.method == "tools/call"]
    (login,) = [c for c in found if c is not None and c.summary.method != "tools/call"]

    assert (call.summary.status.value, call.summary.notes[-1]) == ("incomplete", RUN_REPLACED)
    assert {m.kind for m in login.messages} == {"http"}


def test_the_har_export_judges_plain_http_by_the_endpoint_and_ends_the_earlier_runs_entry(
    capture: Path,
) -> None:
    out = io.BytesIO()
    export_capture([capture], Format.HAR, out)
    entries = orjson.loads(out.getvalue())["log"]["entries"]

    (login,) = [e for e in entries if "well-known" in e["request"]["url"]]
    (call,) = [e for e in entries if e["request"]["url"].endswith("/mcp")]

    assert {m["kind"] for m in login["_mcp"]["messages"]} == {"http"}
    assert call["_mcp"].get("open")
    assert call["comment"] == OPEN_AT_RUN_END
