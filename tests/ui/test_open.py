"""Opening a big capture: its newest chains at once, then every chain reachable by the filter.

The capture is real traffic (the demo's SDK peers of both eras through real proxies) copied with fresh
names until it is bigger than the part shown first; the feed is the one `tui --open` runs, its index
pass a real child process. The index is held back until the test has seen the first screen.
"""

from __future__ import annotations

import asyncio
import io
import shutil
from pathlib import Path

import orjson
import pytest

from proxy.flows.events import ChainOpened, ChainSummary
from proxy.flows.filters import ChainFilter
from proxy.flows.store import ChainStore
from proxy.record.capture import CaptureReader
from proxy.record.index import TAIL_PREFIX, run_index
from proxy.record.observations import ObservationReplayer
from proxy.record.run_ends import CAPTURE_ENDS
from tests.record.captures import record_demo, replicate
from tests.ui.helpers import wait_for
from ui.app import ProxyTui
from ui.capture_index import READ_CHUNK, Headlines, IndexReady, index_capture, output_lines
from ui.feeds import CaptureFeed, FeedItem, FeedStatus, Sink
from ui.messages import FilterChanged
from ui.model import CAPTURE_CHAINS, MAX_LOADED
from ui.widgets.chain_table import ChainTable
from ui.widgets.status_bar import StatusBar

TAIL = 16 * 1024
"""The part of the capture shown first (small, so the test's capture is many times bigger)."""


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("open")
    return replicate(record_demo(directory), directory / "big.jsonl", 12)


def all_chains(path: Path) -> dict[str, tuple[str | None, float, int]]:
    """Every chain a full read builds: id -> (method, started, messages)."""
    store = ChainStore(max_chains=1_000_000)
    with CaptureReader(path, replayer=ObservationReplayer(store=store)) as reader:
        for _ in reader:
            pass
    return {c.summary.id: (c.summary.method, c.summary.started, c.summary.messages) for c in store.drain()}


class HeldIndex:
    """The capture feed, with its index held back until `release`."""

    def __init__(self, feed: CaptureFeed) -> None:
        self.feed = feed
        self.description = feed.description
        self.release = asyncio.Event()
        self.index_waiting = False

    async def run(self, sink: Sink) -> None:
        async def held(item: FeedItem) -> None:
            if isinstance(item, IndexReady):
                self.index_waiting = True
                await self.release.wait()
            await sink(item)

        await self.feed.run(held)


async def test_a_big_capture_shows_its_newest_chains_first_then_every_chain_by_the_filter(
    capture: Path,
) -> None:
    expected = all_chains(capture)
    newest = max(expected.values(), key=lambda c: c[1])
    feed = HeldIndex(CaptureFeed(capture, tail_bytes=TAIL))
    app = ProxyTui(feed, max_chains=CAPTURE_CHAINS, batch_delay=0.01)
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.main.query_one(ChainTable)
        await wait_for(lambda: feed.index_waiting, what="the index pass to end", seconds=30)
        await pilot.pause()
        # The first screen: the newest chains, built from the end of the file alone.
        shown = [app.model.chains[str(key.value)].summary for key in table.rows]
        assert shown
        assert all(s.id.startswith(TAIL_PREFIX) for s in shown)
        assert len(shown) < len(expected) // 4
        assert (newest[0], newest[1]) in {(s.method, s.started) for s in shown}
        assert app.feed_status is not None
        assert app.feed_status.state == "indexing"

        feed.release.set()
        await wait_for(lambda: app.feed_status is not None and app.feed_status.state == "ended", what="end")
        ended = FeedStatus("ended", f"{len(expected)} chains from {capture.name}", unfinished=CAPTURE_ENDS)
        assert app.feed_status == ended
        assert {s.summary.id: s.summary.method for s in app.model.chains.values()} == {
            chain_id: method for chain_id, (method, _, _) in expected.items()
        }

        # The filter reaches the oldest chain, and its messages are read back when it is shown.
        app.main.post_message(FilterChanged("id:r1"))
        await wait_for(lambda: table.row_count == 1, what="the filter to find r1")
        key = table.selected_key
        assert key is not None
        assert key.startswith("r1@")
        entry = app.model.get(key)
        assert entry is not None
        assert len(entry.messages) == expected["r1"][2] > 0
        assert [m.seq for m in entry.messages] == list(range(1, expected["r1"][2] + 1))


def export_finds(path: Path, text: str) -> set[str]:
    """The ids of the chains `mcp-proxy export --q TEXT` keeps: a full read, every body searched."""
    keep = ChainFilter(text=text)
    store = ChainStore(max_chains=1_000_000)
    with CaptureReader(path, replayer=ObservationReplayer(store=store)) as reader:
        for _ in reader:
            pass
    return {chain.summary.id for chain in store.drain() if keep.keeps(chain)}


