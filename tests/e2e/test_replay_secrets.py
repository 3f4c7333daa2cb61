"""`mcp-proxy replay` never prints a value given with `--header`, whatever the header's name.

A call recorded through `mcp-proxy --capture` with a cookie (held redacted) is replayed with the
cookie given again (`--header @FILE`, as a user keeps it out of `ps`) to the conformance suite's
legacy SDK server, whose `proxy_test_whoami` tool answers with the credentials it saw. The live proxy
does not remember cookies for echoes (one changes with every session), but the replay knows every
value it was given: the report, text and `--json`, shows the echo masked.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from proxy.record.replay_source import open_capture, plans
from tests.peers.conformance_more import WHOAMI
from tests.peers.runner import PeerServer
from tests.peers.scenarios import client_for
from tests.sidecar import ProxyProcess, clean_env, proxy_command, run_mcp_proxy, settings_env

pytestmark = pytest.mark.e2e

RECORDED_COOKIE: Final = "session=RecordedCookie-Ab12Cd34"
GIVEN_COOKIE: Final = "ReplayCookie-Kl12Mn34"


@pytest.fixture(scope="module")
def upstream() -> Iterator[PeerServer]:
    with PeerServer("conformance-legacy") as peer:
        yield peer


async def _record_whoami(endpoint: str) -> None:
    async with client_for(endpoint, "legacy", headers={"Cookie": RECORDED_COOKIE}) as client:
        result = await client.call_tool(WHOAMI, {})
    assert RECORDED_COOKIE in str(result.content), "the server echoes the cookie it saw"


def _recorded_whoami(upstream: str, tmp_path: Path) -> tuple[Path, str]:
    """A capture of a whoami call sent with a cookie, and that call's chain id."""
    capture = tmp_path / "cookie.jsonl"
    env = settings_env(upstream=upstream, capture=capture, admin_enabled="false", drain_grace=1)
    with ProxyProcess(clean_env(**env)) as proxy:
        asyncio.run(_record_whoami(proxy.endpoint()))
        assert proxy.stop() == 0
    call = next(p.chain for p in plans(open_capture([capture])) if p.headline() == f"tools/call {WHOAMI}")
    return capture, call


def test_a_cookie_given_with_header_is_masked_where_the_server_echoes_it_in_the_report(
    upstream: PeerServer, tmp_path: Path
) -> None:
    capture, call = _recorded_whoami(upstream.url, tmp_path)
    given = tmp_path / "headers.txt"
    given.write_text(f"Cookie: session={GIVEN_COOKIE}\n", encoding="utf-8")

    as_text = run_mcp_proxy(
        "replay", str(capture), "--all", "--upstream", upstream.url, "--header", f"@{given}"
    )
    as_json = run_mcp_proxy(
        "replay", str(capture), "--all", "--json", "--upstream", upstream.url, "--header", f"@{given}"
    )

    outcome = next(c for c in json.loads(as_json.stdout)["chains"] if c["chain"] == call)
    assert outcome["status"] == "differs", outcome
    assert "<redacted len=" in json.dumps(outcome["difference"]), "the echo is in the report, masked"
    for done in (as_text, as_json):
        assert done.returncode == 1, done.stdout + done.stderr
        assert GIVEN_COOKIE not in done.stdout + done.stderr


EDITED_PASSWORD: Final = "hunter2-PASSWORD-77"


def test_a_set_value_under_a_key_the_replay_redacts_is_never_printed_and_its_place_not_compared(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    """`--set params.arguments.password=...` puts back a value the capture holds redacted: the replay's
    proxy, redacting that key, masks it in the request it records, and the report leaves the edited
    place out, so the same server gives `same` and no output shows the value."""
    capture = tmp_path / "login.jsonl"
    env = settings_env(upstream=legacy_server.url, capture=capture, admin_enabled="false", drain_grace=1)
    with ProxyProcess(clean_env(**env)) as proxy:
        asyncio.run(_echo(proxy.endpoint()))
        assert proxy.stop() == 0
    call = next(p.chain for p in plans(open_capture([capture])) if p.headline() == "tools/call echo")
    replay_env = clean_env(MCP_PROXY_REDACT_BODY_KEYS="password")
    edit = f"params.arguments.password={EDITED_PASSWORD}"
    runs = [
        subprocess.run(
            [*proxy_command(), "replay", str(capture), "--chain", call, "--set", edit, *extra],
            env=replay_env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        for extra in ((), ("--json",))
    ]

    for done in runs:
        assert done.returncode == 0, done.stdout + done.stderr
        assert EDITED_PASSWORD not in done.stdout + done.stderr
        assert (
            f"sending it edited: params.arguments.password=<redacted len={len(EDITED_PASSWORD)}"
            in done.stderr
        )
    assert f"{call} tools/call echo: same" in runs[0].stdout
    assert json.loads(runs[1].stdout)["chains"][0]["status"] == "same"


async def _echo(endpoint: str) -> None:
    async with client_for(endpoint, "legacy") as client:
        await client.call_tool("echo", {"text": "hello"})


def test_a_set_value_inside_an_object_the_replay_masks_whole_is_announced_as_that_object_masked(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    """`--set params.arguments.credentials.user=...` with `redact_body_keys` naming `credentials`: the
    replay's proxy masks the object under that key whole, so the edit is announced as the request sent
    shows it (the object's stand-in), with no traceback and the value nowhere."""
    capture = tmp_path / "echo.jsonl"
    env = settings_env(upstream=legacy_server.url, capture=capture, admin_enabled="false", drain_grace=1)
    with ProxyProcess(clean_env(**env)) as proxy:
        asyncio.run(_echo(proxy.endpoint()))
        assert proxy.stop() == 0
    call = next(p.chain for p in plans(open_capture([capture])) if p.headline() == "tools/call echo")
    edit = f"params.arguments.credentials.user={EDITED_PASSWORD}"

    done = subprocess.run(
        [*proxy_command(), "replay", str(capture), "--chain", call, "--set", edit],
        env=clean_env(MCP_PROXY_REDACT_BODY_KEYS="credentials"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert "sending it edited: params.arguments.credentials=<redacted len=" in done.stderr, done.stderr
    assert EDITED_PASSWORD not in done.stdout + done.stderr
