"""An OAuth flow through the proxy's mirrored paths reaches no output in clear.

The official Python SDK's server with its authorization server on the same origin
(`FastMCP(auth_server_provider=...)`, as `tests.peers.sdk1_oauth` serves it) mounts `/register`,
`/authorize`, `/token` and `/revoke` beside `/mcp`, so the whole flow passes the proxy: a client
registers (the answer holds its client secret), is handed a code, trades it with its secret and PKCE
verifier in a form-encoded body for an access and a refresh token (a JSON answer), calls `/mcp` with
the bearer token, refreshes, and revokes. The real `mcp-proxy` relays every step and none of these
values is in clear in its log, capture, exports (`--json`, `--har`, `--curl`), admin API or what the
TUI shows of the capture, while the names around them stay readable.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import aiohttp
import pytest

from proxy.record.capture import read_capture
from tests.e2e.test_no_secrets import rendered
from tests.peers.runner import Sdk1Server
from tests.sidecar import (
    ProxyProcess,
    admin_outputs,
    chain_ids,
    clean_env,
    exported_chains,
    run_mcp_proxy,
    settings_env,
)

pytestmark = pytest.mark.e2e

TOKEN = "oauth-secrets-admin-token-6021"
REDIRECT = "http://127.0.0.1:1/cb"
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


async def form_post(http: aiohttp.ClientSession, url: str, fields: dict[str, str]) -> dict[str, Any]:
    """POST a form-encoded body as an OAuth client does; the JSON answer (must be 200)."""
    async with http.post(url, data=urlencode(fields), headers=FORM) as answer:
        body = await answer.text()
        assert answer.status == 200, (url, answer.status, body)
        decoded: dict[str, Any] = json.loads(body) if body else {}
        return decoded


async def authorized_code(http: aiohttp.ClientSession, base: str, client_id: str, challenge: str) -> str:
    """A fresh authorization code for the client (the provider approves at once)."""
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "state": secrets.token_urlsafe(16),
    }
    async with http.get(f"{base}/authorize?{urlencode(query)}", allow_redirects=False) as answer:
        assert answer.status == 302, await answer.text()
        (code,) = parse_qs(urlsplit(answer.headers["Location"]).query)["code"]
        return code


def pkce_pair() -> tuple[str, str]:
    """A PKCE code verifier and its S256 challenge, as an OAuth client makes them."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


async def registered(http: aiohttp.ClientSession, base: str, name: str | None = None) -> dict[str, Any]:
    """A client registered dynamically at `/register` (201): its id and secret."""
    registration: dict[str, Any] = {"redirect_uris": [REDIRECT]}
    if name is not None:
        registration["client_name"] = name
    async with http.post(f"{base}/register", json=registration) as answer:
        assert answer.status == 201, await answer.text()
        client: dict[str, Any] = await answer.json()
        return client


async def code_traded(
    http: aiohttp.ClientSession, base: str, client: dict[str, Any], verifier: str, challenge: str
) -> tuple[str, dict[str, str], dict[str, Any]]:
    """Authorize the client, then trade the code at `/token`: the code, the client's credentials (as
    a token request sends them) and the tokens."""
    code = await authorized_code(http, base, client["client_id"], challenge)
    creds = {"client_id": client["client_id"], "client_secret": client["client_secret"]}
    trade = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT}
    tokens = await form_post(http, f"{base}/token", {**trade, **creds, "code_verifier": verifier})
    return code, creds, tokens


async def oauth_flow(base: str, mcp: str) -> dict[str, str]:
    """Register, authorize, trade the code, call `/mcp` with the token, refresh and revoke, all through
    the proxy; every secret the flow carried, by name."""
    verifier, challenge = pkce_pair()
    async with aiohttp.ClientSession() as http:
        client = await registered(http, base, "oauth-secrets")
        code, creds, first = await code_traded(http, base, client, verifier, challenge)
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "oauth-secrets", "version": "1"},
            },
        }
        bearer = {
            "Authorization": f"Bearer {first['access_token']}",
            "Accept": "application/json, text/event-stream",
        }
        async with http.post(mcp, json=init, headers=bearer) as answer:
            assert answer.status == 200, await answer.text()
            assert "serverInfo" in await answer.text()
        renewal = {"grant_type": "refresh_token", "refresh_token": first["refresh_token"], **creds}
        second = await form_post(http, f"{base}/token", renewal)
        await form_post(http, f"{base}/revoke", {"token": second["access_token"], **creds})
    return {
        "client secret": client["client_secret"],
        "code": code,
        "code verifier": verifier,
        "access token": first["access_token"],
        "refresh token": first["refresh_token"],
        "refreshed access token": second["access_token"],
        "refreshed refresh token": second["refresh_token"],
    }


async def test_an_oauth_flow_through_the_mirrored_paths_reaches_no_output_in_clear(tmp_path: Path) -> None:
    capture = tmp_path / "run.jsonl"
    with Sdk1Server(oauth=True) as server:
        env = clean_env(
            **settings_env(upstream=server.url, capture=capture, admin_token=TOKEN, log_format="json")
        )
        with ProxyProcess(env) as proxy:
            planted = await oauth_flow(proxy.listen, proxy.endpoint())
            admin = await admin_outputs(proxy.admin, TOKEN)
            proxy.stop()
            log = proxy.stderr()
    listed, chains = exported_chains(capture)
    har = run_mcp_proxy("export", "--har", "-", str(capture))
    assert har.returncode == 0, har.stderr
    curls = [run_mcp_proxy("export", "--curl", str(c["id"]), str(capture)) for c in chains]
    assert all(c.returncode == 0 for c in curls), [c.stderr for c in curls]
    outputs = {
        "log": log,
        "capture": capture.read_text(encoding="utf-8"),
        "export --json": listed,
        "export --har": har.stdout,
        "export --curl": "\n".join(c.stdout for c in curls),
        "admin API": "\n".join(admin),
        "TUI": rendered(list(read_capture(capture))),
    }
    assert chain_ids(chains, "method", "initialize"), "the bearer-authorized call was relayed"
    shown = outputs["admin API"]
    assert "grant_type=refresh_token&refresh_token=<redacted len=" in shown, "the form is shown, masked"
    assert '\\"access_token\\":\\"<redacted len=' in shown or '"access_token":"<redacted len=' in shown
    assert '"token_type":"Bearer"' in outputs["capture"], "what is no secret stays readable"
    assert "client_secret_post" in outputs["capture"], "the registration's answer is recorded"
    leaks = sorted(
        (where, name) for name, value in planted.items() for where, text in outputs.items() if value in text
    )
    assert leaks == [], [
        (w, n, outputs[w][max(0, outputs[w].index(planted[n]) - 200) :][:300]) for w, n in leaks
    ]
