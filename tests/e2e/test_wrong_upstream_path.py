"""An upstream that answers HTTP but serves no MCP (a URL without the endpoint's path, an application
that fails every request): the proxy warns with what to check and is not ready.

A real SDK server answers 404 off its endpoint; a user who gave only the server's origin (or a
mistyped path) sees a warning at start naming the likely cause, not an info line among others.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

import pytest

from tests.peers.runner import PeerServer
from tests.sidecar import ProxyProcess, admin_get, clean_env, settings_env
from tests.threaded_http import FailingApp, serving


@pytest.fixture(scope="module")
def mounted_server() -> Iterator[PeerServer]:
    """The legacy SDK server under a real Starlette `Mount("/api")`: its endpoint is `/api/mcp`, and
    Starlette redirects `/api/mcp/` there (307)."""
    peer = PeerServer("legacy-inflight", extra_args=["--mount", "/api"]).start()
    try:
        yield peer
    finally:
        peer.stop()


async def test_an_upstream_the_server_redirects_warns_naming_the_url_to_give_and_readyz_says_it(
    mounted_server: PeerServer,
) -> None:
    origin = f"http://127.0.0.1:{mounted_server.port}"
    redirected = f"{origin}/api/mcp/"
    env = clean_env(**settings_env(upstream=redirected, admin_enabled="false", health="127.0.0.1:0"))
    with ProxyProcess(env) as proxy:
        unknown = proxy.wait_for("upstream_era_unknown")
        assert unknown is not None, proxy.stderr()
        status, _, body = await admin_get(proxy.health + "/readyz")

    fix = f"give --upstream {origin}/api/mcp"
    assert unknown["level"] == "warning", unknown
    assert f"the server redirects {redirected} to {origin}/api/mcp: {fix}" in unknown["problem"]
    assert unknown["hint"].startswith(fix), unknown
    assert status == 503, body
    assert fix in json.loads(body)["reason"]


def test_a_404_to_initialize_warns_that_the_path_is_likely_not_the_mcp_endpoint(
    legacy_server: PeerServer,
) -> None:
    parts = urlsplit(legacy_server.url)
    wrong = f"{parts.scheme}://{parts.netloc}/wrong"

    with ProxyProcess(clean_env(**settings_env(upstream=wrong, admin_enabled="false"))) as proxy:
        unknown = proxy.wait_for("upstream_era_unknown")

    assert unknown is not None, proxy.stderr()
    assert unknown["level"] == "warning", unknown
    assert "HTTP 404 to initialize; " in unknown["problem"]
    assert "is it the server's MCP endpoint?" in unknown["problem"]


async def test_readyz_is_not_ready_while_nothing_serves_mcp_at_the_upstream_path(
    legacy_server: PeerServer,
) -> None:
    parts = urlsplit(legacy_server.url)
    wrong = f"{parts.scheme}://{parts.netloc}/wrong"
    env = clean_env(**settings_env(upstream=wrong, admin_enabled="false", health="127.0.0.1:0"))
    with ProxyProcess(env) as proxy:
        assert proxy.wait_for("upstream_era_unknown") is not None, proxy.stderr()
        status, _, body = await admin_get(proxy.health + "/readyz")
    assert status == 503, body
    answer = json.loads(body)
    assert answer["status"] == "not_ready"
    assert "is it the server's MCP endpoint?" in answer["reason"]


@pytest.fixture
def failing_upstream() -> Iterator[str]:
    with serving(FailingApp) as url:
        yield url


async def test_readyz_is_not_ready_and_a_warning_says_why_while_the_upstream_fails_every_request(
    failing_upstream: str,
) -> None:
    env = clean_env(**settings_env(upstream=failing_upstream, admin_enabled="false", health="127.0.0.1:0"))
    with ProxyProcess(env) as proxy:
        unknown = proxy.wait_for("upstream_era_unknown")
        assert unknown is not None, proxy.stderr()
        status, _, body = await admin_get(proxy.health + "/readyz")
    assert unknown["level"] == "warning", unknown
    assert "it is up, but not serving MCP" in unknown["problem"]
    assert status == 503, body
    assert "HTTP 500 to initialize" in json.loads(body)["reason"]


class _ElsewhereSse(BaseHTTPRequestHandler):
    """A hand-written fake: an HTTP+SSE server whose `endpoint` event names an absolute URL on another
    origin (`localhost` for the `127.0.0.1` it was reached at), as servers behind a load balancer or
    started with their public host name announce it; the SDK servers the tests run announce a path."""

    def do_GET(self) -> None:
        port = self.server.server_address[1]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(f"event: endpoint\ndata: http://localhost:{port}/messages?sessionId=1\n\n".encode())
        self.wfile.flush()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b"Cannot POST /sse"
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_an_sse_server_announcing_another_origin_is_named_as_the_cause_not_the_path() -> None:
    with serving(_ElsewhereSse, "/sse") as url:
        port = urlsplit(url).port
        with ProxyProcess(clean_env(**settings_env(upstream=url, admin_enabled="false"))) as proxy:
            unknown = proxy.wait_for("upstream_era_unknown")
    assert unknown is not None, proxy.stderr()
    assert unknown["level"] == "warning", unknown
    problem = unknown["problem"]
    assert "a GET there opened an HTTP+SSE stream, but" in problem
    assert f"a message endpoint on another origin (http://localhost:{port})" in problem
    assert f"name it in --upstream: http://localhost:{port}/sse" in problem
    assert "is it the server's MCP endpoint?" not in problem
