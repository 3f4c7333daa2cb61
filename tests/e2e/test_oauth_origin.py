"""An OAuth client given only the proxy's URL logs in through it to a server that advertises its own URL.

Servers with OAuth name their own URL in what a client discovers: the 401's `resource_metadata`, the
protected resource metadata's `resource` and `authorization_servers`, the authorization server's
`issuer` and endpoints. The real `mcp-proxy` moves the URLs on the upstream's origin onto its own (and
the RFC 8707 `resource` the client sends back onto the upstream's), so the SDKs' OAuth clients, which
refuse a `resource` that is not the URL they were given, log in and call tools through the proxy
without ever being told, or reaching, the upstream's address. Checked with the Python SDK's client
against the SDK's `FastMCP(auth_server_provider=...)` (authorization server on the upstream's own
origin, tokens bound to the resource they were asked for) and with the TypeScript SDK's client
against its `simpleStreamableHttp.js --oauth` example (authorization server on another origin, which
stays as advertised), each client's own log of its requests and the bytes it received, the proxy's
log, capture and export read; and with the rewriting turned off, the old failure.
"""

from __future__ import annotations

import gzip
import http.client
import json
import subprocess
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.peers.envs import NODE_DIR, REPO_ROOT, node_binary, node_modules, sdk1_python
from tests.peers.runner import NodeOAuthExample, Sdk1Server, node_environment, python_peer_environment
from tests.sidecar import ProxyProcess, clean_env, exported_chains, settings_env

pytestmark = pytest.mark.e2e

CLIENT_SECONDS = 60.0
"""The most one client run takes (a whole login and two calls take about a second)."""


