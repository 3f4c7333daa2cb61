"""The capture reader on damaged files: it reads what it can, skips and counts the rest, never raises.

Whoever reads a capture (`tui --open`, exports, the soak's completeness check) may get a file that a
full disk, a killed proxy, an editor or an attacker damaged. The reader must then yield every event
of every line left intact (in order), count the lines it skipped, and raise nothing but
`CaptureFormatError` for a broken header; in strict mode, `CaptureFormatError` is the only exception.
Inputs: a capture of every event type plus observation lines of a relayed call, with lines flipped, cut,
duplicated, swapped, dropped, or replaced by garbage (binary, deep nesting, huge numbers, wrong types).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from proxy.flows.events import FlowEvent, event_from_json
from proxy.record.capture import CaptureFormatError, CaptureReader, CaptureWriter
from proxy.record.observations import OBS_PREFIX
from tests.fuzz.profile import examples
from tests.record.test_capture import ALL_EVENTS
from tests.record.test_capture_observations import _record


def _base() -> list[bytes]:
    """The lines (newline kept) of a capture: every event type and the observations of one relayed call."""
    with tempfile.TemporaryDirectory() as tmp:
        facts = Path(tmp) / "facts.jsonl"
        _record(facts)
        path = Path(tmp) / "all.jsonl"
        with CaptureWriter(path) as writer:
            for event in ALL_EVENTS:
                writer.write(event)
        events = path.read_bytes().splitlines(keepends=True)
        return events + facts.read_bytes().splitlines(keepends=True)[1:]


BASE = _base()
GARBAGE = [
    b"\x00\xff\xfe garbage\n",
    b"[]\n",
    b"null\n",
    b'"text"\n',
    b"{}\n",
    b'{"type":"chain_opened"}\n',
    b'{"type":"chain_opened","chain":' + b"[" * 5000 + b"\n",
    b'{"type":"message_recorded","chain_id":"c1","message":{"seq":1e999}}\n',
    b'{"type":"lagged","dropped":' + b"9" * 5000 + b"}\n",
    b'{"type":"obs","t":1,"kind":"message","exchange":"x9"}\n',
    b'{"type":"obs","t":1,"kind":"exchange_opened","exchange":null,"headers":[]}\n',
    b'{"type":"obs","kind":"nonsense"}\n',
    b'{"type":"obs"' + b"x" * 70_000 + b"\n",
    b'{"type":"from-a-newer-proxy","x":1}\n',
    b"\r\n",
    b"\n",
]


@st.composite
def damaged(draw: st.DrawFn) -> tuple[list[bytes], set[int]]:
    """The base capture's lines with some damaged; the indexes (into the result) of untouched lines."""
    lines = list(BASE)
    touched = [False] * len(lines)
    for _ in range(draw(st.integers(0, 4))):
        at = draw(st.integers(1, len(lines) - 1))  # the header stays: a broken header is its own test
        op = draw(st.sampled_from(["flip", "cut", "garbage", "dup", "swap", "drop"]))
        line = lines[at]
        if op == "flip" and len(line) > 1:
            pos = draw(st.integers(0, len(line) - 2))
            lines[at] = line[:pos] + bytes([draw(st.integers(0, 255))]) + line[pos + 1 :]
            touched[at] = True
        elif op == "cut":
            lines[at] = line[: draw(st.integers(0, len(line) - 1))] + b"\n"
            touched[at] = True
        elif op == "garbage":
            lines.insert(at, draw(st.sampled_from(GARBAGE) | st.binary(max_size=40).map(lambda b: b + b"\n")))
            touched.insert(at, True)
        elif op == "dup":
            lines.insert(at, line)
            touched.insert(at, True)
        elif op == "swap" and at + 1 < len(lines):
            lines[at], lines[at + 1] = lines[at + 1], lines[at]
            touched[at] = touched[at + 1] = True
        elif op == "drop":
            del lines[at]
            del touched[at]
    if draw(st.booleans()):
        lines[-1] = lines[-1].rstrip(b"\n")[: draw(st.integers(0, len(lines[-1])))]  # a killed writer
        touched[-1] = True
    return lines, {i for i, t in enumerate(touched) if not t}


