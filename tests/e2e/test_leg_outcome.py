"""A bridge's upstream leg that ended without its answer says why, wherever the leg is shown.

The `mcp-proxy` command bridges to an upstream nobody listens on, in each bridge's mode: the leg the
bridge sends first (a legacy session's `initialize`, a 2026-07-28 server's `server/discover`) is
refused. Its `leg_closed` line carries `outcome: upstream_unreachable`, its HAR entry (live and from
the capture) names it in `_mcp.outcome` and the comment, and its span's `error.type` is it too, so
a refused connection is not read as an upstream that went quiet (`no_response`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.legacy_raw import HEADERS, initialize
from tests.e2e.modern_raw import modern_headers, modern_params
from tests.otlp_receiver import OtlpReceiver
from tests.sidecar import ProxyProcess, admin_get, clean_env, run_mcp_proxy, settings_env
from tests.transport.helpers import dead_port

pytestmark = pytest.mark.e2e

REFUSED = "upstream_unreachable"

COMMENT = f"a bridge's upstream leg: no response head came; it ended as {REFUSED}"


def first_request(era: str) -> tuple[dict[str, Any], dict[str, str]]:
    """What a client of the bridge in front of an upstream of `era` sends first, with its headers."""
    if era == "legacy":  # a 2026-07-28 client: the bridge opens a legacy session for its call
        params = modern_params({"name": "add", "arguments": {"a": 2, "b": 3}})
        call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
        return call, modern_headers("tools/call", params)
    return initialize(), HEADERS  # a legacy client: the bridge asks the server/discover of it


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("era", "leg_span"), [("legacy", "initialize"), ("modern", "server/discover")])
async def test_a_refused_bridge_leg_names_its_outcome_in_the_capture_the_hars_and_its_span(
    era: str, leg_span: str, tmp_path: Path
) -> None:
    capture = tmp_path / "capture.jsonl"
    upstream = f"http://127.0.0.1:{dead_port()}/mcp"
    with OtlpReceiver() as receiver:
        settings = settings_env(
            upstream=upstream, upstream_era=era, capture=capture, otlp_endpoint=receiver.url
        )
        with ProxyProcess(clean_env(**settings)) as proxy:
            body, headers = first_request(era)
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http,
                http.post(proxy.endpoint(), json=body, headers=headers) as resp,
            ):
                answer = await resp.json(content_type=None)
            status, _, live = await admin_get(proxy.admin + "/api/export.har")
            assert status == 200
            assert proxy.stop() == 0
        spans = receiver.spans()
    exported = tmp_path / "capture.har"
    done = run_mcp_proxy("export", "--har", str(exported), str(capture))
    assert done.returncode == 0, done.stderr

    assert "unreachable" in answer["error"]["message"]
    lines = [json.loads(line) for line in capture.read_text().splitlines()]
    closed = [line for line in lines if line.get("kind") == "leg_closed"]
    assert [line.get("outcome") for line in closed] == [REFUSED], closed

    for har in (json.loads(live), json.loads(exported.read_bytes())):
        (leg,) = [e for e in har["log"]["entries"] if e["_mcp"]["side"] == "upstream"]
        assert (leg["_mcp"]["exchange"], leg["_mcp"].get("outcome")) == (closed[0]["leg"], REFUSED)
        assert leg["comment"] == COMMENT

    (span,) = [s for s in spans if s.name == leg_span and s.kind == "client"]
    assert span.attributes["error.type"] == REFUSED, span
