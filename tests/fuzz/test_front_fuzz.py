"""Raw bytes into a running proxy: it answers or closes, never hangs or fails, smuggles nothing upstream.

Requests are built from the parts a front parses (request line, `Host`, framing headers, chunked
bodies with extensions and trailers, JSON-RPC bodies), pipelined, mutated byte by byte and cut into
chunks at arbitrary points, then sent on a fresh connection to a proxy in front of the byte-recording
upstream, in pass-through and through the legacy -> 2026-07-28 bridge. After each input:

- the proxy closed, or answered every request the bytes hold (an independent parser's count) within
  a bound, or was waiting for more bytes of an unfinished one;
- none of its answers is a 500 (the proxy's own failure) or a 502/504 (blaming a healthy upstream for
  the client's bytes);
- the upstream parsed no more requests than the client got answers, plus the one a closed connection
  may have left in flight, and every head it got is one strict HTTP/1.1 request;
- a canary client on another connection is served at once, and its request is the one the upstream got.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.live import LiveProxy, live_proxy
from tests.fuzz.profile import examples
from tests.fuzz.raw import Outcome, exchange, reference_requests, strict_problem
from tests.fuzz.strategies import envelopes, mutate

pytestmark = pytest.mark.e2e

MAX_BODY = 64 * 1024
"""The proxies' body limit here: small, so bodies past it are cheap to send."""
LEGACY = "2025-11-25"
_canary_ids = itertools.count(1)


OBSERVED = {"admin_enabled": True, "admin": "127.0.0.1:0", "max_body_bytes": MAX_BODY}
"""As users run it: the admin API on (chains built live), and a capture (set per proxy below)."""


@pytest.fixture(scope="module")
def passthrough(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveProxy]:
    where = tmp_path_factory.mktemp("fuzz")
    with live_proxy("legacy", where / "log.jsonl", capture=where / "capture.jsonl", **OBSERVED) as live:
        yield live


@pytest.fixture(scope="module")
def bridged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveProxy, str]]:
    """A proxy bridging legacy clients to a 2026-07-28 upstream, and a session it minted."""
    where = tmp_path_factory.mktemp("fuzz")
    with live_proxy("modern", where / "log.jsonl", capture=where / "capture.jsonl", **OBSERVED) as live:
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": LEGACY,
                "capabilities": {},
                "clientInfo": {"name": "f", "version": "1"},
            },
        }
        out = exchange(live.address, [request(live, orjson.dumps(init))], expect=1)
        session = out.final[0].header("mcp-session-id")
        assert session, out
        yield live, session


def request(
    live: LiveProxy, body: bytes, headers: list[tuple[str, str]] = (), *, method: str = "POST"
) -> bytes:  # type: ignore[assignment]
    """A well-formed request to the proxy's MCP endpoint (Content-Length framing)."""
    host, port = live.address
    lines = [f"{method} {live.path} HTTP/1.1", f"Host: {host}:{port}", "Content-Type: application/json"]
    lines += ["Accept: application/json, text/event-stream", f"MCP-Protocol-Version: {LEGACY}"]
    lines += [f"{k}: {v}" for k, v in headers]
    lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def canary(live: LiveProxy, session: str | None = None) -> None:
    """Another client is served at once, and the upstream gets exactly its request."""
    ident = next(_canary_ids)
    body = {
        "jsonrpc": "2.0",
        "id": ident,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {}},
    }
    headers = [("X-Canary", str(ident))] + ([("Mcp-Session-Id", session)] if session else [])
    before = len(live.upstream.heads)
    out = exchange(live.address, [request(live, orjson.dumps(body), headers)], expect=1, deadline=10.0)
    assert out.final, f"the canary got no answer ({out})"
    answer = out.final[0]
    assert answer.status == 200, answer
    assert orjson.loads(answer.body)["id"] == ident, answer
    got = [h for h in live.upstream.heads[before:] if h.values("X-Canary")]
    assert [h.values("X-Canary") for h in got] == [[str(ident)]], (
        "the canary's request went up other than once"
    )


# -- inputs ----------------------------------------------------------------------------------------

SPICE = [b"\r\n", b"\n", b"\r", b"\x00", b" ", b"\t", b":", b"\xff", "é".encode(), b"\r\n ", b"\r\n\r\n"]
spice = st.sampled_from(SPICE)
framing = st.sampled_from(
    [
        "length",
        "length",
        "chunked",
        "chunked-ext",
        "chunked-trailer",
        "chunked-badsize",
        "cl+te",
        "dup-cl",
        "neg-cl",
        "huge-cl",
        "none",
    ]
)
targets = st.sampled_from(
    [
        "{path}",
        "/",
        "{path}?a=1",
        "http://{host}{path}",
        "/../{path}",
        "{path}/../..",
        "*",
        "{path}#f",
        "//x{path}",
    ]
)
versions = st.sampled_from(["HTTP/1.1", "HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.1 ", "http/1.1"])
verbs = st.sampled_from(
    ["POST", "POST", "POST", "GET", "DELETE", "PUT", "OPTIONS", "POST\r\nX: 1", "P\x00ST"]
)
extra_headers = st.lists(
    st.sampled_from(
        [
            ("Host", "evil.example"),
            ("Expect", "100-continue"),
            ("Connection", "close"),
            ("Connection", "keep-alive, X-A"),
            ("X-A", "1"),
            ("Transfer-Encoding", "identity"),
            ("X-Fold", "a\r\n b"),
            ("X-Lf", "a\nb"),
            ("X-Nul", "a\x00b"),
            ("X-Utf8", "é€"),
            ("X-Big", "\x01big\x01"),
            ("Te", "trailers"),
            ("Trailer", "X-Tr"),
            ("Upgrade", "h2c"),
            ("Mcp-Session-Id", ""),
            ("MCP-Protocol-Version", "2026-07-28"),
        ]
    ),
    max_size=3,
)


