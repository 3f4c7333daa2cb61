"""A capture's HAR entries, drafted from its observations as a reader builds them, written as each ends.

`HarFromCapture` listens to the `ObservationReplayer` it makes (`on_applied`): an exchange's opening
line starts its draft, each message joins it with the chain the builder filed it in, and its closing
line ends it, so the entry is written then and forgotten. A bridge's upstream leg is drafted the same
way from its first message (or, for a leg that sends none, a session's GET stream or DELETE, its
`leg_opened`) to its `leg_closed`, with the response head its `leg_head` line gave. Each entry names
the run of the proxy it went through (the latest `proxy_info`), since ids start again at a restart.
Memory holds the exchanges open at one time, not the file. An entry needs only which chain each
message joined and the chains' headlines (kept current in the store), so the replayer builds no
message records and announces no headline changes (`lean`). Without `lean` the replayer builds
everything a live watcher gets, and the drafts learn the chains and their ends from its events
instead: the same entries, by another road (tests hold them equal).

A filter that judges chains by their end (status, free text) holds an ended exchange until every
chain it carried has ended too (a client's answer to a nested request closes before its call does);
at most `max_held` such entries wait, past which the oldest is judged as things stand. An entry is
kept when any of its chains passes the filter; one that joined no chain, only when nothing is filtered.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Final

from proxy.flows.events import (
    BRIDGE_ERAS,
    UNFINISHED,
    ChainChanged,
    ChainSummary,
    Channel,
    Direction,
    FlowEvent,
    MessageRecorded,
    ProxyInfo,
    Side,
)
from proxy.flows.filters import ChainFilter
from proxy.flows.observations import (
    BodyNotInspected,
    BytesOut,
    EventIdSeen,
    ExchangeClosed,
    ExchangeOpened,
    InvalidBody,
    LegClosed,
    LegHeadSeen,
    LegLinked,
    LegMessageSeen,
    LegOpened,
    MessageSeen,
    Observation,
    ResponseHeadSeen,
)
from proxy.flows.redact import CutBody
from proxy.flows.store import ChainStore
from proxy.record.capture import minor_version
from proxy.record.har import (
    DEFAULT_ENTRY_BYTES,
    Carried,
    EntryDraft,
    client_url,
    is_event_stream,
    render,
    upstream_url,
)
from proxy.record.observations import ObservationReplayer
from proxy.record.run_ends import OPEN_AT_RUN_END

LEG_HEADS_SINCE: Final = 5
"""The capture format minor that first records the upstream's response head to a leg (`leg_head`)."""

DEFAULT_MAX_HELD: Final = 10_000
"""Ended entries waiting for their chains to end before a filter judges them."""

_UPSTREAM: Final = Side.UPSTREAM


