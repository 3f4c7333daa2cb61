"""Request heads on the upstream wire, fuzzed against an independent parser (h11) as the upstream's eye.

Every upstream request is framed by `encode_request_head`, so whatever a client or a bridge puts in a
method, a target or a header must come out as exactly one request that a strict parser reads back
field for field, framed by one `Content-Length` and nothing else, or be refused with `HeadError`.
Refused exactly when a field cannot be sent as given (a method or name that is no token, a target
that is not origin form, a value with a control byte or outside Latin-1), and never otherwise.
Client headers take the path the relay gives them (`forward_request_headers` first).
"""

from __future__ import annotations

import re

import h11
from hypothesis import example, given
from hypothesis import strategies as st

from proxy.framing.h1 import HeadError, encode_request_head
from proxy.framing.http import forward_request_headers
from proxy.wire.headers import decode_param_value, encode_param_value
from tests.fuzz.profile import examples

TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
TARGET = re.compile(r"/[\x21-\x7e]*")
BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
HOSTS = ["127.0.0.1:8000", "example.com", "[::1]:9000"]

SPICE = [
    "\r",
    "\n",
    "\r\n",
    "\x00",
    "\t",
    " ",
    ":",
    "\x7f",
    "\x85",
    "é",
    "\u0131",
    "😀",
    "\r\n\r\nGET /x HTTP/1.1",
]
spicy = st.lists(st.sampled_from(SPICE) | st.text(st.characters(codec="ascii"), max_size=4), max_size=5).map(
    "".join
)
names = st.sampled_from(["Accept", "Mcp-Method", "Mcp-Name", "Mcp-Param-Q", "X-A", "Authorization"]) | spicy
values = (
    st.sampled_from(["tools/call", "application/json", "", " padded ", "a\tb"]) | spicy | st.text(max_size=8)
)
methods = st.sampled_from(["POST", "GET", "DELETE"]) | spicy
targets = st.sampled_from(["/mcp", "/mcp?k=v", "/a/b?x=%20"]) | spicy.map(lambda s: "/mcp" + s) | spicy


def sendable(method: str, target: str, headers: list[tuple[str, str]]) -> bool:
    """Whether every field can go on the wire as given (an independent statement of the rules)."""
    if not TOKEN.fullmatch(method) or not TARGET.fullmatch(target):
        return False
    for name, value in headers:
        if not TOKEN.fullmatch(name) or BAD_VALUE.search(value):
            return False
        try:
            value.encode("latin-1")
        except UnicodeEncodeError:
            return False
    return True


def read_back(wire: bytes) -> tuple[h11.Request, bytes]:
    """Parse `wire` as a server would: exactly one request, its body, and nothing after it."""
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(wire)
    request = conn.next_event()
    assert isinstance(request, h11.Request), request
    body = b""
    while True:
        event = conn.next_event()
        if isinstance(event, h11.Data):
            body += bytes(event.data)
        elif isinstance(event, h11.EndOfMessage):
            break
        else:
            raise AssertionError(f"the request did not end where its framing says: {event!r}")
    assert conn.trailing_data == (b"", False), "bytes after the request: a second request smuggled"
    return request, body


