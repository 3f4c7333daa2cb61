"""A body cut at `capture_body_limit` reads back from the capture as cut, as the running proxy shows it.

The real `mcp-proxy` command, with a small `capture_body_limit`, relays the official SDK's legacy
client calling its legacy server's `echo` with a text longer than the limit, so the call, the
server's log notification and its answer are each cut to the `{"$truncated": ...}` stand-in. The
capture's `export --json` must mark those messages `truncated` exactly where the running proxy's
`/api/export.json` does; `export --curl` of the call must say its body is not the whole request (the
command would send the stand-in); and the HAR entry of the exchange, from the capture and from the
running proxy alike, must say in its comment that its bodies are stand-ins, and pass har-validator.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_export import validate
from tests.peers.runner import PeerServer
from tests.peers.scenarios import client_for
from tests.sidecar import ProxyProcess, admin_get, admin_json, clean_env, run_mcp_proxy, settings_env

pytestmark = pytest.mark.e2e

LIMIT = 300
"""The capture's body limit: the echo's text alone is several times longer."""

TEXT = "cut-me " * 150

CUT_COMMENT = "# the proxy cut this body at its capture limit: this is not the whole request"


def cut_marks(export: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """Each message of the tools/call chain of a JSON export: (direction, kind, truncated)."""
    (chain,) = [c for c in export["chains"] if c["chain"].get("method") == "tools/call"]
    return [(m["direction"], m["kind"], m["truncated"]) for m in chain["messages"] if m["kind"] != "http"]


def echo_entry(har: dict[str, Any]) -> dict[str, Any]:
    """The HAR entry of the client's exchange that carried the tools/call."""
    calls = [e for e in har["log"]["entries"] if e["_mcp"]["side"] == "client"]
    (entry,) = [e for e in calls if any(m.get("method") == "tools/call" for m in e["_mcp"]["messages"])]
    return entry


async def test_a_body_cut_at_the_capture_limit_reads_back_cut_in_json_curl_and_har(
    legacy_server: PeerServer, tmp_path: Path
) -> None:
    capture = tmp_path / "run.jsonl"
    env = clean_env(**settings_env(upstream=legacy_server.url, capture=capture, capture_body_limit=LIMIT))
    with ProxyProcess(env) as proxy:
        async with client_for(proxy.endpoint(), "legacy") as legacy:
            echoed = await legacy.call_tool("echo", {"text": TEXT})
        assert not echoed.is_error
        live = await admin_json(proxy.admin + "/api/export.json")
        status, _, live_har = await admin_get(proxy.admin + "/api/export.har")
        assert status == 200
        proxy.stop()

    listed = run_mcp_proxy("export", "--json", "-", str(capture))
    assert listed.returncode == 0, listed.stderr
    exported = json.loads(listed.stdout)
    marks = cut_marks(exported)
    assert ("to_server", "request", True) in marks
    assert ("to_client", "result", True) in marks
    assert marks == cut_marks(live)

    (chain,) = [c["chain"]["id"] for c in exported["chains"] if c["chain"].get("method") == "tools/call"]
    command = run_mcp_proxy("export", "--curl", chain, str(capture))
    assert command.returncode == 0, command.stderr
    assert '--data-binary \'{"$truncated":true,' in command.stdout
    assert CUT_COMMENT in command.stdout

    har_file = tmp_path / "run.har"
    done = run_mcp_proxy("export", "--har", str(har_file), str(capture))
    assert done.returncode == 0, done.stderr
    assert validate(har_file) == {"valid": True}
    said = (
        "the proxy cut the request and response bodies at its capture limit (capture_body_limit): "
        'each cut message shows as {"$truncated":true,"size":N,"preview":...}, not as it was sent'
    )
    for har in (json.loads(har_file.read_bytes()), json.loads(live_har)):
        entry = echo_entry(har)
        assert entry["request"]["postData"]["text"].startswith('{"$truncated":true,')
        assert said in entry["comment"]
        call = [m for m in entry["_mcp"]["messages"] if m["kind"] == "request"]
        assert [m.get("truncated") for m in call] == [True]