def run_oauth_client(command: list[str], env: dict[str, str]) -> list[dict[str, Any]]:
    """Run an OAuth client process to its end (bounded); its JSON lines, the last one saying how it ended."""
    try:
        done = subprocess.run(
            command,
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=CLIENT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{command[-2]} killed after {CLIENT_SECONDS}s: {exc.stderr!r}") from None
    lines = [json.loads(text) for text in done.stdout.splitlines() if text.startswith("{")]
    assert lines, done.stderr[-3000:]
    return lines


def python_client(url: str) -> list[dict[str, Any]]:
    """The Python SDK's `OAuthClientProvider` (`tests.peers.sdk1_oauth_client`) given `url` alone."""
    command = [str(sdk1_python()), "-m", "tests.peers.sdk1_oauth_client", url]
    return run_oauth_client(command, python_peer_environment())


def ts_client(url: str) -> list[dict[str, Any]]:
    """The TypeScript SDK's OAuth client (`tests/peers/node/oauth-client.mjs`) given `url` alone."""
    node_modules()
    return run_oauth_client([node_binary(), str(NODE_DIR / "oauth-client.mjs"), url], node_environment())


def origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def requests_of(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line["step"] == "http"]


def got(lines: list[dict[str, Any]], path: str) -> dict[str, Any]:
    """The client's first request to `path` (on whichever origin), as it logged it."""
    return next(line for line in requests_of(lines) if urlsplit(line["url"]).path == path)


def direct(url: str) -> bytes:
    """A document as the upstream serves it to whoever reaches it (the test does; the clients do not)."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        body: bytes = answer.read()
        return body


def rewrites(capture: Path) -> list[tuple[str, str, str, str, str]]:
    """The capture's `origin_rewritten` records: (path of the exchange, direction, changed, was, now)."""
    lines = [json.loads(text) for text in capture.read_text(encoding="utf-8").splitlines()[1:]]
    paths = {line["exchange"]: line["path"] for line in lines if line.get("kind") == "exchange_opened"}
    return [
        (paths[line["exchange"]].split("?")[0], line["direction"], line["changed"], line["was"], line["now"])
        for line in lines
        if line.get("kind") == "origin_rewritten"
    ]


PRM = "/.well-known/oauth-protected-resource/mcp"
ASM = "/.well-known/oauth-authorization-server"


def test_the_python_sdk_client_logs_in_through_the_proxy_to_a_server_advertising_itself(
    tmp_path: Path,
) -> None:
    capture = tmp_path / "run.jsonl"
    with Sdk1Server(oauth=True, advertise=True) as server:
        env = clean_env(**settings_env(upstream=server.url, capture=capture))
        with ProxyProcess(env) as proxy:
            lines = python_client(proxy.endpoint())
            upstream_prm, upstream_asm = direct(server.base_url + PRM), direct(server.base_url + ASM)
            proxy.stop()
            log = proxy.events()
    up, me = server.base_url, proxy.listen
    assert lines[-1] == {"step": "done", "tools": ["add", "ask_name", "summarize"], "add": "3"}, lines
    assert {origin(line["url"]) for line in requests_of(lines)} == {me}, "every request went to the proxy"
    assert got(lines, "/mcp")["www_authenticate"] == (
        f'Bearer error="invalid_token", error_description="Authentication required", '
        f'resource_metadata="{me}{PRM}"'
    )
    assert up.encode() in upstream_prm, "the server advertises itself"
    assert up.encode() in upstream_asm
    assert got(lines, PRM)["body"] == upstream_prm.replace(up.encode(), me.encode()).decode()
    assert got(lines, ASM)["body"] == upstream_asm.replace(up.encode(), me.encode()).decode()
    assert json.loads(got(lines, PRM)["body"])["resource"] == f"{me}/mcp"
    authorize = next(line for line in lines if line["step"] == "authorize")
    assert authorize == {"step": "authorize", "url": f"{me}/authorize", "resource": [f"{me}/mcp"]}
    # The server accepts only tokens issued for its own URL: the calls above passed because the
    # `resource` the client sent was moved back onto the upstream's origin.
    prm_fields = "resource, authorization_servers[0]"
    asm_fields = "issuer, authorization_endpoint, token_endpoint, registration_endpoint, revocation_endpoint"
    assert rewrites(capture) == [
        ("/mcp", "to_client", "WWW-Authenticate resource_metadata", up, me),
        (PRM, "to_client", prm_fields, up, me),
        (ASM, "to_client", asm_fields, up, me),
        ("/authorize", "to_server", "resource (query)", me, up),
        ("/token", "to_server", "resource (form)", me, up),
    ]
    said = [
        (e["direction"], e["changed"], e["was"], e["now"]) for e in log if e["event"] == "origin_rewritten"
    ]
    assert said == [(d, c, w, n) for _, d, c, w, n in rewrites(capture)]
    heads = [json.loads(text) for text in capture.read_text(encoding="utf-8").splitlines()[1:]]
    challenges = [h["headers"].get("www-authenticate", "") for h in heads if h.get("kind") == "response_head"]
    assert any(f'resource_metadata="{up}{PRM}"' in c for c in challenges), "the server's head is recorded"
    listed, _ = exported_chains(capture)
    assert f"origin rewritten for the client by the proxy: {prm_fields}: {up} -> {me}" in listed
    assert f"origin rewritten for the server by the proxy: resource (form): {me} -> {up}" in listed


def test_the_typescript_sdk_client_logs_in_through_the_proxy_with_an_authorization_server_elsewhere(
    tmp_path: Path,
) -> None:
    capture = tmp_path / "run.jsonl"
    with NodeOAuthExample() as server:
        env = clean_env(**settings_env(upstream=server.url, capture=capture))
        with ProxyProcess(env) as proxy:
            lines = ts_client(proxy.endpoint())
            upstream_prm = direct(f"http://127.0.0.1:{server.port}{PRM}")
            proxy.stop()
    up, me, auth = f"http://localhost:{server.port}", proxy.listen, server.auth_origin
    assert lines[-1] == {"step": "done", "tools": lines[-1]["tools"], "greet": "Hello, oauth!"}, lines
    used = {origin(line["url"]) for line in requests_of(lines)}
    assert used == {me, auth}, "the proxy, and the authorization server it advertises; never the upstream"
    assert str(server.port) not in json.dumps(lines), "the upstream's port reached the client nowhere"
    assert got(lines, "/mcp")["www_authenticate"] == (
        f'Bearer error="invalid_token", error_description="Missing Authorization header", '
        f'resource_metadata="{me}{PRM}"'
    )
    assert got(lines, PRM)["body"] == upstream_prm.replace(up.encode(), me.encode()).decode()
    assert json.loads(got(lines, PRM)["body"])["authorization_servers"] == [f"{auth}/"], (
        "another origin: kept"
    )
    authorize = next(line for line in lines if line["step"] == "authorize")
    assert authorize == {"step": "authorize", "url": f"{auth}/authorize", "resource": [f"{me}/mcp"]}
    assert {(path, changed) for path, _, changed, _, _ in rewrites(capture)} == {
        ("/mcp", "WWW-Authenticate resource_metadata"),
        (PRM, "resource"),
    }


def raw_get(host: str, port: int, path: str, **headers: str) -> tuple[dict[str, str], bytes]:
    """A GET's response headers (names lowercased) and body bytes, as they came on the wire."""
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        connection.request("GET", path, headers={k.replace("_", "-"): v for k, v in headers.items()})
        answer = connection.getresponse()
        return {name.lower(): value for name, value in answer.getheaders()}, answer.read()
    finally:
        connection.close()


def test_a_rewritten_document_is_sent_without_the_servers_etag_since_its_bytes_changed() -> None:
    """The TypeScript example serves its metadata with Express, which sends an `ETag` of the bytes:
    the client gets other bytes, so it must not get the tag that names the server's."""
    with NodeOAuthExample() as server:
        env = clean_env(**settings_env(upstream=server.url))
        with ProxyProcess(env) as proxy:
            served, upstream_prm = raw_get("127.0.0.1", server.port, PRM)
            relayed, body = raw_get("127.0.0.1", urlsplit(proxy.listen).port or 80, PRM)
    up = f"http://localhost:{server.port}"
    assert "etag" in served, "the server tags its document"
    assert body == upstream_prm.replace(up.encode(), proxy.listen.encode())
    assert "etag" not in relayed
    assert relayed["content-length"] == str(len(body))


@pytest.mark.parametrize("client", [python_client, ts_client], ids=["python", "typescript"])
def test_with_rewriting_off_the_clients_get_the_upstreams_urls_and_refuse_them(
    client: Any, tmp_path: Path
) -> None:
    capture = tmp_path / "run.jsonl"
    peer = Sdk1Server(oauth=True, advertise=True) if client is python_client else NodeOAuthExample()
    with peer as server:
        env = clean_env(**settings_env(upstream=server.url, capture=capture, rewrite_oauth_origin="false"))
        with ProxyProcess(env) as proxy:
            lines = client(proxy.endpoint())
            proxy.stop()
    up = origin(server.url)
    assert lines[-1]["step"] == "error", lines
    assert f"Protected resource {up}/mcp does not match expected {proxy.endpoint()}" in lines[-1]["error"]
    assert f'resource_metadata="{up}{PRM}"' in got(lines, "/mcp")["www_authenticate"]
    assert rewrites(capture) == []


def test_behind_compression_middleware_the_documents_are_decoded_rewritten_and_sent_plain(
    tmp_path: Path,
) -> None:
    """The Python SDK's server runs behind Starlette's `GZipMiddleware`, so a client that accepts gzip
    gets its discovery documents compressed (the TypeScript SDK's does: Node's fetch asks for it; the
    Python SDK's OAuth flow makes its discovery requests without): the proxy decodes them to move
    their URLs, and sends what it rewrote unencoded (a client takes an unencoded body whatever it
    accepts)."""
    capture = tmp_path / "run.jsonl"
    with Sdk1Server(oauth=True, advertise=True, gzip=True) as server:
        env = clean_env(**settings_env(upstream=server.url, capture=capture))
        with ProxyProcess(env) as proxy:
            lines = ts_client(proxy.endpoint())
            port = urlsplit(proxy.listen).port or 80
            served, packed = raw_get("127.0.0.1", server.port, ASM, accept_encoding="gzip")
            relayed, body = raw_get("127.0.0.1", port, ASM, accept_encoding="gzip")
            proxy.stop()
    up, me = server.base_url, proxy.listen
    assert (lines[-1]["step"], lines[-1]["tools"]) == ("done", ["add", "ask_name", "summarize"]), lines
    assert {origin(line["url"]) for line in requests_of(lines)} == {me}, "every request went to the proxy"
    assert served["content-encoding"] == "gzip", "the server compresses its documents"
    assert "content-encoding" not in relayed
    assert body == gzip.decompress(packed).replace(up.encode(), me.encode())
    assert relayed["content-length"] == str(len(body))
    assert [(path, changed) for path, _, changed, _, _ in rewrites(capture)][:3] == [
        ("/mcp", "WWW-Authenticate resource_metadata"),
        (PRM, "resource, authorization_servers[0]"),
        (ASM, "issuer, authorization_endpoint, token_endpoint, registration_endpoint, revocation_endpoint"),
    ]
    heads = [json.loads(text) for text in capture.read_text(encoding="utf-8").splitlines()[1:]]
    assert any(
        h.get("kind") == "response_head" and h["headers"].get("content-encoding") == "gzip" for h in heads
    ), "what the server sent is recorded as it came"
