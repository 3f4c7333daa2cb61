"""Redaction: no secret survives into anything an observer sees, and bodies are bounded with a marker."""

from __future__ import annotations

import base64
import copy
import hashlib
import hmac
import json
import re
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.flows.redact import DEFAULT_HEADER_NAMES, MAX_ECHOED_SECRETS, Redactor, bound_body

SECRET = "s3cr3t-VALUE-that-must-never-leak-0123456789"
STAND_IN = re.compile(r"<redacted len=(\d+) hmac:([0-9a-f]{8})>")
KEY = b"a-test-deployment-key"


def sha8(value: str) -> str:
    """The keyed digest prefix a stand-in carries (HMAC-SHA-256 under the redactor's key)."""
    return hmac.new(KEY, value.encode(), hashlib.sha256).hexdigest()[:8]


def dump(value: Any) -> str:
    return json.dumps(value)


@pytest.fixture
def redactor() -> Redactor:
    return Redactor(key=KEY)


# -- headers ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*DEFAULT_HEADER_NAMES, "X-Api-Key", "COOKIE", "Mcp-Session-Id"])
def test_default_secret_headers_are_masked(redactor: Redactor, name: str) -> None:
    out = redactor.headers({name: SECRET, "Content-Type": "application/json"})
    assert SECRET not in dump(out)
    assert out["Content-Type"] == "application/json"
    assert STAND_IN.fullmatch(out[name]), out[name]


@pytest.mark.parametrize(
    "name",
    ["X-Github-Token", "x-csrf-token", "X-Client-Secret", "DB-Password", "X-My-ApiKey", "Mcp-Param-Api-Key"],
)
def test_pattern_matches_mask_header(redactor: Redactor, name: str) -> None:
    out = redactor.headers([(name, SECRET)])
    assert out == {name: f"<redacted len={len(SECRET)} hmac:{sha8(SECRET)}>"}


def test_non_secret_headers_pass_unchanged(redactor: Redactor) -> None:
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
    assert redactor.headers(headers) == headers


def test_header_names_are_case_insensitive() -> None:
    r = Redactor(header_names=["X-Custom-Auth"], header_patterns=["PRIVATE"], key=KEY)
    out = r.headers([("x-custom-auth", SECRET), ("X-PRIVATE-thing", SECRET), ("Authorization", "Bearer x")])
    assert SECRET not in dump(out)
    # Only the configured names and patterns apply.
    assert out["Authorization"] == "Bearer x"


def test_bearer_keeps_scheme_and_hashes_credentials(redactor: Redactor) -> None:
    credential = "a" * 40
    out = redactor.headers({"Authorization": f"Bearer {credential}"})
    assert out == {"Authorization": f"Bearer <redacted len=40 hmac:{sha8(credential)}>"}
    # The credential part equals token(): a user can match it with principals shown elsewhere.
    assert out["Authorization"] == f"Bearer {redactor.token(credential)}"


@pytest.mark.parametrize("scheme", ["Basic", "bearer", "DPoP", "Digest"])
def test_known_schemes_are_kept_on_proxy_authorization(redactor: Redactor, scheme: str) -> None:
    out = redactor.headers({"proxy-authorization": f"{scheme} {SECRET}"})
    value = out["proxy-authorization"]
    assert value.startswith(f"{scheme} <redacted len={len(SECRET)} ")
    assert SECRET not in value


@pytest.mark.parametrize("value", [SECRET, f"{SECRET} trailing", "Bearer", f"sk-{SECRET} x"])
def test_authorization_without_known_scheme_is_masked_whole(redactor: Redactor, value: str) -> None:
    out = redactor.headers({"Authorization": value})["Authorization"]
    assert STAND_IN.fullmatch(out), out
    assert out == redactor.token(value)


def test_same_secret_same_stand_in_different_secret_different(redactor: Redactor) -> None:
    a = redactor.headers({"Mcp-Session-Id": "session-one"})["Mcp-Session-Id"]
    b = redactor.headers({"mcp-session-id": "session-one"})["mcp-session-id"]
    c = redactor.headers({"Mcp-Session-Id": "session-two"})["Mcp-Session-Id"]
    assert a == b
    assert a != c


def test_token_form(redactor: Redactor) -> None:
    assert redactor.token("abc") == f"<redacted len=3 hmac:{sha8('abc')}>"
    assert redactor.token("") == f"<redacted len=0 hmac:{sha8('')}>"


def test_repeated_headers_are_joined_and_each_masked(redactor: Redactor) -> None:
    items = [("Set-Cookie", "a=" + SECRET), ("set-cookie", "b=" + SECRET), ("Vary", "A"), ("vary", "B")]
    out = redactor.headers(items)
    assert SECRET not in dump(out)
    assert out["Set-Cookie"] == f"{redactor.token('a=' + SECRET)}\n{redactor.token('b=' + SECRET)}"
    assert out["Vary"] == "A, B"
    assert set(out) == {"Set-Cookie", "Vary"}


def test_each_cookie_of_a_recorded_set_cookie_gets_its_own_stand_in(redactor: Redactor) -> None:
    out = redactor.headers({"Set-Cookie": f"a={SECRET}; Path=/\nb={SECRET}; Path=/"})
    assert out["Set-Cookie"] == "\n".join(redactor.token(f"{c}={SECRET}; Path=/") for c in "ab")


def test_each_value_of_a_repeated_credential_is_masked_where_a_server_echoes_it_alone(
    redactor: Redactor,
) -> None:
    other = SECRET[::-1]
    shown = redactor.headers(
        {"Authorization": f"Bearer {SECRET}, Bearer {other}", "X-Api-Key": f"{SECRET}, {other}"}
    )
    assert SECRET not in dump(shown)
    assert other not in dump(shown)
    assert (
        redactor.text_body(f"first {SECRET} then {other}")
        == f"first {redactor.token(SECRET)} then {redactor.token(other)}"
    )


def test_headers_accepts_any_mapping_and_leaves_it_alone(redactor: Redactor) -> None:
    source = {"Cookie": SECRET, "Host": "example"}
    before = dict(source)
    out = redactor.headers(source)
    assert source == before
    assert out is not source
    assert SECRET not in dump(out)


