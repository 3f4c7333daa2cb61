"""Every reader of a capture says the same of a call still open where the record of its run ends.

The capture is real traffic (the demo's SDK clients of both eras through real proxies), cut right
after a call's request, as a proxy killed mid-call leaves it. The readers are the exports (JSON and
HAR, with a status filter) and the feed `tui --open` runs, applied to the TUI's model as the app
applies it: all of them show that call `incomplete`, with the same note, and none `pending`.
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import orjson
import pytest

from proxy.flows.events import ChainStatus, FlowEvent, ProxyInfo
from proxy.flows.filters import ChainFilter
from proxy.record.capture import CaptureWriter, make_header
from proxy.record.export import Format, export_capture
from proxy.record.run_ends import CAPTURE_ENDS, OPEN_AT_RUN_END, RUN_ENDED_THERE, RUN_REPLACED
from tests.record.captures import record_demo
from ui.feeds import CaptureFeed, FeedItem, FeedStatus
from ui.model import ViewModel

Verdict = tuple[str, str, str | None]
"""A chain as a reader shows it: method, status, last note."""


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record_demo(tmp_path_factory.mktemp("run-ends"))


def killed_mid_call(capture: Path, target: Path) -> Path:
    """The capture up to its first `tools/call` request, as a proxy killed during that call leaves it."""
    lines = capture.read_bytes().splitlines(keepends=True)
    request = b'"kind":"message"'
    at = next(n for n, line in enumerate(lines) if request in line and b'"method":"tools/call"' in line)
    target.write_bytes(b"".join(lines[: at + 1]))
    return target


def exported(paths: list[Path], **filters: Any) -> dict[str, Verdict]:
    out = io.BytesIO()
    export_capture(paths, Format.JSON, out, ChainFilter(**filters))
    chains = [c["chain"] for c in orjson.loads(out.getvalue())["chains"]]
    return {c["id"]: (c["method"], c["status"], (c["notes"] or [None])[-1]) for c in chains}


def har_entries(paths: list[Path], **filters: Any) -> list[dict[str, Any]]:
    out = io.BytesIO()
    export_capture(paths, Format.HAR, out, ChainFilter(**filters))
    entries: list[dict[str, Any]] = orjson.loads(out.getvalue())["log"]["entries"]
    return entries


def opened_in_tui(path: Path) -> dict[str, Verdict]:
    """What `tui --open` shows: the feed's events applied to the model, settled as the app settles it."""
    items: list[FeedItem] = []

    async def sink(item: FeedItem) -> None:
        items.append(item)

    asyncio.run(CaptureFeed(path).run(sink))
    model = ViewModel()
    for item in items:
        if isinstance(item, FeedStatus) and item.unfinished:
            model.settle(item.unfinished)
        elif not isinstance(item, FeedStatus):
            event: FlowEvent = item  # type: ignore[assignment]
            model.apply(event)
    return {
        e.summary.id: (str(e.summary.method), e.summary.status.value, (e.summary.notes or [None])[-1])
        for e in model.chains.values()
    }


def test_a_call_open_where_a_killed_proxys_capture_ends_is_incomplete_in_every_reader(
    demo: Path, tmp_path: Path
) -> None:
    killed = killed_mid_call(demo, tmp_path / "killed.jsonl")

    chains = exported([killed])

    call = next(v for v in chains.values() if v[0] == "tools/call")
    assert call == ("tools/call", "incomplete", CAPTURE_ENDS)
    assert [v for v in chains.values() if v[1] == "pending"] == []
    assert opened_in_tui(killed) == chains
    assert exported([killed], statuses=["pending"]) == {}
    assert har_entries([killed], statuses=["pending"]) == []
    (entry,) = [e for e in har_entries([killed], statuses=["incomplete"]) if e["_mcp"].get("open")]
    assert entry["comment"] == RUN_ENDED_THERE.open_entry


def test_a_capture_a_running_proxy_still_writes_leaves_its_open_calls_pending(
    demo: Path, tmp_path: Path
) -> None:
    killed = killed_mid_call(demo, tmp_path / "live.jsonl")

    with CaptureWriter(killed):  # a running proxy appends to it (and holds its lock)
        chains = exported([killed])
        shown = opened_in_tui(killed)

    call = next(v for v in chains.values() if v[0] == "tools/call")
    assert call == ("tools/call", "pending", None)
    assert shown == chains


def test_a_part_whose_later_part_lies_beside_it_names_that_part(demo: Path, tmp_path: Path) -> None:
    killed = killed_mid_call(demo, tmp_path / "run.jsonl.1")
    created = orjson.loads(killed.read_bytes().split(b"\n", 1)[0])["created"]
    later = tmp_path / "run.jsonl"
    later.write_bytes(orjson.dumps(make_header(created + 5, follows=created, series=created)) + b"\n")

    chains = exported([killed])

    call = next(v for v in chains.values() if v[0] == "tools/call")
    assert call[1] == "incomplete"
    assert call[2] is not None
    assert "goes on in the later part run.jsonl, which was not read" in call[2]
    assert opened_in_tui(killed) == chains


def test_a_later_run_appended_to_the_capture_ends_the_earlier_runs_open_calls(
    demo: Path, tmp_path: Path
) -> None:
    killed = killed_mid_call(demo, tmp_path / "killed.jsonl").read_bytes()
    lines = demo.read_bytes().splitlines(keepends=True)
    info = ProxyInfo.model_validate(orjson.loads(lines[1]))
    restarted = info.model_copy(update={"run": "restart", "started": (info.started or 0) + 60})
    appended = tmp_path / "appended.jsonl"  # the restarted proxy numbers its exchanges from x1 again
    appended.write_bytes(killed + restarted.model_dump_json().encode() + b"\n" + b"".join(lines[2:]))

    chains = exported([appended])
    alone = exported([demo])

    earlier = len(exported([tmp_path / "killed.jsonl"]))
    call = chains[f"r{earlier}"]
    assert call == ("tools/call", "incomplete", RUN_REPLACED)
    later = {f"r{int(chain_id[1:]) + earlier}": verdict for chain_id, verdict in alone.items()}
    assert {k: v for k, v in chains.items() if int(k[1:]) > earlier} == later
    assert opened_in_tui(appended) == chains
    entries = har_entries([appended])
    assert len(entries) == len(har_entries([tmp_path / "killed.jsonl"])) + len(har_entries([demo]))
    (left,) = [e for e in entries if e["_mcp"].get("open")]
    assert (left["_mcp"]["run"], left["_mcp"]["exchange"]) == (info.run, "x1")
    assert left["comment"] == OPEN_AT_RUN_END
    assert ChainStatus.PENDING.value not in {v[1] for v in chains.values()}
