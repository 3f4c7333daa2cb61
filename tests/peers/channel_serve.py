"""The Python SDK's catalogue server on its other transports: ``python -m tests.peers.channel_serve MODE``.

``stdio``: the in-flight (legacy-style) server of ``tests.peers.apps`` over the SDK's stdio transport,
for ``mcp-proxy --upstream-cmd``. ``sse [--port N]``: the same server over the SDK's 2024-11-05
HTTP+SSE transport (``GET /sse``, ``POST /messages/?session_id=...``) under uvicorn, bound to
127.0.0.1, announcing ``READY <port> <http>`` like ``tests.peers.serve``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import anyio
from mcp.server.sse import SseServerTransport
from mcp.server.stdio import stdio_server
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.peers.channel_serve", description=__doc__)
    parser.add_argument("mode", choices=("stdio", "sse"))
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    if args.mode == "stdio":
        anyio.run(serve_stdio)
        return 0
    return serve(sse_app(), args.port)


if __name__ == "__main__":
    sys.exit(main())
