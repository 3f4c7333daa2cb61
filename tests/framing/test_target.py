"""Request targets and `Host` as a client sends them: what is routed, what is refused and why."""

from __future__ import annotations

import json

import pytest

from proxy.framing.target import Target, TargetProblem, check_target, refuse_target


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/mcp", Target("/mcp", None)),
        ("/mcp?key=v.1", Target("/mcp?key=v.1", None)),
        ("/.well-known/oauth-protected-resource", Target("/.well-known/oauth-protected-resource", None)),
        ("/files/a.b/..c", Target("/files/a.b/..c", None)),
        ("http://proxy.test:8080/mcp?x=1", Target("/mcp?x=1", "proxy.test:8080")),
        ("HTTPS://proxy.test", Target("/", "proxy.test")),
        ("http://proxy.test?x=1", Target("/?x=1", "proxy.test")),
    ],
)
def test_origin_and_absolute_form_targets_are_routed_by_their_path(target: str, expected: Target) -> None:
    assert check_target(target, 1, http10=False) == expected


@pytest.mark.parametrize(
    "target",
    [
        "/mcp/../admin",
        "/..",
        "/./mcp",
        "/mcp/%2e%2e/admin",
        "/%2E/mcp",
        "/mcp/.%2e?x=1",
        "http://proxy.test/a/../../etc",
    ],
)
def test_a_dot_segment_in_the_path_is_refused_naming_the_request_target(target: str) -> None:
    problem = check_target(target, 1, http10=False)
    assert isinstance(problem, TargetProblem)
    assert problem.field == "request target"
    assert "segment" in problem.text


@pytest.mark.parametrize(
    "target", ["/mcp#x", "/mcp?api_key=s3cr3t-value#frag", "/#", "http://proxy.test/mcp#x"]
)
def test_a_fragment_in_the_target_is_refused_naming_the_request_target(target: str) -> None:
    """Origin form is a path and a query: a fragment would reach the upstream as part of the path."""
    problem = check_target(target, 1, http10=False)
    assert isinstance(problem, TargetProblem)
    assert problem.field == "request target"
    assert "fragment" in problem.text
    assert "s3cr3t-value" not in problem.text


@pytest.mark.parametrize(
    "target", ["*", "proxy.test:443", "ftp://proxy.test/mcp", "http:///mcp", "http://user:pw@proxy.test/mcp"]
)
def test_targets_neither_a_path_nor_an_http_url_are_refused(target: str) -> None:
    problem = check_target(target, 1, http10=False)
    assert isinstance(problem, TargetProblem)
    assert problem.field == "request target"
    assert "pw" not in problem.text  # userinfo is never echoed


@pytest.mark.parametrize(
    "target",
    [
        "*?token=s3cr3t-value",
        "ftp://user:s3cr3t-value@proxy.test/mcp",
        "ftp://s3cr3t-value@proxy.test/mcp",
        "proxy.test:443?api_key=s3cr3t-value",
    ],
)
def test_a_refused_target_is_echoed_without_its_userinfo_or_query_values(target: str) -> None:
    """The refusal reaches the capture and the feed as well as the client: no credential in it."""
    problem = check_target(target, 1, http10=False)
    assert isinstance(problem, TargetProblem)
    assert "s3cr3t-value" not in problem.text
    assert "neither a path" in problem.text


def test_two_host_fields_are_refused_in_any_http_version() -> None:
    for http10 in (False, True):
        problem = check_target("/mcp", 2, http10=http10)
        assert problem == TargetProblem("Host", "2 Host header fields; a request names exactly one host")


def test_a_missing_host_is_refused_in_http11_and_allowed_in_http10() -> None:
    problem = check_target("/mcp", 0, http10=False)
    assert isinstance(problem, TargetProblem)
    assert problem.field == "Host"
    assert check_target("/mcp", 0, http10=True) == Target("/mcp", None)


def test_the_refusal_is_a_400_json_rpc_error_naming_the_field_with_the_request_id() -> None:
    problem = check_target("/mcp", 2, http10=False)
    assert isinstance(problem, TargetProblem)
    raw = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/list"}).encode()
    refusal = refuse_target(problem, "POST", raw)
    assert refusal.status == 400
    assert refusal.body["id"] == 7
    assert refusal.body["error"]["code"] == -32600
    assert refusal.body["error"]["message"].startswith("Host: ")
    assert refusal.body["error"]["data"] == {"field": "Host"}
    notification = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode()
    assert refuse_target(problem, "POST", notification).body["id"] is None
