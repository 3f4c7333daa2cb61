"""What every raw-socket test of the front checks, and the issue's shapes as raw inputs.

`check` sends one input to a live proxy (`tests.fuzz.live`) and holds it to the invariants: answered
or closed within a bound, no 500/502/504 and no logged failure of its own, no more strict requests at
the upstream than answers to the client, and another client (`canary`) served right after.
"""

from __future__ import annotations

import itertools

import orjson

from tests.fuzz.live import LiveProxy
from tests.fuzz.raw import Outcome, exchange, reference_requests, strict_problem

MAX_BODY = 64 * 1024
"""The proxies' body limit here: small, so bodies past it are cheap to send."""
LEGACY = "2025-11-25"


def legacy_request(live: LiveProxy, body: bytes, headers: list[tuple[str, str]] | None = None) -> bytes:
    """A well-formed legacy POST to the proxy's MCP endpoint (Content-Length framing)."""
    host, port = live.address
    lines = [f"POST {live.path} HTTP/1.1", f"Host: {host}:{port}", "Content-Type: application/json"]
    lines += ["Accept: application/json, text/event-stream", f"MCP-Protocol-Version: {LEGACY}"]
    lines += [f"{k}: {v}" for k, v in headers or []]
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


_canary_ids = itertools.count(1)


def canary(live: LiveProxy, session: str | None = None) -> None:
    """Another client is served at once, and the upstream gets exactly its request."""
    ident = next(_canary_ids)
    body = {
        "jsonrpc": "2.0",
        "id": ident,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {}},
    }
    session = live.canary_session or session
    headers = [("X-Canary", str(ident))] + ([("Mcp-Session-Id", session)] if session else [])
    before = len(live.upstream.heads)
    out = exchange(live.address, [legacy_request(live, orjson.dumps(body), headers)], expect=1, deadline=10.0)
    assert out.final, f"the canary got no answer ({out})"
    answer = out.final[0]
    assert answer.status == 200, answer
    assert orjson.loads(answer.body)["id"] == ident, answer
    got = [h for h in live.upstream.heads[before:] if h.values("X-Canary")]
    assert [h.values("X-Canary") for h in got] == [[str(ident)]], (
        "the canary's request went up other than once"
    )


# -- invariants ------------------------------------------------------------------------------------


def check(live: LiveProxy, chunks: list[bytes], session: str | None = None) -> Outcome:
    data = b"".join(chunks)
    owed = reference_requests(data)
    before, errors = len(live.upstream.heads), len(live.errors)

    def relayed() -> int:
        return len([h for h in live.upstream.heads[before:] if not h.values("X-Canary")])

    out = exchange(live.address, chunks, expect=owed or None, relayed=relayed)

    if owed and not out.closed:
        assert len(out.final) >= owed, f"{owed} requests, {len(out.final)} answers and the connection open"
    bad = [r for r in out.final if r.status in (500, 502, 504)]
    assert not bad, f"the proxy failed on client bytes: {bad[0].status} {bad[0].body[:300]!r}"
    assert live.errors[errors:] == [], "the proxy logged a failure of its own"
    canary(live, session)
    heads = [h for h in live.upstream.heads[before:] if not h.values("X-Canary")]
    allowed = len(out.final) + (1 if out.closed else 0)
    assert len(heads) <= allowed, f"upstream parsed {len(heads)} requests for {len(out.final)} answers"
    for head in heads:
        assert strict_problem(head) is None, (strict_problem(head), head.raw)
        assert b"X-Tr:" not in head.raw, "a trailer reached the upstream as a header"
    return out


HOST = b"\x01host\x01"
"""Stands for the proxy's `host:port` in raw inputs (the port is known only once it runs)."""
SMUGGLE = b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nX-Smuggled: 1\r\n\r\n"


CALL = b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":{}}}'
HEAD = b"POST /mcp HTTP/1.1\r\nHost: \x01host\x01\r\nContent-Type: application/json\r\n"
WHOLE = HEAD + b"Content-Length: %d\r\n\r\n" % len(CALL) + CALL
DEEP = CALL[:-3] + b'"a":' + b"[" * 1000 + b"]" * 1000 + b"}}}"
"""A tools/call whose arguments nest 1,000 deep (valid JSON)."""

SHAPES: dict[str, list[bytes]] = {
    "cl+te": [
        HEAD + b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" % len(SMUGGLE) + SMUGGLE
    ],
    "duplicate-cl": [HEAD + b"Content-Length: %d\r\nContent-Length: 0\r\n\r\n" % len(CALL) + CALL],
    "obs-fold": [HEAD + b"X-Fold: a\r\n b\r\nContent-Length: %d\r\n\r\n" % len(CALL) + CALL],
    "bare-lf": [HEAD.replace(b"\r\n", b"\n") + b"Content-Length: %d\n\n" % len(CALL) + CALL],
    "chunk-size-overflow": [
        HEAD + b"Transfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n" + CALL + b"\r\n0\r\n\r\n"
    ],
    "chunk-size-negative": [HEAD + b"Transfer-Encoding: chunked\r\n\r\n-5\r\n" + CALL + b"\r\n0\r\n\r\n"],
    "oversize-head": [HEAD + b"X-Big: " + b"x" * 70_000 + b"\r\n\r\n"],
    "crlf-in-method": [b"POST\r\nX-Injected: 1 /mcp HTTP/1.1\r\nHost: \x01host\x01\r\n\r\n"],
    "non-latin-1-header": [
        HEAD + "X-Utf8: é€😀\r\n".encode() + b"Content-Length: %d\r\n\r\n" % len(CALL) + CALL
    ],
    "pipelined": [WHOLE * 3],
    "split-at-every-byte": [WHOLE],  # sent one byte per write (`shape_chunks`)
    "chunk-extensions-past-the-limit": [
        HEAD
        + b"Transfer-Encoding: chunked\r\n\r\n%x;%s\r\n" % (len(CALL), b"e" * (MAX_BODY + 1))
        + CALL
        + b"\r\n0\r\n\r\n"
    ],
    "trailer": [
        HEAD + b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % len(CALL) + CALL + b"\r\n0\r\nX-Tr: t\r\n\r\n"
    ],
    "expect-over-limit": [HEAD + b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY * 4)],
    "missing-host": [WHOLE.replace(b"Host: \x01host\x01\r\n", b"")],
    "duplicate-host": [HEAD + b"Host: evil\r\nContent-Length: %d\r\n\r\n" % len(CALL) + CALL],
    "absolute-form": [WHOLE.replace(b"POST /mcp", b"POST http://\x01host\x01/mcp")],
    "dot-segments": [WHOLE.replace(b"POST /mcp", b"POST /../../mcp")],
    "deep-json": [HEAD + b"Content-Length: %d\r\n\r\n" % len(DEEP) + DEEP],
}
"""The shapes of the issue as raw inputs; the exact answer each must get is in test_front_shapes."""


def shape_chunks(live: LiveProxy, shape: str) -> list[bytes]:
    """One of `SHAPES` for this proxy."""
    host = "{}:{}".format(*live.address).encode()
    chunks = [chunk.replace(HOST, host) for chunk in SHAPES[shape]]
    if shape == "split-at-every-byte":
        return [chunks[0][i : i + 1] for i in range(len(chunks[0]))]
    return chunks
