"""A call whose end the TUI can never see is shown `incomplete`, never `pending` for ever.

The capture is real traffic (an SDK client through a real proxy) cut right after a call's request,
as a rotated capture's part ends when the answer goes into the next one; the feed is the one
`tui --open` runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.flows.events import ChainStatus
from proxy.record.observations import OBS_PREFIX
from proxy.record.run_ends import CAPTURE_ENDS
from tests.conftest import running_proxy
from tests.peers.runner import PeerServer
from tests.peers.scenarios import run_scenario
from tests.ui.helpers import wait_for
from ui.app import ProxyTui
from ui.feeds import CaptureFeed

pytestmark = pytest.mark.e2e


def cut_after_request(capture: Path, part: Path, method: bytes) -> None:
    """Write the capture's lines up to the first one carrying a `method` request, as a part ends."""
    lines = capture.read_bytes().splitlines(keepends=True)
    at = next(
        n
        for n, line in enumerate(lines)
        if line.startswith(OBS_PREFIX) and b'"method":"' + method + b'"' in line
    )
    part.write_bytes(b"".join(lines[: at + 1]))


async def test_a_part_cut_before_a_calls_answer_shows_it_incomplete(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "cap.jsonl"
    async with running_proxy(legacy_server.url, capture=capture) as proxy:
        await run_scenario(proxy.endpoint(), "legacy", "echo")
    part = tmp_path / "cap.jsonl.1"
    cut_after_request(capture, part, b"tools/call")

    app = ProxyTui(CaptureFeed(part), batch_delay=0.01)
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(
            lambda: app.feed_status is not None and app.feed_status.state == "ended", what="the end"
        )
        await pilot.pause()

        (call,) = [e for e in app.model.chains.values() if e.summary.method == "tools/call"]
        assert call.summary.status is ChainStatus.INCOMPLETE
        assert call.summary.notes[-1] == CAPTURE_ENDS
        assert str(app.main.table.get_cell(call.key, "status")).startswith("incom")
        assert all(e.summary.status is not ChainStatus.PENDING for e in app.model.chains.values())
