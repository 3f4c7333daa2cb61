"""Run one test peer: ``python -m tests.peers.serve KIND [--port N] [--no-seal] [--tls-cert C --tls-key K]``.

Tests run peers as subprocesses (see ``tests.peers.runner``) so that a real HTTP server with its own
event loop sits on the other side of the proxy, exactly as in production. The process binds
127.0.0.1 only (``--port 0`` picks a free port), prints exactly one line ``READY <port> <http>`` on
stdout once the app's lifespan has started and the socket is accepting connections, and serves
``/mcp`` until SIGTERM or SIGINT. ``<http>`` is the HTTP implementation uvicorn picked (``h11`` or
``httptools``): uvicorn takes httptools whenever it is installed, so the environment the peer runs in
decides, and the runner checks it got the one it asked for.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys

import uvicorn

from tests.peers.apps import KINDS, build_app

HOST = "127.0.0.1"


class _ReadyServer(uvicorn.Server):
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


def _bind(port: int) -> socket.socket:
    # IPPROTO_TCP, as uvicorn's own binding (loop.create_server) creates it: asyncio sets TCP_NODELAY
    # only on sockets that say they are TCP, and without it every response written in pieces (an SSE
    # event, then the last chunk) waits on a delayed ACK, about 40 ms, which users' servers never do.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, port))
    sock.set_inheritable(True)
    return sock


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, bind the socket, and serve until a termination signal."""
    parser = argparse.ArgumentParser(prog="python -m tests.peers.serve", description=__doc__)
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0 = any free port)")
    parser.add_argument("--no-seal", action="store_true", help="MRTR kinds: send requestState as plain JSON")
    parser.add_argument("--log-level", default="warning", help="uvicorn log level (stderr)")
    parser.add_argument("--tls-cert", help="serve HTTPS with this PEM certificate (needs --tls-key)")
    parser.add_argument("--tls-key", help="the PEM private key of --tls-cert")
    args = parser.parse_args(argv)

    sock = _bind(args.port)
    port = sock.getsockname()[1]
    app = build_app(args.kind, seal_state=not args.no_seal)
    config = uvicorn.Config(
        app,
        log_level=args.log_level,
        access_log=False,
        lifespan="on",
        # Open SSE streams must not hold shutdown hostage.
        timeout_graceful_shutdown=2,
        ssl_certfile=args.tls_cert,
        ssl_keyfile=args.tls_key,
    )
    server = _ReadyServer(config, port)
    try:
        asyncio.run(server.serve(sockets=[sock]))
    finally:
        sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
