"""HTTP head handling: upstream URL parsing, path mapping, which headers cross, content types."""

from __future__ import annotations

import re

import pytest

from proxy.framing.h1 import HeadError, encode_request_head, origin_form
from proxy.framing.http import (
    command_secrets,
    forward_request_headers,
    forward_response_headers,
    header,
    is_sse,
    masked_command,
    masked_text,
    masked_url,
    media_type,
    parse_upstream,
    stdio_upstream,
)


def names(headers: list[tuple[str, str]]) -> list[str]:
    return [name.lower() for name, _ in headers]


# -- upstream URL ---------------------------------------------------------------------------------


KEY = "ZDk3OGE4YjctNWY2Ny00NGFlLTk5ZTAtYTk5NDEy"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (f"https://mcp.example.com/api/mcp/s/{KEY}/mcp", "https://mcp.example.com/api/mcp/s/<redacted>/mcp"),
        ("http://h/0123456789abcdef0123456789abcdef/sse", "http://h/<redacted>/sse"),
        ("http://h/sk-ak-AbCdEf0123456789xyz/mcp", "http://h/<redacted>/mcp"),
        ("http://h:1/74bcf4976eb5795511f79e228b5296df/mcp", "http://h:1/<redacted>/mcp"),  # the first segment
        ("http://h/s/AcsW20VstS13_UzK3rKPTw/mcp", "http://h/s/<redacted>/mcp"),  # base64url: - and _ inside
        ("http://h/k/a%2Fb0123456789abcdef0123/mcp", "http://h/k/<redacted>/mcp"),
        ("/Zk3370e8bc1fc0f22cf61e36b4be6d802a/mcp", "/<redacted>/mcp"),  # a path alone
        ("refused: http://h:1/x/0123456789abcdef0123: no", "refused: http://h:1/x/<redacted>: no"),
        # Words, dates, numbers, UUIDs and hosts name things: they stay.
        ("http://h/server-everything/2025-06-18/mcp", "http://h/server-everything/2025-06-18/mcp"),
        (
            "http://h/v1/p/4f1c2d3e-1111-2222-3333-444455556666/mcp",
            "http://h/v1/p/4f1c2d3e-1111-2222-3333-444455556666/mcp",
        ),
        ("http://h/users/12345678901234567890/mcp", "http://h/users/12345678901234567890/mcp"),
        (
            "https://abcdef1234567890abcdef.tunnel.example/mcp",
            "https://abcdef1234567890abcdef.tunnel.example/mcp",
        ),
    ],
)
def test_a_key_in_a_urls_path_is_masked_and_the_path_around_it_kept(url: str, shown: str) -> None:
    assert masked_url(url) == shown


def test_a_key_in_the_upstream_path_is_one_of_its_secrets_and_never_shown() -> None:
    upstream = parse_upstream(f"https://mcp.example.com/s/{KEY}/mcp?api_key=k-123456789")
    assert KEY in upstream.secrets
    assert "k-123456789" in upstream.secrets
    assert upstream.shown == "https://mcp.example.com:443/s/<redacted>/mcp?api_key=<redacted>"
    assert upstream.target == f"/s/{KEY}/mcp?api_key=k-123456789"  # what goes on the wire is whole


def test_an_upstream_url_is_split_into_origin_host_port_and_base_path() -> None:
    up = parse_upstream("http://127.0.0.1:8000/mcp")

    assert (up.scheme, up.host, up.port, up.base_path) == ("http", "127.0.0.1", 8000, "/mcp")
    assert up.origin == "http://127.0.0.1:8000"
    assert up.host_header == "127.0.0.1:8000"


@pytest.mark.parametrize(
    ("url", "port", "host_header"),
    [
        ("http://example.com/mcp", 80, "example.com"),
        ("https://example.com/mcp", 443, "example.com"),
        ("https://example.com:8443/mcp", 8443, "example.com:8443"),
        ("http://example.com:443/", 443, "example.com:443"),
    ],
)
def test_the_host_header_omits_only_the_scheme_default_port(url: str, port: int, host_header: str) -> None:
    up = parse_upstream(url)

    assert up.port == port
    assert up.host_header == host_header


