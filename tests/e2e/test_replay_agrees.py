"""Readers that build less agree with the full chain builder, on captures of real traffic.

The `mcp-proxy` command records SDK peers of both eras: through both bridges (a legacy client in
front of a 2026-07-28 server, a 2026-07-28 client in front of a legacy server that asks in flight)
and straight through (each client with a server of its own era), a bearer token on every request,
and a client body that is not JSON-RPC. The two captures are read as one (a capture and its rotated
part). Each lighter reader is held to the full build, the one a live watcher gets: the HAR export
(no message records, no headline announcements) byte for byte, the chain each message joined, and
the index pass (records by reference, built from the capture when shown) chain by chain, headline and
records. The token is never in what they write.
"""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import httpx
import orjson
import pytest

from proxy.flows.events import ChainStatus, ChainSummary, FlowEvent, MessageRecorded
from proxy.flows.filters import ChainFilter
from proxy.flows.store import ChainStore
from proxy.record.export import RING, Format, export_capture, open_readers
from proxy.record.index import read_records, run_index
from proxy.record.observations import ObservationReplayer
from proxy.record.record_refs import RecordBuilder
from tests.peers.runner import PeerServer
from tests.peers.scenarios import run_scenario
from tests.record.captures import full_har, full_read
from tests.sidecar import ProxyProcess, clean_env, settings_env

pytestmark = pytest.mark.e2e

SECRET = "replay-test-bearer-51c0e9aa"
MODERN = "2026-07-28"
AUTH = {"Authorization": f"Bearer {SECRET}"}


async def record(upstream: str, capture: Path, runs: list[tuple[str, str]]) -> None:
    """Run each (client mode, scenario) through a real `mcp-proxy` recording to `capture`, then a body
    that is not JSON-RPC."""
    env = clean_env(**settings_env(upstream=upstream, capture=capture, drain_grace=5))
    with ProxyProcess(env) as proxy:
        for mode, scenario in runs:
            await run_scenario(proxy.endpoint(), mode, scenario, headers=AUTH)
        async with httpx.AsyncClient(timeout=10) as http:
            refused = await http.post(
                proxy.endpoint(),
                content=b"this is not JSON-RPC",
                headers={**AUTH, "Content-Type": "application/json", "Accept": "application/json"},
            )
        assert refused.status_code >= 400
        proxy.stop()


MODERN_SERVER_RUNS = [
    ("legacy", "ask_name"),
    ("legacy", "ask_twice"),
    ("legacy", "slow_progress"),
    (MODERN, "ask_llm"),
]
"""Through the legacy_to_mrtr bridge (MRTR rounds, SSE streams, progress), and straight through."""

LEGACY_SERVER_RUNS = [
    (MODERN, "ask_name"),
    (MODERN, "ask_two_at_once"),
    ("legacy", "list_client_roots"),
    ("legacy", "fail"),
]
"""Through the mrtr_to_legacy bridge (parked calls, continuations), and straight through."""


@pytest.fixture(scope="module")
def captures(
    modern_server: PeerServer, legacy_server: PeerServer, tmp_path_factory: pytest.TempPathFactory
) -> list[Path]:
    """A 2026-07-28 server's capture, then a legacy server's: both bridges and pass-through."""
    directory = tmp_path_factory.mktemp("replay")
    modern, legacy = directory / "modern.jsonl", directory / "legacy.jsonl"
    asyncio.run(record(modern_server.url, modern, MODERN_SERVER_RUNS))
    asyncio.run(record(legacy_server.url, legacy, LEGACY_SERVER_RUNS))
    return [modern, legacy]


FILTERS = {
    "all": ChainFilter(),
    "ended ok": ChainFilter(statuses=frozenset({ChainStatus.OK})),  # entries wait for their chains' ends
    "text": ChainFilter(text="ask"),
    "method": ChainFilter(methods=frozenset({"tools/call"})),
}


@pytest.mark.parametrize("name", FILTERS)
async def test_the_lean_har_export_is_byte_for_byte_the_full_builds(captures: list[Path], name: str) -> None:
    out = io.BytesIO()
    report = export_capture(captures, Format.HAR, out, FILTERS[name])

    assert not report.any_skipped
    assert report.written > 5
    assert out.getvalue() == full_har(captures, FILTERS[name])
    text = out.getvalue().decode()
    assert SECRET not in text
    assert "Bearer <redacted len=" in text
    if name == "all":
        modes = {entry["_mcp"]["mode"] for entry in orjson.loads(out.getvalue())["log"]["entries"]}
        assert {"passthrough", "legacy_to_mrtr", "mrtr_to_legacy"} <= modes


async def test_each_message_joins_the_chain_the_full_build_files_it_in(captures: list[Path]) -> None:
    lean_chains: list[str | None] = []
    full_chains: list[str | None] = []

    def recorded(events: list[FlowEvent]) -> str | None:
        return next((e.chain_id for e in events if isinstance(e, MessageRecorded)), None)

    lean = ObservationReplayer(
        store=ChainStore(max_chains=RING),
        headlines=False,
        records=False,
        on_applied=lambda _obs, _events, chain: lean_chains.append(chain),
    )
    full = ObservationReplayer(
        store=ChainStore(max_chains=RING),
        on_applied=lambda _obs, events, _c: full_chains.append(recorded(events)),
    )
    for replayer in (lean, full):
        for reader in open_readers(captures, replayer):
            with reader:
                for _event in reader:
                    pass

    assert lean_chains == full_chains
    assert sum(1 for chain in full_chains if chain is not None) > 100


async def test_the_index_holds_each_chain_with_the_records_the_full_build_made(captures: list[Path]) -> None:
    spill, lines = io.BytesIO(), list[bytes]()
    end = run_index(captures, spill, lines.append)
    summaries, records = full_read(captures)

    indexed = [orjson.loads(line) for line in lines if line.startswith(b'{"type":"indexed"')]
    assert end["chains"] == len(indexed) == len(summaries) > 30
    assert end["corrupt_lines"] == 0
    assert spill.getvalue().startswith(b"[")  # records by reference, not copies
    shown = 0
    with RecordBuilder(captures) as builder:
        for item in indexed:
            summary = ChainSummary.model_validate(item["chain"])
            assert summary == summaries[summary.id]
            built = read_records(spill, item["records"], builder)
            assert [r.model_dump_json() for r in built] == [
                r.model_dump_json() for r in records.get(summary.id, [])
            ]
            assert all(SECRET not in r.model_dump_json() for r in built)
            shown += len(built)
    assert shown == sum(len(r) for r in records.values())
    kinds = {r.kind for rs in records.values() for r in rs}
    assert {"request", "result", "http", "invalid"} <= kinds
    assert any(r.http is not None and r.http.status is not None for rs in records.values() for r in rs)
