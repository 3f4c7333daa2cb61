"""The era probe's lines for a stdio server, behind the real ``mcp-proxy`` command: a stdio channel
has no HTTP status, so each line says what the server itself answered (a result, its error's code, or
none, with how its child ended), never the status of the proxy's own stdio adapter.
"""

from __future__ import annotations

import shlex
import sys
from typing import Any

import pytest

from tests.e2e.channel_peers import python_stdio_command, sdk1_stdio_command
from tests.sidecar import ProxyProcess, clean_env, settings_env

pytestmark = pytest.mark.e2e

CRASHING = shlex.join([sys.executable, "-c", "import sys; sys.stderr.write('boom\\n'); sys.exit(3)"])
"""A command that exits with status 3 before it reads a byte: a server that crashes at start-up
(not an MCP server: what it does is all a crash loop does)."""


def _probe_lines(proxy: ProxyProcess, count: int) -> list[tuple[Any, ...]]:
    lines = proxy.wait_events(lambda seen: len(_probed(seen)) >= count, 30)
    return [(e["method"], e["status"], e["session_state"], e.get("answer")) for e in _probed(lines)]


def _probed(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [line for line in lines if line.get("event") == "era_probe_request"]


def test_a_stdio_server_that_exits_before_reading_is_logged_as_no_answer_with_its_exit() -> None:
    with ProxyProcess(clean_env(**settings_env(upstream_cmd=CRASHING, admin_enabled="false"))) as proxy:
        sent = _probe_lines(proxy, 2)[:2]
    assert [line[:3] for line in sent] == [("server/discover", None, None), ("initialize", None, None)]
    for *_, answer in sent:
        assert answer.startswith("none: the upstream MCP server (pid "), sent
        assert "exited with status 3" in answer, sent
    # No session was opened, so none is said to be deleted.
    assert "DELETE" not in [line["method"] for line in _probed(proxy.events())]


def test_a_legacy_stdio_servers_refusal_of_discover_is_logged_as_its_error_not_as_200() -> None:
    with ProxyProcess(
        clean_env(**settings_env(upstream_cmd=sdk1_stdio_command(), admin_enabled="false"))
    ) as proxy:
        sent = _probe_lines(proxy, 1)
    assert len(sent) == 1, sent  # a refused discover: the child serves the first client, no initialize
    method, status, session_state, answer = sent[0]
    assert (method, status, session_state) == ("server/discover", None, None)
    assert answer is not None, sent
    assert answer.startswith("error -326"), sent


def test_a_dual_era_stdio_servers_probe_lines_say_it_answered_and_its_child_was_stopped() -> None:
    with ProxyProcess(
        clean_env(**settings_env(upstream_cmd=python_stdio_command(), admin_enabled="false"))
    ) as proxy:
        sent = _probe_lines(proxy, 3)
    assert sent == [
        ("server/discover", None, None, "result"),
        ("initialize", None, "opened", "result"),
        ("DELETE", None, "deleted", "its child asked to stop"),
    ]
