"""A client notification the upstream refuses is a failed delivery, in every place the proxy says so.

server-everything answers HTTP 400 to a message in a session it does not know (one from before its
restart). A client's `notifications/cancelled` in such a session reaches it through the real
`mcp-proxy` command and is refused: the client gets the server's 400 unchanged, and the chain
(`error`, `HTTP 400`), `mcp_proxy_errors_total` and the round-trip log line (`trouble`) all call it
a failure, as they call a refused `tools/call`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.peers.runner import NodeServer
from tests.sidecar import ProxyProcess, clean_env, exported_chains, settings_env

pytestmark = pytest.mark.e2e

CANCEL = b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"user"}}'
HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "Mcp-Session-Id": "a-session-from-before-the-restart",
    "MCP-Protocol-Version": "2025-11-25",
}


@pytest.fixture
def everything() -> Iterator[NodeServer]:
    with NodeServer("everything") as server:
        yield server


def errors_counted(metrics: str, method: str) -> float:
    prefix = "mcp_proxy_errors_total{"
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith(prefix) and f'method="{method}"' in line
    )


def test_a_notification_the_upstream_refuses_is_an_error_in_its_chain_metrics_and_log_line(
    everything: NodeServer, tmp_path: Path
) -> None:
    direct = httpx.post(everything.url, content=CANCEL, headers=HEADERS, timeout=10)
    capture = tmp_path / "refused.jsonl"
    with ProxyProcess(clean_env(**settings_env(upstream=everything.url, capture=capture))) as proxy:
        proxied = httpx.post(proxy.endpoint(), content=CANCEL, headers=HEADERS, timeout=10)
        lines = proxy.wait_events(lambda events: any(e.get("event") == "exchange" for e in events))
        chains: list[dict[str, Any]] = httpx.get(proxy.admin + "/api/chains", timeout=10).json()
        metrics = httpx.get(proxy.admin + "/metrics", timeout=10).text
        assert proxy.stop() == 0

    assert direct.status_code == 400
    assert (proxied.status_code, proxied.content) == (400, direct.content)
    (line,) = [e for e in lines if e.get("event") == "exchange"]
    assert line["trouble"] == "HTTP 400"
    (chain,) = [c for c in chains if c["method"] == "notifications/cancelled"]
    assert (chain["status"], chain["error"]) == ("error", "HTTP 400")
    assert errors_counted(metrics, "notifications/cancelled") == 1
    _, recorded = exported_chains(capture)
    (chain,) = [c for c in recorded if c["method"] == "notifications/cancelled"]
    assert (chain["status"], chain["error"]) == ("error", "HTTP 400")
    assert json.loads(proxied.content) == json.loads(direct.content)
