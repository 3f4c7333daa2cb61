"""Health answers: the upstream named by its origin only, reason texts scrubbed of the URL's secrets,
and the health-only listener in-process (its routes, its JSON 404, and its place in the proxy's life).
The process-level checks (probes without the token, the listener with the admin API off, draining)
are in tests/test_sidecar.py.
"""

from __future__ import annotations

import aiohttp
import pytest

from proxy.config import Settings
from proxy.framing.http import parse_upstream
from proxy.runtime import Proxy
from proxy.transport.health import scrub
from tests.peers.runner import PeerServer

URL = "https://probe-user:s3cret-pass@mcp.example:8443/mcp/tenant?api_key=q-secret-123#frag-secret"


@pytest.mark.parametrize(
    ("url", "origin"),
    [
        (URL, "https://mcp.example:8443"),
        ("http://127.0.0.1/mcp", "http://127.0.0.1:80"),
        ("https://host/mcp", "https://host:443"),
        ("http://user@[::1]:3001/mcp?x=1", "http://[::1]:3001"),
    ],
)
def test_the_public_upstream_is_scheme_host_and_port_only(url: str, origin: str) -> None:
    assert parse_upstream(url).origin == origin


@pytest.mark.parametrize(
    "reason",
    [
        f"era probe of {URL} failed: HTTP 404",
        "POST https://probe-user:s3cret-pass@mcp.example:8443/other?api_key=q-secret-123 answered 401",
        "auth failed for password s3cret-pass",
        "query api_key=q-secret-123 refused",
    ],
)
def test_a_reason_text_never_carries_the_upstream_urls_userinfo_password_or_query(reason: str) -> None:
    text = scrub(reason, parse_upstream(URL))

    assert [s for s in ("probe-user", "s3cret-pass", "q-secret-123", "frag-secret") if s in text] == []
    assert text.split()[0] == reason.split()[0]  # the rest of the reason stays readable


def test_a_reason_without_secrets_is_left_as_it_is() -> None:
    reason = "upstream mcp.example:8443 unreachable: Connection refused"

    assert scrub(reason, parse_upstream(URL)) == reason
    assert scrub(reason, parse_upstream("http://mcp.example:8443/mcp")) == reason


def test_a_short_password_is_masked_only_in_its_userinfo_form_not_in_ordinary_words() -> None:
    url = parse_upstream("http://u:ab@host:1/mcp")

    assert scrub("probe of http://u:ab@host:1/mcp failed; ab", url) == "probe of http://host:1 failed; ab"
    assert scrub("GET u:ab@host:1 refused", url) == "GET ***@host:1 refused"


async def test_the_health_listener_serves_health_and_readiness_with_json_404_elsewhere(
    legacy_server: PeerServer,
) -> None:
    settings = Settings(
        upstream=legacy_server.url, listen="127.0.0.1:0", admin_enabled=False, health="127.0.0.1:0"
    )
    async with Proxy(settings) as proxy, aiohttp.ClientSession() as http:
        assert proxy.admin is None
        assert proxy.health_url is not None
        answers = {}
        for path in ("/healthz", "/readyz", "/metrics", "/api/feed"):
            async with http.get(proxy.health_url + path) as resp:
                answers[path] = (resp.status, resp.content_type, await resp.json())
        async with http.post(proxy.health_url + "/healthz") as resp:
            posted = (resp.status, resp.headers.get("Allow"), (await resp.json())["error"])
        url = proxy.health_url

    assert answers["/healthz"] == (200, "application/json", {"status": "ok"})
    assert answers["/readyz"] == (
        200,
        "application/json",
        {"status": "ready", "upstream": f"http://127.0.0.1:{legacy_server.port}", "upstream_era": "legacy"},
    )
    assert answers["/metrics"][:2] == answers["/api/feed"][:2] == (404, "application/json")
    assert answers["/metrics"][2]["error"] == "not_found"
    assert posted[0] == 405
    assert posted[2] == "method_not_allowed"
    assert "GET" in (posted[1] or "")
    async with aiohttp.ClientSession() as http:  # and it is closed once the proxy stopped
        with pytest.raises(aiohttp.ClientConnectionError):
            await http.get(url + "/healthz")


async def test_without_the_health_setting_no_health_listener_is_bound(legacy_server: PeerServer) -> None:
    settings = Settings(upstream=legacy_server.url, listen="127.0.0.1:0", admin_enabled=False)
    async with Proxy(settings) as proxy:
        assert proxy.health is None
        assert proxy.health_url is None
