"""A rotated capture of real traffic exported with its parts in any order, twice, or with one missing.

The `mcp-proxy` command records SDK clients of both eras against the legacy SDK server (pass-through
and the modern-client bridge) into a capture that rotates every few KiB. `mcp-proxy export --json`
of its parts given newest first must export what the parts given oldest first export, and say on
stderr that it read them in another order than given. A copy of a part given too (a glob that caught
it) is read once and named; a part left out from the middle is named by the parts around it, on
stderr and in the export; neither fails the export, which writes what it was given.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
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


async def recorded_parts(server: PeerServer, directory: Path) -> list[Path]:
    """The parts, oldest first, of a capture of SDK clients of both eras rotated every few KiB."""
    capture = directory / "run.jsonl"
    settings = settings_env(upstream=server.url, capture=capture, capture_max_bytes=3000, capture_keep=100)
    with ProxyProcess(clean_env(**settings)) as proxy:
        for mode in ("legacy", "2026-07-28"):
            for scenario in ("echo", "ask_name", "list_tools"):
                await run_scenario(proxy.endpoint(), mode, scenario)
        proxy.stop()
    parts = capture_files(capture)
    assert len(parts) >= 4, parts
    return parts


async def test_rotated_parts_given_newest_first_export_as_the_parts_given_oldest_first(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    parts = await recorded_parts(legacy_server, tmp_path)

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


async def test_a_copy_of_a_part_given_with_the_parts_is_read_once_and_named(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    parts = await recorded_parts(legacy_server, tmp_path)
    copy = tmp_path / "stale-copy.jsonl"
    shutil.copyfile(parts[1], copy)

    alone = run_mcp_proxy("export", "--json", "-", *map(str, parts))
    with_copy = run_mcp_proxy("export", "--json", "-", *map(str, parts), str(copy))  # `run.jsonl* stale*`

    assert with_copy.returncode == 0, with_copy.stderr
    assert outline(with_copy.stdout) == outline(alone.stdout)
    told = f"mcp-proxy export: not reading {copy}: it is a copy of {parts[1]} (the same header, and "
    assert [line for line in with_copy.stderr.splitlines() if line.startswith(told)], with_copy.stderr
    document = json.loads(with_copy.stdout)
    assert document["sources"] == [str(p) for p in parts]
    assert document["parts"] == {"copies": [{"file": str(copy), "same_as": str(parts[1])}], "missing": []}


async def test_a_part_left_out_from_the_middle_is_named_on_stderr_and_in_the_export(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    parts = await recorded_parts(legacy_server, tmp_path)
    before, left_out, after = parts[0], parts[1], parts[2]
    given = [p for p in parts if p != left_out]
    started = json.loads(left_out.read_bytes().split(b"\n", 1)[0])["created"]

    chains = run_mcp_proxy("export", "--json", "-", *map(str, given))
    har = run_mcp_proxy("export", "--har", "-", *map(str, given))

    assert chains.returncode == har.returncode == 0, chains.stderr
    gap = f"a capture part is missing between {before} and {after}: {after} continues a file started at "
    assert [line for line in chains.stderr.splitlines() if line.startswith(f"mcp-proxy export: {gap}")]
    (missing,) = json.loads(chains.stdout)["parts"]["missing"]
    assert (missing["after"], missing["before"]) == (str(before), str(after))
    when = datetime.fromtimestamp(started, UTC).isoformat(timespec="milliseconds")
    assert missing["follows"] == when.replace("+00:00", "Z")
    assert gap in json.loads(har.stdout)["log"]["comment"]
