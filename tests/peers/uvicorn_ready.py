"""Serve an ASGI app with uvicorn as the test peers do: on 127.0.0.1, saying ``READY <port> <http>``.

Imports uvicorn and the standard library only, so a peer of any SDK version (``tests.peers.serve``
in the 2.x environment, ``tests.peers.sdk1_server`` in the 1.x one) can use it.
"""

from __future__ import annotations

import asyncio
import socket
import sys
from typing import Any

import uvicorn

HOST = "127.0.0.1"


class ReadyServer(uvicorn.Server):
    """A uvicorn server that announces its port once it is really listening."""

    def __init__(self, config: uvicorn.Config, port: int) -> None:
        super().__init__(config)
        self._port = port

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if not self.should_exit:  # startup failures (e.g. lifespan errors) set should_exit
            sys.stdout.write(f"READY {self._port} {http_implementation(self.config)}\n")
            sys.stdout.flush()


def http_implementation(config: uvicorn.Config) -> str:
    """``h11`` or ``httptools``: what uvicorn's ``http="auto"`` resolved to once the config is loaded."""
    name = getattr(config, "http_protocol_class", type(None)).__name__
    return {"H11Protocol": "h11", "HttpToolsProtocol": "httptools"}.get(name, name)


def bind(port: int) -> socket.socket:
    """A listening-ready socket on 127.0.0.1:`port`, inheritable by uvicorn."""
    # IPPROTO_TCP, as uvicorn's own binding (loop.create_server) creates it: asyncio sets TCP_NODELAY
    # only on sockets that say they are TCP, and without it every response written in pieces (an SSE
    # event, then the last chunk) waits on a delayed ACK, about 40 ms, which users' servers never do.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, port))
    sock.set_inheritable(True)
    return sock


def serve(
    app: Any, port: int, *, log_level: str = "warning", sock: socket.socket | None = None, **config: Any
) -> int:
    """Bind `port` (0: any free one), or take `sock` bound already, serve `app` until SIGTERM or SIGINT,
    and return 0."""
    sock = sock or bind(port)
    settings = uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        lifespan="on",
        # Open SSE streams must not hold shutdown hostage.
        timeout_graceful_shutdown=2,
        **config,
    )
    server = ReadyServer(settings, sock.getsockname()[1])
    try:
        asyncio.run(server.serve(sockets=[sock]))
    finally:
        sock.close()
    return 0
