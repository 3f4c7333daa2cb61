"""The client's side of one exchange: what the pass-through relay and the bridges write to.

Every MCP connection is served by the lean front server (`front.py`); the relay and the bridge
drivers reach the client only through this small surface, so neither knows how the response is
framed (length, chunking, or the connection's close) nor which connection carries it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from proxy.flows.observations import CLIENT_CANCELLED, PROXY_STOPPING


class ClientGone(Exception):
    """The client's connection closed while the proxy was still answering.

    `outcome` is what the exchange records: the client left (`client_disconnected`), or the proxy
    cut the connection because it is stopping (`proxy_stopping`), which a write can find before the
    cut's own news arrives.
    """

    def __init__(self, detail: str, outcome: str = "client_disconnected") -> None:
        super().__init__(detail)
        self.outcome = outcome


def cut_outcome(cancel: BaseException) -> str:
    """The outcome of an exchange whose task was cancelled: the proxy's stop, the client cancelling
    the call it carried, or the client leaving.

    The front cancels with `PROXY_STOPPING` as the message when the proxy stops, and a channel
    client's shell with `CLIENT_CANCELLED` when its client cancels a call, so the relay and the
    bridges can tell those cuts from a client that left.
    """
    reason = cancel.args[0] if cancel.args else None
    return reason if reason in (PROXY_STOPPING, CLIENT_CANCELLED) else "client_disconnected"


def answer_headers(content_type: str | None, headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The head of a whole answer the proxy made (`ClientSide.respond`) as its observation records it:
    the headers the proxy chose (`Retry-After`, ...) and its `Content-Type`, as `respond` sends them.

    The framing headers the front adds to every response (`Content-Length`, `Date`, `Server`,
    `Connection`) are not the answer's own and are left out, as they are for a relayed head.
    """
    out = dict(headers)
    if content_type is not None:
        out["Content-Type"] = content_type
    return out


class ClientSide(Protocol):
    """What an exchange needs of the client's connection: the request as sent, and a response to write."""

    method: str
    path_qs: str
    """Path and query exactly as the client sent them (percent-encoding kept)."""
    raw_query: str
    headers: tuple[tuple[str, str], ...]
    transport: str
    """How the client reached the proxy (`http`, `sse`, `stdio`): shown with its chains."""
    connection: str
    """The client connection carrying the exchange, an id unique within the process and never reused
    (`k12`): what a client without credentials is told apart by."""

    @property
    def peer(self) -> str:
        """The client's address without its port ("" when unknown)."""

    def start_now(
        self,
        status: int,
        reason: str | None,
        headers: tuple[tuple[str, str], ...],
        length: int | None,
        first: bytes = b"",
        *,
        end: bool = False,
    ) -> None:
        """Begin a response; `length` None means a stream of unknown length. Raises ClientGone.

        `first` is the start of the body, sent in the same write as the head; `end` says it is the
        whole body, so a stream's end goes in that write too.
        """

    def send_whole(
        self, status: int, reason: str | None, headers: tuple[tuple[str, str], ...], body: bytes
    ) -> None:
        """A relayed response whose body is all here: head and body in one write."""

    async def write(self, chunk: bytes, *, end: bool = False) -> None:
        """Send body bytes (waits while the client reads slowly); `end` ends the body in the same
        write. Raises ClientGone."""

    async def finish(self) -> None:
        """End a started response cleanly. Raises ClientGone."""

    def respond(
        self, status: int, body: bytes, content_type: str | None, headers: tuple[tuple[str, str], ...]
    ) -> None:
        """Answer with a whole response the proxy made itself (it goes out when the exchange ends)."""

    def cut(self) -> None:
        """Break the connection off after what was written: the upstream cut the body short."""

    def close_after_answer(self) -> None:
        """End the connection once this exchange is answered (a refused stream's: left open, it would
        hold a connection slot for nothing)."""

    @property
    def started(self) -> bool:
        """A response head has gone out (or is committed to)."""

    def withdraw_head(self) -> bool:
        """Take back a head begun but held for its body's first bytes, unsent: True when nothing of the
        response went out, so the exchange can still be answered otherwise (`respond`)."""


class PromptSide(Protocol):
    """What a stream relayed from the upstream's reads (no task) asks of the client: writes that never
    wait, and a way to wait for the client once it reads too slowly."""

    def write_now(self, chunks: Iterable[bytes], *, end: bool = False) -> bool:
        """Send body chunks in one write, each framed as `write` frames one; `end` ends the body in the
        same write. True when the client reads too slowly to be sent more yet. Raises ClientGone."""

    def finish_now(self) -> None:
        """`finish`, at once. Raises ClientGone."""

    async def drain(self) -> None:
        """Wait until the client has read enough to be sent more. Raises ClientGone."""