# -- bodies ----------------------------------------------------------------------------------


def input_required(state: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "resultType": "input_required",
            "inputRequests": {"k": {"method": "elicitation/create", "params": {"message": "hi"}}},
            "requestState": state,
        },
    }


def retry(state: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "t", "arguments": {}, "inputResponses": {"k": {}}, "requestState": state},
    }


def nested_deep(state: str) -> dict[str, Any]:
    return {"a": [{"b": {"c": [1, {"requestState": state}]}}], "sibling": {"untouched": True}}


@pytest.mark.parametrize("build", [input_required, retry, nested_deep])
def test_request_state_is_masked_at_any_depth(redactor: Redactor, build: Any) -> None:
    message = build(SECRET)
    before = copy.deepcopy(message)
    out = redactor.body(message)
    assert SECRET not in dump(out)
    assert f"<requestState len={len(SECRET)} hmac:{sha8(SECRET)}>" in dump(out)
    assert message == before  # input unmodified


def test_request_state_in_a_batch(redactor: Redactor) -> None:
    batch = [retry(SECRET), {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}]
    out = redactor.body(batch)
    assert SECRET not in dump(out)
    assert out[1] is batch[1]  # untouched members are shared, not copied


def test_only_the_changed_path_is_copied(redactor: Redactor) -> None:
    message = nested_deep(SECRET)
    out = redactor.body(message)
    assert out is not message
    assert out["sibling"] is message["sibling"]
    assert out["a"] is not message["a"]
    assert out["a"][0]["b"]["c"][0] == 1


def test_identity_fast_path_when_nothing_to_redact(redactor: Redactor) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "x" * 1000}]}}
    assert redactor.body(message) is message
    scalars: list[Any] = [None, 1, "text", True, {}, []]
    for scalar in scalars:
        assert redactor.body(scalar) is scalar


def test_body_keys_are_case_insensitive_and_mask_any_value_type() -> None:
    r = Redactor(body_keys=["Password", "apiKey"], key=KEY)
    message = {
        "params": {
            "arguments": {
                "PASSWORD": SECRET,
                "apikey": {"nested": SECRET},
                "username": "visible",
                "list": [{"password": 123456789}],
            }
        }
    }
    before = copy.deepcopy(message)
    out = r.body(message)
    text = dump(out)
    assert SECRET not in text
    assert "123456789" not in text
    assert out["params"]["arguments"]["username"] == "visible"
    assert STAND_IN.fullmatch(out["params"]["arguments"]["PASSWORD"])
    assert message == before


def test_request_state_key_matches_case_insensitively(redactor: Redactor) -> None:
    out = redactor.body({"params": {"RequestState": SECRET}})
    assert SECRET not in dump(out)


def test_null_request_state_stays_null(redactor: Redactor) -> None:
    message = {"result": {"requestState": None}}
    assert redactor.body(message) is message


def test_body_survives_nesting_deeper_than_the_python_stack(redactor: Redactor) -> None:
    deep: Any = {"requestState": SECRET}
    for _ in range(5000):
        deep = [deep]
    out = redactor.body(deep)
    inner = out
    for _ in range(5000):
        inner = inner[0]
    assert inner == {"requestState": redactor.body({"requestState": SECRET})["requestState"]}


def test_default_redactor_leaves_ordinary_argument_names() -> None:
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"arguments": {"token": "t", "password": "p"}},
    }
    assert Redactor(key=KEY).body(message) is message  # body keys beyond requestState are opt-in


# -- bounding --------------------------------------------------------------------------------


def test_bound_under_limit_returns_value_and_size() -> None:
    value = {"a": 1, "b": "é"}
    size = len(orjson.dumps(value))
    assert bound_body(value, size) == (value, False, size)
    out, truncated, n = Redactor.bound(value, 1000)
    assert out is value
    assert (truncated, n) == (False, size)


def test_bound_over_limit_gives_marker_and_size() -> None:
    value = {"text": "x" * 500}
    size = len(orjson.dumps(value))
    out, truncated, n = bound_body(value, 100)
    assert truncated is True
    assert n == size
    assert out == {"$truncated": True, "size": size, "preview": orjson.dumps(value)[:100].decode()}
    assert len(out["preview"].encode()) <= 100


def test_bound_preview_never_splits_a_character() -> None:
    value = "é" * 100  # 2 bytes each; JSON adds a quote first
    out, truncated, _ = bound_body(value, 10)
    assert truncated
    assert out["preview"] == '"' + "é" * 4
    assert len(out["preview"].encode()) <= 10


def test_bound_zero_means_no_limit() -> None:
    value = {"text": "x" * 500}
    assert bound_body(value, 0)[:2] == (value, False)


def test_bound_unencodable_value_gives_marker() -> None:
    deep: Any = []
    for _ in range(1000):
        deep = [deep]
    out, truncated, n = bound_body(deep, 100)
    assert truncated
    assert n == 0
    assert out["$unencodable"] is True


# -- masking and bounding in one pass ------------------------------------------------------------

