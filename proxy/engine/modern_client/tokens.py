"""Sealed `requestState` tokens for the MRTR->legacy bridge (the proxy's own continuation handles).

Theory of operation. When the bridge parks a live upstream call it hands the client a
`requestState` that the client must echo on its retry. That string is attacker-controlled on the
way back, and it names a piece of process memory (the parked call), so it is integrity-protected:

    v1.<base64url(payload)>.<base64url(HMAC-SHA256(key, context || payload))>

`payload` is canonical JSON (a fixed-order array) binding everything a retry must agree with: the
proxy instance that holds the call (so a load balancer could route the retry there), the
continuation id, the caller's principal keyed under the token key (HMAC-SHA256 of the principal,
itself a hash of the caller's `Authorization`), the method, the name/uri, a SHA-256 digest of the
canonical JSON arguments, the round number and an expiry (epoch seconds). The payload is readable
by whoever holds the token (a client's debug log, an agent's transcript, a body-logging ingress),
so the principal is keyed: without the key a reader cannot check a guessed or leaked credential
against it offline. The rest is what the client sent.

Verification recomputes the MAC and compares it in constant time (`hmac.compare_digest`), insists
on the canonical base64url spelling of both parts (so no two strings open to the same token), then
checks instance, expiry and the binding against the retry. One-time use is not a property of the
token but of the continuation table: each round mints a new token with a higher round number, and
the table only accepts the current round (see `rounds`).

Pure functions and one small class; no clock (the caller passes `now`), no randomness.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Final

import orjson

from proxy.engine.principal import principal_of
from proxy.wire import errors
from proxy.wire.mcp import target_name

TOKEN_VERSION: Final = "v1"
"""The first dot-separated part of every token; a new layout gets a new version."""

_CONTEXT: Final = b"mcp-debug-proxy/requestState/v1\x00"
"""Domain separation: this key's MACs mean "a requestState", never anything else."""

_PRINCIPAL_CONTEXT: Final = b"mcp-debug-proxy/requestState/principal/v1\x00"
"""Domain separation for the keyed principal a token carries (never a token's MAC)."""

INVALID_STATE_MESSAGE: Final = errors.INVALID_STATE_MESSAGE
"""The one client-facing text for every rejection (SDK practice); the reason goes to the log and
the chain's note, never to the client."""


class InvalidToken(Exception):
    """A token that must not resume anything; `reason` is for logs, never for the client."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Binding:
    """What a retry must repeat exactly: who asks, and the same request (method, target, arguments)."""

    principal: str
    method: str
    name: str | None
    arguments: str


@dataclass(frozen=True, slots=True)
class Claims:
    """Everything a token asserts."""

    instance: str
    continuation: str
    round: int
    expires: float
    binding: Binding


def canonical_json(value: Any) -> bytes:
    """One spelling per JSON value (sorted keys, compact), so equal arguments digest equally."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # orjson.JSONEncodeError: integers beyond 64 bits and the like
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def arguments_digest(arguments: Any) -> str:
    """SHA-256 (hex) of the canonical JSON of a request's arguments (absent arguments digest `null`)."""
    return hashlib.sha256(canonical_json(arguments)).hexdigest()


def binding_for(method: str, params: dict[str, Any], headers: Iterable[tuple[str, str]]) -> Binding:
    """What a token for this request binds: its principal, method, name/uri and arguments digest."""
    return Binding(
        principal_of(headers), method, target_name(method, params), arguments_digest(params.get("arguments"))
    )


def fingerprint(token: str) -> dict[str, Any]:
    """Length and SHA-256 prefix: enough to tell tokens apart in logs and views, never the token."""
    return {"length": len(token), "sha256": hashlib.sha256(token.encode("utf-8")).hexdigest()[:8]}


class StateSealer:
    """Seals and opens tokens under one key, for one proxy instance."""

    def __init__(self, key: bytes, instance: str = "") -> None:
        if not key:
            raise ValueError("the requestState key must not be empty")
        self._key = key
        self.instance = instance

    def __repr__(self) -> str:
        return f"StateSealer(instance={self.instance!r}, key=<{len(self._key)} bytes>)"

    def seal(self, claims: Claims) -> str:
        """The token for `claims`."""
        b = claims.binding
        payload = canonical_json(
            [
                TOKEN_VERSION,
                claims.instance,
                claims.continuation,
                self.sealed_principal(b.principal),
                b.method,
                b.name,
                b.arguments,
                claims.round,
                claims.expires,
            ]
        )
        return f"{TOKEN_VERSION}.{_b64(payload)}.{_b64(self._mac(payload))}"

    def sealed_principal(self, principal: str) -> str:
        """The principal as a token carries it: keyed, so a reader of the token cannot test a guess."""
        return hmac.new(self._key, _PRINCIPAL_CONTEXT + principal.encode("utf-8"), hashlib.sha256).hexdigest()

    def open(self, token: str) -> Claims:
        """The claims of an authentic token (raises InvalidToken when it is not one of ours); its
        binding's principal is the keyed one it carries (`sealed_principal`)."""
        parts = token.split(".") if isinstance(token, str) else []
        if len(parts) != 3 or parts[0] != TOKEN_VERSION:
            raise InvalidToken("malformed")
        payload, mac = _unb64(parts[1]), _unb64(parts[2])
        if payload is None or mac is None:
            raise InvalidToken("malformed")
        if not hmac.compare_digest(mac, self._mac(payload)):
            raise InvalidToken("bad_signature")
        return _claims(payload)

    def verify(self, token: str, binding: Binding, now: float) -> Claims:
        """Open `token` and check it was minted here, is still valid and belongs to this very request
        (the claims returned carry that request's `binding`)."""
        claims = self.open(token)
        if claims.instance != self.instance:
            raise InvalidToken("foreign_instance")
        if now > claims.expires:
            raise InvalidToken("expired")
        bound = claims.binding
        if not hmac.compare_digest(bound.principal, self.sealed_principal(binding.principal)):
            raise InvalidToken("foreign_principal")
        if bound.method != binding.method:
            raise InvalidToken("method_mismatch")
        if bound.name != binding.name:
            raise InvalidToken("name_mismatch")
        if bound.arguments != binding.arguments:
            raise InvalidToken("arguments_mismatch")
        return replace(claims, binding=binding)

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._key, _CONTEXT + payload, hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes | None:
    """Decode unpadded base64url, accepting only the canonical spelling `_b64` produces."""
    if not text.isascii():
        return None
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        return None
    return data if _b64(data) == text else None


def _claims(payload: bytes) -> Claims:
    """Read an authentic payload; a wrong shape means a foreign or future layout, never trusted."""
    try:
        items = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise InvalidToken("malformed") from exc
    if not isinstance(items, list) or len(items) != 9 or items[0] != TOKEN_VERSION:
        raise InvalidToken("malformed")
    _, instance, continuation, principal, method, name, arguments, rnd, expires = items
    texts = (instance, continuation, principal, method, arguments)
    if not all(isinstance(t, str) for t in texts) or not (name is None or isinstance(name, str)):
        raise InvalidToken("malformed")
    if not isinstance(rnd, int) or isinstance(rnd, bool) or not isinstance(expires, int | float):
        raise InvalidToken("malformed")
    return Claims(instance, continuation, rnd, float(expires), Binding(principal, method, name, arguments))
