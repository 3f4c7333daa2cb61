"""An upstream behind HTTPS: the lean pool's TLS, for pass-through and for the bridges' upstream legs.

The SDK peers serve HTTPS with a certificate from a throwaway CA (`tests.peers.tls`); the proxy, the
`mcp-proxy` command, trusts it the way an operator would make it trust a private CA, through
`SSL_CERT_FILE`. Each path must give what the same client gets from the same server over plain HTTP.
"""

from __future__ import annotations

from collections.abc import Iterator

import aiohttp
import pytest

from tests.e2e.commanded import command_env
from tests.e2e.modern_raw import modern_call
from tests.peers.runner import PeerServer
from tests.peers.scenarios import run_scenario
from tests.peers.tls import TlsFiles, make_tls_files
from tests.sidecar import ProxyProcess
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


def https_proxy(upstream: str, ca: str | None, *, probed: bool = False) -> ProxyProcess:
    """`mcp-proxy` in front of the HTTPS peer, trusting `ca` through `SSL_CERT_FILE` (None: no such
    file, so only the system's CAs); told the upstream's era, or (`probed`) finding it as by default."""
    env = command_env(upstream)
    env.pop("SSL_CERT_FILE", None)
    if ca is not None:
        env["SSL_CERT_FILE"] = ca
    return ProxyProcess(env) if probed else ProxyProcess(env, "--upstream-era", "legacy")


@pytest.fixture(scope="module")
def trusting(legacy_https: str, tls_files: TlsFiles) -> Iterator[ProxyProcess]:
    """One proxy that trusts the test CA, shared by the tests of what goes through it."""
    with https_proxy(legacy_https, str(tls_files.ca)) as proxy:
        yield proxy


@pytest.mark.parametrize("scenario", ["ask_name", "progress"])
async def test_legacy_client_passes_through_to_an_https_upstream(
    scenario: str,
    legacy_server: PeerServer,
    trusting: ProxyProcess,
) -> None:
    direct = await run_scenario(legacy_server.url, LEGACY, scenario)
    relayed = await run_scenario(trusting.endpoint(), LEGACY, scenario)
    assert relayed == direct


@pytest.mark.parametrize("scenario", ["ask_name", "ask_two_at_once"])
async def test_modern_client_is_bridged_to_an_https_legacy_upstream(
    scenario: str,
    modern_server: PeerServer,
    trusting: ProxyProcess,
) -> None:
    direct = await run_scenario(modern_server.url, MODERN, scenario)
    bridged = await run_scenario(trusting.endpoint(), MODERN, scenario)
    assert bridged == direct


async def test_an_upstream_certificate_nobody_trusts_fails_the_call_and_says_why(legacy_https: str) -> None:
    client_info = {"name": "t", "version": "1"}
    initialize = rpc("initialize", 1, protocolVersion=LEGACY, capabilities={}, clientInfo=client_info)
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with https_proxy(legacy_https, None) as proxy:  # the system CAs only
        async with aiohttp.ClientSession() as http:
            async with http.post(proxy.endpoint(), data=initialize, headers=headers) as response:
                passed = (response.status, await response.json())
            bridged = await modern_call(
                http, proxy.endpoint(), "tools/call", {"name": "echo", "arguments": {}}, ident=2
            )
    for status, reply in (passed, bridged):
        assert status == 502, reply
        assert "certificate verify failed" in reply["error"]["message"], reply
        assert "SSL_CERT_FILE" in reply["error"]["message"], reply  # what to do, era known or not


async def test_by_default_a_refused_certificate_is_a_gateway_error_naming_the_fix_not_a_retry_later(
    legacy_https: str,
) -> None:
    """With the era probed (the default), the probe meets the certificate first: that is no server
    still starting, so the client gets 502 without Retry-After, and the start is warned of."""
    client_info = {"name": "t", "version": "1"}
    initialize = rpc("initialize", 1, protocolVersion=LEGACY, capabilities={}, clientInfo=client_info)
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with https_proxy(legacy_https, None, probed=True) as proxy:
        async with (
            aiohttp.ClientSession() as http,
            http.post(proxy.endpoint(), data=initialize, headers=headers) as response,
        ):
            status, retry, reply = response.status, response.headers.get("Retry-After"), await response.json()
        unknown = proxy.wait_for("upstream_era_unknown")
    assert (status, retry) == (502, None), reply
    message = reply["error"]["message"]
    assert message.startswith("the proxy refused the upstream MCP server's TLS certificate: ")
    assert "certificate verify failed" in message
    assert "SSL_CERT_FILE" in message
    assert unknown is not None
    assert unknown["level"] == "warning"
    assert "SSL_CERT_FILE" in unknown["hint"]