_KEYS = st.sampled_from(["requestState", "REQUESTSTATE", "apiKey", "api\u212aey", "text", "name", "é", "x"])
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | _KEYS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(_KEYS | st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(value=_JSON, limit=st.sampled_from([0, 8, 40, 65536]))
def test_body_bounded_is_bound_of_body(value: Any, limit: int) -> None:
    # Two redactors in one state: masking a secret key's value remembers it (for echoes from then on).
    one, two = Redactor(body_keys=["apikey"], key=KEY), Redactor(body_keys=["apikey"], key=KEY)
    assert one.body_bounded(value, limit) == Redactor.bound(two.body(value), limit)


def test_body_bounded_keeps_the_very_same_body_when_nothing_is_secret(redactor: Redactor) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": "requestState"}]}}
    out, truncated, size = redactor.body_bounded(message, 65536)
    assert out is message
    assert (truncated, size) == (False, len(orjson.dumps(message)))


def test_a_body_that_is_not_json_rpc_has_its_secret_looking_members_and_known_texts_masked() -> None:
    r = Redactor(body_keys=["api_key"], key=KEY)
    r.headers([("Authorization", f"Bearer tok-{SECRET}")])
    text = f'{{"id":1,"apiKey": "{SECRET}", "requestState":"st-{SECRET}", "n": 5, "t": "tok-{SECRET}"'

    shown = r.body(text)

    assert SECRET not in shown
    assert shown.startswith('{"id":1,"apiKey": "<redacted len=')
    assert '"n": 5' in shown


@pytest.mark.parametrize("name", ["api_key", "apiKey", "API-Key", "old_api_key", "x.apikey", "apiKey2"])
def test_a_body_key_masks_members_whose_words_read_it_however_they_are_joined(name: str) -> None:
    r = Redactor(body_keys=["api_key"], key=KEY)
    out, _, _ = r.body_bounded({"arguments": {name: SECRET, "api_keys_count": 3, "rapid_keyboard": 1}}, 65536)

    assert STAND_IN.fullmatch(out["arguments"][name])
    assert out["arguments"]["api_keys_count"] == 3  # `keys` is another word
    assert out["arguments"]["rapid_keyboard"] == 1


def test_body_bounded_masks_a_key_spelled_with_the_kelvin_sign() -> None:
    out, _, _ = Redactor(body_keys=["apikey"], key=KEY).body_bounded({"api\u212aey": SECRET}, 65536)
    assert SECRET not in dump(out)


def test_body_bounded_unencodable_value_gives_marker(redactor: Redactor) -> None:
    deep: Any = []
    for _ in range(1000):
        deep = [deep]
    out, truncated, n = redactor.body_bounded(deep, 100)
    assert (truncated, n, out["$unencodable"]) == (True, 0, True)


def test_the_same_headers_masked_twice_give_equal_copies_each_free_to_change(redactor: Redactor) -> None:
    sent = [("Authorization", "Bearer sekrit-1"), ("Accept", "*/*")]
    first = redactor.headers(sent)
    first["Accept"] = "changed by a caller"
    second = redactor.headers(sent)
    assert second == {
        "Authorization": redactor.header_value("Authorization", "Bearer sekrit-1"),
        "Accept": "*/*",
    }
    assert "sekrit-1" not in str(second)


def test_headers_that_differ_only_in_a_secret_are_masked_apart(redactor: Redactor) -> None:
    one = redactor.headers([("Mcp-Session-Id", "session-one")])
    two = redactor.headers([("Mcp-Session-Id", "session-two")])
    assert one != two
    assert "session-one" not in str(one)
    assert "session-two" not in str(two)


def test_secret_texts_are_masked_inside_any_header_value() -> None:
    redactor = Redactor(secret_texts=["k-secret-123", "hunter22", "on"], key=KEY)
    location = "http://upstream:8000/mcp?api_key=k-secret-123&trace=on"

    shown = redactor.headers([("Location", location), ("X-Echo", "pw=hunter22")])

    assert "k-secret-123" not in shown["Location"]
    assert shown["Location"].startswith("http://upstream:8000/mcp?api_key=<redacted len=12 hmac:")
    assert shown["Location"].endswith("&trace=on"), "texts shorter than four characters stay"
    assert shown["X-Echo"] == f"pw={redactor.token('hunter22')}"


# -- credential-like names, query strings, keyed masks -----------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "X-Auth",
        "X-Access-Key",
        "X-Credentials",
        "X-Session",
        "X-Passwd",
        "Set-Cookie2",
        "X-Jwt",
        "DPoP",
        "X-Bearer",
        "X-Pass",
        "X-Amz-Signature",
    ],
)
def test_credential_looking_header_names_are_masked_by_default(redactor: Redactor, name: str) -> None:
    out = redactor.headers({name: SECRET})
    assert STAND_IN.fullmatch(out[name]), out[name]


def test_a_servers_challenge_stays_readable_but_a_bare_handshake_token_in_it_is_masked(
    redactor: Redactor,
) -> None:
    bearer = 'Bearer error="invalid_token", resource_metadata="https://mcp.test/.well-known/oauth"'
    negotiate = f"Negotiate {SECRET}==, Basic realm=x"

    shown = redactor.headers([("WWW-Authenticate", bearer), ("Proxy-Authenticate", negotiate)])

    assert shown["WWW-Authenticate"] == bearer
    assert shown["Proxy-Authenticate"] == f"Negotiate {redactor.token(SECRET + '==')}, Basic realm=x"
    assert STAND_IN.fullmatch(
        Redactor(["www-authenticate"]).headers({"WWW-Authenticate": bearer})["WWW-Authenticate"]
    )  # a user who lists it masks it whole


def test_oauth_and_signed_url_query_values_are_masked(redactor: Redactor) -> None:
    shown = redactor.path(f"/cb?code=c-{SECRET}&state=s-{SECRET}&sig=g-{SECRET}&pwd=p-{SECRET}&tab=2")

    assert SECRET not in shown
    assert shown.endswith("&tab=2")


def test_a_credential_a_server_echoes_is_masked_wherever_it_shows_up(redactor: Redactor) -> None:
    """A debug header or an error message that repeats the client's token shows its stand-in too."""
    request = redactor.headers([("X-Echo", "none yet"), ("Authorization", f"Bearer {SECRET}")])
    echoed = redactor.headers([("X-Debug-Echo", f"Bearer {SECRET}")])
    error = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32001, "message": f"bad credentials: {SECRET}"}}
    body, _, _ = redactor.body_bounded(error, 10_000)
    captured, _, encoded = redactor.body_for_capture(error, 10_000)

    stand_in = redactor.token(SECRET)
    assert request["Authorization"] == f"Bearer {stand_in}"
    assert echoed["X-Debug-Echo"] == f"Bearer {stand_in}"
    assert body["error"]["message"] == f"bad credentials: {stand_in}"
    assert SECRET not in dump(captured)
    assert encoded is None or SECRET.encode() not in encoded
    assert SECRET not in dump(redactor.body(error))
    assert SECRET not in redactor.scrub(f"a log line naming {SECRET}")
    assert error["error"]["message"] == f"bad credentials: {SECRET}"  # the traffic itself is untouched


