"""An OAuth-protected upstream's era is learned from the first call that carries credentials.

The official Python SDK's server with its authorization server on the same origin
(`tests.peers.sdk1_oauth`) answers the real `mcp-proxy`'s start-up era probe 401, as it answers
every request without a token: the proxy says the server wants credentials and that the era comes
from the first request to the MCP endpoint that carries them. A client's login then passes the
proxy (a call without a token, registration, authorization, code trade) and, once the re-probe
interval has passed, another call without a token and a refresh at `/token`: neither can teach the
era, so neither may spend the one re-probe the interval allows. The bearer call right after them
is probed with its token, and the era is known from then on.
"""

from __future__ import annotations

import time

import aiohttp
import pytest

from proxy.transport.routing import CREDENTIALS_HINT, REPROBE_INTERVAL
from tests.e2e.legacy_raw import HEADERS, initialize
from tests.e2e.test_oauth_secrets import code_traded, form_post, pkce_pair, registered
from tests.peers.runner import Sdk1Server
from tests.sidecar import ProxyProcess, clean_env, settings_env, until

pytestmark = pytest.mark.e2e


async def test_an_oauth_upstreams_era_is_learned_from_the_first_call_with_a_token_not_from_its_login() -> (
    None
):
    verifier, challenge = pkce_pair()
    with (
        Sdk1Server(oauth=True) as server,
        ProxyProcess(clean_env(**settings_env(upstream=server.url))) as proxy,
    ):
        probed = time.monotonic()  # the start-up probe ends before the proxy says it listens
        async with aiohttp.ClientSession() as http:
            async with http.post(proxy.endpoint(), json=initialize(), headers=HEADERS) as answer:
                assert answer.status == 401, await answer.text()
            client = await registered(http, proxy.listen)
            _, creds, tokens = await code_traded(http, proxy.listen, client, verifier, challenge)
            await until(
                lambda: time.monotonic() - probed > REPROBE_INTERVAL,
                what="the re-probe interval after the start-up probe",
                seconds=2 * REPROBE_INTERVAL,
            )
            async with http.post(proxy.endpoint(), json=initialize(), headers=HEADERS) as answer:
                assert answer.status == 401, await answer.text()
            renewal = {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"], **creds}
            renewed = await form_post(http, f"{proxy.listen}/token", renewal)
            bearer = {**HEADERS, "Authorization": f"Bearer {renewed['access_token']}"}
            async with http.post(proxy.endpoint(), json=initialize(), headers=bearer) as answer:
                assert answer.status == 200, await answer.text()
        events = proxy.wait_events(lambda lines: any(e.get("event") == "upstream_eras" for e in lines))

    unknown = [e for e in events if e.get("event") == "upstream_era_unknown"]
    assert [(e["problem"], e["hint"]) for e in unknown] == [
        ("HTTP 401 to server/discover, HTTP 401 to initialize", CREDENTIALS_HINT)
    ]
    assert [e["eras"] for e in events if e.get("event") == "upstream_eras"] == ["legacy"]
