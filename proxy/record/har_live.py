"""HAR entries of chains in a running proxy's store (the admin API's `/api/export.har`).

The store holds records, not observations: each record names its exchange (or a bridge's upstream
leg) and carries the request head on requests and the response head on the first message back, so
an exchange's entry is drafted from the records of every chain it carried, in time order. What no
record holds, each chain keeps beside its records as the exchange's facts (`ExchangeFacts`): when
the request came, when the response head went out and when the exchange closed (and how), the
request body's bytes, response bytes that carried no message, SSE events without a message, and the
earlier leg a leg serves. The entry takes its timings and sizes from those, as a capture's export
takes them from the observations, so both exports give the same traffic the same numbers. An
exchange whose facts a chain no longer kept (past its bound) is timed by its records, and is complete
once its chains have ended. Records were redacted when they were made, with the proxy's own redactor, so an
entry holds nothing the store does not.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from proxy.flows.events import ChainSummary, Channel, Direction, HttpInfo, MessageRecord, Side
from proxy.flows.exchanges import ExchangeFacts
from proxy.flows.store import Chain
from proxy.record.har import Carried, EntryDraft, client_url, render


class LiveDrafts:
    """HAR entries drafted chain by chain, then rendered one by one, so a caller can pause between
    any two steps (the admin API yields to the loop that serves MCP traffic)."""

    def __init__(self, *, host: str, upstream: str, run: str | None = None) -> None:
        self.host = host
        self.upstream = upstream
        self.run = run
        """The proxy's run tag, which every entry carries as a capture's export gives it."""
        self._drafts: dict[str, EntryDraft] = {}
        self._facts: dict[str, ExchangeFacts] = {}

    def add(self, chain: Chain) -> None:
        """Draft what this chain's records tell of the exchanges they travelled on."""
        summary = chain.summary
        self._facts.update(chain.exchanges)
        drafts = self._drafts
        for record in list(chain.messages):
            draft = drafts.get(record.exchange)
            if draft is None:
                draft = drafts[record.exchange] = _draft(
                    record, summary, host=self.host, upstream=self.upstream
                )
                draft.run = self.run
            _take(draft, record, summary, self.host)

    def entries(self) -> Iterator[dict[str, Any]]:
        """The entries of every exchange drafted, oldest first, each rendered as it is asked for."""
        for draft in self._drafts.values():
            draft.messages.sort(key=lambda m: m.t)
            facts = self._facts.get(draft.key)
            if facts is not None:
                _with_facts(draft, facts)
            else:
                draft.head_missing = UNKEPT_HEAD
                if all(s.ended is not None for s in draft.chains.values()):
                    draft.ended = _ended(draft)
        for draft in sorted(self._drafts.values(), key=lambda d: d.started):
            yield render(draft)


UNKEPT_HEAD = "its response head is unknown: none came, or the store no longer holds what would say"
"""What a leg without a response head says when no chain kept its facts (past their bound)."""

DROPPED_HEAD = "its response head came, but the store no longer holds the message that carried it"
"""What a leg without a response head says when one came and the leg has ended (the record of the
head, on its first message back or on its own at the end, was filed, then dropped past the bounds)."""

UNFILED_HEAD = "its response head came; the proxy files it with the leg's first message back, or at its end"
"""What an open leg without a response head says when one came: it waits to be filed."""


def _with_facts(draft: EntryDraft, facts: ExchangeFacts) -> None:
    """Time and size the draft as its exchange's facts tell (what its capture's observations say)."""
    if facts.started is not None:
        draft.started = facts.started
    if facts.head_at is not None:
        draft.head_at = facts.head_at
        draft.head_missing = DROPPED_HEAD if facts.ended is not None else UNFILED_HEAD
    draft.ended, draft.outcome, draft.trailers = facts.ended, facts.outcome, facts.trailers
    if draft.side == "client":
        draft.session = facts.session
    draft.body_size, draft.bytes_out, draft.related = facts.body_size, facts.bytes_out, facts.related
    draft.unread = facts.unread
    messages = draft.messages
    for n, (t, before, sse_id) in enumerate(facts.events):  # where each came among the messages
        event = Carried(t, Direction.TO_CLIENT, Channel.SSE, Side.BOTH.value, None, sse_id=sse_id)
        messages.insert(min(before + n, len(messages)), event)


def _ended(draft: EntryDraft) -> float:
    """When an ended exchange ended, as far as its records tell (its last message or response head):
    the chains' note of the exchange's close comes on top (a GET stream ends after its last event)."""
    times = [draft.started, *(m.t for m in draft.messages)]
    if draft.head_at is not None:
        times.append(draft.head_at)
    return max(times)


def _draft(record: MessageRecord, summary: ChainSummary, *, host: str, upstream: str) -> EntryDraft:
    upstream_side = record.side is Side.UPSTREAM
    method = "GET" if record.channel is Channel.GET_SSE else "POST"
    draft = EntryDraft(
        record.exchange,
        "upstream" if upstream_side else "client",
        record.ts,
        method,
        upstream if upstream_side else f"http://{host}/",
        client_era=summary.client_era,
        upstream_era=summary.upstream_era,
        mode=summary.mode.value,
        client_transport=summary.client_transport,
        session=None if upstream_side else summary.session,
    )
    return draft


def _take(draft: EntryDraft, record: MessageRecord, summary: ChainSummary, host: str) -> None:
    http: HttpInfo | None = record.http
    draft.started = min(draft.started, record.ts)
    if http is not None and http.method is not None and not draft.request_headers:
        draft.http_method = http.method
        draft.url = client_url(http.path or "/", http.headers, host)
        draft.request_headers = http.headers
    if http is not None and http.status is not None and draft.status is None:
        draft.head(record.ts, http.status, http.content_type, http.headers)
    if record.kind == "http" and record.body is None:  # a head that carried no body
        draft.chains.setdefault(summary.id, summary)
        return
    carried = Carried(
        record.ts, record.direction, record.channel, record.side.value, record.kind, record.body,
        record.jsonrpc_id, record.method, record.size, record.sse_id, record.note, summary.id,
        record.truncated,
    )  # fmt: skip
    draft.add(carried, summary)
