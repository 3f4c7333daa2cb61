"""The client's side of one pass-through exchange, whichever HTTP server carries it.

The pass-through relay talks to the client through this small surface, so the same relay serves a
connection held by the lean front server (`front.py`) and one held by aiohttp (connections handed over
to the bridges' server keep being served there, pass-through requests included).
"""

from __future__ import annotations

from typing import Protocol

import aiohttp
from aiohttp import web

from proxy import SERVER_SOFTWARE

_GONE = (ConnectionResetError, aiohttp.ClientConnectionResetError, ConnectionError)


class ClientGone(Exception):
    """The client's connection closed while the proxy was still answering."""


class ClientSide(Protocol):
    """What the relay needs of the client's connection: the request as sent, and a response to write."""

    method: str
    path_qs: str
    """Path and query exactly as the client sent them (percent-encoding kept)."""
    raw_query: str
    headers: tuple[tuple[str, str], ...]

    async def start(
        self, status: int, reason: str | None, headers: tuple[tuple[str, str], ...], length: int | None
    ) -> None:
        """Begin a relayed response; `length` None means a stream of unknown length. Raises ClientGone."""

    async def write(self, chunk: bytes) -> None:
        """Relay body bytes (waits while the client reads slowly). Raises ClientGone."""

    async def finish(self) -> None:
        """End a started response cleanly. Raises ClientGone."""

    def respond(
        self, status: int, body: bytes, content_type: str | None, headers: tuple[tuple[str, str], ...]
    ) -> None:
        """Answer with a whole response the proxy made itself."""

    def cut(self) -> None:
        """Break the connection off after what was written: the upstream cut the body short."""

    @property
    def started(self) -> bool:
        """A relayed response head has gone out (or is committed to)."""


class AiohttpSide:
    """The client side of an exchange on a connection aiohttp serves."""

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.method = request.method
        self.path_qs = request.rel_url.raw_path_qs
        self.raw_query = request.rel_url.raw_query_string
        self.headers = tuple(request.headers.items())
        self.response: web.StreamResponse | None = None

    async def start(
        self, status: int, reason: str | None, headers: tuple[tuple[str, str], ...], length: int | None
    ) -> None:
        kind = web.StreamResponse if length is None else _HeadWithBody
        response = kind(status=status, reason=reason)
        for name, value in headers:
            response.headers.add(name, value)
        if length is not None:
            response.content_length = length
        self.response = response
        try:
            await response.prepare(self.request)
        except _GONE as exc:
            raise ClientGone(str(exc)) from None

    async def write(self, chunk: bytes) -> None:
        assert self.response is not None
        try:
            await self.response.write(chunk)
        except _GONE as exc:
            raise ClientGone(str(exc)) from None

    async def finish(self) -> None:
        if self.response is not None and self.response.prepared:
            try:
                await self.response.write_eof()
            except _GONE as exc:
                raise ClientGone(str(exc)) from None

    def respond(
        self, status: int, body: bytes, content_type: str | None, headers: tuple[tuple[str, str], ...]
    ) -> None:
        response = web.Response(status=status, body=body, content_type=content_type)
        response.headers["Server"] = SERVER_SOFTWARE  # an answer the proxy made names the proxy
        for name, value in headers:
            response.headers.add(name, value)
        self.response = response

    def cut(self) -> None:
        transport = self.request.transport
        if transport is not None:
            transport.close()

    @property
    def started(self) -> bool:
        return self.response is not None and self.response.prepared

    def final(self) -> web.StreamResponse:
        """What the aiohttp handler returns."""
        return self.response if self.response is not None else web.Response(status=500)


class _HeadWithBody(web.StreamResponse):
    """A relayed body of known length: its head goes out with the first body bytes, in one write.

    aiohttp sends a StreamResponse's head at `prepare` (right for SSE, whose first event may be long
    coming), which costs a body of known length a second write(2) and TCP segment per exchange.
    """

    _send_headers_immediately = False  # aiohttp's own switch (web.Response sets it the same way)
