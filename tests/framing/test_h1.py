"""The HTTP/1.1 core without sockets: bytes in, events out, in both roles, and the heads it frames."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.framing.h1 import (
    MAX_HEAD_BYTES,
    MAX_HEADERS,
    BodyTooLarge,
    EndOfRequest,
    EndOfResponse,
    Refusal,
    Request,
    RequestEvent,
    RequestHead,
    RequestReader,
    ResponseEvent,
    ResponseFailed,
    ResponseHead,
    ResponseReader,
    encode_request,
    encode_response_head,
    keep_alive_timeout,
)

LIMIT = 1000


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def reader(limit: int = LIMIT) -> tuple[RequestReader[Request], Clock]:
    clock = Clock()
    return RequestReader(limit, clock, Request), clock


def feed(core: RequestReader[Any] | ResponseReader, data: bytes) -> list[Any]:
    """What one feed returned, copied: the readers hand back the same list from every feed."""
    return list(core.feed(data))


def kinds(events: list[RequestEvent[Request]] | list[ResponseEvent]) -> list[str]:
    return ["data" if isinstance(event, bytes) else type(event).__name__ for event in events]


def post(body: bytes, *extra: str) -> bytes:
    head = "".join(f"{line}\r\n" for line in extra)
    return f"POST /mcp?x=1 HTTP/1.1\r\nHost: p\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body


def chunked(*parts: bytes, trailers: bytes = b"", extension: bytes = b"") -> bytes:
    body = b"".join(b"%x%b\r\n%b\r\n" % (len(p), extension, p) for p in parts) + b"0\r\n" + trailers + b"\r\n"
    return b"POST /mcp HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: chunked\r\n\r\n" + body


# -- server role -------------------------------------------------------------------------------------


def test_a_request_comes_out_as_its_head_then_its_end_with_the_body_on_it() -> None:
    core, clock = reader()
    events = feed(core, post(b'{"id":1}', "Content-Type: application/json"))

    assert kinds(events) == ["RequestHead", "EndOfRequest"]
    req = events[1].request
    assert events[0].request is req
    assert (req.method, req.target, req.http10, req.keep_alive, req.hosts) == (
        "POST",
        b"/mcp?x=1",
        False,
        True,
        1,
    )
    assert req.headers == [("Host", "p"), ("Content-Length", "8"), ("Content-Type", "application/json")]
    assert (b"".join(req.body), req.size, req.began, req.head_done) == (b'{"id":1}', 8, clock.now, clock.now)
    assert core.current is None


def test_a_request_split_over_reads_ends_in_the_read_that_completes_it_and_is_timed_from_its_start() -> None:
    core, clock = reader()
    data = post(b"0123456789")
    assert feed(core, data[:10]) == []
    assert core.current is not None
    assert core.current.method == ""
    clock.now = 101.0
    assert kinds(feed(core, data[10:-4])) == ["RequestHead"]
    clock.now = 102.0
    (end,) = feed(core, data[-4:])
    assert isinstance(end, EndOfRequest)
    assert (end.request.began, end.request.head_done, b"".join(end.request.body)) == (
        100.0,
        101.0,
        b"0123456789",
    )


def test_pipelined_requests_come_out_in_order_from_one_read() -> None:
    core, _ = reader()
    events = feed(core, post(b"a") + post(b"b") + b"GET / HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n")

    ends = [e.request for e in events if isinstance(e, EndOfRequest)]
    assert [(r.method, b"".join(r.body), r.keep_alive) for r in ends] == [
        ("POST", b"a", True),
        ("POST", b"b", True),
        ("GET", b"", False),
    ]


def test_field_names_are_one_string_each_however_many_heads_carry_them() -> None:
    """A proxy keeps many heads (queued observations, chains): each holds no copy of a name of its own."""
    first, _ = reader()
    second, _ = reader()
    ends = [
        e.request
        for core in (first, second)
        for e in feed(core, post(b"a", "Mcp-Session-Id: s") + post(b"b", "Mcp-Session-Id: s"))
        if isinstance(e, EndOfRequest)
    ]
    names = [[name for name, _ in r.headers] for r in ends]
    assert names[0] == ["Host", "Content-Length", "Mcp-Session-Id"]
    for other in names[1:]:
        assert all(a is b for a, b in zip(names[0], other, strict=True))

    responses = [response_reader() for _ in range(2)]
    heads = [feed(core, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")[0] for core in responses]
    assert heads[0].headers[0][0] is heads[1].headers[0][0]


def test_http10_is_read_with_its_own_keep_alive_rule() -> None:
    core, _ = reader()
    (_, end) = feed(core, b"GET /mcp HTTP/1.0\r\n\r\n")
    assert isinstance(end, EndOfRequest)
    assert (end.request.http10, end.request.keep_alive) == (True, False)


def test_expect_continue_is_noted_and_a_declared_body_over_the_limit_is_cut_before_it_is_sent() -> None:
    core, _ = reader()
    head = post(b"x" * 10, "Expect: 100-continue")[:-10]
    assert kinds(feed(core, head)) == ["RequestHead"]
    assert core.current is not None
    assert core.current.continue_wanted

    core, _ = reader()
    events = feed(core, post(b"x" * (LIMIT + 1), "Expect: 100-continue")[: -(LIMIT + 1)])
    assert kinds(events) == ["RequestHead", "BodyTooLarge"]
    req = events[1].request
    assert (req.too_large, req.early, req.keep_alive, req.body) == (True, True, False, [])
    assert core.current is None


def test_a_body_over_the_limit_is_cut_with_its_start_kept_for_the_id() -> None:
    core, _ = reader()
    events = feed(core, post(b'{"id":7,' + b" " * LIMIT + b"}"))

    assert kinds(events) == ["RequestHead", "BodyTooLarge"]
    req = events[1].request
    assert req.too_large
    assert req.early
    assert len(b"".join(req.body)) == LIMIT + 1
    assert b"".join(req.body).startswith(b'{"id":7,')


def test_trailers_count_toward_the_head_bound_and_never_join_the_headers() -> None:
    core, _ = reader()
    (_, end) = feed(core, chunked(b"abc", trailers=b"X-Trailer: t\r\n"))
    assert isinstance(end, EndOfRequest)
    assert [name for name, _ in end.request.headers] == ["Host", "Transfer-Encoding"]
    assert b"".join(end.request.body) == b"abc"

    core, _ = reader(limit=1 << 20)
    trailers = b"".join(b"X-T%d: %s\r\n" % (i, b"t" * 1000) for i in range(70))
    events = feed(core, chunked(b"abc", trailers=trailers))
    assert isinstance(events[-1], Refusal)
    assert (events[-1].status, str(MAX_HEAD_BYTES) in events[-1].reason) == (431, True)


@pytest.mark.parametrize("pieces", [1, 2, 7, 64])
def test_chunk_extensions_count_toward_the_body_bound_however_the_request_is_split(pieces: int) -> None:
    data = chunked(*[b"a"] * 20, extension=b";ext=" + b"e" * 100)
    core, _ = reader()
    events: list[RequestEvent[Request]] = []
    step = -(-len(data) // pieces)
    for start in range(0, len(data), step):
        events += feed(core, data[start : start + step])

    cut = [e for e in events if isinstance(e, BodyTooLarge)]
    ended = [e.request for e in events if isinstance(e, EndOfRequest)]
    assert cut or (ended and ended[0].too_large), f"{len(data)} bytes on the wire passed no bound"


def test_a_head_that_never_ends_is_refused_by_the_bytes_it_arrived_in() -> None:
    core, _ = reader()
    assert feed(core, b"POST /mcp HTTP/1.1\r\nX-Long: ") == []
    events: list[RequestEvent[Request]] = []
    for _ in range(MAX_HEAD_BYTES // 4096 + 1):
        events += feed(core, b"v" * 4096)
    assert isinstance(events[-1], Refusal)
    assert events[-1].status == 431
    assert feed(core, b"more") == [], "nothing is read after a refusal"


@pytest.mark.parametrize(
    ("data", "status", "words"),
    [
        (
            b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(MAX_HEADERS + 1)) + b"\r\n",
            431,
            "fields",
        ),
        (b"GET / HTTP/2.0\r\nHost: p\r\n\r\n", 505, "HTTP/2.0"),
        (b"CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\n", 501, "CONNECT is not served"),
        (b"GET / HTTP/1.1\r\nHost p\r\n\r\n", 400, "malformed"),
        (b"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "malformed"),
        (b"POST / HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501, "gzip"),
        (b"POST / HTTP/1.1\r\nHost: p\r\nTransfer-Encoding: identity\r\n\r\n", 501, "identity"),
    ],
    ids=["too-many-fields", "http2", "connect", "bad-field", "two-framings", "gzip-coded", "identity"],
)
def test_what_cannot_be_served_is_refused_with_its_status(data: bytes, status: int, words: str) -> None:
    core, _ = reader()
    events = feed(core, data)
    assert len(events) == 1, events  # refused whole: nothing of it is served first
    assert isinstance(events[0], Refusal)
    assert events[0].status == status
    assert words in events[0].reason


UPGRADING = (
    b"POST /mcp HTTP/1.1\r\nHost: p\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
    b"HTTP2-Settings: AAMAAABk\r\nContent-Length: 2\r\n\r\n{}"
    b"POST /mcp HTTP/1.1\r\nHost: p\r\nConnection: upgrade\r\nUpgrade: h2c\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
    b"3\r\n[1]\r\n0\r\n\r\n"
    b"GET /mcp HTTP/1.1\r\nHost: p\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
    b"Sec-WebSocket-Key: k\r\n\r\n"
    b"POST /mcp HTTP/1.0\r\nHost: p\r\nConnection: Upgrade\r\nUpgrade: h2c\r\nContent-Length: 1\r\n\r\nx"
)


@pytest.mark.parametrize(
    "size", [len(UPGRADING), 1, 7, 64], ids=["one-read", "bytewise", "7-byte-reads", "64-byte-reads"]
)
def test_a_request_asking_to_switch_protocols_is_read_as_plain_http_body_and_all(size: int) -> None:
    """`Upgrade` is ignored (curl --http2, a WebSocket handshake): each request comes out whole, in
    order, and the ones after it are read as usual; an HTTP/1.0 one closes after its answer."""
    core, _ = reader()
    events = [
        event for i in range(0, len(UPGRADING), size) for event in list(core.feed(UPGRADING[i : i + size]))
    ]

    ends = [event.request for event in events if isinstance(event, EndOfRequest)]
    assert [(r.method, b"".join(r.body), r.keep_alive) for r in ends] == [
        ("POST", b"{}", True),
        ("POST", b"[1]", True),
        ("GET", b"", True),
        ("POST", b"x", False),
    ]
    assert kinds(events).count("RequestHead") == 4
    assert not [event for event in events if isinstance(event, Refusal)]


def test_a_subclass_carries_the_servers_own_fields() -> None:
    class Served(Request):
        __slots__ = ("note",)

        def __init__(self, began: float) -> None:
            super().__init__(began)
            self.note = "mine"

    core = RequestReader(LIMIT, Clock(), Served)
    (head, _) = feed(core, post(b"{}"))
    assert isinstance(head, RequestHead)
    assert head.request.note == "mine"


# -- client role -------------------------------------------------------------------------------------


def response_reader(limit: int = 4096, *, no_body: bool = False) -> ResponseReader:
    core = ResponseReader(limit)
    core.expect(no_body)
    return core


def test_a_response_comes_out_as_head_data_and_end() -> None:
    core = response_reader()
    events = feed(core, b"HTTP/1.1 201 Made\r\nContent-Length: 3\r\nX-A: 1\r\n\r\nabc")

    assert kinds(events) == ["ResponseHead", "data", "EndOfResponse"]
    head, data, end = events
    assert isinstance(head, ResponseHead)
    assert isinstance(end, EndOfResponse)
    assert (head.status, head.reason, head.headers) == (201, "Made", [("Content-Length", "3"), ("X-A", "1")])
    assert (data, end.keep_alive) == (b"abc", True)


def test_interim_heads_are_passed_over_and_connection_close_ends_keep_alive() -> None:
    core = response_reader()
    events = feed(
        core,
        b"HTTP/1.1 102 Processing\r\n\r\nHTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
    )
    assert kinds(events) == ["ResponseHead", "EndOfResponse"]
    assert isinstance(events[1], EndOfResponse)
    assert not events[1].keep_alive


def test_a_chunked_body_is_decoded_across_reads() -> None:
    core = response_reader()
    first = feed(core, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab")
    rest = feed(core, b"c\r\n0\r\n\r\n")
    data = b"".join(e for e in first + rest if isinstance(e, bytes))
    assert (data, kinds(rest)[-1]) == (b"abc", "EndOfResponse")


def test_a_responses_trailers_are_kept_apart_from_its_head_and_bounded() -> None:
    core = response_reader(limit=1024)
    head_bytes = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n"
    (head,) = [e for e in feed(core, head_bytes + b"3\r\nabc\r\n") if isinstance(e, ResponseHead)]
    filler = b"".join(b"X-F%d: %s\r\n" % (i, b"f" * 100) for i in range(20))  # past the 1024-byte bound
    rest = feed(core, b"0\r\nX-Checksum: 42 \r\nSet-Cookie: fromtrailer=1\r\n" + filler + b"\r\n")

    assert kinds(rest) == ["EndOfResponse"]
    assert head.headers == [("Transfer-Encoding", "chunked"), ("Trailer", "X-Checksum")]
    assert head.trailers[:2] == [("X-Checksum", "42"), ("Set-Cookie", "fromtrailer=1")]
    assert 2 < len(head.trailers) < 22  # past the bound, trailers are dropped, the response still ends
    second = feed(core, b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    assert isinstance(second[0], ResponseHead)
    assert (second[0].headers, second[0].trailers) == ([("Content-Length", "0")], [])


def test_the_answer_to_head_ends_with_its_head_and_keeps_no_connection() -> None:
    core = response_reader(no_body=True)
    events = feed(core, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
    assert kinds(events) == ["ResponseHead", "EndOfResponse"]
    assert isinstance(events[1], EndOfResponse)
    assert not events[1].keep_alive


@pytest.mark.parametrize("whole", [True, False], ids=["in-one-read", "never-ending"])
def test_a_head_over_its_bound_fails_naming_the_setting(whole: bool) -> None:
    core = response_reader(limit=1024)
    filler = b"".join(b"X-F%d: %s\r\n" % (i, b"f" * 100) for i in range(20))
    data = b"HTTP/1.1 200 OK\r\n" + filler + (b"Content-Length: 0\r\n\r\n" if whole else b"")
    events = feed(core, data)
    assert isinstance(events[-1], ResponseFailed)
    assert events[-1].kind == "head_too_large"
    assert "1024 bytes (upstream_max_head_bytes)" in events[-1].detail
    assert feed(core, b"more") == []


def test_a_malformed_response_fails_as_cut() -> None:
    events = response_reader().feed(b"HTTP/1.1 abc\r\n\r\n")
    assert isinstance(events[-1], ResponseFailed)
    assert events[-1].kind == "cut"


def test_the_keep_alive_timeout_an_upstream_announces_is_read_from_its_header() -> None:
    assert keep_alive_timeout([("Keep-Alive", "timeout=5, max=100")]) == 5.0
    assert keep_alive_timeout([("keep-alive", "max=3,timeout=1")]) == 1.0
    assert keep_alive_timeout([("Keep-Alive", "timeout=soon")]) is None
    assert keep_alive_timeout([("Keep-Alive", "timeout=-1")]) is None
    assert keep_alive_timeout([("X", "timeout=1")]) is None


# -- heads out ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("length", "chunked", "framing"),
    [
        (5, False, b"Content-Length: 5\r\n"),
        (None, True, b"Transfer-Encoding: chunked\r\n"),
        (None, False, b""),
    ],
    ids=["length", "chunked", "close-delimited"],
)
def test_a_response_head_is_framed_by_length_chunks_or_close(
    length: int | None, chunked: bool, framing: bytes
) -> None:
    head = encode_response_head(200, None, [("X-A", "1")], length, chunked)
    assert head == b"HTTP/1.1 200 OK\r\nX-A: 1\r\n" + framing + b"\r\n"
    assert encode_response_head(599, None, [], 0, False).startswith(b"HTTP/1.1 599 Unknown\r\n")
    assert encode_response_head(404, "Gone Away", [], 0, False).startswith(b"HTTP/1.1 404 Gone Away\r\n")


def test_a_request_carries_its_body_with_its_length_and_a_bodiless_get_none() -> None:
    assert encode_request("POST", "/mcp", "u", [("Content-Length", "9")], b"{}") == (
        b"POST /mcp HTTP/1.1\r\nHost: u\r\nContent-Length: 2\r\n\r\n{}"
    )
    assert encode_request("POST", "/mcp", "u", [], b"").endswith(b"Content-Length: 0\r\n\r\n")
    assert encode_request("GET", "/mcp", "u", [], b"") == b"GET /mcp HTTP/1.1\r\nHost: u\r\n\r\n"


def test_what_the_core_frames_the_core_reads_back() -> None:
    data = encode_request("POST", "/mcp?a=1", "u:1", [("Mcp-Method", "tools/call")], b'{"id":1}')
    core, _ = reader()
    (_head, end) = feed(core, data)
    assert isinstance(end, EndOfRequest)
    assert (end.request.target, end.request.headers[-2], b"".join(end.request.body)) == (
        b"/mcp?a=1",
        ("Mcp-Method", "tools/call"),
        b'{"id":1}',
    )


def test_a_released_reader_is_freed_by_reference_counting_not_left_in_a_cycle_with_its_parser() -> None:
    import gc
    import weakref

    core, _clock = reader()
    core.feed(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n{}")  # a body begun
    upstream = ResponseReader(1024)
    upstream.expect(no_body=False)
    upstream.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}")
    gone = [weakref.ref(core), weakref.ref(upstream)]
    gc.disable()  # the cyclic collector's rare runs may not be what frees them
    try:
        core.release()
        upstream.release()
        del core, upstream
        assert [ref() for ref in gone] == [None, None]
    finally:
        gc.enable()


def test_a_released_reader_takes_no_more_bytes() -> None:
    core, _clock = reader()
    core.release()
    assert core.feed(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n") == []
    upstream = ResponseReader(1024)
    upstream.release()
    assert upstream.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n") == []
