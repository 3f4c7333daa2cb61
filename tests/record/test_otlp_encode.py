"""Our OTLP trace encoding against the SDK's: both decoded with the official protobuf types must agree."""

from __future__ import annotations

import dataclasses

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from proxy.flows.span_records import SpanKind, SpanRecord
from proxy.record.otlp import SpanSender
from tests.otlp_receiver import DecodedSpan, decode

TRACE = 0x4BF92F3577B34DA6A3CE929D0E0E4736


def records() -> list[SpanRecord]:
    root = SpanRecord(
        "tools/call echo",
        SpanKind.SERVER,
        TRACE,
        0x1111,
        0x00F067AA0BA902B7,
        1_700_000_000.123456,
        {"mcp.method.name": "tools/call", "jsonrpc.request.id": "7", "gen_ai.tool.name": "échø"},
        end=1_700_000_000.5,
        remote_parent=True,
        trace_state="rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
    )
    leg = SpanRecord(
        "tools/call echo",
        SpanKind.CLIENT,
        TRACE,
        0x2222,
        0x1111,
        1_700_000_000.2,
        {"server.port": 8000, "mcp_proxy.round": 2, "flag": True, "negative": -3},
        end=1_700_000_000.4,
        failed=True,
        error="bad params",
    )
    leg.attributes["error.type"] = "-32602"
    alone = SpanRecord(
        "ping", SpanKind.SERVER, 0xABC, 0x3333, None, 5.0, {"mcp.method.name": "ping"}, end=5.0, failed=True
    )
    shared = {"mcp.method.name": "tools/call", "mcp_proxy.mode": "passthrough", "network.transport": "tcp"}
    again = [
        SpanRecord("tools/call add", SpanKind.SERVER, 0xDEF, 0x4444 + i, None, 6.0, {"jsonrpc.request.id": n})
        for i, n in enumerate("01")
    ]
    for span in again:
        span.end, span.shared = 6.5, shared  # one dict for both: encoded once, written twice
    return [root, leg, alone, *again]


def comparable(spans: list[DecodedSpan]) -> list[DecodedSpan]:
    """The SDK leaves the trace-flags byte of `flags` empty; the rest must match field for field."""
    return [dataclasses.replace(span, flags=span.flags & 0x300) for span in spans]


def test_our_encoding_decodes_to_exactly_what_the_sdks_encoding_of_the_same_spans_does() -> None:
    sender = SpanSender(exporter=InMemorySpanExporter())
    try:
        ours = decode(sender._counting._encoder.request(records()))
        theirs = decode(encode_spans([sender.readable(r) for r in records()]).SerializeToString())
    finally:
        sender.close(5.0)

    assert comparable(ours) == comparable(theirs)
    assert [s.resource for s in ours] == [s.resource for s in theirs]
    assert [s.flags for s in ours] == [0x301, 0x101, 0x101, 0x101, 0x101]
    assert ours[4].attributes == {**ours[3].attributes, "jsonrpc.request.id": "1"}
    assert ours[1].status_message == "bad params"
    assert ours[0].attributes["gen_ai.tool.name"] == "échø"