class HarFromCapture:
    """Drafts the HAR entries of a capture's observations and hands each to `write` as it ends."""

    def __init__(
        self,
        write: Callable[[dict[str, Any]], None],
        store: ChainStore,
        *,
        keep: ChainFilter | None = None,
        entry_bytes: int = DEFAULT_ENTRY_BYTES,
        max_held: int = DEFAULT_MAX_HELD,
        lean: bool = True,
    ) -> None:
        self._write = write
        self._store = store
        self._keep = keep or ChainFilter()
        self._entry_bytes = entry_bytes
        self._max_held = max_held
        self._open: dict[str, EntryDraft] = {}
        self._leg_heads: dict[str, LegHeadSeen] = {}
        """The head of a leg with no entry yet (a GET stream's comes before its first message)."""
        self._held: deque[EntryDraft] = deque()
        self._host = "localhost"
        self._upstream = "http://upstream/"
        self._run: str | None = None
        self._head_missing: str | None = None
        """What a leg of the file being read without a head says (its format records none)."""
        self.written = 0
        self._lean = lean
        self.replayer = ObservationReplayer(
            store=store, on_applied=self.applied, headlines=not lean, records=not lean
        )
        """The replayer to read the capture with: it hands each observation built to `applied`."""
        self._builder = self.replayer.builder
        self._finished = 0

    def proxy_info(self, info: ProxyInfo) -> None:
        """Learn where the proxy listened and what it proxied (entries' URLs), once the replayer read
        the line: when it began another run, that run's open entries end (the next run numbers its
        exchanges from x1 again)."""
        if self.replayer.run_changed:
            self._close_all(OPEN_AT_RUN_END)
        self._host = info.listen.partition("://")[2].rstrip("/") or self._host
        self._upstream = upstream_url(info.upstream)
        self._run = info.run or self._run

    def file_header(self, header: dict[str, Any]) -> None:
        """Learn the format of the file about to be read: one before 1.5 records no leg's response
        head, so a leg without one is unknown there, not one that got none."""
        minor = minor_version(header)
        self._head_missing = None
        if minor is not None and minor < LEG_HEADS_SINCE:
            self._head_missing = (
                f"its response head is unknown: a capture of format {header['version']} records none "
                "(1.5 and later do)"
            )

    def applied(self, obs: Observation, events: list[FlowEvent], chain: str | None) -> None:
        """Take one observation, as the replayer built it, with the chain it filed a message in."""
        if not self._lean:
            chain = next((e.chain_id for e in events if isinstance(e, MessageRecorded)), None)
        match obs:
            case MessageSeen():
                draft = self._open.get(obs.exchange)
                if draft is not None:
                    msg = obs.msg
                    carried = Carried(
                        obs.t, obs.direction, obs.channel, obs.side, msg.kind, msg.raw,
                        msg.id, msg.method, obs.size, obs.sse_id, obs.note or msg.problem, chain,
                        isinstance(msg.raw, CutBody),
                    )  # fmt: skip
                    if draft.plain:  # a plain HTTP body: no JSON-RPC meant
                        carried.kind, carried.jsonrpc_id, carried.method, carried.note = (
                            "http",
                            None,
                            None,
                            None,
                        )
                    self._note_chain(draft, chain)
                    if obs.side is _UPSTREAM and obs.direction is Direction.TO_SERVER and msg.id is not None:
                        draft.sent_in_place(carried)
                    draft.add(carried)
            case ExchangeOpened():
                self._open[obs.exchange] = EntryDraft(
                    obs.exchange,
                    "client",
                    obs.t,
                    obs.http_method,
                    client_url(obs.path, obs.headers, self._host),
                    request_headers=obs.headers,
                    body_size=obs.body_size,
                    session=obs.session,
                    client_era=obs.client_era,
                    upstream_era=obs.upstream_era,
                    mode=obs.mode.value,
                    client_transport=obs.client_transport,
                    run=self._run,
                    limit=self._entry_bytes,
                    plain=self._builder.endpoint.is_plain(
                        obs.path, obs.client_transport, obs.upstream_transport
                    ),
                )
                self._note_chain(self._open[obs.exchange], chain)  # a GET's or DELETE's chain
            case ResponseHeadSeen():
                if (draft := self._open.get(obs.exchange)) is not None:
                    draft.head(obs.t, obs.status, obs.content_type, obs.headers)
            case ExchangeClosed():
                if (draft := self._open.pop(obs.exchange, None)) is not None:
                    self._note_chain(draft, chain)
                    draft.ended, draft.outcome, draft.trailers = obs.t, obs.outcome, obs.trailers
                    self._ended(draft)
            case BytesOut():
                if (draft := self._open.get(obs.exchange)) is not None:
                    draft.bytes_out += obs.size
            case BodyNotInspected():
                if (draft := self._open.get(obs.exchange)) is not None:
                    draft.unread = draft.unread or obs.reason
            case EventIdSeen():
                if (draft := self._open.get(obs.exchange)) is not None:
                    event = Carried(obs.t, Direction.TO_CLIENT, Channel.SSE, Side.BOTH.value, None)
                    event.sse_id = obs.sse_id
                    draft.add(event)
            case InvalidBody():
                if (draft := self._open.get(obs.exchange)) is not None:
                    draft.invalid_body = text = obs.body.decode("utf-8", "replace")
                    self._note_chain(draft, chain)
                    invalid = Carried(
                        obs.t, Direction.TO_SERVER, Channel.POST, Side.BOTH.value, "invalid", text,
                        size=obs.size, note=obs.problem, chain=chain,
                    )  # fmt: skip
                    if draft.plain:  # a form or other plain HTTP body, as it is
                        invalid.kind, invalid.note = "http", None
                    draft.add(invalid)
            case LegMessageSeen():
                self._leg_message(obs, chain)
            case LegOpened():
                self._leg_opened(obs)
            case LegHeadSeen():
                if (draft := self._open.get(obs.leg)) is not None:
                    draft.head(obs.t, obs.status, obs.content_type, obs.headers)
                elif is_event_stream(obs.content_type):  # before 1.7: a head before any message is a GET's
                    self._leg(obs.leg, obs.t, None, "GET").head(
                        obs.t, obs.status, obs.content_type, obs.headers
                    )
                else:
                    self._leg_heads[obs.leg] = obs
            case LegLinked():
                self._leg(obs.leg, obs.t, None).related = obs.related
            case LegClosed():
                self._leg_heads.pop(obs.leg, None)
                if (draft := self._open.pop(obs.leg, None)) is not None:
                    draft.ended, draft.outcome = obs.t, obs.outcome
                    self._ended(draft)
            case _:
                pass
        if self._chain_ended(events) and self._held:  # held entries may be judged now
            self._release_held()

    def finish(self, open_note: str | None = None) -> None:
        """Write what is left: entries waiting on their chains, then exchanges still open (marked so,
        `open_note` saying why they have no end, when the capture tells)."""
        while self._held:
            self._judge(self._held.popleft())
        self._close_all(open_note)

    def _close_all(self, open_note: str | None) -> None:
        """Write every exchange and leg still open (rendered as such), oldest first, and forget them."""
        for draft in sorted(self._open.values(), key=lambda d: d.started):
            draft.open_note = open_note
            self._judge(draft)
        self._open.clear()
        self._leg_heads.clear()

    # -- internals ----------------------------------------------------------------------------

    def _chain_ended(self, events: list[FlowEvent]) -> bool:
        if not self._lean:
            return any(isinstance(e, ChainChanged) and e.chain.ended is not None for e in events)
        finished = self._builder.finished
        ended, self._finished = finished != self._finished, finished
        return ended

    def _summary(self, chain_id: str | None) -> ChainSummary | None:
        chain = self._store.peek(chain_id) if chain_id is not None else None
        return chain.summary if chain is not None else None

    def _note_chain(self, draft: EntryDraft, chain_id: str | None) -> None:
        """File the chain in the draft with its headline, looked up once per entry and chain."""
        if chain_id is not None and chain_id not in draft.chains:
            summary = self._summary(chain_id)
            if summary is not None:
                draft.chains[chain_id] = summary

    def _leg(self, leg: str, t: float, first: LegMessageSeen | None, method: str = "POST") -> EntryDraft:
        draft = self._open.get(leg)
        if draft is None:
            if first is not None and first.channel is Channel.GET_SSE:
                method = "GET"
            draft = self._open[leg] = EntryDraft(
                leg, "upstream", t, method, self._upstream, run=self._run, limit=self._entry_bytes
            )
            draft.head_missing = self._head_missing
            head = self._leg_heads.pop(leg, None)
            if head is not None:
                draft.head(head.t, head.status, head.content_type, head.headers)
        return draft

    def _leg_opened(self, obs: LegOpened) -> None:
        """A leg that sends no message (a GET stream, a DELETE): an entry from its request on, with
        its bridge's eras and mode, and its client's transport (the exchange it serves says, while it is
        open; else the line does, from 1.14)."""
        draft = self._leg(obs.leg, obs.t, None, obs.http_method)
        draft.client_era, draft.upstream_era = BRIDGE_ERAS.get(obs.mode, ("unknown", "unknown"))
        draft.mode = obs.mode.value
        served = self._open.get(obs.exchange)
        draft.client_transport = served.client_transport if served is not None else obs.client_transport

    def _leg_message(self, obs: LegMessageSeen, chain: str | None) -> None:
        draft = self._leg(obs.leg, obs.t, obs)
        msg = obs.msg
        carried = Carried(
            obs.t, obs.direction, obs.channel, Side.UPSTREAM, msg.kind, msg.raw,
            msg.id, msg.method, obs.size, None, msg.problem, chain, isinstance(msg.raw, CutBody),
        )  # fmt: skip
        if not draft.chains and (summary := self._summary(chain)) is not None:
            # a leg has the eras and mode of the chain it serves
            draft.client_era, draft.upstream_era, draft.mode, draft.client_transport = (
                summary.client_era,
                summary.upstream_era,
                summary.mode.value,
                summary.client_transport,
            )
        self._note_chain(draft, chain)
        draft.add(carried)

    def _ended(self, draft: EntryDraft) -> None:
        keep = self._keep
        if keep.empty or not keep.needs_end or _all_ended(draft):
            self._judge(draft)
            return
        self._held.append(draft)
        if len(self._held) > self._max_held:
            self._judge(self._held.popleft())

    def _release_held(self) -> None:
        waiting = len(self._held)
        for _ in range(waiting):
            draft = self._held.popleft()
            if _all_ended(draft):
                self._judge(draft)
            else:
                self._held.append(draft)

    def _judge(self, draft: EntryDraft) -> None:
        keep = self._keep
        if keep.empty or any(self._kept(chain_id, summary) for chain_id, summary in draft.chains.items()):
            self._write(render(draft))
            self.written += 1

    def _kept(self, chain_id: str, summary: ChainSummary) -> bool:
        """The filter's verdict on one chain: on its stored messages when the query searches bodies
        (and the store still holds it), else on its headline."""
        chain = self._store.peek(chain_id) if self._keep.needs_bodies else None
        return self._keep.keeps(chain) if chain is not None else self._keep(summary)


def _all_ended(draft: EntryDraft) -> bool:
    return all(
        summary.ended is not None or summary.status not in UNFINISHED for summary in draft.chains.values()
    )