@pytest.mark.parametrize("scheme", ["SSWS", "Splunk", "ApiKeyAuth", "Custom-Scheme"])
def test_the_token_of_an_unknown_authorization_scheme_is_masked_where_a_server_echoes_it_alone(
    redactor: Redactor, scheme: str
) -> None:
    """Okta's `SSWS` and Splunk's `Splunk` are masked whole; an error naming only the token hides it too."""
    token = f"00Ab_{SECRET}"
    request = redactor.headers({"Authorization": f"{scheme} {token}"})
    error = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32001, "message": f"unknown key {token}"}}
    body, _, _ = redactor.body_bounded(error, 10_000)
    echoed = redactor.headers({"X-Debug": f"token={token}", "X-Whole": f"{scheme} {token}"})

    assert request["Authorization"] == redactor.token(f"{scheme} {token}")
    assert body["error"]["message"] == f"unknown key {redactor.token(token)}"
    assert echoed["X-Debug"] == f"token={redactor.token(token)}"
    assert token not in echoed["X-Whole"]


def test_auth_params_of_an_unknown_scheme_are_remembered_whole_not_piece_by_piece(redactor: Redactor) -> None:
    value = f'Custom realm="r", key="{SECRET}"'
    redactor.headers({"Authorization": value})

    assert redactor.scrub(value) == redactor.token(value)
    assert redactor.scrub(f'realm="r", key="{SECRET}"') == f'realm="r", key="{SECRET}"'


def test_echoed_credentials_are_remembered_within_a_bound_newest_kept(redactor: Redactor) -> None:
    tokens = [f"token-{n:04d}-{SECRET}" for n in range(MAX_ECHOED_SECRETS + 1)]
    for token in tokens:
        redactor.headers([("Authorization", f"Bearer {token}")])

    assert redactor.scrub(tokens[0]) == tokens[0]  # the oldest was let go
    assert redactor.scrub(tokens[-1]) == redactor.token(tokens[-1])


def test_a_credential_still_in_use_stays_remembered_however_many_others_come_and_go(
    redactor: Redactor,
) -> None:
    bearer = f"long-lived-{SECRET}"
    for n in range(3 * MAX_ECHOED_SECRETS):  # a client's bearer, with another client's new token each time
        redactor.headers([("Authorization", f"Bearer {bearer}")])
        redactor.headers([("X-Api-Key", f"key-{n:04d}-{SECRET}")])
        redactor.headers([("Authorization", f"Bearer {bearer}"), ("DPoP", f"proof-{n:04d}-{SECRET}")])

        assert redactor.scrub(f"echo {bearer}") == f"echo {redactor.token(bearer)}", n


def test_a_session_token_header_is_remembered_for_echoes_but_session_ids_cookies_and_proofs_are_not(
    redactor: Redactor,
) -> None:
    redactor.headers(
        [
            ("X-Session-Token", f"xs-{SECRET}"),
            ("Mcp-Session-Id", f"id-{SECRET}"),
            ("Cookie", f"sid=ck-{SECRET}"),
            ("DPoP", f"proof-{SECRET}"),
        ]
    )

    assert redactor.scrub(f"xs-{SECRET}") == redactor.token(f"xs-{SECRET}")
    for kept in (f"id-{SECRET}", f"sid=ck-{SECRET}", f"proof-{SECRET}"):
        assert redactor.scrub(kept) == kept


def test_a_body_keys_value_is_masked_where_the_server_echoes_it() -> None:
    r = Redactor(body_keys=["password"], key=KEY)
    call = {"jsonrpc": "2.0", "id": 1, "params": {"arguments": {"db_password": SECRET}}}
    quoted = {"type": "text", "text": f'{{"db_password": "{SECRET}"}}'}
    echo = {"jsonrpc": "2.0", "id": 1, "result": {"content": [quoted]}}

    masked, _, _ = r.body_bounded(call, 65536)
    echoed, _, _ = r.body_bounded(echo, 65536)

    assert SECRET not in repr(masked)
    assert SECRET not in repr(echoed)


def test_a_short_upstream_query_value_is_masked_in_headers_but_left_in_bodies_where_it_is_a_word() -> None:
    r = Redactor(secret_texts=["json", "k-1234567890"], key=KEY)
    body = {"result": {"mimeType": "application/json", "echo": "key k-1234567890"}}

    out, _, _ = r.body_bounded(body, 65536)

    assert out["result"]["mimeType"] == "application/json"
    assert out["result"]["echo"] == f"key {r.token('k-1234567890')}"
    assert r.headers({"X-Format": "json"})["X-Format"] == r.token("json")


def test_session_ids_and_short_values_are_not_remembered_as_echoed_credentials(redactor: Redactor) -> None:
    redactor.headers([("Mcp-Session-Id", SECRET), ("X-Api-Key", "short")])

    assert redactor.scrub(f"{SECRET} short") == f"{SECRET} short"


def test_credential_like_query_parameters_are_masked_and_the_rest_kept(redactor: Redactor) -> None:
    shown = redactor.path(f"/mcp?access_token={SECRET}&API_KEY=k2-{SECRET}&trace=on&sessionId=s-{SECRET}")
    assert SECRET not in shown
    assert shown.startswith("/mcp?access_token=<redacted len=")
    assert "&trace=on&" in shown
    assert redactor.path("/mcp") == "/mcp"
    assert redactor.path("/mcp?flag&x=") == "/mcp?flag&x="


def test_a_url_in_referer_or_location_has_its_credentials_masked_like_a_path(redactor: Redactor) -> None:
    shown = redactor.headers(
        [
            ("Referer", f"https://app.test/page?token={SECRET}&tab=2"),
            ("Location", f"http://user:{SECRET}@up.test/mcp"),
            ("X-Note", "plain"),
        ]
    )
    assert SECRET not in repr(shown)
    assert shown["Referer"].startswith("https://app.test/page?token=<redacted len=")
    assert shown["Referer"].endswith("&tab=2")
    assert shown["X-Note"] == "plain"


