"""The chain builder: groups every observed message into the chain of the client operation it serves.

Theory of operation. The transport reports each HTTP exchange (`open_exchange` ... `close_exchange`)
and each JSON-RPC message seen on it (`message`). A client request opens a chain, unless it is the
retry of an MRTR round, which joins the chain that got the `input_required` result (matched by the
`requestState` digest, or, when the server sent none, by method + name/uri + arguments + answered
keys, and only when exactly one chain fits). Anything that rides the POST's response stream joins the
chain of that POST's request; a server request registers its id so the client's answering POST joins
the same chain; `notifications/cancelled` joins the chain of the request it cancels; GET-stream
traffic joins the chain of that stream. Time spent waiting on the client (a nested request
outstanding, or an `input_required` result not yet retried) is split from time spent upstream.

No I/O, no clock of its own (one is injected), no logging: the transport logs what `close_exchange`
returns.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.flows.events import (
    ChainChanged,
    ChainOpened,
    ChainStatus,
    ChainSummary,
    Channel,
    ContinuationChanged,
    Direction,
    FlowEvent,
    HttpInfo,
    MessageRecord,
    MessageRecorded,
    Mode,
    SessionChanged,
    Side,
)
from proxy.flows.redact import Redactor
from proxy.flows.store import Chain, ChainStore
from proxy.wire.jsonrpc import Kind, Message, RequestId, classify_value
from proxy.wire.mcp import (
    INPUT_METHODS,
    META_CLIENT_INFO,
    RESULT_INPUT_REQUIRED,
    request_meta,
    result_type,
    target_name,
)

_CORRELATION_BOUND = 10000
"""How many open correlations (pending nested requests, expected retries) are remembered."""


def digest(value: Any) -> str:
    """A short, stable digest of a JSON value (argument matching; never shown as a secret)."""
    data = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(data).hexdigest()[:16]


class _BoundedMap(OrderedDict[Any, Any]):
    """An insertion-ordered dict that forgets its oldest entries past a bound."""

    def __init__(self, bound: int = _CORRELATION_BOUND) -> None:
        super().__init__()
        self.bound = bound

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        while len(self) > self.bound:
            self.popitem(last=False)


@dataclass(slots=True)
class _Exchange:
    """What the builder remembers about one open HTTP exchange with the client."""

    id: str
    http_method: str
    path: str
    started: float
    session: str | None
    client_era: str
    upstream_era: str
    mode: Mode
    request_headers: dict[str, str]
    chains: list[str] = field(default_factory=list)
    requests: dict[RequestId, str] = field(default_factory=dict)
    answered: set[RequestId] = field(default_factory=set)
    head: HttpInfo | None = None
    head_recorded: bool = False
    minted_session: str | None = None
    last_sse_id: str | None = None
    pending_note: str | None = None
    bytes_in: int = 0
    bytes_out: int = 0
    messages_out: int = 0


@dataclass(slots=True)
class _RetryExpectation:
    """An `input_required` result waiting for the client's retry."""

    chain_id: str
    signature: tuple[str, str | None, str]
    input_keys: frozenset[str]
    state_digest: str | None


@dataclass(frozen=True, slots=True)
class ExchangeSummary:
    """The round-trip log line of one HTTP exchange, as plain data for the transport to log."""

    exchange: str
    chain_id: str | None
    http_method: str
    session: str | None
    method: str | None
    name: str | None
    jsonrpc_ids: tuple[RequestId, ...]
    status: int | None
    content_type: str | None
    bytes_in: int
    bytes_out: int
    messages_out: int
    duration_ms: float
    outcome: str | None

    def log_fields(self) -> dict[str, Any]:
        """The fields of the round-trip log line (already redacted)."""
        return {
            "chain_id": self.chain_id,
            "session": self.session,
            "http_method": self.http_method,
            "method": self.method,
            "name": self.name,
            "ids": list(self.jsonrpc_ids),
            "status": self.status,
            "content_type": self.content_type,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "messages_out": self.messages_out,
            "duration_ms": self.duration_ms,
            "outcome": self.outcome,
        }


