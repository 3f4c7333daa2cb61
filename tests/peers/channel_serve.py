"""The Python SDK's catalogue server on its other transports: ``python -m tests.peers.channel_serve MODE``.

``stdio``: the in-flight (legacy-style) server of ``tests.peers.apps`` over the SDK's stdio transport,
for ``mcp-proxy --upstream-cmd``. ``sse [--port N]``: the same server over the SDK's 2024-11-05
HTTP+SSE transport (``GET /sse``, ``POST /messages/?session_id=...``) under uvicorn, bound to
127.0.0.1, announcing ``READY <port> <http>`` like ``tests.peers.serve``. ``--bearer TOKEN`` puts it
behind a bearer check of the kind users write (one middleware in front of every path, 401 with
`WWW-Authenticate` without ``Authorization: Bearer TOKEN``), and writes each request's head to stderr
as a JSON line (``{"heard": METHOD, "target": ..., "headers": [[name, value], ...]}``), so a test can
read what reached the server.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import anyio
from mcp.server.sse import SseServerTransport
from mcp.server.stdio import stdio_server
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from tests.peers.apps import build_server
from tests.peers.uvicorn_ready import serve


async def serve_stdio() -> None:
    server = build_server("inflight")
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def sse_app() -> Starlette:
    server = build_server("inflight")
    transport = SseServerTransport("/messages/")

    async def handle_sse(request: Request) -> Response:
        send: Any = request._send  # the SDK's documented way: the SSE response is written directly
        async with transport.connect_sse(request.scope, request.receive, send) as (read, write):
            await server.run(read, write, server.create_initialization_options())
        return Response()

    return Starlette(
        routes=[
            Route("/sse", endpoint=handle_sse, methods=["GET"]),
            Mount("/messages/", app=transport.handle_post_message),
        ]
    )


CHALLENGE = (
    'Bearer error="invalid_token", resource_metadata="http://127.0.0.1/.well-known/oauth-protected-resource"'
)
"""The `WWW-Authenticate` a refused request gets (what an OAuth-capable client starts its flow from)."""


def bearer_checked(app: ASGIApp, token: str) -> ASGIApp:
    """`app` behind a bearer check on every path; each request's head written to stderr (one JSON line)."""

    async def checked(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        heads = [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]]
        target = scope["path"] + (f"?{scope['query_string'].decode()}" if scope["query_string"] else "")
        line = json.dumps({"heard": scope["method"], "target": target, "headers": heads})
        print(line, file=sys.stderr, flush=True)
        if dict((k.lower(), v) for k, v in heads).get("authorization") != f"Bearer {token}":
            body = b'{"error":"invalid_token"}'
            head = [(b"content-type", b"application/json"), (b"www-authenticate", CHALLENGE.encode())]
            head.append((b"content-length", str(len(body)).encode()))
            await send({"type": "http.response.start", "status": 401, "headers": head})
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    return checked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.peers.channel_serve", description=__doc__)
    parser.add_argument("mode", choices=("stdio", "sse"))
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--bearer", help="refuse every request without `Authorization: Bearer BEARER`")
    args = parser.parse_args(argv)
    if args.mode == "stdio":
        anyio.run(serve_stdio)
        return 0
    app: ASGIApp = sse_app()
    return serve(bearer_checked(app, args.bearer) if args.bearer else app, args.port)


if __name__ == "__main__":
    sys.exit(main())
