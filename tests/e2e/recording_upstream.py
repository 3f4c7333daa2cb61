"""A scripted MCP upstream on raw sockets that records every request head exactly as its bytes arrived.

A fake, named as one: the wire tests must see the request line and headers the proxy sends for any
path prefix and query on the upstream URL, and no SDK server can be mounted at such paths on demand
or hand over the raw bytes it parsed (a framework's request object shows a normalised path; that is
how absolute-form request lines went unseen). Its answers are the least a server of each era gives:

- legacy: `initialize` -> InitializeResult with an `Mcp-Session-Id`; a 2026-07-28 request -> 400
  "Unsupported protocol version"; notifications and responses -> 202; DELETE -> 200; GET -> 405.
- modern: `server/discover` -> DiscoverResult; `initialize` -> 400 -32022; GET/DELETE -> 405.
- both: `tools/list` and `tools/call` (tool `echo`) answered in the era's shape, as JSON; a legacy
  call of tool `dump` is answered with its arguments as JSON text, as a server's debugging tool would.
- `answer_headers`: header lines added to every answer as given, a name repeated as often as it
  comes (two `Set-Cookie`s of a sticky-session balancer), which no SDK server sends.
- `answer_trailers`: every answer with a body goes chunked, announcing these fields in `Trailer` and
  sending them after its last chunk (a checksum trailer of a gateway), which no SDK server sends.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Literal

from proxy.framing.h1 import EndOfRequest, Refusal, Request, RequestReader

Era = Literal["legacy", "modern"]

MAX_BODY = 64 * 1024 * 1024
"""Largest request body the fake reads (the proxy's own limit is far below it)."""
SESSION = "fake-session-1"


@dataclass(frozen=True)
class Head:
    """One request as received: the raw head bytes and the body."""

    raw: bytes
    body: bytes

    @property
    def request_line(self) -> str:
        """The first line, exactly (`POST /mcp HTTP/1.1`)."""
        return self.raw.split(b"\r\n", 1)[0].decode("latin-1")

    @property
    def headers(self) -> list[tuple[str, str]]:
        """Header fields in arrival order and spelling."""
        out = []
        for line in self.raw.split(b"\r\n")[1:]:
            if line:
                name, _, value = line.decode("latin-1").partition(":")
                out.append((name, value.strip()))
        return out

    def values(self, name: str) -> list[str]:
        """Every value of a header (case-insensitive)."""
        return [v for k, v in self.headers if k.lower() == name.lower()]

    @property
    def method(self) -> str | None:
        """The JSON-RPC method of the body, if it has one."""
        try:
            value = json.loads(self.body)
        except (ValueError, RecursionError):  # deep nesting is valid JSON the stdlib cannot read
            return None
        return value.get("method") if isinstance(value, dict) else None


@dataclass
class RecordingUpstream:
    """A running fake: its port, its era and every head it received."""

    era: Era
    port: int = 0
    heads: list[Head] = field(default_factory=list)
    answer_headers: tuple[tuple[str, str], ...] = ()
    answer_trailers: tuple[tuple[str, str], ...] = ()

    def url(self, path: str, query: str = "") -> str:
        """The upstream URL to give the proxy."""
        return f"http://127.0.0.1:{self.port}{path}" + (f"?{query}" if query else "")


def _response(status: int, body: Any = None, headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    data = b"" if body is None else json.dumps(body).encode()
    reason = {200: "OK", 202: "Accepted", 400: "Bad Request", 405: "Method Not Allowed"}[status]
    lines = [f"HTTP/1.1 {status} {reason}", f"Content-Length: {len(data)}"]
    if body is not None:
        lines.append("Content-Type: application/json")
    lines += [f"{k}: {v}" for k, v in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + data


def _result(ident: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "result": result}


def _error(ident: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": ident, "error": error}


_TOOL = {"name": "echo", "inputSchema": {"type": "object", "properties": {}}}


def _called(message: dict[str, Any]) -> str:
    """A tool's text: `dump` gives back its arguments as JSON (a debugging tool), every other `echoed`."""
    params = message.get("params")
    if isinstance(params, dict) and params.get("name") == "dump":
        return json.dumps(params.get("arguments"))
    return "echoed"


def _answer(era: Era, head: Head) -> bytes:
    verb = head.request_line.split(" ", 1)[0]
    if verb == "GET" or (verb == "DELETE" and era == "modern"):
        return _response(405)
    if verb == "DELETE":
        return _response(200)
    try:
        message = json.loads(head.body)
    except RecursionError:  # valid JSON nested past the stdlib's reach: answered as a server would
        message = {"jsonrpc": "2.0", "id": _peek_id(head.body), "method": "tools/call"}
    except ValueError:
        return _response(400, _error(None, -32700, "Parse error"))
    if isinstance(message, list) and message and all(isinstance(m, dict) and "id" not in m for m in message):
        return _response(202)  # a 2025-03-26 batch of notifications
    if not isinstance(message, dict):
        return _response(400, _error(None, -32600, "Invalid Request"))
    if "method" not in message or "id" not in message:
        return _response(202)
    ident, method = message["id"], message["method"]
    modern_wire = "2026-07-28" in head.values("MCP-Protocol-Version")
    if era == "legacy":
        if modern_wire:
            return _response(400, _error(ident, -32600, "Unsupported protocol version"))
        if method == "initialize":
            result = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "recording-upstream", "version": "1"},
            }
            return _response(200, _result(ident, result), (("Mcp-Session-Id", SESSION),))
        if method == "tools/list":
            return _response(200, _result(ident, {"tools": [_TOOL]}))
        if method == "tools/call":
            return _response(200, _result(ident, {"content": [{"type": "text", "text": _called(message)}]}))
        return _response(200, _error(ident, -32601, "Method not found"))
    if method == "initialize":
        data = {"supported": ["2026-07-28"], "requested": message.get("params", {}).get("protocolVersion")}
        return _response(400, _error(ident, -32022, "Unsupported protocol version", data))
    info = {"io.modelcontextprotocol/serverInfo": {"name": "recording-upstream", "version": "1"}}
    if method == "server/discover":
        result = {
            "resultType": "complete",
            "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {}},
            "ttlMs": 0,
            "cacheScope": "private",
            "_meta": info,
        }
        return _response(200, _result(ident, result))
    if method == "tools/list":
        result = {"resultType": "complete", "tools": [_TOOL], "ttlMs": 0, "cacheScope": "private"}
        return _response(200, _result(ident, result))
    if method == "tools/call":
        result = {"resultType": "complete", "content": [{"type": "text", "text": "echoed"}], "_meta": info}
        return _response(200, _result(ident, result))
    return _response(200, _error(ident, -32601, "Method not found"))


def _with_headers(answer: bytes, extra: tuple[tuple[str, str], ...]) -> bytes:
    """`answer` with the `extra` header lines added at the end of its head."""
    if not extra:
        return answer
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = "".join(f"\r\n{name}: {value}" for name, value in extra).encode()
    return head + lines + b"\r\n\r\n" + body


def _with_trailers(answer: bytes, trailers: tuple[tuple[str, str], ...]) -> bytes:
    """`answer` re-framed chunked (two chunks) with `trailers` after its last chunk, when it has a body."""
    head, _, body = answer.partition(b"\r\n\r\n")
    if not trailers or not body:
        return answer
    lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"content-length:")]
    names = ", ".join(dict.fromkeys(name for name, _ in trailers))
    lines += [b"Transfer-Encoding: chunked", f"Trailer: {names}".encode()]
    half = len(body) // 2
    chunks = b"".join(b"%x\r\n%b\r\n" % (len(part), part) for part in (body[:half], body[half:]))
    fields = "".join(f"{name}: {value}\r\n" for name, value in trailers).encode()
    return b"\r\n".join(lines) + b"\r\n\r\n" + chunks + b"0\r\n" + fields + b"\r\n"