def test_an_ipv6_upstream_gets_brackets_in_its_origin() -> None:
    up = parse_upstream("http://[::1]:9000/mcp")

    assert up.host == "::1"
    assert up.origin == "http://[::1]:9000"


def test_an_upstream_without_a_path_has_the_root_as_base_path() -> None:
    assert parse_upstream("http://example.com").base_path == "/"


@pytest.mark.parametrize(
    ("url", "problem"),
    [("ftp://example.com/mcp", "not an http(s) URL"), ("http:///mcp", "URL has no host")],
)
def test_an_unusable_upstream_url_is_refused_saying_why(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        parse_upstream(url)


WELL_KNOWN = "/.well-known/oauth-protected-resource"


@pytest.mark.parametrize(
    ("upstream", "client_path", "expected"),
    [
        ("http://h/mcp", "/mcp", "/mcp"),
        ("http://h/mcp", "/mcp/", "/mcp/"),
        ("http://h/mcp", "/mcp/sub", "/mcp/sub"),
        ("http://h/mcp", "/", "/mcp"),
        ("http://h/mcp", "", "/mcp"),
        ("http://h/api/mcp", WELL_KNOWN, WELL_KNOWN),
        ("http://h/api/v1/mcp", "/mcp", "/mcp"),
        ("http://h/mcp/", "/mcp", "/mcp"),
        ("http://h/", "/anything", "/anything"),
        ("http://h", "/mcp", "/mcp"),
    ],
)
def test_the_proxy_mirrors_the_upstreams_paths_and_the_root_is_the_endpoint(
    upstream: str, client_path: str, expected: str
) -> None:
    assert parse_upstream(upstream).path_for(client_path) == expected


def test_only_the_endpoint_or_the_root_names_the_endpoint() -> None:
    up = parse_upstream("http://h/api/v1/mcp?k=1")

    assert "/api/v1/mcp" in up.endpoint_paths
    assert "/" in up.endpoint_paths
    assert "/mcp" not in up.endpoint_paths
    assert "/api/v1/mcp/" not in up.endpoint_paths


# -- request headers ------------------------------------------------------------------------------


def test_request_headers_drop_hop_by_hop_and_length_and_present_the_upstream_host() -> None:
    incoming = [
        ("Host", "proxy.local:8080"),
        ("Connection", "keep-alive"),
        ("Keep-Alive", "timeout=5"),
        ("Transfer-Encoding", "chunked"),
        ("TE", "trailers"),
        ("Upgrade", "h2c"),
        ("Proxy-Authorization", "Basic abc"),
        ("Content-Length", "10"),
        ("Content-Type", "application/json"),
        ("Authorization", "Bearer t"),
        ("Mcp-Session-Id", "s-1"),
        ("Mcp-Param-Region", "=?base64?w7w=?="),
    ]

    out = forward_request_headers(incoming)

    assert out == [
        ("Content-Type", "application/json"),
        ("Authorization", "Bearer t"),
        ("Mcp-Session-Id", "s-1"),
        ("Mcp-Param-Region", "=?base64?w7w=?="),
    ]


def test_headers_listed_in_connection_are_dropped_whatever_their_case() -> None:
    incoming = [
        ("Connection", "X-Trace, close"),
        ("connection", " x-other "),
        ("x-trace", "1"),
        ("X-Other", "2"),
        ("X-Kept", "3"),
    ]

    assert forward_request_headers(incoming) == [("X-Kept", "3")]


def test_repeated_request_headers_all_cross_in_order() -> None:
    out = forward_request_headers([("Accept", "application/json"), ("Accept", "text/event-stream")])

    assert out == [("Accept", "application/json"), ("Accept", "text/event-stream")]


# -- request heads ----------------------------------------------------------------------------------


def test_an_upstream_url_keeps_its_query_in_the_endpoint_target() -> None:
    up = parse_upstream("http://example.com:8000/base/mcp?key=a%2Fb&x=1")

    assert (up.base_path, up.query, up.target) == ("/base/mcp", "key=a%2Fb&x=1", "/base/mcp?key=a%2Fb&x=1")
    assert parse_upstream("http://example.com/mcp").target == "/mcp"


def test_the_request_target_carries_the_upstream_query_then_the_clients() -> None:
    with_key = parse_upstream("http://upstream.internal:8000/mcp?key=a%20b")
    plain = parse_upstream("http://upstream.internal:8000/mcp")

    assert with_key.request_target("/mcp") == "/mcp?key=a%20b"
    assert with_key.request_target("/mcp", "trace=1") == "/mcp?key=a%20b&trace=1"
    assert with_key.request_target("/mcp", "key=a%20b") == "/mcp?key=a%20b"
    assert plain.request_target("/mcp", "trace=1") == "/mcp?trace=1"


def test_the_request_target_maps_the_root_and_other_paths_onto_the_upstreams() -> None:
    prefixed = parse_upstream("http://upstream.internal:8000/team/a/mcp?k=1")

    assert prefixed.request_target("/team/a/mcp") == "/team/a/mcp?k=1"
    assert prefixed.request_target("/") == "/team/a/mcp?k=1"
    assert prefixed.request_target("") == "/team/a/mcp?k=1"
    assert prefixed.request_target("/.well-known/oauth", "x=1") == "/.well-known/oauth?k=1&x=1"


def test_an_ipv6_host_header_keeps_its_brackets() -> None:
    assert parse_upstream("http://[::1]:9000/mcp").host_header == "[::1]:9000"
    assert parse_upstream("http://[::1]/mcp").host_header == "[::1]"


@pytest.mark.parametrize(
    "url", ["http://h:99999/mcp", "http://h/m cp", "http://h/mcp?a=\x7f", "http://h/\u2603"]
)
def test_an_upstream_url_that_cannot_make_a_request_line_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="URL"):
        parse_upstream(url)


