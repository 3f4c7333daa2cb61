"""The capture files read, and their order: each part once, by the start time in each file's header
(else as given), and the parts the headers say are missing named."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from proxy.record.capture import make_header
from proxy.record.parts import MAX_SIBLINGS, later_part, oldest_first


def part(
    directory: Path,
    name: str,
    created: object,
    *,
    follows: float | None = None,
    series: float | None = None,
    body: bytes = b"",
) -> Path:
    header = make_header(0.0, follows, series)
    header["created"] = created
    path = directory / name
    path.write_bytes(orjson.dumps(header) + b"\n" + body)
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
    same_a, same_b = part(tmp_path, "a", 10.0, body=b"{}\n"), part(tmp_path, "b", 10.0, body=b"[]\n")
    unknown = part(tmp_path, "c", "yesterday")
    later = part(tmp_path, "d", 50.0)

    order = oldest_first([later, same_b, same_a, unknown])

    assert order.paths == [later, same_b, same_a, unknown]
    assert not order.reordered
    assert order.unsure == [same_b, same_a, unknown]
    (note,) = order.notes()
    assert note.startswith(f"cannot tell which is older of {same_b}, {same_a}, {unknown}")
    assert note.endswith("read in the order given")


def test_one_file_without_a_start_time_is_named_for_itself_not_for_an_order(tmp_path: Path) -> None:
    alone = part(tmp_path, "a", "yesterday")
    dated = part(tmp_path, "b", 10.0)

    assert oldest_first([alone]).notes() == [
        f"{alone}: its header gives no start time (its `created` is missing or not a number)"
    ]
    assert oldest_first([dated, alone]).notes() == [
        f"cannot tell where {alone} goes among the other files (its header gives no start time): "
        "read in the order given"
    ]


def test_a_copy_of_a_part_under_another_name_is_read_once_and_named(tmp_path: Path) -> None:
    older = part(tmp_path, "run.jsonl.2", 10.0, body=b"{}\n")
    kept = part(tmp_path, "run.jsonl.1", 20.0, follows=10.0, body=b"{}\n{}\n")
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(kept.read_bytes())

    order = oldest_first([older, kept, copy])

    assert order.paths == [older, kept]
    assert not order.reordered
    assert order.notes() == [
        f"not reading {copy}: it is a copy of {kept} (the same header, and {kept} holds all its lines), "
        "read once"
    ]
    assert order.summary() == {"copies": [{"file": str(copy), "same_as": str(kept)}], "missing": []}


def test_a_copy_taken_while_the_part_was_written_gives_way_to_the_part_holding_more(tmp_path: Path) -> None:
    stale = part(tmp_path, "stale.jsonl", 10.0, body=b'{"a":1}\n')
    whole = part(tmp_path, "run.jsonl", 10.0, body=b'{"a":1}\n{"b":2}\n')

    order = oldest_first([stale, whole])

    assert order.paths == [whole]
    assert [(c.path, c.same_as) for c in order.copies] == [(stale, whole)]
    assert order.unsure == []


def test_the_same_file_given_twice_is_read_once(tmp_path: Path) -> None:
    capture = part(tmp_path, "run.jsonl", 10.0)

    order = oldest_first([capture, capture])

    assert order.paths == [capture]
    assert order.notes() == [f"{capture} is given twice: read once"]


def test_a_part_left_out_between_two_given_is_named_by_the_parts_around_it(tmp_path: Path) -> None:
    fifth = part(tmp_path, "run.jsonl.5", 1796418282.5, follows=1796418282.4, series=1796418282.0)
    third = part(tmp_path, "run.jsonl.3", 1796418282.7, follows=1796418282.6, series=1796418282.0)
    second = part(tmp_path, "run.jsonl.2", 1796418282.8, follows=1796418282.7, series=1796418282.0)

    order = oldest_first([fifth, third, second])

    assert order.paths == [fifth, third, second]
    assert order.notes() == [
        f"a capture part is missing between {fifth} and {third}: {third} continues a file started at "
        "2026-12-04T21:04:42.600Z, which was not given: what went on in it is not read (its calls end "
        "pending, or lack their start); give every part"
    ]
    assert order.summary() == {
        "copies": [],
        "missing": [{"after": str(fifth), "before": str(third), "follows": "2026-12-04T21:04:42.600Z"}],
    }


def test_parts_before_the_oldest_given_are_not_missing(tmp_path: Path) -> None:
    newest_two = [
        part(tmp_path, "run.jsonl.1", 20.0, follows=10.0, series=10.0),
        part(tmp_path, "run.jsonl", 30.0, follows=20.0, series=10.0),
    ]

    order = oldest_first(newest_two)

    assert order.gaps == []
    assert order.notes() == []


def test_another_capture_given_beside_parts_whose_older_parts_were_rotated_away_makes_none_missing(
    tmp_path: Path,
) -> None:
    """`export dir/*.jsonl` over two proxies' captures: the other one started first, which proves
    nothing about the parts before the rotated one."""
    other = part(tmp_path, "other.jsonl", 5.0, series=5.0)
    rotated = part(tmp_path, "run.jsonl", 30.0, follows=20.0, series=10.0)

    order = oldest_first([other, rotated])

    assert order.paths == [other, rotated]
    assert order.gaps == []
    assert order.notes() == []
    assert order.summary() is None


def test_a_part_missing_is_named_by_the_parts_of_its_own_capture_not_by_another_given_between(
    tmp_path: Path,
) -> None:
    first = part(tmp_path, "run.jsonl.3", 10.0, series=10.0)
    other = part(tmp_path, "other.jsonl", 15.0, series=15.0)
    third = part(tmp_path, "run.jsonl.1", 30.0, follows=20.0, series=10.0)

    order = oldest_first([first, other, third])

    assert [(g.after, g.before, g.follows) for g in order.gaps] == [(first, third, 20.0)]


def test_parts_that_name_no_series_are_never_said_to_miss_one(tmp_path: Path) -> None:
    """A file that follows another but names no series was written before `series`: nothing ties it to
    an older file given, so nothing is claimed."""
    older = part(tmp_path, "run.jsonl.2", 10.0)
    newer = part(tmp_path, "run.jsonl", 30.0, follows=20.0)

    assert oldest_first([older, newer]).gaps == []


def test_copies_nested_one_in_another_are_each_named_with_the_file_read_in_their_place(
    tmp_path: Path,
) -> None:
    """Three copies of one part taken as it grew (a ⊂ b ⊂ c): only c is read, so a and b are both
    copies of c, never of b, which is not read."""
    lines = [b'{"n":1}\n', b'{"n":2}\n', b'{"n":3}\n']
    a, b, c = (
        part(tmp_path, name, 10.0, body=b"".join(lines[:n])) for name, n in (("a", 1), ("b", 2), ("c", 3))
    )

    order = oldest_first([a, b, c])

    assert order.paths == [c]
    assert order.summary() == {
        "copies": [{"file": str(a), "same_as": str(c)}, {"file": str(b), "same_as": str(c)}],
        "missing": [],
    }


def test_a_file_given_twice_and_a_bigger_copy_of_it_is_named_once_as_a_copy_of_the_file_read(
    tmp_path: Path,
) -> None:
    small = part(tmp_path, "stale.jsonl", 10.0, body=b'{"n":1}\n')
    whole = part(tmp_path, "run.jsonl", 10.0, body=b'{"n":1}\n{"n":2}\n')

    order = oldest_first([small, small, whole])

    assert order.paths == [whole]
    assert [(c.path, c.same_as) for c in order.copies] == [(small, whole)]


def listed(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every directory entry `Path.iterdir` hands out from now on, as it hands it out."""
    seen: list[Path] = []
    real = Path.iterdir

    def counting(self: Path) -> Iterator[Path]:
        for entry in real(self):
            seen.append(entry)
            yield entry

    monkeypatch.setattr(Path, "iterdir", counting)
    return seen


def test_the_rotated_part_after_a_file_is_found_without_listing_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    older = part(tmp_path, "run.jsonl.1", 10.0, series=10.0)
    newer = part(tmp_path, "run.jsonl", 20.0, follows=10.0, series=10.0)
    for n in range(50):
        part(tmp_path, f"other-{n}.jsonl", 100.0 + n)
    seen = listed(monkeypatch)

    assert later_part(older) == newer
    assert seen == []


def test_a_renamed_later_part_is_looked_for_among_a_bounded_number_of_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    older = part(tmp_path, "run.jsonl", 10.0, series=10.0)
    for n in range(MAX_SIBLINGS * 2):
        part(tmp_path, f"other-{n:04}.jsonl", 100.0 + n)
    seen = listed(monkeypatch)

    assert later_part(older) is None
    assert len(seen) <= MAX_SIBLINGS + 1  # the bound, and at most one entry skipped as `older` itself