class ChainBuilder:
    """Turns the transport's observations into chains in the store and flow events on the sink."""

    def __init__(
        self,
        store: ChainStore,
        sink: Callable[[FlowEvent], None],
        redactor: Redactor,
        *,
        clock: Callable[[], float],
        body_limit: int = 65536,
    ) -> None:
        self.store = store
        self._sink = sink
        self._redactor = redactor
        self._clock = clock
        self._body_limit = body_limit
        self._ids = itertools.count(1)
        self._exchanges: dict[str, _Exchange] = {}
        self._nested: _BoundedMap = _BoundedMap()
        self._requests: _BoundedMap = _BoundedMap()
        self._retries_by_state: _BoundedMap = _BoundedMap()
        self._retries: _BoundedMap = _BoundedMap()
        self._session_init: _BoundedMap = _BoundedMap()
        self._session_names: _BoundedMap = _BoundedMap()
        self._changed: dict[str, Chain] | None = None
        self._legs: _BoundedMap = _BoundedMap()
        self._event_chains: _BoundedMap = _BoundedMap()

    # -- exchanges -------------------------------------------------------------------------------

    def open_exchange(
        self,
        exchange_id: str,
        *,
        http_method: str,
        path: str,
        headers: dict[str, str],
        session: str | None,
        client_era: str = "unknown",
        upstream_era: str = "unknown",
        mode: Mode = Mode.PASSTHROUGH,
        body_size: int = 0,
    ) -> None:
        """Start tracking one HTTP exchange from the client (before any message is seen)."""
        self._exchanges[exchange_id] = _Exchange(
            id=exchange_id,
            http_method=http_method,
            path=path,
            started=self._clock(),
            session=session,
            client_era=client_era,
            upstream_era=upstream_era,
            mode=mode,
            request_headers=headers,
            bytes_in=body_size,
        )
        if http_method == "GET":
            if not self._resume(self._exchanges[exchange_id]):
                self._open_chain(self._exchanges[exchange_id], method="GET stream", name=None, ident=None)
        elif http_method == "DELETE":
            self._open_chain(self._exchanges[exchange_id], method="DELETE session", name=None, ident=None)

    def note_event_id(self, exchange_id: str, sse_id: str) -> None:
        """Remember which chain an SSE event id belongs to, so a resumed stream rejoins that chain."""
        ex = self._exchanges.get(exchange_id)
        if ex is None:
            return
        ex.last_sse_id = sse_id
        chain_id = next(iter(ex.requests.values()), None) or (ex.chains[0] if ex.chains else None)
        if chain_id is not None:
            self._event_chains[(ex.session, sse_id)] = chain_id

    def _resume(self, ex: _Exchange) -> bool:
        """A GET with Last-Event-ID continues the stream of the chain that event belonged to."""
        last = next((v for k, v in ex.request_headers.items() if k.lower() == "last-event-id"), None)
        chain_id = self._event_chains.get((ex.session, last)) if last else None
        chain = self.store.get(chain_id) if chain_id else None
        if chain is None:
            return False
        ex.chains.append(chain.summary.id)
        if chain.summary.jsonrpc_id is not None and chain.summary.status not in (
            ChainStatus.OK,
            ChainStatus.ERROR,
        ):
            ex.requests[chain.summary.jsonrpc_id] = chain.summary.id
        chain.summary.notes.append(f"stream resumed with Last-Event-ID {last}")
        return True

    def response_head(
        self, exchange_id: str, *, status: int, content_type: str | None, headers: dict[str, str]
    ) -> None:
        """Remember the HTTP head of the response; it is attached to the first message back."""
        ex = self._exchanges.get(exchange_id)
        if ex is None:
            return
        ex.head = HttpInfo(status=status, content_type=content_type, headers=self._redactor.headers(headers))
        ex.minted_session = next((v for k, v in headers.items() if k.lower() == "mcp-session-id"), None)
        for chain_id in ex.chains:
            chain = self.store.get(chain_id)
            if chain is not None and chain.summary.http_status is None:
                chain.summary.http_status = status

    def message(
        self,
        exchange_id: str,
        msg: Message,
        *,
        size: int,
        direction: Direction,
        channel: Channel,
        side: Side = Side.BOTH,
        sse_id: str | None = None,
        note: str | None = None,
    ) -> str | None:
        """Record one message seen on an exchange; returns the chain it joined.

        Headline changes the message causes are announced after the message itself, so the last
        ChainChanged of a chain already counts its final message.
        """
        self._changed = {}
        try:
            return self._message(exchange_id, msg, size, direction, channel, side, sse_id, note)
        finally:
            changed, self._changed = self._changed, None
            for chain in changed.values():
                self._emit_changed(chain)

    def _message(
        self,
        exchange_id: str,
        msg: Message,
        size: int,
        direction: Direction,
        channel: Channel,
        side: Side,
        sse_id: str | None,
        note: str | None,
    ) -> str | None:
        ex = self._exchanges.get(exchange_id)
        if ex is None:
            return None
        if direction is Direction.TO_SERVER:
            ex_chain = self._client_message(ex, msg)
        else:
            ex.messages_out += 1
            ex.bytes_out += size
            ex_chain = self._server_message(ex, msg)
        chain = self.store.get(ex_chain) if ex_chain else None
        if chain is None:
            return None
        if sse_id is not None:
            self.note_event_id(exchange_id, sse_id)
        self._record(
            chain,
            ex,
            msg,
            size=size,
            direction=direction,
            channel=channel,
            side=side,
            sse_id=sse_id,
            note=note,
        )
        return chain.summary.id

    def leg_message(
        self,
        leg: str,
        exchange_id: str,
        message: Any,
        *,
        size: int,
        direction: Direction,
        channel: Channel,
        note: str | None = None,
    ) -> str | None:
        """Record a message on an upstream leg a bridge made; it joins the chain of the request it serves.

        A leg keeps its chain after the client exchange that caused it has closed (a parked call).
        Upstream-side messages never change the chain's status: the client side decides that.
        """
        chain_id = self._legs.get(leg)
        if chain_id is None:
            ex = self._exchanges.get(exchange_id)
            if ex is None:
                return None
            chain_id = next(iter(ex.requests.values()), None) or (ex.chains[0] if ex.chains else None)
            if chain_id is None:
                return None
            self._legs[leg] = chain_id
        chain = self.store.get(chain_id)
        if chain is None:
            return None
        msg = message if isinstance(message, Message) else classify_value(message)
        if direction is Direction.TO_SERVER and msg.kind is Kind.REQUEST:
            chain.upstream_requests += 1
            if chain.summary.mode is Mode.LEGACY_TO_MRTR and msg.method == chain.summary.method:
                chain.summary.rounds = chain.upstream_requests
        self._changed = {}
        try:
            self._record_leg(chain, leg, msg, size=size, direction=direction, channel=channel, note=note)
        finally:
            self._changed = None
        return chain.summary.id

    def chain_of_exchange(self, exchange_id: str) -> str | None:
        """The chain an open exchange's request belongs to (None once the exchange has closed)."""
        ex = self._exchanges.get(exchange_id)
        if ex is None:
            return None
        return next(iter(ex.requests.values()), None) or (ex.chains[0] if ex.chains else None)

    def continuation_changed(
        self, chain_id: str, state: str, *, principal: str | None, pending_keys: list[str], age_ms: float
    ) -> None:
        """Announce a parked upstream call's change; one that ends while its chain still waits fails it."""
        chain = self.store.get(chain_id)
        if state in ("expired", "cancelled") and chain is not None and chain.summary.ended is None:
            chain.summary.notes.append(f"parked upstream call {state}")
            self._finish(chain, ChainStatus.ERROR, f"parked upstream call {state}", self._clock())
        self._sink(
            ContinuationChanged.model_validate(
                {
                    "ts": self._clock(),
                    "chain_id": chain_id,
                    "state": state,
                    "principal": principal,
                    "pending_keys": pending_keys,
                    "age_ms": age_ms,
                }
            )
        )

    def link_leg(self, leg: str, related: str) -> None:
        """File a new leg in the chain of an earlier one (an answer to, or cancel of, a parked call)."""
        chain_id = self._legs.get(related)
        if chain_id is not None:
            self._legs[leg] = chain_id

    def leg_closed(self, leg: str) -> None:
        """Forget a finished leg's chain."""
        self._legs.pop(leg, None)

    def add_bytes_out(self, exchange_id: str, size: int) -> None:
        """Count response bytes that carried no JSON-RPC message (SSE comments, priming events)."""
        ex = self._exchanges.get(exchange_id)
        if ex is not None:
            ex.bytes_out += size

    def close_exchange(self, exchange_id: str, outcome: str | None = None) -> ExchangeSummary | None:
        """Finish an exchange: unanswered requests fail with `outcome`, and the log line is returned."""
        ex = self._exchanges.pop(exchange_id, None)
        if ex is None:
            return None
        now = self._clock()
        if ex.head is not None and not ex.head_recorded and ex.chains:
            self._record_http_only(ex)
        for ident, chain_id in ex.requests.items():
            if ident in ex.answered:
                continue
            if outcome is None and ex.last_sse_id is not None and not self._http_failed(ex):
                continue  # the server may drop a stream after an event id; the client resumes it
            if self._requests.get((ex.session, ident)) == chain_id:  # no answer can come any more
                del self._requests[(ex.session, ident)]
            chain = self.store.get(chain_id)
            if chain is None or chain.summary.status in (ChainStatus.OK, ChainStatus.ERROR):
                continue
            if outcome is not None or (ex.head is not None and (ex.head.status or 0) >= 400):
                reason = outcome or f"HTTP {ex.head.status if ex.head else '?'}"
                self._finish(chain, ChainStatus.ERROR, reason, now)
            elif chain.summary.status in (ChainStatus.PENDING, ChainStatus.WAITING_CLIENT):
                self._finish(chain, ChainStatus.ERROR, "response stream ended without a response", now)
        for chain_id in ex.chains:
            chain = self.store.get(chain_id)
            if chain is None or chain.summary.method not in ("GET stream", "DELETE session"):
                continue
            if chain.summary.method == "DELETE session" and ex.session:
                self._session_event(ex.session, "ended")
            status = (
                ChainStatus.ERROR
                if outcome not in (None, "client_disconnected") or self._http_failed(ex)
                else ChainStatus.OK
            )
            self._finish(chain, status, outcome if status is ChainStatus.ERROR else None, now)
        first = self.store.get(ex.chains[0]) if ex.chains else None
        return ExchangeSummary(
            exchange=ex.id,
            chain_id=first.summary.id if first else None,
            http_method=ex.http_method,
            session=ex.session and self._redactor.token(ex.session),
            method=first.summary.method if first else None,
            name=first.summary.name if first else None,
            jsonrpc_ids=tuple(ex.requests),
            status=ex.head.status if ex.head else None,
            content_type=ex.head.content_type if ex.head else None,
            bytes_in=ex.bytes_in,
            bytes_out=ex.bytes_out,
            messages_out=ex.messages_out,
            duration_ms=round((now - ex.started) * 1000, 3),
            outcome=outcome,
        )

    def mark_invalid(self, exchange_id: str, problem: str, *, size: int, body: bytes) -> str | None:
        """Record a client body that is not JSON-RPC (still forwarded in pass-through) as an invalid chain."""
        ex = self._exchanges.get(exchange_id)
        if ex is None:
            return None
        chain = self._open_chain(ex, method=None, name=None, ident=None)
        chain.summary.invalid = True
        chain.summary.notes.append(f"invalid request: {problem}")
        preview = body[: self._body_limit].decode("utf-8", "replace")
        msg = Message(Kind.INVALID, preview, problem=problem)
        self._record(
            chain,
            ex,
            msg,
            size=size,
            direction=Direction.TO_SERVER,
            channel=Channel.POST,
            side=Side.BOTH,
            sse_id=None,
            note=problem,
        )
        # Nothing can answer it into success; without this it would stay pending for ever.
        self._finish(chain, ChainStatus.ERROR, f"invalid request: {problem}", self._clock())
        return chain.summary.id

    @property
    def open_exchanges(self) -> int:
        """Exchanges currently in flight (for metrics and draining)."""
        return len(self._exchanges)

    def correlation_sizes(self) -> dict[str, int]:
        """Sizes of the builder's correlation tables (tests assert they drain)."""
        return {
            "exchanges": len(self._exchanges),
            "nested": len(self._nested),
            "requests": len(self._requests),
            "retries": len(self._retries),
        }

    # -- correlation ------------------------------------------------------------------------------

    def _client_message(self, ex: _Exchange, msg: Message) -> str | None:
        ex_key = ex.session
        if msg.kind is Kind.REQUEST and msg.id is not None:
            chain = self._match_retry(ex, msg)
            if chain is None:
                chain = self._open_chain(
                    ex, method=msg.method, name=target_name(msg.method, msg.params), ident=msg.id
                )
                chain.signature = self._signature(msg.method, msg.params)
                self._adopt_client_info(chain, ex, msg)
            else:
                self._attach(chain, ex)
                chain.summary.rounds += 1
                chain.summary.jsonrpc_id = msg.id
                self._stop_waiting(chain)
                chain.summary.status = ChainStatus.PENDING
                self._emit_changed(chain)
            ex.requests[msg.id] = chain.summary.id
            self._requests[(ex_key, msg.id)] = chain.summary.id
            return chain.summary.id
        if msg.is_response:
            chain_id = self._nested.pop((ex_key, msg.id), None)
            chain = self.store.get(chain_id) if chain_id else None
            if chain is None:
                chain = self._open_chain(ex, method="(response)", name=None, ident=msg.id)
                chain.summary.notes.append("response to a request the proxy did not see")
                self._finish(chain, ChainStatus.OK, None, self._clock())
            else:
                self._attach(chain, ex)
                chain.waiting_on = max(0, chain.waiting_on - 1)
                if chain.waiting_on == 0:
                    self._stop_waiting(chain)
                    if chain.summary.status is ChainStatus.WAITING_CLIENT:
                        chain.summary.status = ChainStatus.PENDING
                        self._emit_changed(chain)
            return chain.summary.id
        if msg.kind is Kind.NOTIFICATION:
            return self._client_notification(ex, msg).summary.id
        chain = self._open_chain(ex, method=msg.method, name=None, ident=msg.id)
        chain.summary.invalid = True
        chain.summary.notes.append(f"invalid message: {msg.problem}")
        self._finish(chain, ChainStatus.ERROR, f"invalid message: {msg.problem}", self._clock())
        return chain.summary.id

    def _client_notification(self, ex: _Exchange, msg: Message) -> Chain:
        target: str | None = None
        if msg.method == "notifications/cancelled":
            rid = msg.params.get("requestId")
            target = self._requests.get((ex.session, rid))
        elif msg.method == "notifications/initialized" and ex.session:
            target = self._session_init.get(ex.session)
        chain = self.store.get(target) if target else None
        if chain is None:
            chain = self._open_chain(ex, method=msg.method, name=None, ident=None)
            self._finish(chain, ChainStatus.OK, None, self._clock())
        else:
            self._attach(chain, ex)
            if msg.method == "notifications/cancelled":
                chain.summary.notes.append("cancelled by the client")
        return chain

    def _server_message(self, ex: _Exchange, msg: Message) -> str | None:
        now = self._clock()
        if msg.is_response and msg.id is not None and msg.id in ex.requests:
            chain = self.store.get(ex.requests[msg.id])
            ex.answered.add(msg.id)
            self._requests.pop((ex.session, msg.id), None)
            if chain is None:
                return None
            self._on_response(chain, ex, msg, now)
            return chain.summary.id
        chain_id = ex.chains[-1] if ex.chains else None
        if len(ex.requests) == 1:
            chain_id = next(iter(ex.requests.values()))
        if msg.kind is Kind.REQUEST and msg.id is not None:
            if chain_id is None:
                return None
            chain = self.store.get(chain_id)
            if chain is not None:
                self._nested[(ex.session, msg.id)] = chain_id
                chain.summary.nested += 1
                if msg.method in INPUT_METHODS or msg.method:
                    chain.waiting_on += 1
                    self._start_waiting(chain, now)
                    chain.summary.status = ChainStatus.WAITING_CLIENT
                    self._emit_changed(chain)
        if msg.kind is Kind.INVALID and chain_id:
            chain = self.store.get(chain_id)
            if chain is not None:
                chain.summary.invalid = True
        return chain_id

    def _on_response(self, chain: Chain, ex: _Exchange, msg: Message, now: float) -> None:
        if chain.summary.method == "initialize" and msg.kind is Kind.RESULT and ex.session is None:
            session = ex.minted_session
            if session:
                self._session_init[session] = chain.summary.id
                name = chain.summary.client_name
                if name:
                    self._session_names[session] = name
                version = msg.result.get("protocolVersion") if isinstance(msg.result, dict) else None
                chain.summary.session = self._redactor.token(session)
                self._session_event(session, "opened", name, version if isinstance(version, str) else None)
        if msg.kind is Kind.ERROR:
            err = msg.error
            self._finish(chain, ChainStatus.ERROR, f"{err.get('code')}: {err.get('message')}", now)
            return
        result = msg.result
        if result_type(result) == RESULT_INPUT_REQUIRED:
            self._expect_retry(chain, result)
            parked = chain.summary.mode is Mode.MRTR_TO_LEGACY  # a live upstream call waits in the proxy
            chain.summary.status = ChainStatus.PARKED if parked else ChainStatus.WAITING_CLIENT
            self._start_waiting(chain, now)
            self._emit_changed(chain)
            return
        if isinstance(result, dict) and result.get("isError") is True:
            self._finish(chain, ChainStatus.ERROR, "tool result isError", now)
            return
        self._finish(chain, ChainStatus.OK, None, now)

    def _expect_retry(self, chain: Chain, result: dict[str, Any]) -> None:
        requests = result.get("inputRequests")
        keys = frozenset(requests) if isinstance(requests, dict) else frozenset()
        state = result.get("requestState")
        expectation = _RetryExpectation(
            chain_id=chain.summary.id,
            # from the request as sent: the recorded copy may be redacted or truncated
            signature=chain.signature or self._signature(chain.summary.method, {}),
            input_keys=keys,
            state_digest=digest(state) if isinstance(state, str) else None,
        )
        if expectation.state_digest is not None:
            self._retries_by_state[expectation.state_digest] = expectation
        else:
            self._retries[chain.summary.id] = expectation

    def _match_retry(self, ex: _Exchange, msg: Message) -> Chain | None:
        params = msg.params
        state = params.get("requestState")
        responses = params.get("inputResponses")
        if state is None and responses is None:
            return None
        if isinstance(state, str):
            found = self._retries_by_state.pop(digest(state), None)
            chain = self.store.get(found.chain_id) if found else None
            if chain is None:
                self._note_unmatched(ex, "retry carries a requestState no chain is waiting for")
            return chain
        answered = frozenset(responses) if isinstance(responses, dict) else frozenset()
        signature = self._signature(msg.method, params)
        fits = [e for e in self._retries.values() if e.signature == signature and answered <= e.input_keys]
        if len(fits) != 1:
            self._note_unmatched(ex, f"retry matches {len(fits)} waiting chains; not guessing")
            return None
        self._retries.pop(fits[0].chain_id, None)
        return self.store.get(fits[0].chain_id)

    @staticmethod
    def _note_unmatched(ex: _Exchange, why: str) -> None:
        ex.pending_note = why

    @staticmethod
    def _signature(method: str | None, params: dict[str, Any]) -> tuple[str, str | None, str]:
        args = params.get("arguments")
        return (method or "", target_name(method, params), digest(args if args is not None else {}))

    # -- recording --------------------------------------------------------------------------------

    def _open_chain(
        self, ex: _Exchange, *, method: str | None, name: str | None, ident: RequestId | None
    ) -> Chain:
        now = self._clock()
        session = ex.session
        summary = ChainSummary(
            id=f"c{next(self._ids)}",
            started=now,
            session=self._redactor.token(session) if session else None,
            client_name=self._session_names.get(session) if session else None,
            client_era=ex.client_era,
            upstream_era=ex.upstream_era,
            mode=ex.mode,
            method=method,
            name=name,
            jsonrpc_id=ident,
        )
        if ex.pending_note:
            summary.notes.append(ex.pending_note)
            ex.pending_note = None
        chain = self.store.open(summary)
        ex.chains.append(summary.id)
        self._sink(ChainOpened(chain=summary.model_copy()))
        return chain

    def _attach(self, chain: Chain, ex: _Exchange) -> None:
        if chain.summary.id not in ex.chains:
            ex.chains.append(chain.summary.id)

    def _adopt_client_info(self, chain: Chain, ex: _Exchange, msg: Message) -> None:
        info = (
            msg.params.get("clientInfo")
            if msg.method == "initialize"
            else request_meta(msg.params).get(META_CLIENT_INFO)
        )
        if isinstance(info, dict) and isinstance(info.get("name"), str):
            chain.summary.client_name = info["name"]
        if chain.summary.client_name is None:
            agent = ex.request_headers.get("user-agent")
            chain.summary.client_name = agent

    def _record(
        self,
        chain: Chain,
        ex: _Exchange,
        msg: Message,
        *,
        size: int,
        direction: Direction,
        channel: Channel,
        side: Side,
        sse_id: str | None,
        note: str | None,
    ) -> None:
        http: HttpInfo | None = None
        if (direction is Direction.TO_SERVER and chain.summary.messages == 0) or (
            direction is Direction.TO_SERVER and msg.kind is Kind.REQUEST
        ):
            http = HttpInfo(
                method=ex.http_method, path=ex.path, headers=self._redactor.headers(ex.request_headers)
            )
        elif direction is Direction.TO_CLIENT and not ex.head_recorded and ex.head is not None:
            http = ex.head
            ex.head_recorded = True
        record = self._make_record(
            chain, msg, exchange=ex.id, side=side, direction=direction, channel=channel, size=size, note=note
        )
        record.http, record.sse_id = http, sse_id
        self._store(chain, record, invalid=msg.kind is Kind.INVALID)

    def _record_leg(
        self,
        chain: Chain,
        leg: str,
        msg: Message,
        *,
        size: int,
        direction: Direction,
        channel: Channel,
        note: str | None,
    ) -> None:
        record = self._make_record(
            chain,
            msg,
            exchange=leg,
            side=Side.UPSTREAM,
            direction=direction,
            channel=channel,
            size=size,
            note=note,
        )
        self._store(chain, record, invalid=False)

    def _make_record(
        self,
        chain: Chain,
        msg: Message,
        *,
        exchange: str,
        side: Side,
        direction: Direction,
        channel: Channel,
        size: int,
        note: str | None,
    ) -> MessageRecord:
        """A redacted, bounded record of one message.

        Built by the validating constructor: for these flat models pydantic-core's validation is about
        twice as fast as `model_construct`, which fills fields in Python.
        """
        body, truncated, _ = self._redactor.body_bounded(msg.raw, self._body_limit)
        return MessageRecord(
            seq=chain.next_seq(),
            ts=self._clock(),
            side=side,
            direction=direction,
            channel=channel,
            exchange=exchange,
            kind=msg.kind.value,
            jsonrpc_id=msg.id,
            method=msg.method,
            size=size,
            body=body,
            truncated=truncated,
            http=None,
            sse_id=None,
            round=chain.summary.rounds,
            note=note or msg.problem,
        )

    def _store(self, chain: Chain, record: MessageRecord, *, invalid: bool) -> None:
        """Keep a record in its chain, count it in the headline, and tell the observers."""
        chain.add(record)
        summary = chain.summary
        summary.messages += 1
        if record.direction is Direction.TO_SERVER:
            summary.bytes_to_server += record.size
        else:
            summary.bytes_to_client += record.size
        if invalid:
            summary.invalid = True
        self._sink(MessageRecorded(chain_id=summary.id, message=record))

    def _record_http_only(self, ex: _Exchange) -> None:
        chain = self.store.get(ex.chains[0])
        if chain is None or ex.head is None:
            return
        ex.head_recorded = True
        record = MessageRecord.model_construct(
            seq=chain.next_seq(),
            ts=self._clock(),
            side=Side.BOTH,
            direction=Direction.TO_CLIENT,
            channel=Channel.HTTP,
            exchange=ex.id,
            kind="http",
            jsonrpc_id=None,
            method=None,
            size=0,
            body=None,
            truncated=False,
            http=ex.head,
            sse_id=None,
            round=chain.summary.rounds,
            note=None,
        )
        self._store(chain, record, invalid=False)

    def _http_failed(self, ex: _Exchange) -> bool:
        return ex.head is not None and (ex.head.status or 0) >= 400

    # -- timing and status -----------------------------------------------------------------------

    def _start_waiting(self, chain: Chain, now: float) -> None:
        if chain.wait_started is None:
            chain.wait_started = now

    def _stop_waiting(self, chain: Chain) -> None:
        if chain.wait_started is not None:
            chain.summary.client_wait_ms += (self._clock() - chain.wait_started) * 1000
            chain.wait_started = None

    def _finish(self, chain: Chain, status: ChainStatus, error: str | None, now: float) -> None:
        self._stop_waiting(chain)
        summary = chain.summary
        summary.status = status
        summary.error = error
        summary.ended = now
        summary.duration_ms = round((now - summary.started) * 1000, 3)
        summary.upstream_ms = round(max(0.0, summary.duration_ms - summary.client_wait_ms), 3)
        summary.client_wait_ms = round(summary.client_wait_ms, 3)
        self._retries.pop(summary.id, None)
        self._emit_changed(chain)

    def _emit_changed(self, chain: Chain) -> None:
        if self._changed is not None:  # inside message(): announced once the message is recorded
            self._changed[chain.summary.id] = chain
            return
        self._sink(ChainChanged(chain=chain.summary.model_copy()))

    def _session_event(
        self, session: str, state: str, name: str | None = None, version: str | None = None
    ) -> None:
        self._sink(
            SessionChanged.model_validate(
                {
                    "ts": self._clock(),
                    "session": self._redactor.token(session),
                    "state": state,
                    "client_name": name,
                    "protocol_version": version,
                }
            )
        )
