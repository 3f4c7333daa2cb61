"""HAR entries of chains in a running proxy's store (the admin API's `/api/export.har`).

The store holds records, not observations: each record names its exchange (or a bridge's upstream
leg) and carries the request head on requests and the response head on the first message back, so
an exchange's entry is drafted from the records of every chain it carried, in time order; the chains
note when, and how, each of those exchanges closed. What the records do not hold (bytes that carried
no message, the head of a POST that only answered a nested request) is left out or inferred: an
exchange whose chains have all ended is complete; one whose chain is still running is marked open.
Records were redacted when they were made, with the proxy's own redactor, so an entry holds nothing
the store does not.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from proxy.flows.events import ChainSummary, Channel, HttpInfo, MessageRecord, Side
from proxy.flows.store import Chain
from proxy.record.har import Carried, EntryDraft, client_url, render


class LiveDrafts:
    """HAR entries drafted chain by chain, then rendered one by one, so a caller can pause between
    any two steps (the admin API yields to the loop that serves MCP traffic)."""

    def __init__(self, *, host: str, upstream: str) -> None:
        self.host = host
        self.upstream = upstream
        self._drafts: dict[str, EntryDraft] = {}
        self._ends: dict[str, float] = {}
        self._outcomes: dict[str, str] = {}

    def add(self, chain: Chain) -> None:
        """Draft what this chain's records tell of the exchanges they travelled on."""
        summary = chain.summary
        self._ends.update(chain.exchange_ends)
        self._outcomes.update(chain.exchange_outcomes)
        drafts = self._drafts
        for record in list(chain.messages):
            draft = drafts.get(record.exchange)
            if draft is None:
                draft = drafts[record.exchange] = _draft(
                    record, summary, host=self.host, upstream=self.upstream
                )
            _take(draft, record, summary, self.host)

    def entries(self) -> Iterator[dict[str, Any]]:
        """The entries of every exchange drafted, oldest first, each rendered as it is asked for."""
        for draft in sorted(self._drafts.values(), key=lambda d: d.started):
            draft.messages.sort(key=lambda m: m.t)
            ended = self._ends.get(draft.key)
            if ended is not None or all(s.ended is not None for s in draft.chains.values()):
                draft.ended = max(_ended(draft), ended or 0.0)
                draft.outcome = self._outcomes.get(draft.key)
            yield render(draft)


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
    if record.kind == "http":  # a response head that carried no message
        draft.chains.setdefault(summary.id, summary)
        return
    carried = Carried(
        record.ts, record.direction, record.channel, record.side.value, record.kind, record.body,
        record.jsonrpc_id, record.method, record.size, record.sse_id, record.note, summary.id,
    )  # fmt: skip
    draft.add(carried, summary)
