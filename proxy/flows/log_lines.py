"""The round-trip log's lines as plain data: an exchange's line when it closes (`ExchangeSummary`) and
a server's question the moment it goes (`ServerAsked`), each with the fields it is logged with.

`proxy.flows.tally` makes them from the observations, already redacted; the transport logs them.
Nothing here reads observations or logs.
"""

from __future__ import annotations

from typing import Any

from proxy.flows.events import Mode
from proxy.wire.jsonrpc import RequestId
from proxy.wire.values import value


@value
class ServerAsked:
    """The client was asked something on an open exchange: what rides on it now waits for its answer.

    In flight (a legacy server's request on the call's stream: `asked` is its JSON-RPC id), or as an
    `input_required` answer a 2026-07-28 server gave in pass-through (`asked` is the input key; the
    bridges log their rounds themselves).
    """

    exchange: str
    session: str | None
    """Redacted, as the round-trip line shows it."""
    carried: str
    """What the exchange carried (`tools/call ask_name`, `GET stream`): what is waiting."""
    ids: tuple[RequestId, ...]
    """The JSON-RPC ids of the client's requests on the exchange."""
    method: str
    asked: RequestId
    mode: Mode
    how: str = "in flight"
    """`in flight` or `input_required`."""
    ids_more: int = 0
    """Ids of the client's requests past those `ids` lists (`IDS_BYTES`)."""

    def log_fields(self) -> dict[str, Any]:
        """The fields of its log line (already redacted)."""
        fields = {
            "mode": str(self.mode),
            "exchange": self.exchange,
            "session": self.session,
            "carried": self.carried,
            "ids": list(self.ids),
            "asks": self.method,
            "asked": self.asked,
            "how": self.how,
        }
        if self.ids_more:  # only on a batch with more ids than a line lists
            fields["ids_more"] = self.ids_more
        return fields


@value
class ExchangeSummary:
    """The round-trip log line of one HTTP exchange, as plain data for the transport to log."""

    exchange: str
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
    """How the exchange ended when it did not end as meant (`client_disconnected` before its
    answer, `upstream_timeout`, ...), else None: the judgement every output shares (HAR, console)."""
    carried: str = ""
    """What the exchange carried, named for a person: `tools/call add`, `result of elicitation/create`,
    `notifications/initialized`, `GET stream`."""
    trouble: str | None = None
    """The outcome when something went wrong (None for a clean end, and for a stream the client or
    the session's deletion ended, which is how streams end)."""
    fault: str | None = None
    """The faults the proxy injected into the exchange's messages (`delay 200 ms; drop`), if any."""
    client_transport: str = "http"
    """How the client reached the proxy: `http`, `sse` or `stdio`."""
    upstream_transport: str = "http"
    """How the proxy reached the upstream: `http`, `sse` or `stdio`."""
    intercept: str | None = None
    """What intercepts did to its messages (`held 3.2 s, forwarded edited by api`), if any."""
    end: str | None = None
    """How an exchange that ended as meant was closed, when something closed it (`client_disconnected`:
    the client hung up once answered; `session_deleted`; `cancelled`: the client cancelled its call, a
    2026-07-28 client by closing its stream before the answer):
    a fact for the JSON log, no trouble."""
    not_inspected: str | None = None
    """Why its response body, or the rest of it, was relayed unread (`max_inspected_bytes`), if it was:
    a request it carried may have been answered there, so its missing answer is no trouble."""
    path: str | None = None
    """The request target of a plain HTTP exchange (a path other than the MCP endpoint: OAuth's
    `/token`, say), query credentials masked; None for the endpoint's exchanges."""
    batch: tuple[str, ...] | None = None
    """Each message of a JSON-RPC batch named (the first `BATCH_TOLD`, within `BATCH_BYTES`, then
    `+N more`), None for a single message."""
    ids_more: int = 0
    """Request ids past those `jsonrpc_ids` lists (`IDS_BYTES`): only a large batch has any."""

    @property
    def level(self) -> str:
        """The level of its log line: `warning` when something went wrong (`trouble`), else `info`."""
        return "info" if self.trouble is None else "warning"

    def log_fields(self, mode: str) -> dict[str, Any]:
        """The fields of the round-trip log line (already redacted), for an exchange served in `mode`."""
        fields = {
            "mode": mode,
            "carried": self.carried,
            "trouble": self.trouble,
            "exchange": self.exchange,
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
            "client": self.client_transport,
            "upstream": self.upstream_transport,
        }
        if self.fault is not None:  # only on an exchange a fault rule acted on
            fields["fault"] = self.fault
        if self.intercept is not None:  # only on an exchange an intercept rule picked
            fields["intercept"] = self.intercept
        if self.end is not None:
            fields["end"] = self.end
        if self.not_inspected is not None:  # only on an exchange whose body went by unread
            fields["not_inspected"] = self.not_inspected
        if self.path is not None:  # only on a plain HTTP exchange
            fields["path"] = self.path
        if self.batch is not None:  # only on a JSON-RPC batch
            fields["batch"] = list(self.batch)
        if self.ids_more:  # only on a batch with more ids than a line lists
            fields["ids_more"] = self.ids_more
        return fields
