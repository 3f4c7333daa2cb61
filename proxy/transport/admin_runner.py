"""The admin API's aiohttp runner: requests aiohttp's parser refuses are answered in JSON too.

A request whose URL or a header line passes 8190 bytes, or whose head is not HTTP/1.1, is refused by
aiohttp's parser before the application or any middleware sees it. aiohttp then answers in plain
text, quoting the start of the line (a URL's query may hold a credential), and logs a traceback for
each one. aiohttp has no public hook for that answer, so this runner's server makes request handlers
whose `handle_error` answers the admin API's error shape (`{"error": "bad_request", "message": ...}`)
and records the refusal with the others (`proxy.transport.admin_refusals`, why `unreadable`: one
line a second, never the line itself). A fault of the admin API's own (500) is still logged by
aiohttp with its traceback, and answered as JSON.

It leans on aiohttp's server internals (`AppRunner._make_server`, `Server` making its
`RequestHandler`s and its `_loop` and `_kwargs`), the same throughout aiohttp 3; the admin API's
tests pin the answer.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong

from proxy.transport.admin_refusals import AdminRefusals


class AdminRunner(web.AppRunner):
    """An `AppRunner` whose server answers the requests aiohttp cannot read in the admin API's JSON."""

    def __init__(self, app: web.Application, refusals: AdminRefusals, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._refusals = refusals

    async def _make_server(self) -> web.Server:
        made = await super()._make_server()
        return _JsonErrorServer(made, self._refusals)


class _JsonErrorServer(web.Server):
    """The server aiohttp made for the admin app, making `_JsonErrorHandler`s instead."""

    def __init__(self, made: web.Server, refusals: AdminRefusals) -> None:
        super().__init__(
            made.request_handler,
            request_factory=made.request_factory,
            handler_cancellation=made.handler_cancellation,
            loop=made._loop,
            **made._kwargs,
        )
        self._refusals = refusals

    def __call__(self) -> web.RequestHandler:
        return _JsonErrorHandler(self, self._refusals, loop=self._loop, **self._kwargs)


class _JsonErrorHandler(web.RequestHandler):
    """aiohttp's connection handler, answering its own errors as the admin API answers its."""

    def __init__(self, manager: web.Server, refusals: AdminRefusals, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._refusals = refusals

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """A JSON answer, its connection closed: `bad_request` for a request the parser refused (logged
        as the admin API's refusals are), `internal_server_error` for a fault (logged by aiohttp)."""
        if status < 500 and isinstance(exc, HttpProcessingError):
            if request.writer.output_size > 0:
                raise ConnectionError("a response was already sent: no room for the error")
            said = self._unreadable(exc)
            self._refusals.unreadable_request(request, status, said)
            body = {"error": "bad_request", "message": said}
        else:
            super().handle_error(request, status, exc, message)  # logs the fault with its traceback
            body = {"error": "internal_server_error", "message": "the admin API failed; the proxy logged why"}
        answer = web.Response(body=orjson.dumps(body), status=status, content_type="application/json")
        answer.force_close()
        return answer

    def _unreadable(self, exc: HttpProcessingError) -> str:
        """What the client sent wrong, never quoting it (aiohttp's own message quotes the line)."""
        if isinstance(exc, LineTooLong):
            return (
                f"the request line (its URL) or a header line is longer than the {self.max_line_size} "
                "bytes the admin API reads: send fewer or shorter query parameters"
            )
        return f"the request is not HTTP/1.1 the admin API can read ({type(exc).__name__})"
