"""Rotated parts of a capture of real traffic, read alone and together.

The traffic is the demo's SDK clients of both eras through real proxies (pass-through and both
bridges). It is written again through the capture writer, which starts a new part (as a rotation
does, repeating what is still open) right before each call's exchange closes, after its response:
the case where a part read alone holds a call's request (repeated) and end, but not its response.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from proxy.flows.events import ProxyInfo
from proxy.flows.observations import ExchangeClosed, LegMessageSeen, MessageSeen, Observation
from proxy.record.capture import CaptureWriter
from proxy.record.export import Format, export_capture
from proxy.record.index import read_records, run_index
from proxy.record.observations import OBS_PREFIX, OpenLines, decode
from proxy.record.record_refs import OFFSET_BITS, RecordBuilder
from tests.flows.bridge_play import refused_leg_call
from tests.record.captures import full_har, full_read, record_demo, record_play


def split_after_responses(capture: Path, directory: Path) -> list[Path]:
    """Write `capture` again as parts, a new one begun before each exchange that carried a response closes."""
    answered: set[str] = set()

    def before(obs: Observation) -> bool:
        if isinstance(obs, MessageSeen) and obs.msg.is_response:
            answered.add(obs.exchange)
        return isinstance(obs, ExchangeClosed) and obs.exchange in answered

    return split(capture, directory, before)


def split(capture: Path, directory: Path, before: Callable[[Observation], bool]) -> list[Path]:
    """Write `capture` again as parts, a new one begun (as a rotation begins it) before each line
    `before` picks."""
    path = directory / "run.jsonl"
    parts: list[Path] = []
    opened = OpenLines()
    with CaptureWriter(path) as writer:
        writer.preamble = opened.preamble
        for line in capture.read_bytes().splitlines(keepends=True)[1:]:
            if not line.startswith(OBS_PREFIX):
                writer.write(ProxyInfo.model_validate(orjson.loads(line)))
                continue
            obs = decode(orjson.loads(line))
            if before(obs):
                writer.flush()
                parts.append(path.rename(directory / f"run.part{len(parts) + 1:03d}.jsonl"))
                writer.reopen()
            writer.write_lines([line])
            opened.wrote(obs, line)
    return [*parts, path]


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    directory = tmp_path_factory.mktemp("rotated")
    capture = record_demo(directory)
    return capture, split_after_responses(capture, directory)


def chains(paths: list[Path]) -> list[dict[str, object]]:
    out = io.BytesIO()
    export_capture(paths, Format.JSON, out)
    return [c["chain"] for c in orjson.loads(out.getvalue())["chains"]]


def test_a_part_read_alone_shows_a_call_whose_response_is_in_an_earlier_part_as_incomplete_not_error(
    parts: tuple[Path, list[Path]],
) -> None:
    capture, files = parts
    assert not [c for c in chains([capture]) if c["status"] in ("error", "incomplete")]
    alone = [(f.name, c) for f in files for c in chains([f])]

    errors = [(name, c["id"], c["method"], c.get("error")) for name, c in alone if c["status"] == "error"]
    incomplete = [c for _name, c in alone if c["status"] == "incomplete"]
    assert errors == []
    assert len(incomplete) > 10  # a call of every kind closed in a part after its response
    assert {c["method"] for c in incomplete} >= {"tools/call", "tools/list", "initialize"}
    for chain in incomplete:
        assert "error" not in chain
        notes: list[str] = chain["notes"]  # type: ignore[assignment]
        if chain.get("ended") is None:  # still open where its part ends: the next part holds its end
            assert "goes on in the later part run." in notes[-1]
        else:
            assert any("began in an earlier capture file" in note for note in notes)
    assert not [c for _name, c in alone if c["status"] == "pending"]


def test_the_parts_read_together_oldest_first_are_the_capture_read_whole(
    parts: tuple[Path, list[Path]],
) -> None:
    capture, files = parts
    whole = chains([capture])
    together = chains(files)

    def outline(found: list[dict[str, object]]) -> list[tuple[object, ...]]:
        return [(c.get("method"), c.get("name"), c["status"], c["messages"]) for c in found]

    assert outline(together) == outline(whole)


def test_the_index_of_rotated_parts_holds_each_chains_records_as_a_full_read_builds_them(
    parts: tuple[Path, list[Path]],
) -> None:
    _capture, files = parts
    headlines, full = full_read(files)
    records = {chain_id: [r.model_dump_json() for r in found] for chain_id, found in full.items()}
    spill, lines = io.BytesIO(), list[bytes]()

    run_index(files, spill, lines.append)

    indexed = [orjson.loads(line) for line in lines if line.startswith(b'{"type":"indexed"')]
    assert len(indexed) == len(headlines) > 10  # every chain handed over
    with RecordBuilder(files) as builder:
        built = {
            item["chain"]["id"]: [r.model_dump_json() for r in read_records(spill, item["records"], builder)]
            for item in indexed
        }
    assert built == {chain_id: records.get(chain_id, []) for chain_id in built}
    assert sum(map(len, built.values())) == sum(map(len, records.values()))
    positions = [orjson.loads(line)[0] for line in spill.getvalue().splitlines()]
    assert len({at >> OFFSET_BITS for at in positions}) > 2  # records in many parts


def test_a_lean_har_of_rotated_parts_is_the_full_builds(parts: tuple[Path, list[Path]]) -> None:
    _capture, files = parts
    lean = io.BytesIO()
    export_capture(files, Format.HAR, lean)

    assert lean.getvalue() == full_har(files)


def test_a_part_begun_between_a_legs_head_and_its_answer_repeats_the_head_for_the_answer_to_carry(
    tmp_path: Path,
) -> None:
    capture = tmp_path / "refused.jsonl"
    record_play(refused_leg_call, capture)

    def answer_on_leg_5(obs: Observation) -> bool:
        return isinstance(obs, LegMessageSeen) and obs.leg == "leg-5" and obs.msg.is_response

    first, second = split(capture, tmp_path, answer_on_leg_5)

    _, alone = full_read([second])
    (answer,) = [r for chain in alone.values() for r in chain if r.exchange == "leg-5" and r.kind == "result"]
    assert answer.http is not None
    assert answer.http.status == 200
    assert full_read([first, second]) == full_read([capture])  # the repeated head is not taken twice