async def test_a_big_capture_s_body_and_free_text_filters_reach_every_chain_as_the_export_does(
    capture: Path,
) -> None:
    paris, teal = export_finds(capture, "body:paris"), export_finds(capture, "teal")
    assert len(paris) >= 12  # in every copy of the recorded traffic
    assert len(teal) >= 12
    feed = HeldIndex(CaptureFeed(capture, tail_bytes=TAIL))
    app = ProxyTui(feed, max_chains=CAPTURE_CHAINS, batch_delay=0.01)
    async with app.run_test(size=(200, 40)) as pilot:
        table = app.main.query_one(ChainTable)

        def shown() -> set[str]:
            return {app.model.chains[str(key.value)].summary.id for key in table.rows}

        def searched(text: str) -> bool:
            done = "bodies of every chain searched" in str(app.main.query_one(StatusBar).content)
            return app.main.query_.text == text and done

        await wait_for(lambda: feed.index_waiting, what="the index pass to end", seconds=30)
        await pilot.press("slash", *"body:paris", "enter")  # typed while the rest is indexed
        await pilot.pause()
        assert shown()
        assert all(chain_id.startswith(TAIL_PREFIX) for chain_id in shown())  # the newest part's

        feed.release.set()
        await wait_for(lambda: searched("body:paris"), what="every chain searched", seconds=30)
        assert shown() == paris  # the chains `export --q body:paris` finds, no fewer

        await pilot.press("slash", *["backspace"] * len("body:paris"), *"teal", "enter")
        await wait_for(lambda: searched("teal"), what="the second search", seconds=30)
        assert shown() == teal

        # Nothing of the chains searched stays held but the messages of those shown last.
        holding = [entry for entry in app.model.chains.values() if entry.messages or entry.search_text()]
        assert 0 < len(holding) <= MAX_LOADED


async def test_a_big_capture_feed_hands_over_the_tail_then_the_index_then_its_end(capture: Path) -> None:
    items: list[FeedItem] = []

    async def sink(item: FeedItem) -> None:
        items.append(item)

    await asyncio.wait_for(CaptureFeed(capture, tail_bytes=TAIL).run(sink), 30)

    (index,) = [i for i in items if isinstance(i, IndexReady)]
    at = items.index(index)
    tail = [i for i in items[:at] if isinstance(i, ChainOpened)]
    assert tail
    assert all(e.chain.id.startswith(TAIL_PREFIX) for e in tail)
    assert not any(isinstance(i, ChainOpened) for i in items[at:])
    assert len(index.chains) == len(all_chains(capture))
    assert isinstance(items[-1], FeedStatus)
    assert items[-1].state == "ended"


def test_indexed_headlines_share_one_fields_set_and_hold_repeated_text_once(capture: Path) -> None:
    lines: list[bytes] = []
    run_index([capture], io.BytesIO(), lines.append)
    data = [orjson.loads(line)["chain"] for line in lines if line.startswith(b'{"type":"indexed"')]

    headline = Headlines()
    made = [headline(dict(item)) for item in data]

    assert made == [ChainSummary.model_validate(item) for item in data]
    assert len({id(summary.__pydantic_fields_set__) for summary in made}) == 1
    for name in ("session", "method", "client_era"):
        values = [getattr(summary, name) for summary in made if getattr(summary, name)]
        assert len(values) > len(set(values))  # repeated ...
        assert len({id(value) for value in values}) == len(set(values))  # ... and held once each
    made[0].notes = ["changed later"]  # an assignment keeps working, and touches no other headline
    assert made[1].notes == data[1]["notes"]
    assert made[0].model_dump()["notes"] == ["changed later"]


async def test_a_capture_rewritten_after_its_index_leaves_out_the_messages_it_no_longer_holds(
    capture: Path, tmp_path: Path
) -> None:
    mine, other = tmp_path / "mine.jsonl", tmp_path / "other.jsonl"
    shutil.copyfile(capture, mine)
    shutil.copyfile(capture, other)
    kept = await asyncio.wait_for(index_capture([other], _no_progress), 30)
    index = await asyncio.wait_for(index_capture([mine], _no_progress), 30)
    summary, records, _ = index.chains[-1]
    assert summary.messages > 0
    assert len(kept.load(kept.chains[-1][1])) == summary.messages  # an untouched capture reads back

    with mine.open("r+b") as f:  # rewritten in place: the TUI's open file now reads other bytes
        f.write(b"x" * mine.stat().st_size)

    assert index.load(records) == []


async def _no_progress(_read: int, _total: int) -> None:
    return None


async def test_the_pass_output_is_split_into_lines_however_it_is_chunked() -> None:
    text = b'{"a":1}\n{"b":2}\n\n' + b"x" * (READ_CHUNK * 2 + 5) + b'\n{"c":3}'
    stream = asyncio.StreamReader()
    for at in range(0, len(text), 1000):
        stream.feed_data(text[at : at + 1000])
    stream.feed_eof()

    got = [line async for batch in output_lines(stream) for line in batch]

    assert got == text.split(b"\n")