def test_a_query_credential_is_masked_where_a_server_echoes_it_as_sent_or_decoded(redactor: Redactor) -> None:
    key, encoded = f"k+{SECRET}/1", f"k%2B{SECRET}%2F1"
    redactor.path(f"/mcp?api_key={encoded}&trace=on")
    echoed = redactor.headers({"X-Original-Uri": f"/mcp?api_key={encoded}", "X-Note": f"key {key}"})
    result = {"jsonrpc": "2.0", "id": 2, "result": {"content": [{"type": "text", "text": f"seen {key}"}]}}
    body, _, _ = redactor.body_bounded(result, 10_000)

    assert SECRET not in repr(echoed)
    assert body["result"]["content"][0]["text"] == f"seen {redactor.token(key)}"


def test_a_session_id_in_a_query_is_masked_but_not_remembered_for_echoes(redactor: Redactor) -> None:
    redactor.path(f"/messages?sessionId={SECRET}")

    assert redactor.scrub(SECRET) == SECRET


def test_urls_in_link_and_refresh_have_their_query_credentials_masked_like_a_path(redactor: Redactor) -> None:
    shown = redactor.headers(
        [
            ("Link", f'<https://up.test/next?access_token=a-{SECRET}&page=2>; rel="next", </doc>; rel=help'),
            ("Refresh", f"0; url=/x?token=r-{SECRET}"),
            ("refresh", f"5;URL='https://up.test/y?api_key=q-{SECRET}'"),
        ]
    )

    assert SECRET not in repr(shown)
    assert shown["Link"].startswith("<https://up.test/next?access_token=<redacted len=")
    assert shown["Link"].endswith('&page=2>; rel="next", </doc>; rel=help')
    assert shown["Refresh"].startswith("0; url=/x?token=<redacted len=")
    assert shown["Refresh"].endswith(
        ", 5;URL='https://up.test/y?api_key=" + redactor.token(f"q-{SECRET}") + "'"
    )


def test_a_urls_fragment_has_its_credentials_masked_and_remembered_like_a_querys(redactor: Redactor) -> None:
    """An authorization server answering with `response_mode=fragment` redirects with the tokens in
    the fragment; with a query present the fragment is not read as the last query value."""
    id_token, access, code = f"eyJ.id-{SECRET}", f"at-{SECRET}", f"c-{SECRET}"
    shown = redactor.headers(
        [
            ("Location", f"http://client.test/cb?x=1#id_token={id_token}&access_token={access}&state=st"),
            ("Content-Location", f"http://client.test/cb#access_token={access}"),
            ("Referer", f"https://app.test/#/callback?code={code}&tab=2"),
            ("Link", f'<https://up.test/cb#access_token={access}>; rel="next"'),
            ("Refresh", f"0; url=/cb#access_token={access}"),
        ]
    )
    masked = redactor.token(access)

    assert SECRET not in repr(shown)
    assert shown["Location"] == (
        f"http://client.test/cb?x=1#id_token={redactor.token(id_token)}&access_token={masked}"
        f"&state={redactor.token('st')}"
    )
    assert shown["Content-Location"] == f"http://client.test/cb#access_token={masked}"
    assert shown["Referer"] == f"https://app.test/#/callback?code={redactor.token(code)}&tab=2"
    assert shown["Link"] == f'<https://up.test/cb#access_token={masked}>; rel="next"'
    assert shown["Refresh"] == f"0; url=/cb#access_token={masked}"
    assert redactor.scrub(f"Bearer {access}") == f"Bearer {masked}"
    assert redactor.target(f"/mcp#token={access}") == f"/mcp#token={masked}"
    assert redactor.path("/docs#section-2") == "/docs#section-2"


@pytest.mark.parametrize(
    "target",
    [
        f"http://user:{SECRET}@proxy.test/mcp",
        f"http://{SECRET}@proxy.test/mcp?x=1",
        f"HTTPS://user:{SECRET}@proxy.test",
        f"ftp://user:{SECRET}@proxy.test/mcp",
    ],
)
def test_the_userinfo_of_an_absolute_form_target_is_masked(redactor: Redactor, target: str) -> None:
    """A client may put credentials in an absolute-form target; the capture and feed show its path."""
    shown = redactor.path(target)
    assert SECRET not in shown
    assert "proxy.test" in shown
    assert "<redacted len=" in shown


def test_a_short_uri_password_is_masked_where_its_url_or_a_value_of_exactly_it_shows_again() -> None:
    """`scheme://user:pw@host` holds a secret whatever its length: the same userinfo in a URL elsewhere
    is masked, and so is a value that is exactly the password; inside other text it is left alone,
    where masking `p1` would blot out every `p1` of every message."""
    redactor = Redactor(key=KEY)
    token = Redactor(key=KEY).token
    uri = "https://bob:p1@files.example/doc"
    redactor.path(uri)  # as naming a `resources/read` of it does
    echoed = {"uri": uri, "text": "p1", "words": ["p1", "up1 and p1 again"], "p1": 3}
    answer = {"jsonrpc": "2.0", "id": 1, "result": {"contents": [echoed]}}

    shown = redactor.body(answer)["result"]["contents"][0]
    bounded = redactor.body_bounded(answer, 65536)[0]["result"]["contents"][0]

    assert shown == bounded
    assert shown["uri"] == f"https://{token('bob:p1')}@files.example/doc"
    assert (shown["text"], shown["words"], shown["p1"]) == (token("p1"), [token("p1"), "up1 and p1 again"], 3)
    assert redactor.scrub(f"GET {uri} failed") == f"GET https://{token('bob:p1')}@files.example/doc failed"
    assert redactor.headers([("X-Password-Echo", "p1"), ("X-Note", "p1 x")])["X-Note"] == "p1 x"


