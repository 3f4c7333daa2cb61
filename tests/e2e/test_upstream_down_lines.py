"""An upstream that is down, behind the real ``mcp-proxy`` command: every request fails on it, and
the warnings about that are one line a second for each, the first in full and the next counting
the ones held back, never two warnings a request.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from tests.sidecar import ProxyProcess, clean_env, settings_env
from tests.transport.helpers import CLIENT_ACCEPT, dead_port, rpc

pytestmark = pytest.mark.e2e

FLOOD = 40
"""Requests sent at once-ish (well within a second of each other)."""


def _warnings(lines: list[dict[str, Any]], event: str) -> list[dict[str, Any]]:
    return [e for e in lines if e.get("event") == event and e.get("level") == "warning"]


def test_a_flood_of_requests_to_a_dead_upstream_is_one_warning_a_second_for_each_kind() -> None:
    port = dead_port()
    upstream = f"http://127.0.0.1:{port}/mcp"
    env = clean_env(**settings_env(upstream=upstream, admin_enabled="false"))
    with ProxyProcess(env) as proxy, httpx.Client(timeout=20) as http:
        started = time.monotonic()
        for n in range(FLOOD):
            answer = http.post(proxy.endpoint(), content=rpc("tools/list", n), headers=CLIENT_ACCEPT)
            assert answer.status_code in (502, 503), answer.text
        assert time.monotonic() - started < 1.0, "the flood must fit in a second for this test"
        time.sleep(1.1)
        http.post(proxy.endpoint(), content=rpc("tools/list", FLOOD), headers=CLIENT_ACCEPT)
        lines = proxy.wait_events(lambda seen: len([e for e in seen if e.get("event") == "exchange"]) > FLOOD)
    for event in ("upstream_fault", "upstream_era_unknown"):
        said = _warnings(lines, event)
        assert len(said) == 2, (event, said)  # the flood's first, then the one after a second
        assert "also_unlogged" not in said[0], said
        assert said[1]["also_unlogged"] == FLOOD - 1, said
        assert said[0]["upstream"] == upstream, said
