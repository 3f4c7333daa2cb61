"""A rotated capture of real traffic exported with its parts in any order.

The `mcp-proxy` command records SDK clients of both eras against the legacy SDK server (pass-through
and the modern-client bridge) into a capture that rotates every few KiB. `mcp-proxy export --json`
of its parts given newest first must export what the parts given oldest first export, and say on
stderr that it read them in another order than given.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.record.completeness import capture_files
from proxy.record.mock_table import read_table
from tests.peers.runner import PeerServer
from tests.peers.scenarios import run_scenario
from tests.sidecar import ProxyProcess, clean_env, run_mcp_proxy, settings_env

pytestmark = pytest.mark.e2e


def outline(document: str) -> list[tuple[Any, ...]]:
    chains = json.loads(document)["chains"]
    return [
        (c["chain"]["id"], c["chain"].get("method"), c["chain"]["status"], len(c["messages"])) for c in chains
    ]


async def test_rotated_parts_given_newest_first_export_as_the_parts_given_oldest_first(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "run.jsonl"
    settings = settings_env(
        upstream=legacy_server.url, capture=capture, capture_max_bytes=3000, capture_keep=100
    )
    with ProxyProcess(clean_env(**settings)) as proxy:
        for mode in ("legacy", "2026-07-28"):
            for scenario in ("echo", "ask_name", "list_tools"):
                await run_scenario(proxy.endpoint(), mode, scenario)
        proxy.stop()
    parts = capture_files(capture)
    assert len(parts) >= 4, parts

    oldest_first = run_mcp_proxy("export", "--json", "-", *map(str, parts))
    newest_first = run_mcp_proxy("export", "--json", "-", *map(str, reversed(parts)))

    assert oldest_first.returncode == newest_first.returncode == 0, newest_first.stderr
    assert "reading the captures" not in oldest_first.stderr
    assert outline(newest_first.stdout) == outline(oldest_first.stdout)
    assert len(outline(oldest_first.stdout)) >= 6
    said = [line for line in newest_first.stderr.splitlines() if "oldest first" in line]
    assert said == [
        "mcp-proxy export: reading the captures oldest first, by the time each file was started: "
        + ", ".join(map(str, parts))
    ]
    assert json.loads(newest_first.stdout)["sources"] == [str(p) for p in parts]

    # `mcp-proxy mock` reads the parts the same way: the table it serves does not depend on the order.
    table, report = read_table(parts)
    backwards, told = read_table(list(reversed(parts)))
    assert report.order_notes == []
    assert told.read == parts
    assert told.order_notes, told
    assert (backwards.size, told.unanswered) == (table.size, report.unanswered)
    assert sorted(backwards.operations) == sorted(table.operations)
