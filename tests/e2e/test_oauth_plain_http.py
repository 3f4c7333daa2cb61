"""An OAuth login through the proxy's mirrored paths reads as plain HTTP, never as JSON-RPC errors.

The official Python SDK's server with its authorization server on the same origin
(`tests.peers.sdk1_oauth`) serves `/.well-known/...`, `/register`, `/authorize`, `/token` and
`/revoke` beside `/mcp`. The real `mcp-proxy` relays them all; its log line, its chains (the admin
API's, and those `export --json` builds from the capture), the HAR export and the metrics name each
by its HTTP method and path and judge it by its HTTP status: a 201 or a 200 is a success, a 400 is
`HTTP 400`, none is an invalid JSON-RPC message or counted in `mcp_proxy_errors_total`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proxy.record.capture import read_capture
from tests.e2e.test_no_secrets import rendered
from tests.e2e.test_oauth_secrets import FORM, oauth_flow
from tests.peers.runner import Sdk1Server
from tests.sidecar import ProxyProcess, admin_get, clean_env, exported_chains, run_mcp_proxy, settings_env

pytestmark = pytest.mark.e2e

TOKEN = "oauth-plain-http-admin-token-7140"


async def refused_and_discovered(base: str) -> None:
    """A token request the server refuses (400), and the discovery a client begins with."""
    async with aiohttp.ClientSession() as http:
        bad = "grant_type=authorization_code&code=nope&client_id=nobody"
        async with http.post(f"{base}/token", data=bad, headers=FORM) as answer:
            assert answer.status in (400, 401), await answer.text()
        async with http.get(f"{base}/.well-known/oauth-authorization-server") as answer:
            assert answer.status == 200, await answer.text()


def by_path(chains: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Chains named by HTTP method and path, grouped so."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for chain in chains:
        grouped.setdefault((chain.get("method"), chain.get("name")), []).append(chain)
    return grouped


def assert_plain_chains(chains: list[dict[str, Any]], where: str) -> None:
    """Each OAuth step is one chain named by its method and path, judged by its HTTP status."""
    grouped = by_path(chains)
    for key in (("POST", "/register"), ("GET", "/authorize"), ("POST", "/revoke")):
        assert [c["status"] for c in grouped.get(key, [])] == ["ok"], (where, key, grouped.keys())
    tokens = grouped[("POST", "/token")]
    assert sorted(c["status"] for c in tokens) == ["error", "ok", "ok"], (where, tokens)
    refused = next(c for c in tokens if c["status"] == "error")
    assert refused["error"] in ("HTTP 400", "HTTP 401"), (where, refused)
    assert [c["status"] for c in grouped[("GET", "/.well-known/oauth-authorization-server")]] == ["ok"]
    assert not [c for c in chains if c.get("invalid") or c.get("method") in (None, "GET stream")], (
        where,
        [(c.get("method"), c.get("name"), c.get("error")) for c in chains],
    )
    assert not [c for c in chains if "invalid" in str(c.get("error")) or "not JSON" in str(c.get("notes"))]


async def test_an_oauth_login_is_plain_http_in_every_output(tmp_path: Path) -> None:
    capture = tmp_path / "run.jsonl"
    with Sdk1Server(oauth=True) as server:
        env = clean_env(
            **settings_env(upstream=server.url, capture=capture, admin_token=TOKEN, log_format="json")
        )
        with ProxyProcess(env) as proxy:
            await oauth_flow(proxy.listen, proxy.endpoint())
            await refused_and_discovered(proxy.listen)
            status, _, body = await admin_get(proxy.admin + "/api/chains?limit=100", TOKEN)
            assert status == 200
            live = json.loads(body)
            status, _, metrics = await admin_get(proxy.admin + "/metrics", TOKEN)
            assert status == 200
            status, _, live_har = await admin_get(proxy.admin + "/api/export.har", TOKEN)
            assert status == 200
            proxy.stop()
            lines = [e for e in proxy.events() if e.get("event") == "exchange"]

    assert_plain_chains(live, "admin API")
    _, exported = exported_chains(capture)
    assert_plain_chains(exported, "export --json")

    token_lines = [line for line in lines if line.get("path") == "/token"]
    assert [line["carried"] for line in token_lines] == ["POST /token"] * 3, lines
    assert sorted(str(line["trouble"]) for line in token_lines) in (
        ["HTTP 400", "None", "None"],
        ["HTTP 401", "None", "None"],
    ), token_lines
    register = next(line for line in lines if line.get("path") == "/register")
    assert (register["carried"], register["status"], register["trouble"]) == ("POST /register", 201, None)
    assert not [line for line in lines if line["carried"] in ("invalid message", "POST", "GET stream")], lines

    text = metrics.decode()
    assert 'mcp_proxy_errors_total{method="none"' not in text, text
    errors = [row for row in text.splitlines() if row.startswith("mcp_proxy_errors")]
    assert not [row for row in errors if 'method="(http)"' in row], errors
    assert 'mcp_proxy_chains_total{client_era="unknown",method="(http)",mode="passthrough"} 7.0' in text, text

    for har_text, where in (
        (live_har.decode(), "admin HAR"),
        (run_mcp_proxy("export", "--har", "-", str(capture)).stdout, "export --har"),
    ):
        entries = json.loads(har_text)["log"]["entries"]
        token = [e for e in entries if e["request"]["url"].endswith("/token")]
        assert len(token) == 3, where
        kinds = {m["kind"] for e in token for m in e["_mcp"]["messages"]}
        assert kinds == {"http"}, (where, kinds)
        assert all("grant_type=" in e["request"]["postData"]["text"] for e in token), where
        assert all(
            '"token_type"' in e["response"]["content"]["text"]
            for e in token
            if e["response"]["status"] == 200
        )

    shown = rendered(list(read_capture(capture)))
    assert "missing or wrong" not in shown, shown
    assert "not JSON" not in shown, shown
    assert "POST /token" in shown, shown
