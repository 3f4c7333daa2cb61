"""An upstream behind HTTPS: the lean pool's TLS, for pass-through and for the bridges' upstream legs.

The SDK peers serve HTTPS with a certificate from a throwaway CA (`tests.peers.tls`); the proxy
trusts it the way an operator would make it trust a private CA, through `SSL_CERT_FILE`. Each path
must give what the same client gets from the same server over plain HTTP.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.modern_raw import modern_call
from tests.peers.runner import PeerServer
from tests.peers.scenarios import run_scenario
from tests.peers.tls import TlsFiles, make_tls_files
from tests.transport.helpers import rpc

pytestmark = pytest.mark.e2e

LEGACY = "2025-11-25"
MODERN = "2026-07-28"


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def legacy_https(tls_files: TlsFiles) -> Iterator[str]:
    """The legacy in-flight SDK peer, served over HTTPS; its https URL."""
    tls = ["--tls-cert", str(tls_files.cert), "--tls-key", str(tls_files.key)]
    peer = PeerServer("legacy-inflight", extra_args=tls).start()
    try:
        yield f"https://127.0.0.1:{peer.port}/mcp"
    finally:
        peer.stop()


@pytest.fixture
def trusted(tls_files: TlsFiles, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test CA trusted by TLS contexts created from now on (what the pool creates at start)."""
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_files.ca))
    return tls_files.ca


@pytest.mark.parametrize("scenario", ["ask_name", "progress"])
async def test_legacy_client_passes_through_to_an_https_upstream(
    scenario: str,
    legacy_server: PeerServer,
    legacy_https: str,
    trusted: Path,
    proxy_for: Callable[..., Any],
) -> None:
    direct = await run_scenario(legacy_server.url, LEGACY, scenario)
    async with proxy_for(legacy_https, upstream_era="legacy") as proxy:
        relayed = await run_scenario(proxy.endpoint(), LEGACY, scenario)
    assert relayed == direct


@pytest.mark.parametrize("scenario", ["ask_name", "ask_two_at_once"])
async def test_modern_client_is_bridged_to_an_https_legacy_upstream(
    scenario: str,
    modern_server: PeerServer,
    legacy_https: str,
    trusted: Path,
    proxy_for: Callable[..., Any],
) -> None:
    direct = await run_scenario(modern_server.url, MODERN, scenario)
    async with proxy_for(legacy_https, upstream_era="legacy") as proxy:
        bridged = await run_scenario(proxy.endpoint(), MODERN, scenario)
    assert bridged == direct


async def test_an_upstream_certificate_nobody_trusts_fails_the_call_and_says_why(
    legacy_https: str, proxy_for: Callable[..., Any]
) -> None:
    client_info = {"name": "t", "version": "1"}
    initialize = rpc("initialize", 1, protocolVersion=LEGACY, capabilities={}, clientInfo=client_info)
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with proxy_for(legacy_https, upstream_era="legacy") as proxy, aiohttp.ClientSession() as http:
        async with http.post(proxy.endpoint(), data=initialize, headers=headers) as response:
            passed = (response.status, await response.json())
        bridged = await modern_call(
            http, proxy.endpoint(), "tools/call", {"name": "echo", "arguments": {}}, ident=2
        )
    for status, reply in (passed, bridged):
        assert status == 502, reply
        assert "certificate verify failed" in reply["error"]["message"], reply