@pytest.fixture(scope="module")
def misnamed_https(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, TlsFiles]]:
    """The legacy peer over HTTPS with a certificate its CA signed for `mcp.internal` only, served at
    127.0.0.1; its https URL and its files."""
    files = make_tls_files(tmp_path_factory.mktemp("misnamed"), dns_names=("mcp.internal",))
    tls = ["--tls-cert", str(files.cert), "--tls-key", str(files.key)]
    peer = PeerServer("legacy-inflight", extra_args=tls).start()
    try:
        yield f"https://127.0.0.1:{peer.port}/mcp", files
    finally:
        peer.stop()


async def _refusal(proxy: ProxyProcess) -> tuple[int, str, dict[str, object] | None]:
    """A legacy client's `initialize` through `proxy`: the status, the error message, and the era
    probe's `upstream_era_unknown` line."""
    client_info = {"name": "t", "version": "1"}
    initialize = rpc("initialize", 1, protocolVersion=LEGACY, capabilities={}, clientInfo=client_info)
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(proxy.endpoint(), data=initialize, headers=headers) as response,
    ):
        status, reply = response.status, await response.json()
    return status, reply["error"]["message"], proxy.wait_for("upstream_era_unknown")


async def test_a_certificate_for_another_name_says_to_use_its_name_not_to_add_a_ca(
    misnamed_https: tuple[str, TlsFiles],
) -> None:
    url, files = misnamed_https
    with https_proxy(url, str(files.ca), probed=True) as proxy:  # the CA is trusted: only the name is wrong
        status, message, unknown = await _refusal(proxy)
    assert status == 502, message
    assert "IP address mismatch" in message
    for said in (message, str(unknown and unknown["hint"])):
        assert "give --upstream a host name the certificate is for" in said, said
        assert "SSL_CERT_FILE" not in said, said
    assert unknown is not None
    assert unknown["level"] == "warning"


async def test_an_ssl_cert_file_that_does_not_exist_is_named_as_missing(
    legacy_https: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Python's ssl ignores an SSL_CERT_FILE naming nothing: the proxy says so, since the user did set it."""
    missing = tmp_path_factory.mktemp("nothing") / "ca.pem"
    with https_proxy(legacy_https, str(missing), probed=True) as proxy:
        status, message, unknown = await _refusal(proxy)
    assert status == 502, message
    said = f"SSL_CERT_FILE names {missing}, which does not exist"
    assert said in message
    assert unknown is not None
    assert said in str(unknown["problem"])
    assert "point SSL_CERT_FILE at the PEM file" in message


@pytest.mark.parametrize("speaks", ["https", "http"])
async def test_a_scheme_the_upstream_does_not_speak_is_a_gateway_error_naming_the_right_one(
    speaks: str, legacy_https: str, legacy_server: PeerServer, tls_files: TlsFiles
) -> None:
    """`http://` to a TLS port (uvicorn drops the plain request) and `https://` to a plain one (its
    answer to the handshake is HTTP) are set-ups no retry fixes: 502 without Retry-After, warned of,
    naming the scheme to use; not "not reachable yet, retry"."""
    if speaks == "https":
        upstream = legacy_https.replace("https://", "http://")
    else:
        upstream = legacy_server.url.replace("http://", "https://")
    with https_proxy(upstream, str(tls_files.ca), probed=True) as proxy:
        client_info = {"name": "t", "version": "1"}
        initialize = rpc("initialize", 1, protocolVersion=LEGACY, capabilities={}, clientInfo=client_info)
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        async with (
            aiohttp.ClientSession() as http,
            http.post(proxy.endpoint(), data=initialize, headers=headers) as response,
        ):
            status, retry, reply = response.status, response.headers.get("Retry-After"), await response.json()
        unknown = proxy.wait_for("upstream_era_unknown")
    said = f"the upstream speaks {'HTTPS' if speaks == 'https' else 'plain HTTP'} there: use {speaks}://"
    message = reply["error"]["message"]
    assert (status, retry) == (502, None), reply
    assert message.startswith("the upstream MCP server speaks another scheme than --upstream names: ")
    assert said in message
    assert unknown is not None
    assert unknown["level"] == "warning"
    assert said in unknown["hint"]