def test_masks_and_fingerprints_are_keyed_so_a_guess_cannot_be_checked_without_the_key() -> None:
    one, same, other = Redactor(key=b"k1"), Redactor(key=b"k1"), Redactor(key=b"k2")
    assert one.token(SECRET) == same.token(SECRET)
    assert one.token(SECRET) != other.token(SECRET)
    assert hashlib.sha256(SECRET.encode()).hexdigest()[:8] not in one.token(SECRET)
    assert one.fingerprint("principal") == same.fingerprint("principal") != other.fingerprint("principal")
    assert Redactor().token(SECRET) != Redactor().token(SECRET), "no key: random per redactor"


def test_a_query_credential_of_a_link_is_masked_where_an_earlier_header_of_the_head_echoes_it(
    redactor: Redactor,
) -> None:
    shown = redactor.headers(
        [
            ("X-Debug-Next", f"next page with access_token=a-{SECRET}"),
            ("Link", f"<https://up.test/next?access_token=a-{SECRET}>; rel=next"),
        ]
    )

    assert SECRET not in repr(shown)
    assert shown["X-Debug-Next"] == "next page with access_token=" + redactor.token(f"a-{SECRET}")


def test_a_request_targets_path_keys_are_masked_and_remembered_for_echoes(redactor: Redactor) -> None:
    key = "Zk9f2c41d7a0b83e5c6d1f0a9b8c7d6e5f4"
    shown = redactor.target(f"/mcp/{key}/sse?token=abc123secret&page=2")

    assert key not in shown
    assert shown.startswith("/mcp/<redacted len=")
    assert shown.count("<redacted") == 2
    assert shown.endswith("&page=2")
    # A server echoing the key in a result has it masked too.
    assert key not in json.dumps(redactor.body({"text": f"your key is {key}"}))
    # Names, UUIDs, short paths and a URL's host are kept: they tell endpoints apart.
    for kept in (
        "/mcp",
        "/server-everything/mcp",
        "/sessions/123e4567-e89b-12d3-a456-426614174000/mcp",
        "http://gateway.example.com/github-mcp-server-v2/mcp",
    ):
        assert redactor.target(kept) == kept
    # Wherever a segment sits, whatever it holds besides the key, the key is masked.
    for shape in ("/gw//{k}/mcp", "/gw/acct:{k}/mcp", "/gw/user@{k}/mcp", "http://h//{k}/mcp?x=1"):
        other = "Zk" + hashlib.sha256(shape.encode()).hexdigest()[:24]
        assert other not in redactor.target(shape.format(k=other)), shape
    # A long camel-case name read as a key is masked in the path, not everywhere it appears.
    assert "getUserProfileData" not in redactor.target("/tools/getUserProfileData/mcp")
    assert redactor.scrub("tools/call getUserProfileData") == "tools/call getUserProfileData"
    # `path` (resource URIs as well as targets) judges only the query: a page id is no key.
    page = "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d"
    assert redactor.path(f"notion://workspace/page/{page}") == f"notion://workspace/page/{page}"


def test_a_request_head_learned_before_it_is_shown_masks_the_echo_of_its_path_key(redactor: Redactor) -> None:
    key = "Zk4242424242abababababababab"
    redactor.learn(f"/gw/{key}/mcp", {})
    assert key not in json.dumps(redactor.body({"arguments": {"key": key}}))


def test_an_oauth_token_requests_form_fields_are_masked_and_remembered_like_a_querys(
    redactor: Redactor,
) -> None:
    form = (
        f"grant_type=authorization_code&code=c-{SECRET}&client_id=cid-1&client_secret=s-{SECRET}"
        f"&code_verifier=v-{SECRET}&client_assertion=a-{SECRET}&redirect_uri=http%3A%2F%2F127.0.0.1%2Fcb\n"
    )
    shown = redactor.body(form)
    echoed = redactor.scrub(f"bad verifier v-{SECRET}")

    assert SECRET not in shown + echoed
    assert shown.startswith("grant_type=authorization_code&code=<redacted len=")
    assert "&client_id=cid-1&" in shown
    assert shown.endswith("&redirect_uri=http%3A%2F%2F127.0.0.1%2Fcb\n")


def test_a_token_endpoints_json_answer_has_its_tokens_masked_and_remembered_its_metadata_kept(
    redactor: Redactor,
) -> None:
    answer = {
        "access_token": f"at-{SECRET}",
        "token_type": "Bearer",
        "refresh_token": f"rt-{SECRET}",
        "expires_in": 60,
    }
    registered = {
        "client_id": "cid-1",
        "client_secret": f"cs-{SECRET}",
        "registration_access_token": f"r-{SECRET}",
    }
    metadata = {"token_endpoint": "http://as/token", "authorization_servers": ["http://as"]}
    shown = [redactor.body_bounded(body, 10_000)[0] for body in (answer, registered, metadata)]
    later = redactor.headers({"Authorization": f"Bearer at-{SECRET}", "X-Debug-Echo": f"at-{SECRET}"})

    assert SECRET not in repr(shown) + repr(later)
    assert shown[0]["token_type"] == "Bearer"
    assert shown[0]["expires_in"] == 60
    assert shown[1]["client_id"] == "cid-1"
    assert shown[2] == metadata


@pytest.mark.parametrize(
    "name", ["accessToken", "AccessToken", "access-token", "ACCESS_TOKEN", "clientSecret", "Id.Token"]
)
def test_an_oauth_members_name_is_judged_by_its_words_in_any_case_or_spelling(name: str) -> None:
    """An authorization server written in JavaScript answers `{"accessToken": ...}`."""
    redactor = Redactor(key=KEY)
    answer = {name: f"at-{SECRET}", "tokenType": "Bearer", "tokenEndpoint": "http://as/token"}
    form = f"grant_type=authorization_code&{name}=f-{SECRET}&codeVerifier=v-{SECRET}&Code-Verifier=w-{SECRET}"

    shown = redactor.body_bounded(answer, 10_000)[0]
    malformed = redactor.body(f'{{"{name}": "m-{SECRET}", "tokenType": "Bearer"')

    assert SECRET not in repr(shown) + redactor.body(form) + malformed
    assert shown[name] == redactor.token(f"at-{SECRET}")
    assert (shown["tokenType"], shown["tokenEndpoint"]) == ("Bearer", "http://as/token")
    assert redactor.scrub(f"Bearer at-{SECRET}") == f"Bearer {redactor.token(f'at-{SECRET}')}"