def test_a_request_head_is_origin_form_with_the_upstreams_host_and_the_bodys_length() -> None:
    head = encode_request_head(
        "POST",
        "/mcp?key=1",
        "upstream.internal:8000",
        [("Host", "proxy:8080"), ("Content-Length", "999"), ("Content-Type", "application/json")],
        12,
    )

    assert head == (
        b"POST /mcp?key=1 HTTP/1.1\r\nHost: upstream.internal:8000\r\n"
        b"Content-Type: application/json\r\nContent-Length: 12\r\n\r\n"
    )


def test_a_request_without_a_body_declares_no_length() -> None:
    assert encode_request_head("GET", "/mcp", "u", [("Accept", "text/event-stream")], None) == (
        b"GET /mcp HTTP/1.1\r\nHost: u\r\nAccept: text/event-stream\r\n\r\n"
    )


@pytest.mark.parametrize(
    "target", ["http://u:8000/mcp", "mcp", "*", "/m cp", "/mcp\r\nX: y", "/caf\u00e9", "/\u2603", ""]
)
def test_only_origin_form_targets_are_framed(target: str) -> None:
    with pytest.raises(HeadError, match="origin-form"):
        origin_form(target)
    with pytest.raises(HeadError):
        encode_request_head("POST", target, "u", [], 0)


@pytest.mark.parametrize(
    ("method", "headers", "problem"),
    [
        ("POST\r\nX", [], "method"),
        ("tools/call", [], "method"),
        ("POST", [("Mcp-Method", "tools/call\r\nX-Smuggled: 1")], "control character"),
        ("POST", [("Mcp-Method", "a\nb")], "control character"),
        ("POST", [("Mcp-Name", "\x00")], "control character"),
        ("POST", [("Bad Name", "v")], "field name"),
        ("POST", [("X:Y", "v")], "field name"),
        ("POST", [("Mcp-Name", "\u2603")], "Latin-1"),
    ],
)
def test_a_head_that_would_end_early_or_smuggle_a_message_is_refused(
    method: str, headers: list[tuple[str, str]], problem: str
) -> None:
    with pytest.raises(HeadError, match=problem):
        encode_request_head(method, "/mcp", "u", headers, 0)


