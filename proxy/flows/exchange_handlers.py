"""How the chain builder takes an HTTP exchange from the client as it goes: its opening (which chain
a GET stream, a DELETE or a plain HTTP request opens or resumes), its response head, the bytes it
relays without a message, a body relayed unread, and a proxy that answers it itself.

Its close is `exchange_closing`; the messages it carries are `message_handlers`.
"""

from __future__ import annotations

from proxy.flows.answer_faults import content_type_problem
from proxy.flows.builder_state import BuilderState, note_counted
from proxy.flows.events import DECIDED, Direction, Mode
from proxy.flows.exchanges import Exchange, ExchangeFacts
from proxy.flows.records import Head, http_side
from proxy.flows.resumes import SESSION_GONE_STATUS, ends_session

# Enum members read through their class cost about ten times a module constant's on Python 3.11
# (the enum metaclass's attribute hook): `response_head` runs for every exchange.
_PASSTHROUGH = Mode.PASSTHROUGH
_BODILESS = (202, 204)
"""Statuses of an answer that carries no body, so no Content-Type."""
_HTTP_BOTH = ("http", "http")

NOT_INSPECTED = "response not inspected: "
"""How the note on a chain whose response body the proxy relayed unread begins (the reason follows)."""


class ExchangeHandlers(BuilderState):
    """The builder's handlers of an exchange's opening, heads and unread bytes."""

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
        transports: tuple[str, str] = ("http", "http"),
        connection: str | None = None,
    ) -> str | None:
        """Start tracking one HTTP exchange from the client (before any message is seen).

        `transports`: how the client reached the proxy, and how the proxy reached the upstream. A GET
        stream or a DELETE carries no message to hold its request head, so its chain gets an `http`
        record of it now; so does a plain HTTP request (to a path other than the MCP endpoint), whose
        chain is named by its method and path. Returns that chain (else None).
        """
        ex = self._exchanges[exchange_id] = Exchange(
            id=exchange_id,
            http_method=http_method,
            path=path,
            started=self._clock(),
            session=session,
            client_era=client_era,
            upstream_era=upstream_era,
            mode=mode,
            request_headers=headers,
            client_transport=transports[0],
            upstream_transport=transports[1],
            connection=connection,
        )
        if self._keeps_records:
            token = self._redactor.token(session) if session else None
            ex.facts = ExchangeFacts(started=ex.started, body_size=body_size, session=token)
        if self.endpoint.is_plain(path, *transports):
            ex.plain = True
            self._ledger.open(
                ex, method=http_method, name=self._redactor.target(path.split("?", 1)[0]), ident=None
            )
        elif http_method == "GET":
            if not self._resume(ex):
                self._ledger.open(ex, method="GET stream", name=None, ident=None)
        elif http_method == "DELETE":
            self._ledger.open(ex, method="DELETE session", name=None, ident=None)
        else:
            return None
        return self._record_request_head(ex)

    def bytes_out(self, exchange_id: str, size: int) -> None:
        """Count response bytes that carried no message in the exchange's facts; its chain counts them
        only once the body is known to have gone by unread (`not_inspected`): otherwise they are an
        SSE stream's comments and priming events, and a chain counts message bytes."""
        ex = self._exchanges.get(exchange_id)
        if ex is None:
            return
        if ex.facts is not None:
            ex.facts.bytes_out += size
        if ex.not_inspected is not None:
            self._relayed_unread(ex, size)
        else:
            ex.unmessaged += size

    def not_inspected(self, exchange_id: str, reason: str) -> None:
        """Note on the exchange's chain that its response went by unread: a request it carried that
        no message answered then ends `incomplete` (the answer may be in what was not read), and the
        bytes relayed without a message count in its `bytes_to_client`."""
        ex = self._exchanges.get(exchange_id)
        if ex is not None and ex.not_inspected is None:
            ex.not_inspected = reason
            if ex.facts is not None:
                ex.facts.unread = reason
            unread, ex.unmessaged = ex.unmessaged, 0
            self._relayed_unread(ex, unread)
            self._note(exchange_id, None, f"{NOT_INSPECTED}{reason}")

    def _relayed_unread(self, ex: Exchange, size: int) -> None:
        """Count bytes of a body that went to the client unread in the exchange's main chain: no
        message's size holds them, and the chain must say what was relayed."""
        chain = self.store.peek(ex.main_chain() or "") if size else None
        if chain is not None:
            chain.summary.bytes_to_client += size
            self._ledger.changed(chain)

    def answered_by_proxy(self, exchange_id: str) -> None:
        """The proxy answers the exchange's requests itself: the chains they began, and any it begins
        from now, took no time upstream (a retry that continues an earlier chain keeps its rounds')."""
        ex = self._exchanges.get(exchange_id)
        if ex is None:
            return
        ex.answered_by_proxy = True
        for ident, chain_id in ex.requests.items():
            chain = self.store.get(chain_id)
            if chain is not None and ident not in ex.claims:
                chain.answered_by_proxy = True

    def _resume(self, ex: Exchange) -> bool:
        """A GET with Last-Event-ID continues the stream of the chain that event belonged to."""
        last = next((v for k, v in ex.request_headers.items() if k.lower() == "last-event-id"), None)
        chain_id = self._event_chains.get((ex.session, last)) if last else None
        chain = self.store.peek(chain_id) if chain_id else None
        if chain is None:
            return False
        ex.chains.append(chain.summary.id)
        ident = chain.summary.jsonrpc_id
        if ident is not None and chain.summary.status not in DECIDED:
            ex.requests[ident] = chain.summary.id
            self._resumes.take(ex.session, ident)
        ex.resumed_with = last
        return True

    def response_head(
        self, exchange_id: str, *, status: int, content_type: str | None, headers: dict[str, str]
    ) -> None:
        """Remember the HTTP head of the response; it is attached to the first message back.

        A second head before any message went back replaces the first, in the chain's status too: the
        first was the server's, taken and held for its body, and the proxy answered instead (a 502 for
        a server that closed before its body).
        """
        ex = self._exchanges.get(exchange_id)
        if ex is None:
            return
        replaced = ex.head.status if ex.head is not None and not ex.head_recorded else None
        ex.head = self._records.response_head(status, content_type, headers)
        ex.head_at = self._clock()
        if ex.facts is not None:
            ex.facts.head_at = ex.head_at
        ex.minted_session = next((v for k, v in headers.items() if k.lower() == "mcp-session-id"), None)
        if status == SESSION_GONE_STATUS and ex.session:
            self._session_gone(ex)
        if ex.session and not ex.plain and ends_session(ex.http_method == "DELETE", status):
            self._end_session(ex.session)
        for chain_id in ex.chains:
            chain = self.store.peek(chain_id)
            if chain is not None and chain.summary.http_status in (None, replaced):
                chain.summary.http_status = status
        if ex.resumed_with is not None:
            self._resumed(ex, ex.resumed_with, status)
        if ex.requests and 200 <= status < 300 and status not in _BODILESS and ex.mode is _PASSTHROUGH:
            self._check_content_type(ex, content_type, headers)

    def _check_content_type(self, ex: Exchange, content_type: str | None, headers: dict[str, str]) -> None:
        """Note an answer to requests whose Content-Type no Streamable HTTP client takes (the relayed
        head of the server's own answer: a bridge writes its own)."""
        if ex.http_method != "POST" or ex.plain or (ex.client_transport, ex.upstream_transport) != _HTTP_BOTH:
            return
        problem = content_type_problem(content_type, headers)
        if problem is not None:
            self._note(ex.id, None, self._redactor.scrub(problem))

    def _session_gone(self, ex: Exchange) -> None:
        """A 404 to a request of a relayed session: the server forgot it (it restarted, or let it
        expire), announced once however many requests it refuses; a 404 to the client's DELETE is the
        session's end, announced when that exchange closes."""
        session = ex.session
        if session is None or ex.mode is not Mode.PASSTHROUGH or ex.http_method == "DELETE" or ex.plain:
            return
        if session in self._sessions_gone:
            return
        self._sessions_gone[session] = None
        self._ledger.session_event(session, "expired")

    def _resumed(self, ex: Exchange, last: str, status: int) -> None:
        """Tell the chain a GET resumed how its resume went: the stream goes on, or the server refused."""
        if status < 400:
            note = f"stream resumed with Last-Event-ID {last}"
        else:
            note = f"stream not resumed with Last-Event-ID {last}: the resume was answered HTTP {status}"
        for chain_id in ex.chains:
            chain = self.store.peek(chain_id)
            if chain is not None:
                note_counted(chain.summary.notes, note)
                self._ledger.changed(chain)

    def _record_request_head(self, ex: Exchange) -> str | None:
        """File the request head of a bodiless request (a GET stream, a DELETE) in the chain it opened
        or resumed, as every request's head is: no message of its own carries it."""
        chain = self.store.peek(ex.chains[-1]) if ex.chains else None
        if chain is None:
            return None
        ex.request_recorded = True
        if not self._keeps_records:
            return self._count(chain, Direction.TO_SERVER, 0, False, Head.REQUEST)
        head = self._records.request_head(ex.http_method, ex.path, ex.request_headers)
        record = self._records.http_only(
            chain, ex.id, head, side=http_side(ex.mode), direction=Direction.TO_SERVER
        )
        self._file(chain, record, invalid=False)
        return chain.summary.id
