"""A secret in a message body reaches no file, wherever else its own message repeats it.

The `mcp-proxy` command, recording a capture with `--redact-body-keys password`, relays the SDK
client's `tools/call echo` whose `text` argument repeats its `password` argument, to the legacy SDK
server (which echoes the text), and a `resources/read` of a URI with a `user:password@`. The
capture, and every export made of it (HAR, JSON, curl), must show each masked in the request that
carries it, not only in the messages after it, as the log line and the admin API do.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError

from tests.peers.runner import PeerServer
from tests.peers.scenarios import client_for
from tests.sidecar import ProxyProcess, chain_ids, clean_env, exported_chains, run_mcp_proxy, settings_env

pytestmark = pytest.mark.e2e


async def _call_with_password(endpoint: str, password: str, uri_password: str) -> None:
    async with client_for(endpoint, "legacy") as client:
        await client.call_tool("echo", {"password": password, "text": password})
        with contextlib.suppress(MCPError):  # the server has no such resource: the request is the point
            await client.read_resource(f"https://user:{uri_password}@files.example/doc")


def test_a_body_keys_value_or_a_uris_password_is_masked_in_its_own_message_in_the_capture_and_every_export(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    password, uri_password = f"BODYPW{secrets.token_hex(6)}", f"URIPW{secrets.token_hex(6)}"
    capture = tmp_path / "run.jsonl"
    env = settings_env(
        upstream=legacy_server.url, capture=capture, redact_body_keys="password", drain_grace=1
    )
    with ProxyProcess(clean_env(**env)) as proxy:
        asyncio.run(_call_with_password(proxy.endpoint(), password, uri_password))
        assert proxy.stop() == 0

    listed, chains = exported_chains(capture)
    (call,) = chain_ids(chains, "name", "echo")
    har = run_mcp_proxy("export", "--har", "-", str(capture))
    curl = run_mcp_proxy("export", "--curl", call, str(capture))
    outputs = {
        "capture": capture.read_text(encoding="utf-8"),
        "export --json": listed,
        "export --har": har.stdout,
        "export --curl": curl.stdout,
    }
    assert (har.returncode, curl.returncode) == (0, 0), har.stderr + curl.stderr
    assert '"text":"<redacted len=' in outputs["capture"], "the call was recorded, its text masked"
    assert "https://<redacted len=" in outputs["capture"], "the resource read was recorded, masked"
    leaks = [
        (where, value)
        for where, text in outputs.items()
        for value in (password, uri_password)
        if value in text
    ]
    assert leaks == [], [outputs[w][max(0, outputs[w].index(v) - 200) :][:300] for w, v in leaks]


async def _list_then_call_with_nested_secrets(endpoint: str, arguments: dict[str, object]) -> None:
    async with client_for(endpoint, "legacy") as client:
        await client.list_tools()
        await client.call_tool("echo", arguments)


def test_an_object_under_a_named_key_is_masked_whole_while_a_tools_schema_for_it_stays_a_schema(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    """With `--redact-body-keys text,credentials,api_key`, the SDK client's `tools/call echo` carries
    secrets one level down in objects under `credentials` and `api_key` (whose own keys are named
    nowhere): none reaches the capture, the log or an export. The server's `tools/list` describes
    the `text` argument in `inputSchema.properties.text`, which the capture keeps as the schema it is."""
    nested = f"NESTED{secrets.token_hex(6)}", f"sk-live-{secrets.token_hex(6)}"
    arguments: dict[str, object] = {
        "text": "hello",
        "credentials": {"user": "bob", "value": nested[0]},
        "api_key": {"id": "k1", "secret": nested[1]},
    }
    capture = tmp_path / "run.jsonl"
    env = settings_env(
        upstream=legacy_server.url,
        capture=capture,
        redact_body_keys="text,credentials,api_key",
        drain_grace=1,
    )
    with ProxyProcess(clean_env(**env)) as proxy:
        asyncio.run(_list_then_call_with_nested_secrets(proxy.endpoint(), arguments))
        assert proxy.stop() == 0
        log = proxy.stderr()

    listed, _chains = exported_chains(capture)
    har = run_mcp_proxy("export", "--har", "-", str(capture))
    assert har.returncode == 0, har.stderr
    outputs = {"capture": capture.read_text(encoding="utf-8"), "log": log, "export --json": listed}
    outputs["export --har"] = har.stdout
    leaks = [(where, value) for where, text in outputs.items() for value in nested if value in text]
    assert leaks == [], [outputs[w][max(0, outputs[w].index(v) - 200) :][:300] for w, v in leaks]
    assert '"credentials":"<redacted len=' in outputs["capture"], "the call was recorded, masked"
    assert '"properties":{"text":{"type":"string"}}' in outputs["capture"], "the schema is kept"
