"""A key in the upstream URL's path (`https://host/s/<key>/mcp`, as some hosted MCP servers hand them
out) is a credential, like one in its query: the real `mcp-proxy`, in front of the official Python SDK
server served at such a path, relays a legacy session and shows the key in none of its outputs (the
log, the capture, the HAR, JSON and curl exports, the admin API), and a client answered while the
upstream is out of reach reads the upstream's address with the key masked."""

from __future__ import annotations

import json
import os
import secrets
import socket
from pathlib import Path

import aiohttp
import pytest

from tests.e2e.test_tui_truths import _live_session
from tests.peers.runner import PeerServer
from tests.peers.scenarios import run_scenario
from tests.sidecar import (
    ProxyProcess,
    admin_get,
    chain_ids,
    clean_env,
    exported_chains,
    run_bash,
    run_mcp_proxy,
    settings_env,
)

pytestmark = pytest.mark.e2e

TOKEN = "path-secret-admin-token-3306"


async def admin_pages(proxy: ProxyProcess, *pages: str) -> list[str]:
    """The admin API's answers to these pages (each must be 200)."""
    answers = []
    for page in pages:
        status, _, body = await admin_get(proxy.admin + page, TOKEN)
        assert status == 200, page
        answers.append(body.decode())
    return answers


def key() -> str:
    """A key as hosted servers mint them: letters and digits run together."""
    return "Zk" + secrets.token_hex(16)


@pytest.mark.parametrize("where", ["/s/{key}/mcp", "/{key}/mcp"])
@pytest.mark.parametrize("kind", ["hex", "base64url"])
async def test_a_key_in_the_upstream_path_reaches_no_output(tmp_path: Path, where: str, kind: str) -> None:
    secret = key() if kind == "hex" else "AcsW20VstS13_UzK3rKPTw" + secrets.token_hex(2)
    upstream_path = where.format(key=secret)
    capture = tmp_path / "run.jsonl"
    with PeerServer("legacy-inflight", path=upstream_path) as server:
        env = clean_env(**settings_env(upstream=server.url, capture=capture, admin_token=TOKEN))
        with ProxyProcess(env) as proxy:
            # The bare `/` names the MCP endpoint; the upstream's own path works through the proxy too.
            for path in ("/", upstream_path):
                result = await run_scenario(proxy.endpoint(path), "legacy", "echo")
                assert result["result"]["content"] == ["hello"]
            pages = ("/api/chains?limit=100", "/api/export.har", "/healthz", "/readyz")
            admin = await admin_pages(proxy, *pages)
            proxy.stop()
            log = proxy.stderr()
        listed, chains = exported_chains(capture)
        calls = chain_ids(chains, "method", "tools/call")
        assert len(calls) == 2
        curls = [run_mcp_proxy("export", "--curl", c, "--to", "upstream", str(capture)) for c in calls]
        har = run_mcp_proxy("export", "--har", "-", str(capture))
        assert har.returncode == 0, har.stderr
        assert all(c.returncode == 0 for c in curls), [c.stderr for c in curls]
        # Run by hand with the key (and a live session) set, the command reaches the server's endpoint.
        given = {k: v for k, v in os.environ.items() if not k.startswith("MCP_")}
        given |= {"MCP_URL_SECRET": secret, "MCP_SESSION_ID": await _live_session(server.url)}
        ran = run_bash(curls[0].stdout, given)
        assert ran.returncode == 0, ran.stderr
        assert '"text":"hello"' in ran.stdout, ran.stdout

    outputs = {
        "log": log,
        "capture": capture.read_text(encoding="utf-8"),
        "export --json": listed,
        "export --har": har.stdout,
        "export --curl": "\n".join(c.stdout for c in curls),
        "admin API": "\n".join(admin),
    }
    assert '"event":"exchange"' in log, "the round trips were logged"
    assert where.format(key="<redacted>") in log, "the upstream is shown, its key masked"
    listening = next(json.loads(line) for line in log.splitlines() if '"event":"listening"' in line)
    assert listening["endpoint"] == listening["listen"] + "/", "the endpoint shown works as it is shown"
    assert '"name":"echo"' in outputs["capture"]
    assert '"name":"echo"' in outputs["admin API"]
    placeholder = where.split("{key}")[0] + '"${MCP_URL_SECRET:?'
    assert placeholder in outputs["export --curl"], "the key is a placeholder to set"
    leaks = [place for place, text in outputs.items() if secret in text]
    assert leaks == [], {p: outputs[p][max(0, outputs[p].index(secret) - 200) :][:300] for p in leaks}


async def test_a_client_told_the_upstream_is_out_of_reach_reads_its_address_with_the_key_masked() -> None:
    secret = key()
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    upstream = f"http://127.0.0.1:{port}/s/{secret}/mcp"
    with ProxyProcess(clean_env(**settings_env(upstream=upstream))) as proxy:
        ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
        accept = {"Accept": "application/json, text/event-stream"}
        async with aiohttp.ClientSession() as http:
            answered = await http.post(proxy.endpoint("/"), json=ping, headers=accept)
            status, answer = answered.status, await answered.text()
        proxy.stop()
        log = proxy.stderr()
    assert status == 503, answer
    assert f"http://127.0.0.1:{port}/s/<redacted>/mcp" in answer
    assert secret not in answer
    assert secret not in log
    assert "/s/<redacted>/mcp" in log


async def test_a_key_a_client_puts_in_its_own_path_reaches_no_output(tmp_path: Path) -> None:
    """A gateway that takes each client's key in the path (`/gw/<key>/mcp`): the proxy mirrors the
    client's path to it, so the key is not the upstream URL's, and is masked as the client sent it."""
    secret = key()
    client_path = f"/gw/{secret}/mcp"
    capture = tmp_path / "run.jsonl"
    with PeerServer("legacy-inflight", path=client_path) as server:
        upstream = f"http://127.0.0.1:{server.port}/"  # the gateway's root: no key in it
        env = clean_env(
            **settings_env(upstream=upstream, upstream_era="legacy", capture=capture, admin_token=TOKEN)
        )
        with ProxyProcess(env) as proxy:
            result = await run_scenario(proxy.endpoint(client_path), "legacy", "echo")
            assert result["result"]["content"] == ["hello"]
            admin = await admin_pages(proxy, "/api/chains?limit=100", "/api/export.har")
            proxy.stop()
            log = proxy.stderr()
        listed, chains = exported_chains(capture)
        (call,) = chain_ids(chains, "method", "tools/call")
        curl = run_mcp_proxy("export", "--curl", call, str(capture))
        har = run_mcp_proxy("export", "--har", "-", str(capture))
        assert curl.returncode == 0, curl.stderr
        assert har.returncode == 0, har.stderr

    outputs = {
        "log": log,
        "capture": capture.read_text(encoding="utf-8"),
        "export --json": listed,
        "export --har": har.stdout,
        "export --curl": curl.stdout,
        "admin API": "\n".join(admin),
    }
    assert '"name":"echo"' in outputs["capture"]
    assert '"/gw/<redacted len=' in outputs["capture"], "the path is kept, its key masked"
    assert '/gw/"${MCP_URL_SECRET:?' in outputs["export --curl"], "the key is a placeholder to set"
    leaks = [place for place, text in outputs.items() if secret in text]
    assert leaks == [], {p: outputs[p][max(0, outputs[p].index(secret) - 200) :][:300] for p in leaks}