_SEPARATORS = st.text(alphabet='_-.:/ "\\\n\x01\t@', max_size=4)


@given(
    words=st.tuples(
        st.sampled_from(["", "old", "x_"]),
        st.sampled_from(["api", "API", "Api"]),
        _SEPARATORS,
        st.sampled_from(["key", "KEY", "Key", "keys"]),
        _SEPARATORS,
    )
)
def test_the_captures_pre_filter_sends_every_member_the_walk_would_mask_down_the_walk(
    words: tuple[str, ...],
) -> None:
    """Whatever separators join a configured key's words (`API__KEY`, `api::key`, `api/key`), the
    capture masks what `body` masks: its fast pre-filter never lets such a member through."""
    name = "".join(words)
    message = {"jsonrpc": "2.0", "id": 1, "params": {"arguments": {name: SECRET}}}

    captured, _, _ = Redactor(body_keys=["api_key"], key=KEY).body_for_capture(message, 65536)
    walked = Redactor(body_keys=["api_key"], key=KEY).body(message)

    assert captured == walked


@pytest.mark.parametrize("name", ["API__KEY", "api::key", "api/key", "API--KEY", "api\nkey", 'api"key'])
def test_a_body_key_joined_by_any_separators_is_masked_in_the_capture(name: str) -> None:
    message = {"jsonrpc": "2.0", "id": 1, "params": {"arguments": {name: SECRET}}}

    captured, _, encoded = Redactor(body_keys=["api_key"], key=KEY).body_for_capture(message, 65536)

    assert captured["params"]["arguments"][name] == Redactor(key=KEY).token(SECRET)
    assert encoded is None


def test_a_json_rpc_members_named_like_oauth_tokens_are_kept_as_bodies_are(redactor: Redactor) -> None:
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"arguments": {"access_token": "t"}}}

    assert redactor.body_bounded(call, 10_000)[0] == call


@pytest.mark.parametrize("header", ["Authorization", "Proxy-Authorization"])
def test_a_basic_credential_is_masked_where_a_server_echoes_it_decoded_or_its_password_alone(
    redactor: Redactor, header: str
) -> None:
    password = f"pw-{SECRET}"
    encoded = base64.b64encode(f"alice:{password}".encode()).decode()
    redactor.headers({header: f"Basic {encoded}"})
    result = {
        "jsonrpc": "2.0",
        "id": 2,
        "result": {"content": [{"type": "text", "text": f"decoded: alice:{password}"}]},
    }
    body, _, _ = redactor.body_bounded(result, 10_000)
    said = redactor.scrub(f"wrong password {password} for alice")

    assert SECRET not in repr(body) + said
    assert body["result"]["content"][0]["text"].startswith("decoded: <redacted len=")


def test_a_basic_password_that_could_be_a_word_is_not_masked_wherever_that_word_shows(
    redactor: Redactor,
) -> None:
    """`admin:password` is masked as a pair; `password` alone would mask a schema's property name."""
    encoded = base64.b64encode(b"admin:password").decode()
    redactor.headers({"Authorization": f"Basic {encoded}"})
    schema = {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"tools": [{"inputSchema": {"properties": {"password": {}}}}]},
    }
    body, _, _ = redactor.body_bounded(schema, 10_000)

    assert body == schema
    assert "admin:password" not in redactor.scrub("login admin:password refused")


def test_a_basic_value_that_is_not_base64_is_masked_as_a_whole_and_breaks_nothing(redactor: Redactor) -> None:
    shown = redactor.headers({"Authorization": f"Basic not*base64-{SECRET}"})

    assert shown["Authorization"].startswith("Basic <redacted len=")


def test_a_utf8_header_is_shown_and_masked_as_read_so_its_echo_in_a_body_is_masked_too(
    redactor: Redactor,
) -> None:
    """The HTTP core keeps a value as the latin-1 reading of its bytes; a body is read as UTF-8. The
    secret a client sent as UTF-8 must be known by the text the body shows, or its echo goes unmasked."""
    secret = "clé-secrète-77 名前"
    on_the_wire = secret.encode().decode("latin-1")

    out = redactor.headers([("X-Api-Key", on_the_wire), ("X-Weird", "it's café".encode().decode("latin-1"))])
    echoed, _, _ = redactor.body_bounded({"result": {"text": f"you sent {secret}"}}, 65536)

    assert out == {"X-Api-Key": f"<redacted len={len(secret)} hmac:{sha8(secret)}>", "X-Weird": "it's café"}
    assert echoed == {"result": {"text": f"you sent {redactor.token(secret)}"}}


def test_a_utf8_credential_is_masked_in_its_latin1_reading_too_where_raw_head_text_carries_it(
    redactor: Redactor,
) -> None:
    """A string taken from the raw head (a log field) holds a value's latin-1 reading, not its UTF-8
    text: a credential sent as UTF-8 must be known in both, the body's and the raw head's."""
    secret = "clé-secrète-77 名前"
    on_the_wire = secret.encode().decode("latin-1")
    token = "tök-€-never-shown"

    redactor.headers(
        [("X-Api-Key", on_the_wire), ("Authorization", f"Bearer {token}".encode().decode("latin-1"))]
    )

    for clear in (secret, on_the_wire, token, token.encode().decode("latin-1")):
        shown = redactor.scrub(f"upstream said: {clear}")
        assert clear not in shown
        assert shown == f"upstream said: {redactor.token(clear)}"


def _tools_list_with_a_password_argument() -> dict[str, Any]:
    schema = {
        "type": "object",
        "properties": {"user": {"type": "string"}, "password": {"title": "Password", "type": "string"}},
        "required": ["user", "password"],
    }
    tool = {"name": "login", "inputSchema": schema}
    return {"jsonrpc": "2.0", "id": 3, "result": {"tools": [tool]}}


