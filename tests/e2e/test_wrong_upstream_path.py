"""An `--upstream` URL without the server's MCP endpoint path: the proxy warns with what to check.

A real SDK server answers 404 off its endpoint; a user who gave only the server's origin (or a
mistyped path) sees a warning at start naming the likely cause, not an info line among others.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from tests.peers.runner import PeerServer
from tests.sidecar import ProxyProcess, admin_get, clean_env, settings_env


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
