"""Requests beside the MCP endpoint are plain HTTP: chains and log lines name them by method and path.

The server's other paths (an OAuth server's discovery, `/register`, `/authorize`, `/token`) carry no
JSON-RPC, whatever their bodies look like: each request is one chain named by its HTTP method and
path, its bodies filed as they are, and it ends as its HTTP status says (a 201 or a 302 is a success,
a 400 is `HTTP 400`); its log line names it so, with its path, and never calls it invalid.
"""

from __future__ import annotations

import pytest

from proxy.flows.endpoint import Endpoint, is_plain_chain
from proxy.flows.events import Direction
from tests.flows.plain_play import CLIENT_SECRET, ENDPOINT, oauth_login
from tests.flows.test_sink import Rig


@pytest.mark.parametrize(
    ("path", "plain"),
    [
        ("/mcp", False),
        ("/mcp?key=1", False),
        ("/", False),
        ("", False),
        ("/token", True),
        ("/.well-known/oauth-protected-resource/mcp", True),
        ("/mcp/extra", True),
    ],
)
def test_only_the_upstream_path_and_a_bare_slash_are_the_endpoint(path: str, plain: bool) -> None:
    assert Endpoint.of_upstream("http://127.0.0.1:8000/mcp?key=<redacted>").is_plain(path) is plain


def test_an_unknown_endpoint_or_a_client_that_names_no_path_makes_nothing_plain() -> None:
    assert not Endpoint().is_plain("/token")
    assert not Endpoint.of_upstream("not a url").is_plain("/token")
    assert not Endpoint("/mcp").is_plain("/messages?session_id=1", "sse")
    assert not Endpoint.of_upstream("stdio:npx server").is_plain("/token")
    assert not Endpoint("/sse").is_plain("/mcp", "http", "sse"), "the proxy answers it itself"


def test_a_masked_key_in_the_endpoint_path_matches_the_recorded_mask() -> None:
    shown = Endpoint.of_upstream("https://gw.example/s/<redacted>/mcp")
    assert not shown.is_plain("/s/<redacted len=32 hmac:1a2b3c4d>/mcp")
    assert shown.is_plain("/s/<redacted len=32 hmac:1a2b3c4d>/token")


def test_requests_beside_the_endpoint_are_chains_named_by_method_and_path_judged_by_status() -> None:
    rig = Rig(endpoint=Endpoint(ENDPOINT))
    rig.bus.subscribe("tui")

    oauth_login(rig.facts, rig.clock)

    heads = [(c.summary.method, c.summary.name, str(c.summary.status), c.summary.error) for c in rig.chains()]
    assert heads == [
        ("GET", "/.well-known/oauth-authorization-server", "ok", None),
        ("POST", "/register", "ok", None),
        ("GET", "/authorize", "ok", None),
        ("POST", "/token", "ok", None),
        ("POST", "/token", "error", "HTTP 400"),
    ]
    chains = rig.chains()
    assert all(is_plain_chain(c.summary.method, c.summary.name) for c in chains)
    assert not any(c.summary.invalid or c.summary.notes for c in chains)
    token = chains[3]
    shown = [
        (r.kind, r.direction, r.http and (r.http.method, r.http.path, r.http.status), r.note)
        for r in token.messages
    ]
    assert shown == [
        ("http", Direction.TO_SERVER, ("POST", "/token", None), None),
        ("http", Direction.TO_SERVER, None, None),
        ("http", Direction.TO_CLIENT, (None, None, 200), None),
    ]
    form, answer = token.messages[1].body, token.messages[2].body
    assert form.startswith("grant_type=authorization_code&code=")
    assert CLIENT_SECRET not in form
    assert "client_secret=<redacted len=" in form
    assert answer["token_type"] == "Bearer"


def test_the_log_line_of_a_plain_request_names_its_method_and_path_and_its_status_its_trouble() -> None:
    rig = Rig(endpoint=Endpoint(ENDPOINT))

    lines = oauth_login(rig.facts, rig.clock)

    told = [(line.carried, line.method, line.status, line.trouble) for line in lines]
    assert told[:2] == [
        ("GET /.well-known/oauth-authorization-server", None, 200, None),
        ("POST /register", None, 201, None),
    ]
    assert told[2][0].startswith("GET /authorize?client_id=app&state=")
    assert told[2][2:] == (302, None)
    assert told[3:] == [("POST /token", None, 200, None), ("POST /token", None, 400, "HTTP 400")]
    fields = lines[1].log_fields("passthrough")
    assert (fields["path"], fields["ids"]) == ("/register", [])


def test_an_upstream_at_its_root_judges_no_path_plain_a_gateways_per_client_paths_are_mcp() -> None:
    """A gateway at its root takes each client's own path (`/gw/<key>/mcp`): any path may be MCP."""
    for root in ("/", ""):
        endpoint = Endpoint(root)
        assert not endpoint.known
        assert not endpoint.is_plain("/gw/abc/mcp")
        assert not endpoint.is_plain("/token")
    assert not Endpoint.of_upstream("http://127.0.0.1:9/").known
    assert Endpoint.of_upstream("http://127.0.0.1:9/mcp").is_plain("/token")
