"""MRTR retry matching: which chain a client's retry of an `input_required` round continues.

A chain whose request got an `input_required` result waits here for the client's retry. The retry is
matched by the digest of its `requestState` when the server sent one; otherwise by method + name/uri +
argument digest, with the answered `inputResponses` keys among those the server asked for. Two
clients making the same call at once wait alike: their retries are told apart by who sends them (the
`Authorization` they carry, then the client connection), and when nothing tells them apart the retry
continues the oldest call that fits, noted so (the calls are the same request; only the answers may
be the other client's); so is a retry that continues a call made with another `Authorization`, as no
call that fits was made with its own. A retry that fits no waiting call opens a chain of its own.
A retry the server refuses (`refused`: its `requestState`, or answers that are no results of their
questions) leaves the call waiting as it was, so its expectation is put back (`restore`) for the retry
that follows. A call whose client never retries stops waiting `window` seconds after the answer that
made it wait (`overdue`): a 2026-07-28 client may stop asking, and pass-through holds nothing for it.
Every table is bounded. No I/O, no clock (times are the caller's), no logging.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, TypeAlias

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

NO_FIT = "retry matches no waiting call (method, target, arguments and answered inputs)"
"""The note on the chain a retry without `requestState` opens when no waiting chain fits it."""

AMBIGUOUS_RETRY = (
    "a retry (id {ident}) fitted {count} waiting calls alike that nothing told apart (same method, target, "
    "arguments, answered inputs, Authorization and connection): it continued the oldest, so its answers "
    "may be another client's"
)
"""The note on the chain an ambiguous retry continued (the calls are the same request)."""

OTHER_AUTHORIZATION_RETRY = (
    "a retry (id {ident}) continued a call made with another Authorization (none, or another token): "
    "no waiting call that fits it was made with its own, so its answers may be another client's"
)
"""The note on the chain a retry continued although no call that fits it shares its `Authorization`
(a token refreshed between rounds, or another client's look-alike retry)."""

RETRY_WINDOW: Final = 300.0
"""Seconds a call answered `input_required` waits for its retry by default (`continuation_ttl`'s)."""

NEVER_RETRIED = (
    "the client did not retry within {window:.0f} s (continuation_ttl) of the input_required answer: "
    "a 2026-07-28 client may stop asking"
)
"""The note on a pass-through call whose client never came back with its answers."""

REFUSED_RETRY = "a retry (id {ident}) was refused, {error}; the call kept waiting for its retry"
"""The note on a chain whose retry the server refused, touching nothing (the call still waits)."""


def digest(value: Any) -> str:
    """A short, stable digest of a JSON value (argument matching; never shown as a secret)."""
    data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(data).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request, as far as the proxy can tell clients apart: a digest of its `Authorization`
    (never shown) and the client connection that carried it."""

    principal: str | None = None
    connection: str | None = None


def caller_of(headers: Mapping[str, str], connection: str | None) -> Caller:
    """The caller of a request with these headers, on this connection."""
    auth = next((v for k, v in headers.items() if k.lower() == "authorization"), None)
    return Caller(digest(auth) if auth else None, connection)


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
    caller: Caller


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
    since: float | None = None
    """When the call it continues began to wait, for the same reason."""
    ambiguity: int = 0
    """How many waiting calls it fitted that nothing told apart (0 or 1: none)."""
    other_authorization: bool = False
    """Whether the call it continues was made with another `Authorization` than the retry carries."""


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
    """The chains waiting for an MRTR retry: one table by `requestState` digest, one by signature, and
    when each began to wait."""

    def __init__(self, window: float = RETRY_WINDOW) -> None:
        self.window = window
        self._by_state: BoundedMap = BoundedMap()
        self._by_chain: BoundedMap = BoundedMap()
        self._state_of: BoundedMap = BoundedMap()
        """Chain id -> the `requestState` digest its retry is awaited by (a wait that runs out drops it)."""
        self.waiting: BoundedMap = BoundedMap()
        """Chain id -> when it began to wait for its retry, oldest first (`overdue` reads the first)."""

    def expect(
        self, chain_id: str, signature: Signature, result: dict[str, Any], caller: Caller, since: float | None
    ) -> None:
        """Wait for the retry of the `input_required` `result` that ended a round of `chain_id` at `since`
        (None: the call waits in a bridge, whose continuation says when it stops waiting)."""
        if since is not None:
            self._wait_from(chain_id, since)
        state = result.get("requestState")
        if isinstance(state, str):
            key = digest(state)
            self._by_state[key] = chain_id
            self._state_of[chain_id] = key
            return
        requests = result.get("inputRequests")
        keys = frozenset(requests) if isinstance(requests, dict) else frozenset()
        self._by_chain[chain_id] = _Expectation(chain_id, signature, keys, caller)

    def match(self, method: str | None, params: dict[str, Any], caller: Caller) -> RetryMatch | None:
        """The chain a client request retries; None when the request is no retry at all."""
        state = params.get("requestState")
        responses = params.get("inputResponses")
        if state is None and responses is None:
            return None
        if isinstance(state, str):
            key = digest(state)
            chain_id = self._by_state.pop(key, None)
            if chain_id is not None:
                self._state_of.pop(chain_id, None)
            since = self.waiting.pop(chain_id, None) if chain_id is not None else None
            return RetryMatch(chain_id, UNKNOWN_STATE, state_key=key, since=since)
        answered = frozenset(responses) if isinstance(responses, dict) else frozenset()
        signature = request_signature(method, params)
        fits = [e for e in self._by_chain.values() if e.signature == signature and answered <= e.input_keys]
        if not fits:
            return RetryMatch(None, NO_FIT)
        fits = _told_apart(fits, caller)
        chosen = fits[0]  # the oldest of those nothing tells apart
        del self._by_chain[chosen.chain_id]
        since = self.waiting.pop(chosen.chain_id, None)
        other = chosen.caller.principal != caller.principal
        return RetryMatch(
            chosen.chain_id,
            None,
            expectation=chosen,
            since=since,
            ambiguity=len(fits),
            other_authorization=other,
        )

    def restore(self, found: RetryMatch) -> None:
        """Wait again for the retry `found` matched: the server refused it and the call still waits."""
        if found.chain_id is None:
            return
        if found.since is not None:
            self._wait_from(found.chain_id, found.since)
        if found.state_key is not None:
            self._by_state[found.state_key] = found.chain_id
            self._state_of[found.chain_id] = found.state_key
        elif found.expectation is not None:
            self._by_chain[found.chain_id] = found.expectation

    def forget(self, chain_id: str) -> None:
        """Stop waiting for a finished chain's retry, so a later look-alike cannot join it."""
        self._by_chain.pop(chain_id, None)
        self.waiting.pop(chain_id, None)
        state_key = self._state_of.pop(chain_id, None)
        if state_key is not None and self._by_state.get(state_key) == chain_id:
            del self._by_state[state_key]

    def overdue(self, now: float) -> list[tuple[str, float]]:
        """The chains whose wait for a retry ran out by `now`, each with when it ran out, no longer
        awaited (a retry that comes later opens a chain of its own). Only the oldest wait is looked at
        when it has not run out."""
        waiting, ran_out = self.waiting, []
        while waiting:
            chain_id, since = next(iter(waiting.items()))
            if now - since <= self.window:
                break
            del waiting[chain_id]
            self._by_chain.pop(chain_id, None)
            state_key = self._state_of.pop(chain_id, None)
            if state_key is not None and self._by_state.get(state_key) == chain_id:
                del self._by_state[state_key]
            ran_out.append((chain_id, since + self.window))
        return ran_out

    def _wait_from(self, chain_id: str, since: float) -> None:
        """Wait for `chain_id`'s retry from `since`, in its place among the waits by when each began (a
        refused retry's call waits again from its first `since`, older than the waits that began since)."""
        waiting = self.waiting
        waiting.pop(chain_id, None)
        newer: list[tuple[str, float]] = []
        while waiting:
            last = waiting.popitem()
            if last[1] <= since:
                waiting[last[0]] = last[1]
                break
            newer.append(last)
        waiting[chain_id] = since
        for key, began in reversed(newer):
            waiting[key] = began

    def __len__(self) -> int:
        """Retries awaited by signature (those by `requestState` only age out of their bound)."""
        return len(self._by_chain)


def _told_apart(fits: list[_Expectation], caller: Caller) -> list[_Expectation]:
    """The waiting calls among `fits` the retry's caller is likeliest to have made: those of its
    `Authorization`, then of its connection, where that leaves any."""
    if len(fits) > 1:
        fits = [e for e in fits if e.caller.principal == caller.principal] or fits
    if len(fits) > 1 and caller.connection is not None:
        fits = [e for e in fits if e.caller.connection == caller.connection] or fits
    return fits


def refused(msg: Message) -> bool:
    """Whether a server's answer to a retry refuses it (its `requestState`, or its answers), leaving
    the call untouched."""
    return msg.kind is Kind.ERROR and refuses_retry(msg.error)
