"""`mcp-proxy demo`, headless, as a user runs it: every combination this proxy can serve must succeed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.peers.runner import REPO_ROOT

pytestmark = pytest.mark.e2e


def test_the_demo_runs_every_available_combination_successfully() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "proxy.cli", "demo", "--json"],
        cwd=REPO_ROOT,
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
