"""The order capture files are read in: by the start time in each file's header, else as given."""

from __future__ import annotations

from pathlib import Path

import orjson

from proxy.record.capture import make_header
from proxy.record.parts import oldest_first


def part(directory: Path, name: str, created: object) -> Path:
    header = make_header(0.0)
    header["created"] = created
    path = directory / name
    path.write_bytes(orjson.dumps(header) + b"\n")
    return path


def test_files_given_newest_first_are_read_oldest_first_and_the_change_is_said(tmp_path: Path) -> None:
    old, mid, new = part(tmp_path, "a.2", 10.0), part(tmp_path, "a.1", 20.5), part(tmp_path, "a", 31)

    order = oldest_first([new, old, mid])

    assert order.paths == [old, mid, new]
    assert order.reordered
    assert order.notes() == [
        f"reading the captures oldest first, by the time each file was started: {old}, {mid}, {new}"
    ]


def test_files_given_oldest_first_are_read_as_given_without_a_word(tmp_path: Path) -> None:
    old, new = part(tmp_path, "a.1", 10.0), part(tmp_path, "a", 20.0)

    order = oldest_first([old, new])

    assert order.paths == [old, new]
    assert order.notes() == []


def test_files_without_a_distinct_start_time_keep_the_order_given_and_are_named(tmp_path: Path) -> None:
    same_a, same_b = part(tmp_path, "a", 10.0), part(tmp_path, "b", 10.0)
    unknown = part(tmp_path, "c", "yesterday")
    later = part(tmp_path, "d", 50.0)

    order = oldest_first([later, same_b, same_a, unknown])

    assert order.paths == [later, same_b, same_a, unknown]
    assert not order.reordered
    assert order.unsure == [same_b, same_a, unknown]
    (note,) = order.notes()
    assert note.startswith(f"cannot tell which is older of {same_b}, {same_a}, {unknown}")
    assert note.endswith("read in the order given")
