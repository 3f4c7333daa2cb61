"""Correlation: which chain each message on a client exchange joins, and what it does to that chain.

A client request opens a chain unless it retries an MRTR round (`retries`); a client response answers
a nested request the server sent and joins that request's chain; `notifications/cancelled` joins the
chain of the request it cancels (also just after that request's exchange closed unanswered: a client
may close its stream before it says so) and `notifications/initialized` that of the session's `initialize`.
A server response settles its request's chain (ok, error, or waiting on the client after
`input_required`), except the server's refusal of a retry (its `requestState`, or its answers): that
touches nothing on the server, so the chain is put back as the retry found it and waits for the next
retry (the refused attempt's messages stay in it, noted). A server request nests in the chain its
stream serves. Each question the server asks counts once in its chain's `nested`, whichever way it
was asked: a request in flight, or an input of an `input_required` result (`ChainSummary.nested`). A
question the client never declared it could answer (its `initialize`'s capabilities, or a 2026-07-28
request's `clientCapabilities`) is noted in its chain: it is the usual cause of a client's -32601
there. The tables are bounded.
No I/O, no clock of its own (one is injected), no logging; chains are opened, timed and announced
through the ledger.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from proxy.flows.events import ChainStatus, Mode
from proxy.flows.exchanges import BoundedMap, Exchange
from proxy.flows.ledger import ChainLedger
from proxy.flows.lost import LostHistory
from proxy.flows.observations import LATE_CANCEL_S
from proxy.flows.redact import Redactor
from proxy.flows.retries import (
    AMBIGUOUS_RETRY,
    OTHER_AUTHORIZATION_RETRY,
    REFUSED_RETRY,
    RetryBook,
    RetryClaim,
    caller_of,
    refused,
    request_signature,
)
from proxy.flows.store import Chain
from proxy.wire.capabilities import has_capability, required_capability
from proxy.wire.jsonrpc import Kind, Message, RequestId
from proxy.wire.mcp import (
    INPUT_METHODS,
    META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO,
    RESULT_INPUT_REQUIRED,
    request_meta,
    result_type,
    target_name,
)


class Correlator:
    """Files each client and server message in the chain of the client operation it serves."""

    def __init__(
        self,
        ledger: ChainLedger,
        retries: RetryBook,
        redactor: Redactor,
        *,
        clock: Callable[[], float],
        lost: LostHistory | None = None,
    ) -> None:
        self._ledger = ledger
        self._lost = lost if lost is not None else LostHistory()
        """What the sink dropped unbuilt: an answer to, or a cancel of, a request made there joins nothing."""
        self._store = ledger.store
        self._retries = retries
        self._redactor = redactor
        self._clock = clock
        self._nested: BoundedMap = BoundedMap()
        self._answered: BoundedMap = BoundedMap()
        """(session, id) of a question the client answered -> its chain: a second answer to it is
        named as such, not as an answer to a request nobody asked. A memory of what is over (bounded,
        like `_closed`), so not among the open correlations `sizes` counts."""
        self._requests: BoundedMap = BoundedMap()
        self._session_init: BoundedMap = BoundedMap()
        self._declared: BoundedMap = BoundedMap()
        """chain id -> the client capabilities its request declared (`initialize`, or 2026 `_meta`)."""
        self._session_caps: BoundedMap = BoundedMap()
        """session -> the capabilities its client declared at `initialize`."""
        self._closed: BoundedMap = BoundedMap()
        """(session, id) of a request whose exchange closed unanswered -> (its chain, when): what a
        late `notifications/cancelled` naming it joins."""

    def forget_request(self, session: str | None, ident: RequestId, chain_id: str) -> None:
        """Drop a request no answer can come for any more (its exchange closed unanswered)."""
        if self._requests.get((session, ident)) == chain_id:
            del self._requests[(session, ident)]
        self._closed[(session, ident)] = (chain_id, self._clock())

    def _closed_request(self, session: str | None, ident: object) -> str | None:
        """The chain of a request of `session` whose exchange closed unanswered at most `LATE_CANCEL_S`
        ago (forgotten once asked for: one cancel names it)."""
        if not self._closed or not isinstance(ident, (str, int)):
            return None
        found = self._closed.pop((session, ident), None)
        if found is None or self._clock() - found[1] > LATE_CANCEL_S:
            return None
        chain_id: str = found[0]
        return chain_id

    def sizes(self) -> dict[str, int]:
        """Sizes of the correlation tables (tests assert they drain)."""
        return {"nested": len(self._nested), "requests": len(self._requests), "retries": len(self._retries)}

    # -- the client side -------------------------------------------------------------------------

    def client_message(self, ex: Exchange, msg: Message) -> str | None:
        """The chain a message from the client joins."""
        ex_key = ex.session
        if msg.kind is Kind.REQUEST and msg.id is not None:
            chain = self._match_retry(ex, msg)
            if chain is None:
                chain = self._ledger.open(
                    ex,
                    method=msg.method,
                    name=target_name(msg.method, msg.params),
                    ident=msg.id,
                    client_name=self._declared_client_name(msg),
                    user_agent=ex.request_headers.get("user-agent"),
                )
                chain.signature = request_signature(msg.method, msg.params)
                declared = declared_capabilities(msg.method, msg.params)
                if declared is not None:
                    self._declared[chain.summary.id] = declared
            else:
                self._ledger.attach(chain, ex)
                chain.summary.rounds += 1
                chain.summary.jsonrpc_id = msg.id
                self._ledger.stop_waiting(chain)
                chain.summary.status = ChainStatus.PENDING
                self._ledger.changed(chain)
            ex.requests[msg.id] = chain.summary.id
            self._requests[(ex_key, msg.id)] = chain.summary.id
            return chain.summary.id
        if msg.is_response:
            chain_id = self._nested.pop((ex_key, msg.id), None)
            chain = self._store.peek(chain_id) if chain_id else None
            if chain is None:
                if self._lost.lost_request(ex_key, msg.id):
                    return None  # the question's chain was dropped unbuilt: so is its answer
                chain = self._ledger.open(ex, method="(response)", name=None, ident=msg.id)
                chain.summary.notes.append(self._unmatched_note(ex_key, msg.id))
                self._ledger.finish(chain, ChainStatus.OK, None, self._clock())
            else:
                assert chain_id is not None
                self._answered[(ex_key, msg.id)] = chain_id
                self._ledger.attach(chain, ex)
                chain.waiting_on = max(0, chain.waiting_on - 1)
                if chain.waiting_on == 0:
                    self._ledger.stop_waiting(chain)
                    if chain.summary.status is ChainStatus.WAITING_CLIENT:
                        chain.summary.status = ChainStatus.PENDING
                        self._ledger.changed(chain)
            return chain.summary.id
        if msg.kind is Kind.NOTIFICATION:
            found = self._client_notification(ex, msg)
            return found.summary.id if found is not None else None
        chain = self._ledger.open(ex, method=msg.method, name=None, ident=msg.id)
        chain.summary.invalid = True
        chain.summary.notes.append(f"invalid message: {msg.problem}")
        self._ledger.finish(chain, ChainStatus.ERROR, f"invalid message: {msg.problem}", self._clock())
        return chain.summary.id

    def _unmatched_note(self, session: str | None, ident: RequestId | None) -> str:
        """Why a client response joins no chain: it repeats an answer already given, or it answers
        a request the proxy never saw."""
        earlier = self._answered.get((session, ident))
        if earlier is None:
            return "response to a request the proxy did not see"
        return f"repeated answer to the question {ident!r}, already answered in chain {earlier}"

    def _client_notification(self, ex: Exchange, msg: Message) -> Chain | None:
        target: str | None = None
        if msg.method == "notifications/cancelled":
            rid = msg.params.get("requestId")
            target = self._requests.get((ex.session, rid)) or self._closed_request(ex.session, rid)
            if target is None and self._lost.lost_request(ex.session, rid):
                return None  # it cancels a request whose chain was dropped unbuilt
        elif msg.method == "notifications/initialized" and ex.session:
            target = self._session_init.get(ex.session)
        chain = self._store.peek(target) if target else None
        if chain is None:
            chain = self._ledger.open(ex, method=msg.method, name=None, ident=None)
            self._ledger.finish(chain, ChainStatus.OK, None, self._clock())
        else:
            self._ledger.attach(chain, ex)
            if (
                msg.method == "notifications/cancelled"
                and not chain.cancelled
                and chain.summary.ended is None
            ):
                chain.summary.notes.append("cancelled by the client")
                chain.cancelled = True
        return chain

    @staticmethod
    def _declared_client_name(msg: Message) -> str | None:
        """The name the request's client gives itself (`initialize`'s `clientInfo`, or a 2026 `_meta`)."""
        info = (
            msg.params.get("clientInfo")
            if msg.method == "initialize"
            else request_meta(msg.params).get(META_CLIENT_INFO)
        )
        name = info.get("name") if isinstance(info, dict) else None
        return name if isinstance(name, str) else None

    def _match_retry(self, ex: Exchange, msg: Message) -> Chain | None:
        found = self._retries.match(msg.method, msg.params, caller_of(ex.request_headers, ex.connection))
        if found is None:
            return None
        chain = self._store.peek(found.chain_id) if found.chain_id else None
        if chain is None or chain.summary.ended is not None:  # nothing waits on an ended chain
            if found.unmatched_note:
                ex.pending_note = found.unmatched_note
            return None
        summary = chain.summary
        if found.ambiguity > 1:
            summary.notes.append(AMBIGUOUS_RETRY.format(ident=msg.id, count=found.ambiguity))
        if found.other_authorization:
            summary.notes.append(OTHER_AUTHORIZATION_RETRY.format(ident=msg.id))
        claim = RetryClaim(
            found,
            summary.rounds,
            summary.status,
            summary.jsonrpc_id,
            chain.wait_started,
            summary.client_wait_ms,
        )
        assert msg.id is not None
        ex.claims[msg.id] = claim
        return chain

    # -- the server side -------------------------------------------------------------------------

    def server_message(self, ex: Exchange, msg: Message) -> str | None:
        """The chain a message from the server joins (on the response stream of a client exchange)."""
        now = self._clock()
        if msg.is_response and msg.id is not None and msg.id in ex.requests:
            chain = self._store.peek(ex.requests[msg.id])
            ex.answered.add(msg.id)
            self._requests.pop((ex.session, msg.id), None)
            claim = ex.claims.pop(msg.id, None) if ex.claims else None
            if chain is None:
                return None
            if claim is not None and refused(msg) and chain.summary.ended is None:
                self._retry_refused(chain, claim, msg)
            else:
                self._on_response(chain, ex, msg, now)
            return chain.summary.id
        chain_id = ex.chains[-1] if ex.chains else None
        if len(ex.requests) == 1:
            chain_id = next(iter(ex.requests.values()))
        if msg.kind is Kind.REQUEST and msg.id is not None:
            if chain_id is None:
                return None
            chain = self._store.peek(chain_id)
            if chain is not None:
                self._nested[(ex.session, msg.id)] = chain_id
                chain.summary.nested += 1
                if msg.method in INPUT_METHODS:
                    self._note_undeclared(chain, ex, msg.method, msg.params)
                if msg.method in INPUT_METHODS or msg.method:
                    chain.waiting_on += 1
                    self._ledger.start_waiting(chain, now)
                    chain.summary.status = ChainStatus.WAITING_CLIENT
                    self._ledger.changed(chain)
        if msg.kind is Kind.INVALID and chain_id:
            chain = self._store.peek(chain_id)
            if chain is not None:
                chain.summary.invalid = True
        return chain_id

    def _on_response(self, chain: Chain, ex: Exchange, msg: Message, now: float) -> None:
        if chain.summary.method == "initialize" and msg.kind is Kind.RESULT and ex.session is None:
            self._session_opened(chain, ex, msg)
        if msg.kind is Kind.ERROR:
            err = msg.error
            text = self._redactor.scrub(f"{err.get('code')}: {err.get('message')}")
            self._ledger.finish(chain, ChainStatus.ERROR, text, now)
            return
        result = msg.result
        if result_type(result) == RESULT_INPUT_REQUIRED:
            self._expect_retry(chain, ex, result, now)
            asks = result.get("inputRequests")
            for entry in asks.values() if isinstance(asks, dict) else ():
                if isinstance(entry, dict) and isinstance(entry.get("method"), str):
                    self._note_undeclared(chain, ex, entry["method"], entry.get("params"))
            parked = chain.summary.mode is Mode.MRTR_TO_LEGACY  # a live upstream call waits in the proxy
            if not parked:  # MRTR->legacy restates the requests its upstream leg carried: counted there
                chain.summary.nested += _count(result.get("inputRequests"))
            chain.summary.status = ChainStatus.PARKED if parked else ChainStatus.WAITING_CLIENT
            self._ledger.start_waiting(chain, now)
            self._ledger.changed(chain)
            return
        if isinstance(result, dict) and result.get("isError") is True:
            self._ledger.finish(chain, ChainStatus.ERROR, "tool result isError", now)
            return
        self._ledger.finish(chain, ChainStatus.OK, None, now)

    def _retry_refused(self, chain: Chain, claim: RetryClaim, msg: Message) -> None:
        """The server refused a retry and touched nothing: the chain is as the retry found it (rounds,
        status, client wait) and waits for the next retry."""
        summary = chain.summary
        ident = summary.jsonrpc_id
        summary.status, summary.jsonrpc_id = claim.status, claim.jsonrpc_id
        chain.rounds_after = claim.rounds  # the refusal itself is filed in the refused retry's round
        chain.wait_started, summary.client_wait_ms = claim.wait_started, claim.client_wait_ms
        self._retries.restore(claim.found)
        err = msg.error
        error = self._redactor.scrub(f"{err.get('code')}: {err.get('message')}")
        summary.notes.append(REFUSED_RETRY.format(ident=ident, error=error))
        self._ledger.changed(chain)

    def _session_opened(self, chain: Chain, ex: Exchange, msg: Message) -> None:
        session = ex.minted_session
        declared = self._declared.pop(chain.summary.id, None)
        if not session:
            return
        self._session_init[session] = chain.summary.id
        if declared is not None:
            self._session_caps[session] = declared
        name = chain.summary.client_name
        if name:
            self._ledger.client_names[session] = name
        version = msg.result.get("protocolVersion") if isinstance(msg.result, dict) else None
        chain.summary.session = self._redactor.token(session)
        self._ledger.session_event(
            session,
            "opened",
            name,
            version if isinstance(version, str) else None,
            minted=ex.mode is Mode.LEGACY_TO_MRTR,  # that bridge plays the server: the id is its own
        )

    def _note_undeclared(self, chain: Chain, ex: Exchange, method: str, params: Any) -> None:
        """Note a question the client never declared it could answer (once per chain and kind)."""
        if chain.summary.mode is not Mode.PASSTHROUGH:
            return  # a bridge gates what it asks the client itself (-32021)
        declared = self._declared.get(chain.summary.id)
        where = "this request's clientCapabilities"
        if declared is None and ex.session:
            declared, where = self._session_caps.get(ex.session), "its initialize"
        if declared is None:
            return  # the declaration was not seen (a capture part, say): nothing to judge by
        needed = required_capability({"method": method, "params": params if isinstance(params, dict) else {}})
        if needed is None or has_capability(declared, needed):
            return
        note = (
            f"the server asked {method}, but the client declared no {needed} capability in {where}: "
            "a client may refuse it (-32601) or never answer"
        )
        if note not in chain.summary.notes:
            chain.summary.notes.append(note)
            self._ledger.changed(chain)

    def _expect_retry(self, chain: Chain, ex: Exchange, result: dict[str, Any], now: float) -> None:
        # from the request as sent: the recorded copy may be redacted or truncated
        signature = chain.signature or request_signature(chain.summary.method, {})
        caller = caller_of(ex.request_headers, ex.connection)
        since = now if chain.summary.mode is Mode.PASSTHROUGH else None  # a bridge's continuation expires
        self._retries.expect(chain.summary.id, signature, result, caller, since)


def _count(requests: Any) -> int:
    """How many questions an `input_required` result's `inputRequests` asks (none when it is no map)."""
    return len(requests) if isinstance(requests, dict) else 0


def declared_capabilities(method: str | None, params: dict[str, Any]) -> dict[str, Any] | None:
    """The client capabilities a request declares: an `initialize`'s, or a 2026-07-28 request's
    `_meta` `clientCapabilities`; None when it declares none."""
    caps = (
        params.get("capabilities")
        if method == "initialize"
        else request_meta(params).get(META_CLIENT_CAPABILITIES)
    )
    return caps if isinstance(caps, dict) else None