HOST = b"\x01host\x01"
"""Stands for the proxy's `host:port` in generated bytes (the port is known only once it runs)."""
PATH = "/mcp"


@st.composite
def one_request(draw: st.DrawFn, session: bool) -> bytes:
    host = HOST.decode("latin-1")
    verb = draw(verbs)
    target = draw(targets).format(path=PATH, host=host)
    lines = [f"{verb} {target} {draw(versions)}"]
    if draw(st.integers(0, 9)):
        lines.append(f"Host: {host}")
    lines += ["Content-Type: application/json", "Accept: application/json, text/event-stream"]
    lines.append(f"MCP-Protocol-Version: {LEGACY}")
    if session and draw(st.integers(0, 5)):
        lines.append("Mcp-Session-Id: \x01session\x01")
    lines += [f"{k}: {v}" for k, v in draw(extra_headers)]
    value = (
        draw(envelopes()) if draw(st.integers(0, 3)) else {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    )
    body = orjson.dumps(value)
    if draw(st.booleans()):
        body = mutate(body, draw)
    kind = draw(framing)
    if kind == "length":
        lines.append(f"Content-Length: {len(body)}")
    elif kind.startswith("chunked"):
        lines.append("Transfer-Encoding: chunked")
        ext = ";" + draw(st.sampled_from(["e", "e" * 100, "\x01big\x01"])) if kind == "chunked-ext" else ""
        size = "zz" if kind == "chunked-badsize" else f"{len(body):x}"
        trailer = "X-Tr: t\r\n" if kind == "chunked-trailer" else ""
        body = f"{size}{ext}\r\n".encode() + body + f"\r\n0\r\n{trailer}\r\n".encode()
    elif kind == "cl+te":
        lines += [f"Content-Length: {len(body)}", "Transfer-Encoding: chunked"]
    elif kind == "dup-cl":
        lines += [f"Content-Length: {len(body)}", f"Content-Length: {len(body) + 1}"]
    elif kind == "neg-cl":
        lines.append("Content-Length: -1")
    elif kind == "huge-cl":
        lines.append(f"Content-Length: {MAX_BODY * 4}")
    eol = draw(st.sampled_from(["\r\n"] * 8 + ["\n"]))
    return (eol.join(lines) + eol + eol).encode("utf-8") + body


@st.composite
def inputs(draw: st.DrawFn, session: bool = False) -> tuple[bytes, list[float]]:
    """One to three pipelined requests, maybe mutated, and where to cut them (fractions of the length)."""
    data = b"".join(draw(st.lists(one_request(session), min_size=1, max_size=3)))
    if draw(st.integers(0, 3)) == 0:
        data = mutate(data, draw)
    if draw(st.integers(0, 4)) == 0 and len(data) > 1:
        at = draw(st.integers(1, len(data) - 1))
        data = data[:at] + draw(spice) + data[at:]
    return data, draw(st.lists(st.floats(0, 1), max_size=4))


def materialize(live: LiveProxy, case: tuple[bytes, list[float]], session: str = "") -> list[bytes]:
    """The generated bytes for this proxy, cut into chunks."""
    template, fractions = case
    host = "{}:{}".format(*live.address).encode()
    data = template.replace(HOST, host).replace(b"\x01session\x01", session.encode())
    data = data.replace(b"\x01big\x01", b"x" * (MAX_BODY + 1))  # past the head and body limits
    cuts = sorted({round(f * len(data)) for f in fractions} - {0, len(data)})
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


# -- invariants ------------------------------------------------------------------------------------


def check(live: LiveProxy, chunks: list[bytes], session: str | None = None) -> Outcome:
    data = b"".join(chunks)
    owed = reference_requests(data)
    before, errors = len(live.upstream.heads), len(live.errors)
    out = exchange(live.address, chunks, expect=owed or None)

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
    "split-at-every-byte": [WHOLE[i : i + 1] for i in range(len(WHOLE))],
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


# -- the targets -----------------------------------------------------------------------------------


@examples(400)
@given(case=inputs())
def test_pass_through_answers_or_closes_and_smuggles_nothing(
    passthrough: LiveProxy, case: tuple[bytes, list[float]]
) -> None:
    check(passthrough, materialize(passthrough, case))


@pytest.mark.parametrize("shape", SHAPES)
def test_pass_through_survives_each_shape_of_the_issue(passthrough: LiveProxy, shape: str) -> None:
    check(
        passthrough,
        [chunk.replace(HOST, "{}:{}".format(*passthrough.address).encode()) for chunk in SHAPES[shape]],
    )


@examples(300)
@given(case=inputs(session=True))
def test_the_legacy_bridge_answers_or_closes_and_smuggles_nothing(
    bridged: tuple[LiveProxy, str], case: tuple[bytes, list[float]]
) -> None:
    live, session = bridged
    check(live, materialize(live, case, session), session)
