"""Pass-through calls waiting for their client's MRTR retry: conversations a SIGTERM drain waits for.

In pass-through the proxy holds nothing between two rounds of a 2026-07-28 call: the server answered
`input_required`, that exchange closed, and the client is asking its user. A drain that looked only at
open exchanges and connections would stop the proxy under that client, whose retry would then meet a
closed port. So each such call is remembered from its `input_required` answer until its retry
arrives, matched as the chain builder matches it (`proxy.flows.retries.RetryBook`: by the digest of
the echoed `requestState`, else by method + target + arguments + answered inputs), or until
`continuation_ttl` runs out (`sweep`). From then on the retry's own exchange is in flight and the
drain waits for it like any other; a retry the server refuses leaves the call waiting again.

Bounded (`RETRY_WAITS_BOUND`): past it the oldest call is forgotten and counted (`take_forgotten`),
so the runtime can warn that a drain no longer waits for it. Only 2026-07-28 pass-through exchanges
are followed (the bridges keep their own rounds). No I/O, no clock (times are the observations'), no
logging.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from proxy.flows.events import Direction, Mode
from proxy.flows.exchanges import CORRELATION_BOUND, BoundedMap
from proxy.flows.observations import ExchangeClosed, ExchangeOpened, MessageSeen, Observation
from proxy.flows.retries import (
    RETRY_WINDOW,
    Caller,
    RetryBook,
    RetryMatch,
    caller_of,
    refused,
    request_signature,
)
from proxy.wire.jsonrpc import Kind, Message, RequestId
from proxy.wire.mcp import RESULT_INPUT_REQUIRED
from proxy.wire.versions import Era

RETRY_WAITS_BOUND: Final = CORRELATION_BOUND
"""Pass-through calls awaited for their retry at once; past it the oldest is forgotten (and told)."""

_PASSTHROUGH = Mode.PASSTHROUGH
_MODERN = Era.MODERN.value
_REQUEST = Kind.REQUEST
_RESULT = Kind.RESULT
_TO_SERVER = Direction.TO_SERVER
_RETRY_FIELDS = ("requestState", "inputResponses")


class _Exchange:
    """A 2026-07-28 pass-through exchange still open: who sent it, its requests and its retries."""

    __slots__ = ("caller", "claims", "requests")

    def __init__(self, caller: Caller) -> None:
        self.caller = caller
        self.requests: dict[RequestId, Message] = {}
        self.claims: dict[RequestId, RetryMatch] | None = None
        """Its retries that matched a waiting call, until the server's answer (a refusal puts it back)."""


class RetryWaits:
    """The 2026-07-28 pass-through calls answered `input_required` whose retry has not come yet."""

    def __init__(self, window: float = RETRY_WINDOW, bound: int = RETRY_WAITS_BOUND) -> None:
        """`window`: seconds a call waits for its retry (`continuation_ttl`); `bound`: calls awaited
        at once."""
        self.bound = bound
        self._book = RetryBook(window)
        self._book.waiting.bound = bound
        self._open: BoundedMap = BoundedMap()
        """Exchange id -> `_Exchange`, while open (bounded in case a close is never observed)."""
        self._keys = 0
        self._forgotten = 0

    def __len__(self) -> int:
        """Calls awaited for their retry now."""
        return len(self._book.waiting)

    def take_forgotten(self) -> int:
        """Calls forgotten past the bound since the last look (each was still awaited)."""
        forgotten, self._forgotten = self._forgotten, 0
        return forgotten

    def sweep(self, now: float) -> None:
        """Stop waiting for the calls whose retry did not come within the window by `now`."""
        self._book.overdue(now)

    def observe_all(self, batch: Sequence[Observation]) -> None:
        """Follow observations in order (one of the observation sink's `modern_listeners`).

        This runs for every batch of every exchange, and most exchanges are none of its business: while
        no 2026-07-28 pass-through exchange is open, a batch without an opening is passed over at a
        glance. Observation kinds are never subclassed, so their type is compared exactly.
        """
        if not self._open:
            for obs in batch:
                if type(obs) is ExchangeOpened:
                    break
            else:
                return
        opened = self._open
        for obs in batch:
            if type(obs) is MessageSeen:
                ex = opened.get(obs.exchange)
                if ex is not None:
                    self._message(ex, obs)
            elif type(obs) is ExchangeOpened:
                self._opened(obs)
            elif type(obs) is ExchangeClosed:
                opened.pop(obs.exchange, None)

    def _opened(self, obs: ExchangeOpened) -> None:
        """Follow the exchange if it is a 2026-07-28 pass-through call (a POST)."""
        if obs.mode is _PASSTHROUGH and obs.client_era == _MODERN and obs.http_method == "POST":
            self._open[obs.exchange] = _Exchange(caller_of(obs.headers, obs.connection))

    def _message(self, ex: _Exchange, obs: MessageSeen) -> None:
        msg = obs.msg
        if obs.direction is _TO_SERVER:
            if msg.kind is _REQUEST and msg.id is not None:
                ex.requests[msg.id] = msg
                if any(field in msg.params for field in _RETRY_FIELDS):
                    self._retried(ex, msg)
            return
        if not msg.is_response or msg.id is None:
            return
        request = ex.requests.pop(msg.id, None)
        claim = ex.claims.pop(msg.id, None) if ex.claims else None
        if claim is not None and refused(msg):
            self._book.restore(claim)
        elif request is not None and msg.kind is _RESULT:
            self._answered(ex, request, msg.result, obs.t)

    def _retried(self, ex: _Exchange, msg: Message) -> None:
        """A retry came: the call it continues is no longer awaited (its exchange is in flight now)."""
        found = self._book.match(msg.method, msg.params, ex.caller)
        if found is not None and found.chain_id is not None and msg.id is not None:
            if ex.claims is None:
                ex.claims = {}
            ex.claims[msg.id] = found

    def _answered(self, ex: _Exchange, request: Message, result: Any, t: float) -> None:
        """An `input_required` answer: the call waits for its client's retry from `t`."""
        if type(result) is not dict or result.get("resultType") != RESULT_INPUT_REQUIRED:
            return
        book = self._book
        if len(book.waiting) >= self.bound:
            self._forgotten += 1  # the oldest goes as the new one comes (a `BoundedMap`)
        self._keys += 1
        signature = request_signature(request.method, request.params)
        book.expect(f"w{self._keys}", signature, result, ex.caller, t)
