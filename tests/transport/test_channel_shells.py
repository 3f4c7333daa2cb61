"""The channel shells' pure parts: where an HTTP+SSE session posts, how a stdio command is shown."""

from __future__ import annotations

import pytest

from proxy.framing.http import parse_upstream
from proxy.transport.sse_upstream import Endpoint, resolve_endpoint
from proxy.transport.stdio_upstream import exit_reason, shown_command
from proxy.transport.upstream_pool import UpstreamError

SSE = parse_upstream("http://127.0.0.1:8000/sse", "sse")


def test_a_relative_endpoint_resolves_against_the_sse_url() -> None:
    assert resolve_endpoint(SSE, "/messages?sessionId=abc") == Endpoint("/messages", "sessionId=abc")
    assert resolve_endpoint(SSE, "messages/?session_id=1") == Endpoint("/messages/", "session_id=1")
    assert resolve_endpoint(SSE, "http://127.0.0.1:8000/m?s=2") == Endpoint("/m", "s=2")


@pytest.mark.parametrize(
    "endpoint", ["http://evil.example/messages?s=1", "https://127.0.0.1:8000/m", "//127.0.0.1:9/m"]
)
def test_an_endpoint_on_another_origin_is_refused(endpoint: str) -> None:
    with pytest.raises(UpstreamError, match="another origin"):
        resolve_endpoint(SSE, endpoint)


def test_a_command_is_shown_with_secret_looking_option_values_masked() -> None:
    assert shown_command(["srv", "--api-key", "s3cret", "--token=abc", "--port", "1"]) == (
        "srv --api-key '<redacted>' '--token=<redacted>' --port 1"
    )


def test_a_command_is_shown_with_secret_assignments_header_lines_and_url_credentials_masked() -> None:
    argv = [
        "env", "GITHUB_TOKEN=ghp_s3cret", "PATH=/usr/bin", "npx", "mcp-remote",
        "https://alice:pa55@mcp.example/mcp?api_key=k3y", "--header", "Authorization: Bearer t0ken",
        "--header", "X-Tenant: acme",
    ]  # fmt: skip
    shown = shown_command(argv)
    for secret in ("ghp_s3cret", "pa55", "k3y", "t0ken"):
        assert secret not in shown
    assert shown == (
        "env 'GITHUB_TOKEN=<redacted>' PATH=/usr/bin npx mcp-remote "
        "'https://alice:<redacted>@mcp.example/mcp?api_key=<redacted>' "
        "--header 'Authorization: <redacted>' --header 'X-Tenant: acme'"
    )


def test_an_exit_is_described_by_status_or_signal() -> None:
    assert exit_reason(7, 3) == "the upstream MCP server (pid 7) exited with status 3"
    assert exit_reason(7, -9) == "the upstream MCP server (pid 7) was killed by SIGKILL"