def _peek_id(body: bytes) -> Any:
    """The id of a body too deep for the stdlib's parser, when it is the first member."""
    start = body.find(b'"id":')
    if start < 0:
        return None
    digits = body[start + 5 :].split(b",", 1)[0].strip()
    return int(digits) if digits.isdigit() else None


class _Requests:
    """The requests on one connection: raw bytes as they came, their ends found by the proxy's HTTP/1.1
    core. The fake answers each request before the next is sent, so the bytes between two ends are
    exactly one request."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.core = RequestReader(MAX_BODY, time.monotonic, Request)
        self.raw = bytearray()

    async def next(self) -> Head | None:
        """The next request as received; None at the end, or at bytes with no framing to trust."""
        while True:
            data = await self.reader.read(65536)
            if not data:
                return None
            self.raw += data
            for event in self.core.feed(data):
                if isinstance(event, EndOfRequest):
                    raw, self.raw = bytes(self.raw), bytearray()
                    head_end = raw.find(b"\r\n\r\n") + 4
                    return Head(raw[:head_end], b"".join(event.request.body))
                if isinstance(event, Refusal):
                    return None  # no framing to trust: stop reading this connection


@asynccontextmanager
async def recording_upstream(
    era: Era,
    answer_headers: tuple[tuple[str, str], ...] = (),
    answer_trailers: tuple[tuple[str, str], ...] = (),
) -> AsyncIterator[RecordingUpstream]:
    """Serve on 127.0.0.1:0 (keep-alive, one request at a time per connection); stopped on exit."""
    fake = RecordingUpstream(era, answer_headers=answer_headers, answer_trailers=answer_trailers)
    tasks: set[asyncio.Task[Any]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.add(task)
        try:
            requests = _Requests(reader)
            while (head := await requests.next()) is not None:
                fake.heads.append(head)
                answer = _with_headers(_answer(era, head), fake.answer_headers)
                writer.write(_with_trailers(answer, fake.answer_trailers))
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    fake.port = int(server.sockets[0].getsockname()[1])
    try:
        yield fake
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        with suppress(Exception):
            await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()