def test_a_value_outside_latin1_is_refused_naming_its_header_without_python_internals() -> None:
    """The refusal reaches the client as a JSON-RPC error: it says which header, not the codec's words."""
    headers = [("Accept", "*/*"), ("X-Note", "caf\udce9"), ("X-Other", "ok")]
    with pytest.raises(HeadError) as caught:
        encode_request_head("POST", "/mcp", "u", headers, 0)
    assert "X-Note" in str(caught.value)
    assert "ordinal" not in str(caught.value)


def test_a_tab_inside_a_value_is_allowed() -> None:
    assert b"X-Note: a\tb\r\n" in encode_request_head("GET", "/", "u", [("X-Note", "a\tb")], None)


# -- response headers -----------------------------------------------------------------------------


RESPONSE = [
    ("Content-Type", "application/json"),
    ("Content-Length", "123"),
    ("Transfer-Encoding", "chunked"),
    ("Connection", "keep-alive, X-Hop"),
    ("X-Hop", "1"),
    ("Mcp-Session-Id", "s-2"),
    ("Set-Cookie", "a=1"),
    ("Set-Cookie", "b=2"),
]


def test_response_headers_keep_content_length_when_asked() -> None:
    out = forward_response_headers(RESPONSE, keep_length=True)

    assert out == [
        ("Content-Type", "application/json"),
        ("Content-Length", "123"),
        ("Mcp-Session-Id", "s-2"),
        ("Set-Cookie", "a=1"),
        ("Set-Cookie", "b=2"),
    ]


def test_response_headers_drop_content_length_when_the_body_is_streamed() -> None:
    out = forward_response_headers(RESPONSE, keep_length=False)

    assert "content-length" not in names(out)
    assert names(out) == ["content-type", "mcp-session-id", "set-cookie", "set-cookie"]


def test_a_response_never_forwards_a_host_it_did_not_send() -> None:
    out = forward_response_headers([("Host", "x"), ("Date", "d")], keep_length=True)

    assert out == [("Host", "x"), ("Date", "d")]


# -- lookups and content types ----------------------------------------------------------------------


def test_header_lookup_is_case_insensitive_over_pairs_and_mappings_and_returns_the_first() -> None:
    pairs = [("X-A", "1"), ("x-a", "2")]

    assert header(pairs, "x-A") == "1"
    assert header({"Content-Type": "text/plain"}, "content-type") == "text/plain"
    assert header(pairs, "missing") is None


@pytest.mark.parametrize(
    ("content_type", "sse"),
    [
        ("text/event-stream", True),
        ("text/event-stream; charset=utf-8", True),
        ("Text/Event-Stream ;charset=UTF-8", True),
        ("  text/event-stream", True),
        ("application/json", False),
        ("application/json; charset=utf-8", False),
        ("text/event-streamx", False),
        ("", False),
        (None, False),
    ],
)
def test_is_sse_reads_the_media_type_and_ignores_parameters(content_type: str | None, sse: bool) -> None:
    assert is_sse(content_type) is sse


def test_media_type_is_bare_and_lower_cased() -> None:
    assert media_type("Application/JSON; charset=utf-8") == "application/json"
    assert media_type(None) == ""


def test_an_upstream_is_shown_without_its_userinfo_or_query_values() -> None:
    up = parse_upstream("https://bot:s3cret@mcp.example.com:8443/team/mcp?api_key=k-123&tenant=a")

    assert up.shown == "https://mcp.example.com:8443/team/mcp?api_key=<redacted>&tenant=<redacted>"
    assert parse_upstream("http://u:p@h/mcp").shown == "http://h:80/mcp"


