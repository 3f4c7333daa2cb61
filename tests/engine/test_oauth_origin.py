"""The origin rules of OAuth discovery through the proxy: what moves onto the client's origin, what stays."""

from __future__ import annotations

import orjson
import pytest

from proxy.engine.oauth_origin import (
    DocumentPaths,
    MovedChallenge,
    Origins,
    Rewritten,
    challenge,
    document,
    is_document_path,
    is_form,
    is_json_type,
    resource_parameters,
    rewritten_document_headers,
)
from proxy.framing.http import parse_upstream

UP = "http://localhost:3000"
ME = "http://127.0.0.1:8080"
ORIGINS = Origins(parse_upstream(f"{UP}/mcp"), ME)


@pytest.mark.parametrize(
    ("url", "moved"),
    [
        (f"{UP}/mcp", f"{ME}/mcp"),
        (f"{UP}/", f"{ME}/"),
        (UP, ME),
        ("http://LOCALHOST:3000/x?y=1#z", f"{ME}/x?y=1#z"),
        ("//localhost:3000/x", f"{ME}/x"),
    ],
)
def test_a_url_on_the_upstreams_origin_moves_onto_the_clients(url: str, moved: str) -> None:
    assert ORIGINS.to_client(url) == moved


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:3001/",  # another port: an authorization server elsewhere
        "https://localhost:3000/mcp",  # another scheme
        "http://127.0.0.1:3000/mcp",  # another host naming the same machine: not the upstream's origin
        "https://mcp.example.com/mcp",  # a public URL the server already advertises
        "http://localhost/mcp",  # the default port, not 3000
        "/mcp",  # relative: resolves against the proxy already
        "http://[::1",  # not a URL
        "urn:ietf:params:oauth:token-type:jwt",
    ],
)
def test_a_url_on_any_other_origin_stays(url: str) -> None:
    assert ORIGINS.to_client(url) is None


def test_the_upstream_urls_own_query_is_not_shown_to_the_client() -> None:
    keyed = Origins(parse_upstream(f"{UP}/mcp?api_key=k-1"), ME)

    assert keyed.to_client(f"{UP}/mcp?api_key=k-1") == f"{ME}/mcp"


@pytest.mark.parametrize(
    ("url", "moved"),
    [
        (f"{ME}/mcp", f"{UP}/mcp"),
        ("HTTP://127.0.0.1:8080/mcp", f"{UP}/mcp"),
        (f"{ME}/mcp?x=1", f"{UP}/mcp?x=1"),
        ("http://127.0.0.1:8081/mcp", None),
        ("http://127.0.0.2:8080/mcp", None),
        ("https://127.0.0.1:8080/mcp", None),
        (f"{UP}/mcp", None),
        ("not a url", None),
    ],
)
def test_only_a_url_on_the_clients_origin_moves_back_onto_the_upstreams(url: str, moved: str | None) -> None:
    assert ORIGINS.to_upstream(url) == moved


def test_both_directions_read_a_urls_origin_alike_default_ports_and_userinfo_included() -> None:
    """One rule for both ways: no port written means the scheme's default (443 for https, both
    ways), and userinfo is no part of the origin, left out of the URL moved."""
    https = Origins(parse_upstream("https://mcp.example.com/mcp"), "https://proxy.example")

    assert https.to_upstream("https://proxy.example:443/mcp") == "https://mcp.example.com/mcp"
    assert https.to_client("https://mcp.example.com:443/mcp") == "https://proxy.example/mcp"
    assert https.to_upstream("https://proxy.example:80/mcp") is None
    assert ORIGINS.to_upstream("http://user:pw@127.0.0.1:8080/mcp") == f"{UP}/mcp"
    assert ORIGINS.to_client(f"http://user:pw@{UP.removeprefix('http://')}/mcp") == f"{ME}/mcp"


def test_a_challenges_resource_metadata_moves_and_the_rest_of_it_stays_byte_for_byte() -> None:
    sent = (
        f'Bearer error="invalid_token", error_description="Missing", resource_metadata="{UP}/.well-known/x"'
    )

    assert challenge(sent, ORIGINS) == MovedChallenge(sent.replace(UP, ME), ("/.well-known/x",))
    assert challenge(f"Bearer resource_metadata={UP}/.well-known/x, scope=a", ORIGINS) == MovedChallenge(
        f"Bearer resource_metadata={ME}/.well-known/x, scope=a", ("/.well-known/x",)
    )


def test_a_moved_challenge_names_the_path_of_its_metadata_wherever_the_server_keeps_it() -> None:
    sent = f'Bearer resource_metadata="{UP}/custom/metadata/location.json?v=1", scope="a"'

    moved = challenge(sent, ORIGINS)

    assert moved is not None
    assert moved.documents == ("/custom/metadata/location.json",)
    assert challenge(f'Bearer resource_metadata="{UP}"', ORIGINS) == MovedChallenge(
        f'Bearer resource_metadata="{ME}"', ("/",)
    )


def test_a_learned_metadata_path_is_a_document_path_and_the_table_keeps_the_newest_few() -> None:
    paths = DocumentPaths(limit=2)

    paths.learn(["/custom/a.json", "/.well-known/oauth-protected-resource/mcp"])
    paths.learn(["/custom/b.json", "/custom/a.json", "/custom/c.json"])

    assert "/custom/a.json" not in DocumentPaths()
    assert "/.well-known/oauth-protected-resource/mcp" in paths, "a well-known path needs no learning"
    assert "/custom/b.json" not in paths, "the oldest learned goes first"
    assert "/custom/a.json" in paths, "learned again: the newest"
    assert "/custom/c.json" in paths
    assert repr(paths) == "DocumentPaths(learned=['/custom/a.json', '/custom/c.json'], limit=2)"