def read(lines: list[bytes], *, strict: bool = False) -> tuple[list[FlowEvent], CaptureReader]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.jsonl"
        path.write_bytes(b"".join(lines))
        with CaptureReader(path, strict=strict) as reader:
            return list(reader), reader


def intact_events(lines: list[bytes], intact: set[int]) -> list[FlowEvent]:
    """The events of the untouched event lines (observation lines depend on their neighbours: not counted)."""
    out = []
    for i in sorted(intact):
        line = lines[i]
        if i and line.endswith(b"\n") and line.strip() and not line.startswith(OBS_PREFIX):
            out.append(event_from_json(line))
    return out


def strict_failure(lines: list[bytes]) -> int | None:
    """The line a strict reader names (None when it reads the file); any other exception propagates."""
    try:
        read(lines, strict=True)
    except CaptureFormatError as exc:
        return exc.line if exc.line is not None else -1
    return None


def failure(lines: list[bytes]) -> int | None:
    """The line a lenient reader names for a file it cannot read at all (a header it cannot accept)."""
    try:
        read(lines)
    except CaptureFormatError as exc:
        return exc.line if exc.line is not None else -1
    return None


def is_subsequence(small: list[FlowEvent], big: list[FlowEvent]) -> bool:
    it = iter(big)
    return all(any(e == b for b in it) for e in small)


def test_the_undamaged_base_reads_back_whole_with_nothing_skipped() -> None:
    events, reader = read(BASE)

    assert events[: len(ALL_EVENTS)] == ALL_EVENTS
    assert len(events) > len(ALL_EVENTS)  # the observations built their chain
    assert (reader.corrupt_lines, reader.skipped_unknown, reader.truncated) == (0, 0, False)


@examples(400)
@given(case=damaged())
@example(case=([BASE[0], GARBAGE[6], *BASE[1:]], set(range(2, len(BASE) + 1)) | {0}))
@example(case=([BASE[0], GARBAGE[8], *BASE[1:]], set(range(2, len(BASE) + 1)) | {0}))
@example(case=([BASE[0], GARBAGE[12], *BASE[1:]], set(range(2, len(BASE) + 1)) | {0}))
def test_a_damaged_capture_yields_every_intact_line_and_counts_what_it_skipped(
    case: tuple[list[bytes], set[int]],
) -> None:
    lines, intact = case

    events, reader = read(lines)

    assert is_subsequence(intact_events(lines, intact), events)
    damaged_lines = len(lines) - len(intact)
    if damaged_lines == 0:
        assert reader.corrupt_lines == 0
    assert len(reader.corrupt) == min(reader.corrupt_lines, 20)
    facts = sum(1 for line in lines if line.startswith(OBS_PREFIX))
    assert reader.corrupt_lines + reader.skipped_unknown <= damaged_lines + facts
    line = strict_failure(lines)
    assert line is None or line >= 2


@examples(150)
@given(
    header=st.binary(max_size=80)
    | st.sampled_from([BASE[0][:10], BASE[0].rstrip(), b"\xef\xbb\xbf" + BASE[0]])
)
@example(header=b'{"format":"mcp-debug-proxy-capture","version":' + b"9" * 5000 + b"}\n")
@example(header=b'{"format":"mcp-debug-proxy-capture","version":true}\n')
@example(header=b"[" * 100_000)
def test_a_broken_header_is_refused_with_capture_format_error_only(header: bytes) -> None:
    assert strict_failure([header, *BASE[1:]]) in (None, 1)
    assert failure([header, *BASE[1:]]) in (None, 1)


def test_a_line_far_past_any_sane_length_is_skipped_not_held_whole_in_a_parse_error() -> None:
    huge = b'{"type":"lagged","dropped":"' + b"x" * 5_000_000 + b'"}\n'
    events, reader = read([*BASE[:2], huge, *BASE[2:]])

    assert reader.corrupt_lines == 1
    assert len(reader.corrupt[0][1]) < 1000, "the reason quotes the line at length"
    assert events[:2] == ALL_EVENTS[:2]
