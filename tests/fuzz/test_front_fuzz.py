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

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.front import HOST, LEGACY, MAX_BODY, SHAPES, check
from tests.fuzz.live import LiveProxy
from tests.fuzz.profile import examples
from tests.fuzz.strategies import envelopes, mutate

pytestmark = pytest.mark.e2e

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


# -- the targets -----------------------------------------------------------------------------------


@examples(300)
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


@examples(250)
@given(case=inputs(session=True))
def test_the_legacy_bridge_answers_or_closes_and_smuggles_nothing(
    bridged: tuple[LiveProxy, str], case: tuple[bytes, list[float]]
) -> None:
    live, session = bridged
    check(live, materialize(live, case, session), session)