def test_a_tools_json_schema_for_a_secret_argument_is_kept_whole_in_every_output() -> None:
    """The schema under `properties.password` describes the secret and holds none: masked whole, a
    mock would serve a stand-in as a schema (which SDK clients refuse) and a replay would differ."""
    listed = _tools_list_with_a_password_argument()

    shown = Redactor(body_keys=["password"], key=KEY).body(listed)
    bounded, _, _ = Redactor(body_keys=["password"], key=KEY).body_bounded(listed, 65536)
    captured, _, _ = Redactor(body_keys=["password"], key=KEY).body_for_capture(listed, 65536)

    assert shown == bounded == captured == listed


def _masked_whole(value: Any) -> str:
    return Redactor(key=KEY).token(orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode())


def test_an_object_under_a_secret_key_is_masked_whole_in_every_output() -> None:
    """An operator who names a key means its value, whatever its shape: a secret one level down in an
    object under it (whose own key is named nowhere) reaches no output."""
    credentials = {"user": "bob", "value": "hunter2-secret"}
    api_key = {"id": "k1", "secret": "sk-live-123"}
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "login", "arguments": {"credentials": credentials, "api_key": api_key}},
    }
    keys = ["credentials", "api_key"]

    shown = Redactor(body_keys=keys, key=KEY).body(call)
    captured, _, encoded = Redactor(body_keys=keys, key=KEY).body_for_capture(call, 65536)

    assert shown == captured
    assert shown["params"]["arguments"] == {
        "credentials": _masked_whole(credentials),
        "api_key": _masked_whole(api_key),
    }
    assert encoded is None, "the capture encodes the masked value, not the text it was given"
    assert call["params"]["arguments"]["credentials"] is credentials, "the traffic itself is untouched"


def test_only_a_member_of_a_schemas_properties_is_walked_under_a_secret_key() -> None:
    """Under a member named `properties` an object named like a secret key is a JSON Schema, gone
    through (its own secret members masked); a string there is still a secret, and an object whose
    holder is named anything else is masked whole, however schema-like it looks."""
    redactor = Redactor(body_keys=["credentials", "password"], key=KEY)
    nested = {
        "type": "object",
        "properties": {"password": {"type": "string", "default": "the usual"}, "user": {"type": "string"}},
    }
    schema = {"type": "object", "properties": {"credentials": nested, "password": "plain-secret-text"}}
    lookalike = {"type": "string", "password": SECRET}
    message = {
        "jsonrpc": "2.0",
        "id": 2,
        "result": {"tools": [{"name": "login", "inputSchema": schema}], "meta": {"credentials": lookalike}},
    }

    shown = redactor.body(message)["result"]

    assert shown["tools"][0]["inputSchema"] == {
        "type": "object",
        "properties": {"credentials": nested, "password": Redactor(key=KEY).token("plain-secret-text")},
    }
    assert shown["meta"] == {"credentials": _masked_whole(lookalike)}


def test_under_a_secret_key_an_arrays_items_are_masked_each_and_a_flag_is_kept() -> None:
    redactor = Redactor(body_keys=["password"], key=KEY)
    token = Redactor(key=KEY).token
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "arguments": {
                "password": {"db_password": SECRET, "hint": "the usual"},
                "backup_password": [SECRET, 1234, {"note": "other-secret"}, ["deeper-secret"], True, None],
                "password_set": True,
                "old_password": 987654,
            }
        },
    }

    shown = redactor.body(call)["params"]["arguments"]

    assert shown["password"] == _masked_whole({"db_password": SECRET, "hint": "the usual"})
    masked_items = [_masked_whole({"note": "other-secret"}), _masked_whole(["deeper-secret"])]
    assert shown["backup_password"] == [token(SECRET), token("1234"), *masked_items, True, None]
    assert (shown["password_set"], shown["old_password"]) == (True, token("987654"))


def test_a_text_body_masks_a_secret_keys_value_as_the_json_walk_does() -> None:
    """A body kept as text (JSON inside plain text, or JSON cut short) carries nothing in clear that
    the same members decoded would not: an object under a secret key masked whole, an array's items
    each, a schema's `properties` member gone through, and an object cut short masked to the end."""
    redactor = Redactor(body_keys=["credentials", "password"], key=KEY)
    token = Redactor(key=KEY).token
    credentials = {"user": "bob", "value": "hunter2-secret"}
    schema = {"properties": {"password": {"type": "string", "default": "the usual"}}}
    members = {"credentials": credentials, "password": [SECRET, {"note": "other-secret"}], "schema": schema}
    text = "upstream said: " + orjson.dumps(members).decode() + " (retry later)"

    shown = redactor.text_body(text)
    walked = redactor.body(members)
    cut = redactor.text_body('{"n": 1, "credentials": {"user": "bob", "value": "hunter2-sec')

    assert shown == "upstream said: " + orjson.dumps(walked).decode() + " (retry later)"
    assert walked["credentials"] == _masked_whole(credentials)
    assert walked["password"] == [token(SECRET), _masked_whole({"note": "other-secret"})]
    assert walked["schema"] == schema
    assert "hunter2" not in shown + cut
    assert cut.startswith('{"n": 1, "credentials": "<redacted len=')


def test_a_secret_keys_string_in_a_body_the_proxy_cannot_decode_is_remembered_for_its_echoes() -> None:
    """The upstream may read what the proxy could not (a JavaScript server takes a lone surrogate), and
    echo the value: masked in the body kept as text, it is masked wherever it shows again."""
    redactor = Redactor(body_keys=["password"], key=KEY)
    lone = '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"password":"pw-\\ud800-lone-secret"}}'
    cut = '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"password":"pw-cut-short-secret'

    shown = redactor.text_body(lone) + redactor.text_body(cut)
    echoed = redactor.text_body('{"result":"you sent pw-\\ud800-lone-secret"}')

    assert "lone-secret" not in shown + echoed
    assert "cut-short-secret" not in shown
    assert redactor.scrub("echo: pw-cut-short-secret") == f"echo: {redactor.token('pw-cut-short-secret')}"
