"""JSONL capture: every event round-trips, the header guards the format, damage is tolerated or named."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import orjson
import pytest

import proxy
from proxy.flows.events import (
    ChainChanged,
    ChainOpened,
    ChainStatus,
    ChainSummary,
    Channel,
    ContinuationChanged,
    Direction,
    FlowEvent,
    HttpInfo,
    Lagged,
    MessageRecord,
    MessageRecorded,
    Mode,
    ProxyInfo,
    SessionChanged,
    Side,
    event_to_json,
)
from proxy.record.capture import (
    FORMAT_NAME,
    FORMAT_VERSION,
    KNOWN_EVENT_TYPES,
    MAX_CORRUPT_SHOWN,
    MAX_UNKNOWN_SHOWN,
    CaptureError,
    CaptureFormatError,
    CaptureReader,
    CaptureWriter,
    read_capture,
)


def summary(chain_id: str = "c1", **kw: Any) -> ChainSummary:
    return ChainSummary(id=chain_id, started=1.5, method="tools/call", name="echo", jsonrpc_id=7, **kw)


def message(seq: int = 1) -> MessageRecorded:
    return MessageRecorded(
        chain_id="c1",
        message=MessageRecord(
            seq=seq,
            ts=2.0,
            side=Side.CLIENT,
            direction=Direction.TO_SERVER,
            channel=Channel.POST,
            exchange="x1",
            kind="request",
            jsonrpc_id="abc",
            method="tools/call",
            size=42,
            body={
                "jsonrpc": "2.0",
                "id": "abc",
                "method": "tools/call",
                "params": {"name": "é", "n": [1, 2]},
            },
            http=HttpInfo(
                method="POST", path="/mcp", headers={"Authorization": "Bearer <redacted len=1 ...>"}
            ),
            sse_id="ev-1",
            round=1,
            note="hello",
        ),
    )


def info(upstream: str = "http://up/mcp") -> ProxyInfo:
    return ProxyInfo(
        ts=1.0, version="0.1.0", listen="127.0.0.1:9900", upstream=upstream, upstream_era="modern"
    )


ALL_EVENTS: list[FlowEvent] = [
    info(),
    ChainOpened(chain=summary(mode=Mode.MRTR_TO_LEGACY)),
    message(),
    ChainChanged(
        chain=summary(status=ChainStatus.OK, ended=3.0, duration_ms=1.5, notes=["bridged"], http_status=200)
    ),
    SessionChanged(ts=4.0, session="<redacted len=3 sha256:00000000>", state="opened", client_name="cli"),
    ContinuationChanged(ts=5.0, chain_id="c1", state="parked", pending_keys=["k1", "k2"], age_ms=12.5),
    Lagged(dropped=3),
]


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


def test_every_event_type_is_covered() -> None:
    assert {e.type for e in ALL_EVENTS} == KNOWN_EVENT_TYPES


def test_round_trip_of_every_event_type(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with CaptureWriter(path) as writer:
        for event in ALL_EVENTS:
            writer.write(event)
        assert writer.events_written == len(ALL_EVENTS)
    assert writer.bytes_written == path.stat().st_size
    assert list(read_capture(path)) == ALL_EVENTS


def test_header_line(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    CaptureWriter(path, clock=lambda: 123.25).close()
    header = orjson.loads(lines(path)[0])
    assert header == {
        "format": FORMAT_NAME,
        "version": "1.16",
        "created": 123.25,
        "proxy_version": proxy.__version__,
        "series": 123.25,
    }
    with CaptureReader(path) as reader:
        assert reader.header == header
        assert list(reader) == []


def test_parent_directory_is_created(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "run.jsonl"
    with CaptureWriter(path) as writer:
        writer.write(Lagged(dropped=1))
        assert writer.path == path
    assert list(read_capture(path)) == [Lagged(dropped=1)]


def test_flush_makes_lines_visible_before_close(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    writer = CaptureWriter(path)
    writer.write(Lagged(dropped=1))
    writer.flush()
    assert list(read_capture(path)) == [Lagged(dropped=1)]
    writer.close()
    writer.close()  # idempotent
    with pytest.raises(CaptureError, match="closed"):
        writer.write(Lagged(dropped=2))


# -- header validation -----------------------------------------------------------------------


def write_raw(path: Path, *rows: bytes) -> Path:
    path.write_bytes(b"".join(rows))
    return path


def header(**over: object) -> bytes:
    obj = {"format": FORMAT_NAME, "version": "1.0", "created": 1.0, "proxy_version": "0.1.0", **over}
    return orjson.dumps(obj) + b"\n"


def test_a_newer_major_version_is_refused_by_name(tmp_path: Path) -> None:
    path = write_raw(
        tmp_path / "new.jsonl", header(version="2.0"), orjson.dumps({"type": "lagged", "dropped": 1})
    )
    with pytest.raises(CaptureFormatError) as info_:
        list(read_capture(path))
    assert (
        info_.value.reason == "capture format 2.0 is newer than this mcp-proxy reads (1.x); upgrade mcp-proxy"
    )
    assert info_.value.line == 1
    assert str(path) in str(info_.value)


def test_a_newer_minor_version_is_read(tmp_path: Path) -> None:
    path = write_raw(
        tmp_path / "new.jsonl",
        header(version="1.13", extra="a field this version does not know"),
        orjson.dumps({"type": "lagged", "dropped": 1}) + b"\n",
    )
    assert list(read_capture(path)) == [Lagged(dropped=1)]


def test_a_capture_from_before_the_observation_schema_is_refused_naming_why(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "old.jsonl", header(version=1))
    with pytest.raises(CaptureFormatError, match=r"capture format 1 .*predates the observation schema"):
        CaptureReader(path)


@pytest.mark.parametrize(
    "first",
    [
        header(format="something-else"),
        b"not json at all\n",
        b"[1, 2]\n",
        header(version="1"),
        header(version="0.9"),
        header(version="1.x"),
        header(version=0),
    ],
)
def test_foreign_or_invalid_header_is_refused(tmp_path: Path, first: bytes) -> None:
    path = write_raw(tmp_path / "x.jsonl", first)
    with pytest.raises(CaptureFormatError, match=r"x\.jsonl:1: "):
        CaptureReader(path)


def test_empty_file_is_refused(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "empty.jsonl")
    with pytest.raises(CaptureFormatError, match="empty"):
        list(read_capture(path))


def test_extra_header_fields_are_kept(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "x.jsonl", header(host="sidecar-1"))
    with CaptureReader(path) as reader:
        assert reader.header["host"] == "sidecar-1"


# -- damage ----------------------------------------------------------------------------------


def test_truncated_last_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with CaptureWriter(path) as writer:
        writer.write(message(1))
        writer.write(message(2))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 25])  # killed mid-write
    with CaptureReader(path) as reader:
        events = list(reader)
        assert reader.truncated
    assert events == [message(1)]


def test_complete_last_line_without_newline_is_kept(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "x.jsonl", header(), orjson.dumps({"type": "lagged", "dropped": 4}))
    with CaptureReader(path) as reader:
        assert list(reader) == [Lagged(dropped=4)]
        assert not reader.truncated


@pytest.mark.parametrize(
    "bad",
    [b'{"type":"lagged","dropp\n', b"garbage\n", b'{"type":"lagged"}\n', b'{"no_type":1}\n', b"[]\n"],
)
def test_corrupt_middle_line_is_skipped_and_reported_with_its_number(tmp_path: Path, bad: bytes) -> None:
    good = orjson.dumps({"type": "lagged", "dropped": 1}) + b"\n"
    path = write_raw(tmp_path / "x.jsonl", header(), good, good, bad, good)
    with CaptureReader(path) as reader:
        assert list(reader) == [Lagged(dropped=1)] * 3
        assert reader.corrupt_lines == 1
        assert reader.corrupt[0][0] == 4
        not_json = not bad.startswith((b'{"type":"lagged"}', b'{"no_type"', b"[]"))
        said = "corrupt line (not JSON)" if not_json else "corrupt event line"
        assert reader.corrupt[0][1].startswith(said)


@pytest.mark.parametrize("bad", [b"garbage\n", b'{"type":"lagged"}\n'])
def test_a_strict_reader_raises_on_a_corrupt_line_naming_it(tmp_path: Path, bad: bytes) -> None:
    good = orjson.dumps({"type": "lagged", "dropped": 1}) + b"\n"
    path = write_raw(tmp_path / "x.jsonl", header(), good, bad, good)
    with (
        CaptureReader(path, strict=True) as reader,
        pytest.raises(CaptureFormatError, match=r"x\.jsonl:3: corrupt (event )?line") as err,
    ):
        list(reader)
    assert err.value.line == 3


def test_corrupt_last_line_with_newline_is_skipped_and_counted(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "x.jsonl", header(), b'{"type":"lagged","dr\n')
    with CaptureReader(path) as reader:
        assert list(reader) == []
        assert reader.corrupt_lines == 1
        assert not reader.truncated


def test_many_corrupt_lines_are_all_counted_and_the_first_few_described(tmp_path: Path) -> None:
    good = orjson.dumps({"type": "lagged", "dropped": 1}) + b"\n"
    path = write_raw(tmp_path / "x.jsonl", header(), *([b"junk\n"] * 50), good)
    with CaptureReader(path) as reader:
        assert list(reader) == [Lagged(dropped=1)]
        assert reader.corrupt_lines == 50
        assert len(reader.corrupt) == MAX_CORRUPT_SHOWN


def test_unknown_event_types_from_a_newer_proxy_are_skipped(tmp_path: Path) -> None:
    future = orjson.dumps({"type": "from_the_future", "x": 1}) + b"\n"
    path = write_raw(
        tmp_path / "x.jsonl",
        header(version="1.99"),
        future,
        orjson.dumps({"type": "lagged", "dropped": 2}) + b"\n",
    )
    with CaptureReader(path) as reader:
        assert list(reader) == [Lagged(dropped=2)]
        assert (reader.skipped_unknown, reader.corrupt_lines) == (1, 0)
        assert reader.unknown == [(2, "type 'from_the_future'")]


def test_many_lines_of_a_newer_minor_are_all_counted_and_the_first_few_named(tmp_path: Path) -> None:
    future = orjson.dumps({"type": "obs", "kind": "from_the_future", "t": 1.0}) + b"\n"
    path = write_raw(tmp_path / "x.jsonl", header(version="1.99"), *[future] * (MAX_UNKNOWN_SHOWN + 5))
    with CaptureReader(path) as reader:
        assert list(reader) == []
        assert reader.skipped_unknown == MAX_UNKNOWN_SHOWN + 5
        assert reader.unknown == [(n, "kind 'from_the_future'") for n in range(2, MAX_UNKNOWN_SHOWN + 2)]


def test_an_unknown_event_type_in_a_file_of_this_version_is_a_corrupt_line(tmp_path: Path) -> None:
    damaged = orjson.dumps({"type": "lagge", "dropped": 1}) + b"\n"
    path = write_raw(
        tmp_path / "x.jsonl", header(), damaged, orjson.dumps({"type": "lagged", "dropped": 2}) + b"\n"
    )
    with CaptureReader(path) as reader:
        assert list(reader) == [Lagged(dropped=2)]
        assert (reader.skipped_unknown, reader.corrupt_lines) == (0, 1)
        assert reader.corrupt == [
            (2, "corrupt event line: unknown type 'lagge' (capture format 1.0 has no such type)")
        ]


def test_blank_lines_are_ignored(tmp_path: Path) -> None:
    path = write_raw(
        tmp_path / "x.jsonl", header(), b"\n", orjson.dumps({"type": "lagged", "dropped": 2}) + b"\n"
    )
    assert list(read_capture(path)) == [Lagged(dropped=2)]


# -- appending to an existing file -----------------------------------------------------------


def test_reopening_existing_capture_appends_without_second_header(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with CaptureWriter(path) as writer:
        writer.write(Lagged(dropped=1))
    with CaptureWriter(path) as writer:
        writer.write(Lagged(dropped=2))
    assert sum(b'"format"' in line for line in lines(path)) == 1
    assert list(read_capture(path)) == [Lagged(dropped=1), Lagged(dropped=2)]


def test_appending_after_a_crash_cuts_the_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with CaptureWriter(path) as writer:
        writer.write(message(1))
        writer.write(message(2))
    data = path.read_bytes()
    path.write_bytes(data[:-30])
    with CaptureWriter(path) as writer:
        writer.write(Lagged(dropped=9))
    assert list(read_capture(path)) == [message(1), Lagged(dropped=9)]


def test_a_torn_header_is_replaced(tmp_path: Path) -> None:
    path = write_raw(tmp_path / "run.jsonl", header()[:20])
    with CaptureWriter(path) as writer:
        writer.write(Lagged(dropped=1))
    assert list(read_capture(path)) == [Lagged(dropped=1)]


@pytest.mark.parametrize(
    "content", [b"precious user data\nline two\n", b"no newline here", header(version="2.0")]
)
def test_refuses_to_append_to_a_file_that_is_not_a_v1_capture(tmp_path: Path, content: bytes) -> None:
    path = write_raw(tmp_path / "notes.txt", content)
    with pytest.raises(CaptureError, match=r"refusing to append to .*notes\.txt"):
        CaptureWriter(path)
    assert path.read_bytes() == content


def test_a_capture_another_writer_holds_is_refused_naming_it_and_free_once_that_one_closes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run.jsonl"
    with CaptureWriter(path) as first:
        first.write(Lagged(dropped=1))
        with pytest.raises(CaptureError, match=r"run\.jsonl is being written by another process"):
            CaptureWriter(path)
        first.write(Lagged(dropped=2))
    with CaptureWriter(path) as later:
        later.write(Lagged(dropped=3))
    assert list(read_capture(path)) == [Lagged(dropped=1), Lagged(dropped=2), Lagged(dropped=3)]


# -- rotation --------------------------------------------------------------------------------


def test_rotation_by_size_keeps_keep_files_each_with_a_header(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    one = len(orjson.dumps(message(1).model_dump(mode="json", exclude_none=True))) + 1
    writer = CaptureWriter(path, max_bytes=3 * one + 200, keep=2)
    writer.write(info())
    for seq in range(1, 31):
        writer.write(message(seq))
    writer.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["run.jsonl", "run.jsonl.1", "run.jsonl.2"]
    seen: list[int] = []
    for name in ["run.jsonl.2", "run.jsonl.1", "run.jsonl"]:
        file = tmp_path / name
        assert file.stat().st_size <= 3 * one + 200
        with CaptureReader(file) as reader:
            assert reader.header["format"] == FORMAT_NAME
            events = list(reader)
        # Each file is readable on its own: it repeats the latest ProxyInfo first.
        assert events[0] == info()
        seen += [e.message.seq for e in events[1:] if isinstance(e, MessageRecorded)]
    assert seen == list(range(seen[0], 31))  # newest files hold the newest events, in order
    assert seen[0] > 1  # the oldest were deleted
    assert writer.events_written > 31  # the ProxyInfo repeated at the top of each new file counts


def test_rotation_with_keep_zero_keeps_only_the_current_file(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with CaptureWriter(path, max_bytes=400, keep=0) as writer:
        for seq in range(10):
            writer.write(message(seq))
    assert [p.name for p in tmp_path.iterdir()] == ["run.jsonl"]
    assert [e.message.seq for e in read_capture(path) if isinstance(e, MessageRecorded)] == [9]


def test_an_event_larger_than_max_bytes_still_gets_written(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with CaptureWriter(path, max_bytes=10, keep=3) as writer:
        writer.write(message(1))
        writer.write(message(2))
    assert [e for e in read_capture(path)] == [message(2)]
    assert list(read_capture(tmp_path / "run.jsonl.1")) == [message(1)]
    assert not (tmp_path / "run.jsonl.2").exists()


def test_a_new_proxy_info_is_not_duplicated_on_rotation(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with CaptureWriter(path, max_bytes=10, keep=3) as writer:
        writer.write(info("http://a/mcp"))
        writer.write(info("http://b/mcp"))
    assert list(read_capture(path)) == [info("http://b/mcp")]


def test_each_rotated_file_says_which_file_it_follows(tmp_path: Path) -> None:
    """A reader given the parts with one left out between them can tell from the headers alone."""
    path = tmp_path / "run.jsonl"
    ticks = iter(range(100, 200))
    with CaptureWriter(path, max_bytes=10, keep=5, clock=lambda: float(next(ticks))) as writer:
        for seq in range(3):
            writer.write(message(seq))
    names = ("run.jsonl.2", "run.jsonl.1", "run.jsonl")
    headers = [orjson.loads(lines(tmp_path / name)[0]) for name in names]
    assert [(h["created"], h.get("follows"), h["series"]) for h in headers] == [
        (100.0, None, 100.0),
        (101.0, 100.0, 100.0),
        (102.0, 101.0, 100.0),
    ]


def test_a_restarted_proxy_rotating_a_file_it_appended_to_says_that_file_is_followed(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    CaptureWriter(path, clock=lambda: 100.0).close()
    with CaptureWriter(path, max_bytes=10, clock=lambda: 200.0) as writer:
        writer.write(message(1))  # the appended file is over max_bytes: it rotates first
    assert orjson.loads(lines(tmp_path / "run.jsonl.1")[0])["created"] == 100.0
    header = orjson.loads(lines(path)[0])
    assert (header["follows"], header["series"]) == (100.0, 100.0)


def test_a_restarted_proxy_keeps_the_series_of_the_parts_it_appends_to(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    ticks = iter(range(100, 200))
    CaptureWriter(path, max_bytes=10, clock=lambda: float(next(ticks))).close()
    with CaptureWriter(path, max_bytes=10, clock=lambda: float(next(ticks))) as writer:
        writer.write(message(1))
        writer.write(message(2))
    with CaptureWriter(path, max_bytes=10, clock=lambda: float(next(ticks))) as writer:
        writer.write(message(3))
    headers = [orjson.loads(lines(tmp_path / n)[0]) for n in ("run.jsonl.3", "run.jsonl.2", "run.jsonl.1")]
    headers.append(orjson.loads(lines(path)[0]))
    assert {h["series"] for h in headers} == {100.0}


def test_a_file_started_with_no_file_before_it_starts_a_series_of_its_own(tmp_path: Path) -> None:
    """A fresh capture path (another proxy's, or one given after the old file was moved away before a
    restart) is not tied to any other file."""
    CaptureWriter(tmp_path / "a.jsonl", clock=lambda: 100.0).close()
    CaptureWriter(tmp_path / "b.jsonl", clock=lambda: 200.0).close()
    a, b = (orjson.loads(lines(tmp_path / n)[0]) for n in ("a.jsonl", "b.jsonl"))
    assert (a["series"], b["series"], "follows" in b) == (100.0, 200.0, False)


# -- reopen (external log rotation) ----------------------------------------------------------


def test_reopen_after_logrotate_moved_the_file(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    writer = CaptureWriter(path)
    writer.write(info())
    writer.write(message(1))
    path.rename(tmp_path / "run.jsonl.old")  # logrotate's rename; the writer still holds the old file
    writer.write(message(2))  # still lands in the moved file
    writer.reopen()
    writer.write(message(3))
    writer.close()
    assert list(read_capture(tmp_path / "run.jsonl.old")) == [info(), message(1), message(2)]
    assert lines(path)[0].startswith(b'{"format":"' + FORMAT_NAME.encode())
    old, new = (orjson.loads(lines(p)[0]) for p in (tmp_path / "run.jsonl.old", path))
    assert (new["follows"], new["series"]) == (old["created"], old["series"])
    assert list(read_capture(path)) == [info(), message(3)]


def test_a_reopened_file_is_a_capture_at_once_before_the_next_exchange(tmp_path: Path) -> None:
    """A reader (tail -f, tui --open) of the new file finds its header and proxy_info straight after
    SIGUSR1, not only after traffic comes."""
    path = tmp_path / "run.jsonl"
    writer = CaptureWriter(path)
    writer.write(info())
    path.rename(tmp_path / "run.jsonl.old")
    writer.reopen()
    assert list(read_capture(path)) == [info()]  # nothing written since, and no close either
    writer.close()


def test_reopen_in_place_appends(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    writer = CaptureWriter(path)
    writer.write(Lagged(dropped=1))
    writer.reopen()
    writer.write(Lagged(dropped=2))
    writer.close()
    assert list(read_capture(path)) == [Lagged(dropped=1), Lagged(dropped=2)]
    with pytest.raises(CaptureError, match="closed"):
        writer.reopen()


def test_a_file_truncated_under_the_writer_starts_again_before_the_next_lines_and_says_so(
    tmp_path: Path,
) -> None:
    """`copytruncate` empties the file the writer appends to: the next batch must land after a new
    header, the latest `proxy_info` and what is still open, never in a headerless file."""
    path = tmp_path / "run.jsonl"
    writer = CaptureWriter(path)
    told: list[tuple[int, int]] = []
    writer.on_cut = lambda found, flushed: told.append((found, flushed))
    writer.preamble = lambda: [b'{"still":"open"}\n']
    writer.write(info())
    writer.write_lines([event_to_json(message(1)) + b"\n"])
    writer.flush()
    flushed = path.stat().st_size
    old_header = orjson.loads(lines(path)[0])
    for cut_to in (0, 10):  # logrotate's truncation, and one that leaves the header's first bytes
        os.truncate(path, cut_to)
        writer.write_lines([event_to_json(message(2)) + b"\n"])
        writer.flush()
        assert told[-1] == (cut_to, flushed)
        header, *rest = lines(path)
        assert (orjson.loads(header)["follows"], rest) == (
            old_header["created"],
            [event_to_json(info()), b'{"still":"open"}', event_to_json(message(2))],
        )
        flushed, old_header = path.stat().st_size, orjson.loads(header)
    writer.write_lines([event_to_json(message(3)) + b"\n"])  # not cut since: appended, nothing said
    writer.close()
    assert len(told) == 2
    assert lines(path)[-1] == event_to_json(message(3))


# -- errors ----------------------------------------------------------------------------------


def test_unwritable_path_raises_capture_error_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where a directory should be")
    path = blocker / "run.jsonl"
    with pytest.raises(CaptureError) as err:
        CaptureWriter(path)
    assert isinstance(err.value, OSError)
    assert str(path.parent) in str(err.value)
    assert err.value.path == path


def test_directory_as_path_raises_capture_error(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match=str(tmp_path)):
        CaptureWriter(tmp_path)


def test_missing_capture_raises_capture_error(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match=r"missing\.jsonl"):
        CaptureReader(tmp_path / "missing.jsonl")


@pytest.mark.parametrize(("max_bytes", "keep"), [(-1, 5), (0, -1)])
def test_bad_arguments(tmp_path: Path, max_bytes: int, keep: int) -> None:
    with pytest.raises(ValueError, match=">= 0"):
        CaptureWriter(tmp_path / "run.jsonl", max_bytes=max_bytes, keep=keep)


def test_the_format_reference_and_the_readme_name_the_version_this_code_writes() -> None:
    root = Path(__file__).resolve().parents[2]
    reference = (root / "docs" / "capture-format.md").read_text()
    assert reference.startswith(f"# Capture format {FORMAT_VERSION}\n")
    assert f'(this document: `"{FORMAT_VERSION}"`' in reference
    assert f'"version": "{FORMAT_VERSION}", "created"' in reference
    readme = (root / "README.md").read_text()
    assert not re.search(r"capture-format\.md\)? \(version \d", readme)  # stated once, in the reference
