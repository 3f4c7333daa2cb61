"""A stdio server's stderr in the proxy's log, with the real 1.x SDK FastMCP server behind the real
``mcp-proxy`` command: what it writes while refusing the proxy's own era probe is summed up in one
line, and what it writes for a client afterwards shows line by line.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.e2e.channel_peers import sdk1_stdio_command
from tests.e2e.legacy_raw import HEADERS, initialize, session_headers
from tests.sidecar import ProxyProcess, clean_env, settings_env

pytestmark = pytest.mark.e2e

REFUSAL = "Failed to validate request"
"""How the 1.x SDK starts the warning it writes for a request it cannot parse (then one pydantic
detail block per request type it tried: about a hundred lines for `server/discover`)."""


def _said(lines: list[dict[str, Any]], text: str, level: str = "info") -> list[dict[str, Any]]:
    return [
        e
        for e in lines
        if e.get("event") == "upstream_stderr" and e.get("level") == level and text in e.get("line", "")
    ]


def _logs(proxy: ProxyProcess) -> str:
    return f"--- mcp-proxy stderr ---\n{proxy.stderr()[-6000:]}"


def test_a_legacy_servers_refusal_of_the_era_probe_is_one_line_and_its_later_errors_still_show() -> None:
    with ProxyProcess(clean_env(**settings_env(upstream_cmd=sdk1_stdio_command()))) as proxy:
        eras = proxy.wait_for("upstream_eras", 30)
        assert eras is not None, _logs(proxy)
        assert eras["eras"] == "legacy", _logs(proxy)
        summed = proxy.wait_for("upstream_stderr_probe")
        assert summed is not None, _logs(proxy)
        assert summed["level"] == "info"
        assert summed["lines"] >= 50, summed  # the SDK's whole refusal, counted
        assert "refused it, as a handshake-era (legacy) server does" in summed["note"], summed
        assert summed["first"].startswith(REFUSAL), summed
        at_start = proxy.events()
        assert not [e for e in at_start if e.get("event") == "upstream_stderr" and e["level"] != "debug"], (
            _logs(proxy)
        )
        assert proxy.find("upstream_stderr_suppressed") is None, _logs(proxy)

        # A client's request the server cannot parse, after start: its warning is the server's news.
        with httpx.Client(timeout=20) as http:
            opened = http.post(proxy.endpoint(), json=initialize(), headers=HEADERS)
            assert opened.status_code == 200, opened.text
            session = session_headers(opened.headers["mcp-session-id"])
            bad = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": 7}}
            refused = http.post(proxy.endpoint(), json=bad, headers=session)
            assert refused.status_code == 200, refused.text
            assert "error" in refused.json(), refused.text
        lines = proxy.wait_events(lambda lines: bool(_said(lines, REFUSAL)))
        assert _said(lines, REFUSAL), _logs(proxy)
        assert len([e for e in lines if e.get("event") == "upstream_stderr_probe"]) == 1, _logs(proxy)


def test_the_lines_summed_up_for_the_era_probe_are_logged_at_debug() -> None:
    env = clean_env(**settings_env(upstream_cmd=sdk1_stdio_command(), log_level="debug"))
    with ProxyProcess(env) as proxy:
        summed = proxy.wait_for("upstream_stderr_probe", 30)
        assert summed is not None, _logs(proxy)
        lines = proxy.events()
    refusal = _said(lines, REFUSAL, level="debug")
    assert refusal, _logs(proxy)
    assert refusal[0]["probe"] is True
    assert _said(lines, "input_value='server/discover'", level="debug"), _logs(proxy)
    assert not _said(lines, REFUSAL), _logs(proxy)


def test_a_flood_of_stderr_after_start_is_said_to_be_suppressed_within_a_second_or_so() -> None:
    # The SDK's warning for a request it cannot parse is about a hundred lines in one burst; the
    # server writes nothing more while idle, so the count must not wait for its next line.
    with ProxyProcess(clean_env(**settings_env(upstream_cmd=sdk1_stdio_command()))) as proxy:
        with httpx.Client(timeout=20) as http:
            opened = http.post(proxy.endpoint(), json=initialize(), headers=HEADERS)
            session = session_headers(opened.headers["mcp-session-id"])
            bogus = {"jsonrpc": "2.0", "id": 2, "method": "vendor/unknown", "params": {}}
            assert "error" in http.post(proxy.endpoint(), json=bogus, headers=session).json()
        lines = proxy.wait_events(lambda lines: bool(_said(lines, REFUSAL)))
        assert _said(lines, REFUSAL), _logs(proxy)
        suppressed = proxy.wait_for("upstream_stderr_suppressed", 3)
    assert suppressed is not None, _logs(proxy)
    shown = [e for e in lines if e.get("event") == "upstream_stderr" and e["level"] == "info"]
    assert suppressed["lines"] + len(shown) >= 80, _logs(proxy)
