"""Raw HTTP/1.1 on blocking sockets: send exact bytes, read responses with deadlines, count requests.

The fuzz targets need bytes no HTTP library would send, and answers read without any library's
leniency: `exchange` sends chunks on a fresh connection and reads until the proxy closes, has
answered every request, or goes quiet; `reference_requests` asks an independent parser (h11) how many
complete requests the bytes hold, which is how many answers a proxy owes for them.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import h11

from tests.e2e.recording_upstream import Head


@dataclass
class Response:
    """One response as read: status, header fields in order, body."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


@dataclass
class Outcome:
    """What a client saw: the responses (1xx included), whether the proxy closed, leftover bytes."""

    responses: list[Response] = field(default_factory=list)
    closed: bool = False
    rest: bytes = b""
    timed_out: bool = False

    @property
    def final(self) -> list[Response]:
        """Responses that end an exchange (not `100 Continue`)."""
        return [r for r in self.responses if r.status >= 200]


def parse_responses(data: bytes) -> tuple[list[Response], bytes]:
    """Every complete response at the start of `data`, and what is left (Content-Length or chunked)."""
    out: list[Response] = []
    while True:
        end = data.find(b"\r\n\r\n")
        if end < 0:
            return out, data
        lines = data[:end].decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = [(k, v.strip()) for k, _, v in (line.partition(":") for line in lines[1:])]
        response = Response(status, headers, b"")
        rest = data[end + 4 :]
        if 100 <= status < 200 or status in (204, 304):
            out.append(response)
            data = rest
            continue
        if (response.header("content-type") or "").startswith("text/event-stream"):
            # A stream is an answer as soon as its head is here; it may stay open (a GET stream).
            response.body = rest
            out.append(response)
            return out, b""
        length = response.header("content-length")
        if length is not None:
            if len(rest) < int(length):
                return out, data
            response.body, data = rest[: int(length)], rest[int(length) :]
        elif (response.header("transfer-encoding") or "").lower() == "chunked":
            body, left = _dechunk(rest)
            if left is None:
                return out, data
            response.body, data = body, left
        else:  # delimited by close: only whole once the connection ends
            return out, data
        out.append(response)


def _dechunk(data: bytes) -> tuple[bytes, bytes | None]:
    body = b""
    while True:
        end = data.find(b"\r\n")
        if end < 0:
            return body, None
        size = int(data[:end].split(b";", 1)[0], 16)
        if len(data) < end + 2 + size + 2:
            return body, None
        body += data[end + 2 : end + 2 + size]
        data = data[end + 2 + size + 2 :]
        if size == 0:
            return body, data


def exchange(
    address: tuple[str, int],
    chunks: list[bytes],
    *,
    expect: int | None,
    deadline: float = 5.0,
    quiet: float = 0.25,
    relayed: Callable[[], int] = lambda: 0,
) -> Outcome:
    """Send `chunks` on a new connection; read until closed, `expect` final answers, or quiet.

    With `expect` None (the bytes hold no definite number of requests), reading stops once nothing
    arrived for `quiet` seconds and every request the upstream got so far (`relayed`) was answered;
    otherwise it waits up to `deadline` for the answers owed. A slow machine thus never makes an
    answer still on its way look like a request smuggled upstream.
    """
    outcome = Outcome()
    buf = b""
    with socket.create_connection(address, timeout=deadline) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            for chunk in chunks:
                sock.sendall(chunk)
        except OSError:  # the proxy closed early (an answer may be waiting)
            pass
        end = time.monotonic() + deadline
        while True:
            left = end - time.monotonic()
            if left <= 0:
                outcome.timed_out = True
                break
            if expect is None:
                left = min(left, quiet)
            sock.settimeout(left)
            try:
                data = sock.recv(65536)
            except TimeoutError:
                answered = len([r for r in parse_responses(buf)[0] if r.status >= 200])
                if expect is None and relayed() <= answered:
                    break
                continue
            except OSError:
                outcome.closed = True
                break
            if not data:
                outcome.closed = True
                break
            buf += data
            responses, _ = parse_responses(buf)
            if expect is not None and len([r for r in responses if r.status >= 200]) >= expect:
                break
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
    outcome.responses, outcome.rest = parse_responses(buf)
    return outcome


def reference_requests(data: bytes) -> int | None:
    """How many complete requests `data` holds for h11, or None unless it is exactly that many.

    None when h11 finds an error or bytes of an unfinished request after the complete ones: the number
    of answers owed then depends on how strict the server is.
    """
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(data)
    count = 0
    try:
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                return count if conn.their_state is h11.IDLE and not conn.trailing_data[0] else None
            if event is h11.PAUSED:
                return None
            if isinstance(event, h11.Request) and event.headers and _has(event, b"expect"):
                return None  # a 100-continue exchange: timing-dependent, left to the shape tests
            if isinstance(event, h11.EndOfMessage):
                count += 1
                conn.send(h11.Response(status_code=200, headers=[("content-length", "0")]))
                conn.send(h11.EndOfMessage())
                if conn.our_state is h11.MUST_CLOSE:  # the request ends the connection: no more owed
                    return count
                conn.start_next_cycle()
            elif isinstance(event, h11.ConnectionClosed):
                return count
    except h11.RemoteProtocolError:
        return None


def _has(event: h11.Request, name: bytes) -> bool:
    return any(k == name for k, _ in event.headers)


def strict_problem(head: Head) -> str | None:
    """Why h11 would not read one request head exactly as the upstream recorded it (None: it would)."""
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(head.raw + head.body)
    try:
        event = conn.next_event()
        if not isinstance(event, h11.Request):
            return f"no request: {event!r}"
        body = b""
        while not isinstance(event := conn.next_event(), h11.EndOfMessage):
            if not isinstance(event, h11.Data):
                return f"body not framed by its head: {event!r}"
            body += bytes(event.data)
    except h11.RemoteProtocolError as exc:
        return f"h11 refuses it: {exc}"
    if body != head.body:
        return "the body read back differs"
    return None
