"""A standard-library HTTP server on a free loopback port, in a thread, for the peers the tests write
with `http.server` (a server that answers HTML, a fake that fails every request)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler], path: str = "/mcp") -> Iterator[str]:
    """Serve `handler` until the block ends, then stop the server and its thread; yields its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name=handler.__name__, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{path}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