def test_an_unusable_upstream_url_is_refused_without_echoing_its_secrets() -> None:
    with pytest.raises(ValueError, match="bad port") as caught:
        parse_upstream("http://bot:s3cret@h:99999/mcp?api_key=k-123")

    assert "s3cret" not in str(caught.value)
    assert "k-123" not in str(caught.value)


@pytest.mark.parametrize(
    "url", ["bot:s3cret@127.0.0.1:9/mcp", "http:/bot:s3cret@h/mcp", "http:bot:s3cret@h/mcp"]
)
def test_a_url_missing_its_slashes_is_refused_without_echoing_its_password(url: str) -> None:
    with pytest.raises(ValueError, match=r"not an http|no host") as caught:
        parse_upstream(url)

    assert "s3cret" not in str(caught.value)


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        ("config: token=s3cret more", "config: token=<redacted> more"),
        ("Authorization: Bearer abc.def", "Authorization: Bearer <redacted>"),
        ("started with --api-key abc123 --port 3", "started with --api-key <redacted> --port 3"),
        ("Error: PASSWORD=hunter2, retrying", "Error: PASSWORD=<redacted>, retrying"),
        (
            "fetch http://user:pw@host/x?sig=abc failed",
            "fetch http://user:<redacted>@host/x?sig=<redacted> failed",
        ),
        ("Error: ENOENT: no such file or directory", "Error: ENOENT: no such file or directory"),
        ('{"level":"info","apiKey":"k-123456789"}', '{"level":"info","apiKey":"<redacted>"}'),
        (
            "run --header Authorization: Bearer abcdefgh123 now",
            "run --header Authorization: Bearer <redacted> now",
        ),
        ("using sk-live-abcdef123456 and ghp_abcdefghijklmnop1234", "using <redacted> and <redacted>"),
        ("--passphrase hunter22 -v", "--passphrase <redacted> -v"),
        ("serve --session-id s-1234567 -v", "serve --session-id <redacted> -v"),  # a session id is a bearer
    ],
)
def test_masked_text_hides_what_may_be_a_credential_in_free_text(line: str, shown: str) -> None:
    assert masked_text(line) == shown


def test_a_commands_hidden_values_and_its_secret_environment_are_what_its_redactor_masks() -> None:
    argv = [
        "server",
        "--api-key",
        "argkey-1111",
        "--session-id=sess-3333",
        "Authorization: Bearer hdr-tok-5555",
        "https://x.example/?sig=sig-55556666",
        "--port",
        "3000",
    ]
    env = {
        "GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_env0123456789",
        "AUTH_ENABLED": "true",
        "SSH_AUTH_SOCK": "/tmp/ssh-agent.1",
        "HOME": "/home/me-and-my-long-name",
        "DATABASE_URL": "postgres://app:dbpw-7777@db/app",
        "UPSTREAM_URL": "http://[not-a-url@x",
        "DOCS_URL": "https://docs.example/@team",
        "HTTP_PROXY": "http://u:pass@proxy.internal:3128",  # a password that could be a word: left
        "DEV_DATABASE_URL": "postgres://postgres:postgres@localhost/dev",
        "MY_SERVICE_CREDS": "plainS3cretValue99",
        "GITLAB_PAT": "glpat-0123456789abc",
        "SENTRY_DSN": "https://k3y0123@o1.ingest.sentry.io/5",
        "PATH": "usr-bin:local-bin-long",
        "SPINNER_STYLE": "dots-and-lines",
    }

    found = command_secrets(argv, env)

    assert set(found) == {
        "argkey-1111",
        "sess-3333",
        "hdr-tok-5555",
        "sig-55556666",
        "ghp_env0123456789",
        "dbpw-7777",
        "plainS3cretValue99",
        "glpat-0123456789abc",
        "https://k3y0123@o1.ingest.sentry.io/5",
    }
    shown = masked_command(argv)
    assert not any(secret in shown for secret in found)
    assert stdio_upstream(shown, found).secrets == found
