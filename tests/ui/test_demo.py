"""`mcp-proxy demo`, headless, as a user runs it: every combination this proxy can serve must succeed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.peers.runner import REPO_ROOT

pytestmark = pytest.mark.e2e


UNREACHABLE_FORWARD_PROXY = {"HTTP_PROXY": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9"}
"""A shell's forward proxy that cannot reach this machine's loopback (nothing listens there): the
demo's clients talk to its own proxies on 127.0.0.1, never through it."""


@pytest.mark.parametrize("proxy_env", [{}, UNREACHABLE_FORWARD_PROXY], ids=["plain", "http_proxy_set"])
def test_the_demo_runs_every_available_combination_successfully(proxy_env: dict[str, str]) -> None:
    env = {k: v for k, v in os.environ.items() if k.lower() != "no_proxy"} | proxy_env
    done = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "demo", "--json"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )

    results = json.loads(done.stdout)
    assert [r["label"] for r in results] == [
        "legacy client → legacy server",
        "2026-07-28 client → 2026-07-28 server",
        "legacy client → 2026-07-28 server",
        "2026-07-28 client → legacy server",
    ]
    available = [r for r in results if r["unavailable"] is None]
    assert len(available) >= 3, results  # both pass-throughs and the legacy_to_mrtr bridge at least
    for result in available:
        assert result["ok"], (result["label"], [c for c in result["calls"] if not c["ok"]], result["modes"])
        assert [c["tool"] for c in result["calls"]] == ["add", "greet", "ask_llm", "roots", "survey"]
    assert done.returncode == (0 if len(available) == len(results) else 1), done.stderr
    assert done.stderr == ""
