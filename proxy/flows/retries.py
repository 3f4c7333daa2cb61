"""MRTR retry matching: which chain a client's retry of an `input_required` round continues.

A chain whose request got an `input_required` result waits here for the client's retry. The retry is
matched by the digest of its `requestState` when the server sent one; otherwise by method + name/uri +
argument digest, with the answered `inputResponses` keys among those the server asked for, and only
when exactly one waiting chain fits: an ambiguous retry is never guessed, it opens a chain of its own.
A retry the server refuses (`refused`: its `requestState`, or answers that are no results of their
questions) leaves the call waiting as it was, so its expectation is put back (`restore`) for the retry
that follows. Both tables are bounded. No I/O, no clock, no logging.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, TypeAlias

import orjson

from proxy.flows.events import ChainStatus
from proxy.flows.exchanges import BoundedMap
from proxy.wire.errors import refuses_retry
from proxy.wire.jsonrpc import Kind, Message, RequestId
from proxy.wire.mcp import target_name

Signature: TypeAlias = tuple[str, str | None, str]
"""Method, name/uri and argument digest of a request."""

UNKNOWN_STATE = "retry carries a requestState no chain is waiting for"
"""The note on the chain a retry opens when its `requestState` matches no waiting chain."""

REFUSED_RETRY = "a retry (id {ident}) was refused, {error}; the call kept waiting for its retry"
"""The note on a chain whose retry the server refused, touching nothing (the call still waits)."""


def digest(value: Any) -> str:
    """A short, stable digest of a JSON value (argument matching; never shown as a secret)."""
    data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(data).hexdigest()[:16]


def request_signature(method: str | None, params: dict[str, Any]) -> Signature:
    """What a retry without `requestState` must repeat to continue a chain: method, target and arguments."""
    args = params.get("arguments")
    return (method or "", target_name(method, params), digest(args if args is not None else {}))


@dataclass(frozen=True, slots=True)
class _Expectation:
    """An `input_required` result without `requestState`, waiting for the client's retry."""

    chain_id: str
    signature: Signature
    input_keys: frozenset[str]


@dataclass(frozen=True, slots=True)
class RetryMatch:
    """The outcome of matching a retry, so the builder can note why a retry continues no chain."""

    chain_id: str | None
    """The chain the retry continues, if one was found."""
    unmatched_note: str | None
    """Why the retry continues no chain, for when `chain_id` is None or names a chain no longer held."""
    state_key: str | None = None
    """The `requestState` digest it matched by, so a refused retry can put the expectation back."""
    expectation: _Expectation | None = None
    """The expectation it matched by signature, for the same reason."""


@dataclass(frozen=True, slots=True)
class RetryClaim:
    """What a retry changed in the chain it joined, put back when the server refuses the retry."""

    found: RetryMatch
    rounds: int
    status: ChainStatus
    jsonrpc_id: RequestId | None
    wait_started: float | None
    client_wait_ms: float


class RetryBook:
    """The chains waiting for an MRTR retry: one table by `requestState` digest, one by signature."""

    def __init__(self) -> None:
        self._by_state: BoundedMap = BoundedMap()
        self._by_chain: BoundedMap = BoundedMap()

    def expect(self, chain_id: str, signature: Signature, result: dict[str, Any]) -> None:
        """Wait for the retry of the `input_required` `result` that ended a round of `chain_id`."""
        state = result.get("requestState")
        if isinstance(state, str):
            self._by_state[digest(state)] = chain_id
            return
        requests = result.get("inputRequests")
        keys = frozenset(requests) if isinstance(requests, dict) else frozenset()
        self._by_chain[chain_id] = _Expectation(chain_id, signature, keys)

    def match(self, method: str | None, params: dict[str, Any]) -> RetryMatch | None:
        """The chain a client request retries; None when the request is no retry at all."""
        state = params.get("requestState")
        responses = params.get("inputResponses")
        if state is None and responses is None:
            return None
        if isinstance(state, str):
            key = digest(state)
            return RetryMatch(self._by_state.pop(key, None), UNKNOWN_STATE, state_key=key)
        answered = frozenset(responses) if isinstance(responses, dict) else frozenset()
        signature = request_signature(method, params)
        fits = [e for e in self._by_chain.values() if e.signature == signature and answered <= e.input_keys]
        if len(fits) != 1:
            return RetryMatch(None, f"retry matches {len(fits)} waiting chains; not guessing")
        self._by_chain.pop(fits[0].chain_id, None)
        return RetryMatch(fits[0].chain_id, None, expectation=fits[0])

    def restore(self, found: RetryMatch) -> None:
        """Wait again for the retry `found` matched: the server refused it and the call still waits."""
        if found.chain_id is None:
            return
        if found.state_key is not None:
            self._by_state[found.state_key] = found.chain_id
        elif found.expectation is not None:
            self._by_chain[found.chain_id] = found.expectation

    def forget(self, chain_id: str) -> None:
        """Stop waiting for a finished chain's retry, so a later look-alike cannot join it."""
        self._by_chain.pop(chain_id, None)

    def __len__(self) -> int:
        """Retries awaited by signature (those by `requestState` only age out of their bound)."""
        return len(self._by_chain)


def refused(msg: Message) -> bool:
    """Whether a server's answer to a retry refuses it (its `requestState`, or its answers), leaving
    the call untouched."""
    return msg.kind is Kind.ERROR and refuses_retry(msg.error)
