"""A minimal, fast MCP responder for the benchmark, so the proxy's cost dominates what is measured.

Serves `/mcp` on 127.0.0.1 (``--port 0`` picks a free port; prints ``READY <port>`` once listening):

- POST `initialize`: an InitializeResult (legacy 2025-11-25) with an `Mcp-Session-Id`, so the proxy's
  era probe finds a legacy server; `server/discover`: HTTP 400 -32600, as a legacy-only server answers.
- POST `tools/call`, by tool name: `small` (any unknown name too) a canned JSON result; `sse` an SSE
  body with two progress notifications then the result (`--sse-gap-ms` apart, so a proxy that
  buffers shows it in the time to the first event); `big1m` / `big10m` a JSON result carrying 1 MiB
  / 10 MiB of text; `elicit` the legacy in-flight elicitation round trip: an SSE body that sends
  `elicitation/create`, waits for the client's answering POST, then sends the result.
- POST of a notification or of a JSON-RPC response: 202 (a response resolves a pending `elicit`).
- GET: an SSE stream that stays open, idle (one comment line first, so a client sees it open).
- DELETE: 200.

Answers are pre-encoded bytes with the request id spliced in: no JSON encoding per request.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import Any

import orjson
from aiohttp import web

SESSION = "bench-upstream-session"
_RESULT_HEAD = b'{"jsonrpc":"2.0","id":'
_SMALL_RESULT = orjson.dumps(
    {
        "content": [{"type": "text", "text": "ok: the canned answer of the benchmark upstream"}],
        "isError": False,
    }
)
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_JSON = "application/json"


def _big_result(size: int) -> bytes:
    return orjson.dumps({"content": [{"type": "text", "text": "x" * size}], "isError": False})


_RESULTS: dict[str, bytes] = {"small": _SMALL_RESULT}
_BIG = {"big1m": 1024 * 1024, "big10m": 10 * 1024 * 1024}


def _response(ident: Any, result: bytes) -> bytes:
    return _RESULT_HEAD + orjson.dumps(ident) + b',"result":' + result + b"}"


def _event(payload: bytes) -> bytes:
    return b"event: message\ndata: " + payload + b"\n\n"


class Upstream:
    """The responder's state: pending elicitations waiting for the client's answer."""

    def __init__(self, sse_gap: float) -> None:
        self.sse_gap = sse_gap
        self.pending: dict[Any, asyncio.Future[Any]] = {}
        self.streams: set[web.StreamResponse] = set()
        self._nested = 0

    async def post(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            msg = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return web.Response(status=400, body=b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700}}')
        if not isinstance(msg, dict):
            return web.Response(status=400)
        method = msg.get("method")
        ident = msg.get("id")
        if method is None:  # a response to one of our requests
            future = self.pending.pop(ident, None)
            if future is not None and not future.done():
                future.set_result(msg)
            return web.Response(status=202)
        if ident is None:  # a notification
            return web.Response(status=202)
        if method == "tools/call":
            return await self._tools_call(request, ident, msg.get("params") or {})
        if method == "initialize":
            result = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "bench-upstream-fast", "version": "1"},
            }
            body = _response(ident, orjson.dumps(result))
            return web.Response(body=body, content_type=_JSON, headers={"Mcp-Session-Id": SESSION})
        if method == "server/discover":
            error = {"code": -32600, "message": "Unsupported protocol version"}
            body = orjson.dumps({"jsonrpc": "2.0", "id": ident, "error": error})
            return web.Response(status=400, body=body, content_type=_JSON)
        return web.Response(body=_response(ident, b"{}"), content_type=_JSON)

    async def _tools_call(
        self, request: web.Request, ident: Any, params: dict[str, Any]
    ) -> web.StreamResponse:
        name = params.get("name") or "small"
        if name == "sse":
            return await self._sse(request, ident, params)
        if name == "elicit":
            return await self._elicit(request, ident)
        if name in _BIG and name not in _RESULTS:
            _RESULTS[name] = _big_result(_BIG[name])
        result = _RESULTS.get(name, _SMALL_RESULT)
        return web.Response(body=_response(ident, result), content_type=_JSON)

    async def _sse(self, request: web.Request, ident: Any, params: dict[str, Any]) -> web.StreamResponse:
        token = (params.get("_meta") or {}).get("progressToken", "bench")
        response = web.StreamResponse(headers=_SSE_HEADERS)
        await response.prepare(request)
        for step in (1, 2):
            note = {
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {"progressToken": token, "progress": step, "total": 2},
            }
            await response.write(_event(orjson.dumps(note)))
            await asyncio.sleep(self.sse_gap)
        await response.write(_event(_response(ident, _SMALL_RESULT)))
        await response.write_eof()
        return response

    async def _elicit(self, request: web.Request, ident: Any) -> web.StreamResponse:
        self._nested += 1
        nested = f"elicit-{self._nested}"
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.pending[nested] = future
        response = web.StreamResponse(headers=_SSE_HEADERS)
        await response.prepare(request)
        ask = {
            "jsonrpc": "2.0",
            "id": nested,
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": "What is your name?",
                "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
            },
        }
        await response.write(_event(orjson.dumps(ask)))
        try:
            answer = await asyncio.wait_for(future, 30)
        finally:
            self.pending.pop(nested, None)
        content = (answer.get("result") or {}).get("content") or {}
        result = {"content": [{"type": "text", "text": f"Hello, {content.get('name')}!"}], "isError": False}
        await response.write(_event(_response(ident, orjson.dumps(result))))
        await response.write_eof()
        return response

    async def get(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers=_SSE_HEADERS)
        await response.prepare(request)
        await response.write(b": open\n\n")
        self.streams.add(response)
        try:
            await asyncio.Event().wait()  # idle until the client leaves (the handler is cancelled then)
        finally:
            self.streams.discard(response)

    async def delete(self, request: web.Request) -> web.Response:
        return web.Response(status=200)


def build_app(sse_gap: float) -> web.Application:
    """The responder's aiohttp app (one MCP endpoint; every path serves it)."""
    upstream = Upstream(sse_gap)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/{tail:.*}", upstream.post)
    app.router.add_get("/{tail:.*}", upstream.get)
    app.router.add_delete("/{tail:.*}", upstream.delete)
    return app


async def serve(port: int, sse_gap: float) -> None:
    runner = web.AppRunner(build_app(sse_gap), access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=4096)
    await site.start()
    sockets = getattr(site._server, "sockets", None) or []
    sys.stdout.write(f"READY {sockets[0].getsockname()[1]}\n")
    sys.stdout.flush()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--sse-gap-ms", type=float, default=5.0, help="pause between SSE events")
    args = parser.parse_args()
    try:
        import uvloop  # the upstream should be as fast as it can: the proxy's cost is what is measured
    except ImportError:
        asyncio.run(serve(args.port, args.sse_gap_ms / 1000))
    else:
        uvloop.run(serve(args.port, args.sse_gap_ms / 1000))


if __name__ == "__main__":
    main()
