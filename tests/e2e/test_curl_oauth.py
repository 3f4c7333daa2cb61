"""Copy as curl of an OAuth token request: each secret of its form body from a variable of its own.

The official Python SDK's server with its authorization server on the same origin
(`tests.peers.sdk1_oauth`) takes, through the real `mcp-proxy`, a client's code trade (`code`,
`code_verifier` and `client_secret` in one form body) and a refresh (`refresh_token` and
`client_secret`). `mcp-proxy export --curl CHAIN --to upstream` of each, run by bash with each
variable its comment names set to a fresh value of that field (a new code, the refresh token not
used yet), must be accepted by the server: a command that reads three different secrets from one
variable cannot be. The same field takes the same variable in both commands.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import aiohttp
import pytest

from tests.e2e.test_oauth_secrets import authorized_code, code_traded, form_post, pkce_pair, registered
from tests.peers.runner import Sdk1Server
from tests.sidecar import ProxyProcess, clean_env, exported_chains, run_bash, run_mcp_proxy, settings_env

pytestmark = pytest.mark.e2e


def token_commands(capture: Path) -> dict[str, str]:
    """The `--to upstream` command of each `/token` request of the capture, by its `grant_type`."""
    _, chains = exported_chains(capture)
    out: dict[str, str] = {}
    for chain in chains:
        copied = run_mcp_proxy("export", "--curl", str(chain["id"]), "--to", "upstream", str(capture))
        if copied.returncode == 0 and "/token " in copied.stdout:
            grant = "refresh" if "grant_type=refresh_token" in copied.stdout else "code"
            out[grant] = copied.stdout
    return out


def set_lines(command: str) -> list[str]:
    return [line.split(" first: ")[0] for line in command.split("\n") if line.startswith("# set ")]


async def test_each_secret_of_a_token_requests_form_comes_from_its_own_variable_and_the_server_accepts_it(
    tmp_path: Path,
) -> None:
    capture = tmp_path / "run.jsonl"
    verifier, challenge = pkce_pair()
    with Sdk1Server(oauth=True) as server:
        with ProxyProcess(clean_env(**settings_env(upstream=server.url, capture=capture))) as proxy:
            async with aiohttp.ClientSession() as http:
                client = await registered(http, proxy.listen, "curl-oauth")
                code, creds, first = await code_traded(http, proxy.listen, client, verifier, challenge)
                renewal = {"grant_type": "refresh_token", "refresh_token": first["refresh_token"], **creds}
                second = await form_post(http, f"{proxy.listen}/token", renewal)
                fresh_code = await authorized_code(http, proxy.listen, client["client_id"], challenge)
            proxy.stop()
        commands = token_commands(capture)
        _, chains = exported_chains(capture)
        authorize = next(c for c in chains if c.get("name") == "/authorize")
        shown = run_mcp_proxy("export", "--curl", str(authorize["id"]), str(capture)).stdout
        assert "/authorize?" in shown, shown
        assert "GET stream" not in shown, shown  # a redirect, no event stream
        base = {k: v for k, v in os.environ.items() if not k.startswith("MCP_")}
        traded = run_bash(
            commands["code"],
            {
                **base,
                "MCP_BODY_CODE": fresh_code,
                "MCP_BODY_CODE_VERIFIER": verifier,
                "MCP_BODY_CLIENT_SECRET": client["client_secret"],
            },
        )
        refreshed = run_bash(
            commands["refresh"],
            {
                **base,
                "MCP_BODY_REFRESH_TOKEN": second["refresh_token"],
                "MCP_BODY_CLIENT_SECRET": client["client_secret"],
            },
        )

    assert set_lines(commands["code"]) == [
        "# set MCP_BODY_CODE",
        "# set MCP_BODY_CLIENT_SECRET",
        "# set MCP_BODY_CODE_VERIFIER",
    ]
    assert (
        "# set MCP_BODY_CODE_VERIFIER first: the redacted value of body field 'code_verifier'"
        in commands["code"]
    )
    assert set_lines(commands["refresh"]) == ["# set MCP_BODY_REFRESH_TOKEN", "# set MCP_BODY_CLIENT_SECRET"]
    assert traded.returncode == 0, traded.stderr
    assert json.loads(traded.stdout)["token_type"] == "Bearer", traded.stdout
    assert refreshed.returncode == 0, refreshed.stderr
    assert json.loads(refreshed.stdout)["token_type"] == "Bearer", refreshed.stdout
    for secret in (code, verifier, client["client_secret"], first["refresh_token"]):
        assert secret not in "".join(commands.values())