@pytest.mark.parametrize(
    "sent",
    [
        'Bearer resource_metadata="https://auth.example.com/.well-known/x"',
        'Bearer error="invalid_token"',
        f'Bearer realm="{UP}/mcp"',  # only resource_metadata names where to go next
        'Basic realm="x"',
    ],
)
def test_a_challenge_with_nothing_on_the_upstreams_origin_is_left_alone(sent: str) -> None:
    assert challenge(sent, ORIGINS) is None


def test_resource_metadata_moves_its_resource_and_only_the_authorization_servers_on_the_upstream() -> None:
    sent = orjson.dumps(
        {
            "resource": f"{UP}/mcp",
            "authorization_servers": ["http://localhost:3001/", f"{UP}/"],
            "scopes_supported": ["mcp:tools"],
            "resource_name": f"served at {UP}",
        }
    )

    out = document(sent, ORIGINS)

    assert out.changed == ("resource", "authorization_servers[1]")
    assert orjson.loads(out.data) == {
        "resource": f"{ME}/mcp",
        "authorization_servers": ["http://localhost:3001/", f"{ME}/"],
        "scopes_supported": ["mcp:tools"],
        "resource_name": f"served at {UP}",  # not a URL member: as the server wrote it
    }


def test_authorization_server_metadata_moves_its_issuer_and_every_endpoint_keeping_the_servers_bytes() -> (
    None
):
    sent = (
        b'{\n  "issuer": "http://localhost:3000/",\n  "authorization_endpoint": "http://localhost:3000/authorize",\n'
        b'  "token_endpoint": "http://localhost:3000/token",\n  "jwks_uri": "http://localhost:3000/jwks",\n'
        b'  "service_documentation": "https://docs.example.com/",\n'
        b'  "userinfo_endpoint": "https://id.example.com/userinfo",\n'
        b'  "code_challenge_methods_supported": ["S256"]\n}'
    )

    out = document(sent, ORIGINS)

    assert out == Rewritten(
        sent.replace(UP.encode(), ME.encode()),
        ("issuer", "authorization_endpoint", "token_endpoint", "jwks_uri"),
    )


def test_a_document_that_cannot_be_moved_in_place_is_written_anew() -> None:
    sent = b'{"issuer": "http:\\/\\/localhost:3000\\/"}'  # escaped slashes, as some servers write them

    out = document(sent, ORIGINS)

    assert out == Rewritten(orjson.dumps({"issuer": f"{ME}/"}), ("issuer",))


@pytest.mark.parametrize(
    ("sent", "problem"),
    [(b"<html>sign in</html>", "not JSON"), (b'["http://localhost:3000/"]', "not a JSON object")],
)
def test_a_document_that_is_not_a_json_object_is_relayed_unchanged_and_says_why(
    sent: bytes, problem: str
) -> None:
    assert document(sent, ORIGINS) == Rewritten(sent, problem=problem)


def test_a_document_naming_no_url_on_the_upstreams_origin_is_relayed_unchanged() -> None:
    sent = orjson.dumps(
        {"resource": "https://mcp.example.com/mcp", "authorization_servers": ["https://a.example/"]}
    )

    assert document(sent, ORIGINS) == Rewritten(sent)


def test_the_resource_a_client_asks_a_token_for_moves_back_and_every_other_parameter_stays() -> None:
    query = "response_type=code&client_id=c1&resource=http%3A%2F%2F127.0.0.1%3A8080%2Fmcp&state=s+1"

    assert resource_parameters(query, ORIGINS) == query.replace(
        "http%3A%2F%2F127.0.0.1%3A8080%2Fmcp", "http%3A%2F%2Flocalhost%3A3000%2Fmcp"
    )
    assert resource_parameters("resource=https%3A%2F%2Fapi.example%2F&code=x", ORIGINS) is None
    assert resource_parameters("grant_type=refresh_token&refresh_token=r", ORIGINS) is None


@pytest.mark.parametrize(
    ("path", "wanted"),
    [
        ("/.well-known/oauth-protected-resource", True),
        ("/.well-known/oauth-protected-resource/mcp", True),
        ("/.well-known/oauth-authorization-server", True),
        ("/.well-known/oauth-authorization-server/tenant", True),
        ("/.well-known/openid-configuration", True),
        ("/tenant/.well-known/openid-configuration", True),
        ("/.well-known/oauth-protected-resourcex", False),
        ("/.well-known/jwks.json", False),
        ("/mcp", False),
        ("/token", False),
    ],
)
def test_which_paths_serve_a_discovery_document(path: str, wanted: bool) -> None:
    assert is_document_path(path) is wanted


def test_json_and_form_media_types_are_told_by_their_type_alone() -> None:
    assert is_json_type("application/json; charset=utf-8")
    assert is_json_type("application/jrd+json")
    assert not is_json_type("text/html")
    assert not is_json_type(None)
    assert is_form("application/x-www-form-urlencoded;charset=UTF-8")
    assert not is_form("application/json")


def test_a_rewritten_documents_head_loses_what_names_the_servers_bytes_and_keeps_the_rest() -> None:
    head = (
        ("Content-Type", "application/json"),
        ("ETag", 'W/"5d-abc"'),
        ("Digest", "sha-256=X48E9q=="),
        ("Content-MD5", "Q2hlY2s="),
        ("Content-Digest", "sha-256=:X48E9q==:"),
        ("Repr-Digest", "sha-256=:X48E9q==:"),
        ("Cache-Control", "max-age=3600"),
    )

    assert rewritten_document_headers(head) == (
        ("Content-Type", "application/json"),
        ("Cache-Control", "max-age=3600"),
    )