@examples(800)
@given(
    method=methods,
    target=targets,
    host=st.sampled_from(HOSTS),
    headers=st.lists(st.tuples(names, values), max_size=5),
    length=st.none() | st.integers(0, 40),
)
@example(
    method="POST",
    target="/mcp",
    host=HOSTS[0],
    headers=[("Mcp-Method", "tools/call\r\nX-Injected: 1")],
    length=2,
)
@example(
    method="POST",
    target="/mcp",
    host=HOSTS[0],
    headers=[("Mcp-Method", "x\r\n\r\nPOST /mcp HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n")],
    length=0,
)
@example(method="POST", target="/mcp", host=HOSTS[0], headers=[("Mcp-Method", "tools/\u0131call")], length=2)
@example(method="POST", target="/mcp", host=HOSTS[0], headers=[("Mcp-Name", "a\x00b")], length=2)
@example(method="POST", target="/mcp", host=HOSTS[0], headers=[("X-Fold", "a\r\n b")], length=None)
@example(method="POST", target="/mcp", host=HOSTS[0], headers=[("X-Bare", "a\nb")], length=None)
@example(method="POST\r\nX: 1", target="/mcp", host=HOSTS[0], headers=[], length=None)
@example(method="POST", target="/mcp HTTP/1.1\r\nX: 1\r\n\r\nGET /x", host=HOSTS[0], headers=[], length=None)
@example(method="POST", target="http://evil/mcp", host=HOSTS[0], headers=[], length=None)
@example(
    method="POST", target="/mcp", host=HOSTS[0], headers=[("Content-Length", "5"), ("Host", "evil")], length=2
)
@example(method="POST", target="/mcp", host=HOSTS[0], headers=[("X-Obs", "\x85\xff")], length=1)
def test_a_head_is_one_request_read_back_field_for_field_or_refused(
    method: str, target: str, host: str, headers: list[tuple[str, str]], length: int | None
) -> None:
    headers = [(n, v) for n, v in headers if n.lower() != "transfer-encoding"]  # see the test below
    kept = [(n, v) for n, v in headers if n.lower() not in ("host", "content-length")]
    try:
        head = encode_request_head(method, target, host, headers, length)
    except HeadError:
        assert not sendable(method, target, kept), "refused a head that could have been sent"
        return
    assert sendable(method, target, kept), "sent a field that cannot go on the wire as given"

    request, body = read_back(head + b"b" * (length or 0))

    assert request.method.decode() == method
    assert request.target.decode() == target
    got = [(n.decode("latin-1"), v.decode("latin-1")) for n, v in request.headers]
    assert got[0] == ("host", host)
    framing = [("content-length", str(length))] if length is not None else []
    expected = [(n.lower(), v.strip(" \t")) for n, v in kept]
    assert got[1:] == expected + framing
    assert body == b"b" * (length or 0)


@examples(300)
@given(client=st.lists(st.tuples(names, values), max_size=6), length=st.integers(0, 20))
@example(client=[("Transfer-Encoding", "chunked")], length=3)
@example(client=[("Connection", "x-a"), ("X-A", "1"), ("Content-Length", "0"), ("Host", "evil")], length=3)
@example(client=[("Trailer", "X-T"), ("TE", "trailers"), ("Upgrade", "h2c")], length=0)
def test_client_headers_on_the_relay_path_never_change_the_framing(
    client: list[tuple[str, str]], length: int
) -> None:
    try:
        head = encode_request_head("POST", "/mcp", HOSTS[0], forward_request_headers(client), length)
    except HeadError:
        return

    request, body = read_back(head + b"b" * length)

    names = [n.lower() for n, _ in request.headers]
    assert names.count(b"host") == 1
    assert names.count(b"content-length") == 1
    assert b"transfer-encoding" not in names
    assert body == b"b" * length


def test_a_callers_transfer_encoding_never_goes_out_beside_content_length() -> None:
    # The relay drops it (hop-by-hop); the framing function is the last line of defence for any caller.
    try:
        head = encode_request_head("POST", "/mcp", HOSTS[0], [("Transfer-Encoding", "chunked")], 3)
    except HeadError:
        return
    assert b"transfer-encoding" not in head.lower(), head


@examples(400)
@given(value=st.text() | st.sampled_from(["=?base64?", "=?base64?eA==?=", " x", "x ", "\r\n", "é", ""]))
def test_an_mcp_param_value_always_encodes_to_visible_ascii_and_decodes_back(value: str) -> None:
    encoded = encode_param_value(value)

    assert re.fullmatch(r"[\x20-\x7e]*", encoded)
    assert encoded == encoded.strip()
    assert decode_param_value(encoded) == value
