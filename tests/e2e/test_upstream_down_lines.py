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
        seconds = time.monotonic() - started
        time.sleep(1.1)  # a held count is said with the next line a second on: this request's
        http.post(proxy.endpoint(), content=rpc("tools/list", FLOOD), headers=CLIENT_ACCEPT)
        lines = proxy.wait_events(lambda seen: len([e for e in seen if e.get("event") == "exchange"]) > FLOOD)
    for event in ("upstream_fault", "upstream_era_unknown"):
        said = _warnings(lines, event)
        # the flood's first in full, then one a second counting what it held back (two lines when the
        # flood fits in a second, as it does on a quiet machine); every request counted once
        assert 2 <= len(said) <= int(seconds) + 2, (event, seconds, said)
        assert "also_unlogged" not in said[0], said
        assert len(said) + sum(e.get("also_unlogged", 0) for e in said) == FLOOD + 1, said
        assert said[0]["upstream"] == upstream, said
