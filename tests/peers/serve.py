"""Run one test peer: ``python -m tests.peers.serve KIND [--port N] [--no-seal] [--tls-cert C --tls-key K]``.

Tests run peers as subprocesses (see ``tests.peers.runner``) so that a real HTTP server with its own
event loop sits on the other side of the proxy, exactly as in production. The process binds
127.0.0.1 only (``--port 0`` picks a free port), prints exactly one line ``READY <port> <http>`` on
stdout once the app's lifespan has started and the socket is accepting connections, and serves
``/mcp`` until SIGTERM or SIGINT. ``<http>`` is the HTTP implementation uvicorn picked (``h11`` or
``httptools``): uvicorn takes httptools whenever it is installed, so the environment the peer runs in
decides, and the runner checks it got the one it asked for. ``--gzip json|sse`` puts the peer behind
compression middleware (``tests.peers.compressed``); ``--mount /api`` serves it under that prefix
(``tests.peers.mounted``); ``--server-version V`` sets the SDK kinds' ``serverInfo.version``.
"""

from __future__ import annotations

import argparse
import sys

from tests.peers.apps import KINDS, build_app
from tests.peers.compressed import COMPRESSIONS, gzipped
from tests.peers.mounted import mounted
from tests.peers.uvicorn_ready import serve


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, bind the socket, and serve until a termination signal."""
    parser = argparse.ArgumentParser(prog="python -m tests.peers.serve", description=__doc__)
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0 = any free port)")
    parser.add_argument("--no-seal", action="store_true", help="MRTR kinds: send requestState as plain JSON")
    parser.add_argument("--path", default="/mcp", help="the MCP endpoint's path (the SDK kinds)")
    parser.add_argument("--log-level", default="warning", help="uvicorn log level (stderr)")
    parser.add_argument("--tls-cert", help="serve HTTPS with this PEM certificate (needs --tls-key)")
    parser.add_argument("--tls-key", help="the PEM private key of --tls-cert")
    parser.add_argument(
        "--gzip",
        choices=COMPRESSIONS,
        help="behind Starlette's GZipMiddleware: json answers plain JSON, compressed; sse compresses SSE",
    )
    parser.add_argument("--mount", help="serve the app under this path prefix (a Starlette Mount)")
    parser.add_argument("--server-version", default="1.0.0", help="the SDK kinds' serverInfo.version")
    args = parser.parse_args(argv)

    app = build_app(
        args.kind,
        seal_state=not args.no_seal,
        path=args.path,
        json_response=args.gzip == "json",
        version=args.server_version,
    )
    if args.gzip is not None:
        app = gzipped(app, args.gzip)
    if args.mount:
        app = mounted(app, args.mount)
    return serve(
        app, args.port, log_level=args.log_level, ssl_certfile=args.tls_cert, ssl_keyfile=args.tls_key
    )


if __name__ == "__main__":
    sys.exit(main())
