"""Sealed requestState tokens: round trip, every rejection reason, and tamper resistance."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.engine.modern_client import tokens
from proxy.engine.modern_client.tokens import (
    Binding,
    Claims,
    InvalidToken,
    StateSealer,
    arguments_digest,
    binding_for,
    fingerprint,
)
from proxy.engine.principal import ANONYMOUS, principal_of

KEY = b"k" * 32
BINDING = Binding(
    principal="p" * 64, method="tools/call", name="deploy", arguments=arguments_digest({"a": 1})
)
CLAIMS = Claims(instance="proxy-a", continuation="continuation-1", round=2, expires=1300.5, binding=BINDING)


def sealer(key: bytes = KEY, instance: str = "proxy-a") -> StateSealer:
    return StateSealer(key, instance)


def reason(
    token: str, binding: Binding = BINDING, now: float = 1000.0, seal: StateSealer | None = None
) -> str:
    with pytest.raises(InvalidToken) as caught:
        (seal or sealer()).verify(token, binding, now)
    return caught.value.reason


def test_a_sealed_token_opens_to_the_same_claims_and_verifies_for_the_same_request() -> None:
    token = sealer().seal(CLAIMS)

    assert token.startswith("v1.")
    keyed = Binding(sealer().sealed_principal(BINDING.principal), "tools/call", "deploy", BINDING.arguments)
    assert sealer().open(token) == Claims("proxy-a", "continuation-1", 2, 1300.5, keyed)
    assert sealer().verify(token, BINDING, now=1300.5) == CLAIMS


def test_a_token_carries_the_callers_principal_keyed_never_a_plain_digest_of_its_authorization() -> None:
    secret = "Bearer alice-SECRET-TOKEN-1"
    binding = binding_for("tools/call", {"name": "ask"}, [("Authorization", secret)])
    token = sealer().seal(Claims("proxy-a", "c", 1, 5.0, binding))
    payload = base64.urlsafe_b64decode(token.split(".")[1] + "==").decode()
    plain = hashlib.sha256(secret.encode()).hexdigest()

    assert plain not in payload
    assert secret not in payload
    assert sealer().sealed_principal(plain) in payload
    assert sealer(key=b"j" * 32).sealed_principal(plain) != sealer().sealed_principal(plain)
    assert sealer().verify(token, binding, 0.0).binding == binding


def test_a_name_less_binding_round_trips_too() -> None:
    claims = Claims("", "c", 1, 5.0, Binding(ANONYMOUS, "resources/read", None, arguments_digest(None)))

    assert sealer(instance="").verify(sealer(instance="").seal(claims), claims.binding, 0.0) == claims


@pytest.mark.parametrize(
    ("binding", "expected"),
    [
        (Binding("q" * 64, "tools/call", "deploy", BINDING.arguments), "foreign_principal"),
        (Binding("p" * 64, "prompts/get", "deploy", BINDING.arguments), "method_mismatch"),
        (Binding("p" * 64, "tools/call", "other", BINDING.arguments), "name_mismatch"),
        (Binding("p" * 64, "tools/call", "deploy", arguments_digest({"a": 2})), "arguments_mismatch"),
    ],
)
def test_a_token_for_another_caller_or_another_request_is_refused(binding: Binding, expected: str) -> None:
    assert reason(sealer().seal(CLAIMS), binding) == expected


def test_an_expired_token_is_refused() -> None:
    assert reason(sealer().seal(CLAIMS), now=1300.6) == "expired"


def test_a_token_minted_by_another_instance_is_refused_even_under_the_same_key() -> None:
    elsewhere = Claims("proxy-b", "continuation-1", 2, 1300.5, BINDING)

    assert reason(sealer(instance="proxy-b").seal(elsewhere)) == "foreign_instance"


def test_a_token_sealed_under_another_key_has_a_bad_signature() -> None:
    assert reason(sealer(key=b"x" * 32).seal(CLAIMS)) == "bad_signature"


@pytest.mark.parametrize(
    "token",
    ["", "v1", "v1.a", "v2.YQ.YQ", "v1.@@@.YQ", "v1.YQ.YQ.YQ", "v1.YR.YQ", "v1.YQ==.YQ", "v1.éé.YQ"],
)
def test_malformed_tokens_are_refused(token: str) -> None:
    assert reason(token) == "malformed"


def test_the_conformance_tamper_of_appending_text_is_refused() -> None:
    assert reason(sealer().seal(CLAIMS) + "-TAMPERED") == "bad_signature"


def test_a_validly_signed_payload_of_the_wrong_shape_is_still_refused() -> None:
    payload = b'["v1","proxy-a"]'
    mac = hmac.new(KEY, tokens._CONTEXT + payload, "sha256").digest()
    token = f"v1.{tokens._b64(payload)}.{tokens._b64(mac)}"

    assert reason(token) == "malformed"


def test_the_mac_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    original = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return original(a, b)

    monkeypatch.setattr("proxy.engine.modern_client.tokens.hmac.compare_digest", spy)
    token = sealer().seal(CLAIMS)
    sealer().open(token)

    assert len(calls) == 1
    assert calls[0][0] == base64.urlsafe_b64decode(token.split(".")[2] + "=")


def test_an_empty_key_is_refused_and_the_repr_never_shows_the_key() -> None:
    with pytest.raises(ValueError, match="must not be empty"):
        StateSealer(b"")
    assert "kkkk" not in repr(sealer())


def test_principals_are_hashes_of_authorization_and_anonymous_without_it() -> None:
    assert principal_of([("authorization", "Bearer a")]) != principal_of([("Authorization", "Bearer b")])
    assert len(principal_of([("Authorization", "Bearer a")])) == 64
    assert principal_of([("X-Other", "1")]) == ANONYMOUS


def test_argument_digests_ignore_key_order_but_not_values() -> None:
    assert arguments_digest({"a": 1, "b": [1, 2]}) == arguments_digest({"b": [1, 2], "a": 1})
    assert arguments_digest({"a": 1}) != arguments_digest({"a": "1"})
    assert arguments_digest({"n": 10**30}) == arguments_digest({"n": 10**30})  # beyond orjson's ints


def test_a_binding_names_the_uri_of_resources_read() -> None:
    binding = binding_for("resources/read", {"uri": "file:///a"}, [])

    assert binding == Binding(ANONYMOUS, "resources/read", "file:///a", arguments_digest(None))


def test_fingerprints_show_length_and_a_hash_prefix_only() -> None:
    token = sealer().seal(CLAIMS)

    assert fingerprint(token) == {"length": len(token), "sha256": fingerprint(token)["sha256"]}
    assert len(fingerprint(token)["sha256"]) == 8


TOKEN = StateSealer(KEY, "proxy-a").seal(CLAIMS)


@given(
    position=st.integers(min_value=0, max_value=len(TOKEN) - 1), flip=st.integers(min_value=1, max_value=255)
)
def test_flipping_any_byte_of_a_token_makes_it_invalid(position: int, flip: int) -> None:
    raw = bytearray(TOKEN.encode("ascii"))
    raw[position] ^= flip
    tampered = raw.decode("latin-1")

    with pytest.raises(InvalidToken):
        StateSealer(KEY, "proxy-a").verify(tampered, BINDING, now=1000.0)
