"""Records by reference: a position names a file and an offset; a reference must name a record's line."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.flows.records import Head
from proxy.record.record_refs import NO_LINE, OFFSET_BITS, RecordBuilder, position

HEADER = b'{"format":"mcp-debug-proxy-capture","version":"1.0","created":1.0,"proxy_version":"0"}\n'


def test_a_position_keeps_the_file_apart_from_the_offset() -> None:
    assert position(0, 123) == 123
    assert position(2, 5) >> OFFSET_BITS == 2
    assert position(2, 5) & ((1 << OFFSET_BITS) - 1) == 5


def test_a_reference_to_a_line_that_files_no_record_is_refused(tmp_path: Path) -> None:
    capture = tmp_path / "one.jsonl"
    capture.write_bytes(HEADER + b'{"type":"obs","kind":"leg_closed","t":2.0,"leg":"leg-1"}\n')
    with RecordBuilder([capture]) as builder, pytest.raises(ValueError, match="files no record"):
        builder.build((len(HEADER), 1, 0, Head.NONE, NO_LINE))


def test_a_reference_whose_head_names_no_line_is_refused(tmp_path: Path) -> None:
    capture = tmp_path / "one.jsonl"
    capture.write_bytes(
        HEADER + b'{"type":"obs","kind":"leg_message","t":2.0,"leg":"leg-1","exchange":"x1",'
        b'"msg":{"kind":"request","raw":{"jsonrpc":"2.0","id":1,"method":"ping"},"id":1,"method":"ping"},'
        b'"size":40,"direction":"to_server","channel":"post"}\n'
    )
    with RecordBuilder([capture]) as builder:
        record = builder.build((len(HEADER), 3, 1, Head.NONE, NO_LINE))
        assert (record.seq, record.round, record.exchange, record.method) == (3, 1, "leg-1", "ping")
        with pytest.raises(ValueError, match="names no line"):
            builder.build((len(HEADER), 3, 1, Head.REQUEST, NO_LINE))
