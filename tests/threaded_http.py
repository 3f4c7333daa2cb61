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


class FailingApp(BaseHTTPRequestHandler):
    """A hand-written fake: an application that crashed behind a web server that still answers, 500 to
    every request (no SDK server answers so while it serves MCP)."""

    def _fail(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = b"Internal Server Error"
        self.send_response(500)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = _fail

    def log_message(self, format: str, *args: object) -> None:
        pass
