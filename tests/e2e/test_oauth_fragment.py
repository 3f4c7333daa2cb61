"""Tokens an authorization server puts in a redirect's fragment reach no output in clear.

An OpenID provider answering `response_mode=fragment` (the implicit and hybrid flows,
`response_type=id_token token`) redirects to `redirect_uri#id_token=...&access_token=...`. The SDKs'
authorization servers only issue codes in the query, so the server here is a fake: the smallest
authorization server that answers `/authorize` with such a redirect. The real `mcp-proxy` relays it
on its mirrored path, and its capture, exports, admin API and what the TUI shows hold the tokens
masked, the client getting the `Location` unchanged.
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Final

import aiohttp
import pytest

from proxy.record.capture import read_capture
from tests.e2e.test_no_secrets import rendered
from tests.sidecar import (
    ProxyProcess,
    admin_outputs,
    clean_env,
    exported_chains,
    run_mcp_proxy,
    settings_env,
)
from tests.threaded_http import serving

pytestmark = pytest.mark.e2e

TOKEN: Final = "oauth-fragment-admin-token-3317"
ID_TOKEN: Final = "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ1In0.FragmentIdTokenSecret77aa"
ACCESS_TOKEN: Final = "FragmentAccessTokenSecret88bb"
LOCATION: Final = (
    f"http://127.0.0.1:1/cb?from=op#id_token={ID_TOKEN}&access_token={ACCESS_TOKEN}"
    "&token_type=Bearer&state=st4te1234567"
)


class FragmentAuthorizationServer(BaseHTTPRequestHandler):
    """A fake authorization server: every request is answered 302 to the client's callback with the
    tokens in the fragment, as `response_mode=fragment` does (no real peer in the tests does)."""

    def do_GET(self) -> None:
        self.send_response(302)
        self.send_header("Location", LOCATION)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reads the proxy's output, not this server's."""


async def test_tokens_in_a_redirects_fragment_are_masked_in_every_output(tmp_path: Path) -> None:
    capture = tmp_path / "run.jsonl"
    with serving(FragmentAuthorizationServer) as upstream:
        env = clean_env(
            **settings_env(upstream=upstream, capture=capture, admin_token=TOKEN, log_format="json")
        )
        with ProxyProcess(env) as proxy:
            query = "client_id=app&response_type=id_token%20token&response_mode=fragment&state=st4te1234567"
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"{proxy.listen}/authorize?{query}", allow_redirects=False) as answer,
            ):
                assert answer.status == 302
                assert answer.headers["Location"] == LOCATION, "the client gets the redirect as sent"
            admin = await admin_outputs(proxy.admin, TOKEN)
            proxy.stop()
            log = proxy.stderr()
    listed, _chains = exported_chains(capture)
    har = run_mcp_proxy("export", "--har", "-", str(capture))
    assert har.returncode == 0, har.stderr
    outputs = {
        "log": log,
        "capture": capture.read_text(encoding="utf-8"),
        "export --json": listed,
        "export --har": har.stdout,
        "admin API": "\n".join(admin),
        "TUI": rendered(list(read_capture(capture))),
    }

    assert "http://127.0.0.1:1/cb?from=op#id_token=<redacted len=" in outputs["capture"]
    assert "&access_token=<redacted len=" in outputs["export --har"], "the redirect is recorded, masked"
    leaks = sorted(
        (where, name)
        for name, value in {"id_token": ID_TOKEN, "access_token": ACCESS_TOKEN}.items()
        for where, text in outputs.items()
        if value in text
    )
    assert leaks == []
