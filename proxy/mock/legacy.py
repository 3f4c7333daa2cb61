"""The mock server of a legacy capture: `initialize`, sessions, and in-flight requests on SSE.

A recorded operation with rounds answers on an SSE stream: each round's questions go out as
server->client requests with ids of the mock's own, the client's POSTed answers are taken (202) and
compared with the recorded ones, and once a round is answered the next goes out; the recorded result
ends the stream. Without rounds the answer is one JSON body. The session id is minted here (the
recorded one was redacted); when the recorded server minted sessions, every later request must carry
one the mock gave and has not seen ended, as that server asked (400 without one, 404 for one it does
not know), so a client that loses its session fails here as it would there. A capture of a server
that gave no session is served to whoever reaches the mock.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
from collections import OrderedDict
from typing import Any, Final

from aiohttp import web

from proxy.logs import get_logger
from proxy.mock.backend import (
    INVALID_REQUEST,
    PATH,
    SERVER_INFO,
    MockServer,
    check_answer,
    cut_answer,
    error,
    inferred_capabilities,
    json_response,
    played_notes,
    read_message,
    reply,
    send_event,
    start_stream,
)
from proxy.record.mock_table import Miss, Operation, Round
from proxy.wire.versions import HANDSHAKE_VERSIONS, LATEST_LEGACY

SESSION_HEADER: Final = "Mcp-Session-Id"
ANSWERED_LOCALLY: Final = frozenset({"ping", "logging/setLevel"})
"""Requests a legacy server answers with `{}` when the capture holds no answer of its own."""

MAX_SESSIONS: Final = 10_000
"""Sessions the mock remembers; the oldest is forgotten past this (its next request gets 404, as from
a server that expired it)."""


class LegacyMock(MockServer):
    """A 2025-era Streamable HTTP server answering from the table."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ids = itertools.count(1)
        self._waiting: dict[str, asyncio.Future[dict[str, Any]]] = {}
        """The mock's in-flight request ids -> the client's answer, once POSTed."""
        self._sessions: OrderedDict[str, None] = OrderedDict()
        """Sessions handed out and not ended, oldest first (asked for only when the recorded server
        minted sessions: `MockTable.sessions`)."""

    def routes(self, app: web.Application) -> None:
        app.router.add_post(PATH, self.post)
        app.router.add_get(PATH, self.get)
        app.router.add_delete(PATH, self.delete)

    async def get(self, request: web.Request) -> web.StreamResponse:
        """No standalone stream: every recorded question belongs to a request (405 lets clients go on)."""
        return web.Response(status=405, headers={"Allow": "POST, DELETE"})

    async def delete(self, request: web.Request) -> web.StreamResponse:
        """A session's end: the session is forgotten (a later request naming it gets 404)."""
        refused = self._session_refusal(request)
        if refused is not None:
            return refused
        self._sessions.pop(request.headers.get(SESSION_HEADER, ""), None)
        return web.Response(status=200)

    def _session_refusal(self, request: web.Request) -> web.Response | None:
        """The recorded server's refusal of a request with no session or one it does not know (None
        when the request may go on, or the recorded server gave no sessions)."""
        if not self.table.sessions:
            return None
        session = request.headers.get(SESSION_HEADER)
        if not session:
            return json_response(
                error(
                    None,
                    INVALID_REQUEST,
                    "mock: Bad Request: Missing session ID (the recorded server "
                    "asked every request after initialize for the Mcp-Session-Id it gave)",
                ),
                400,
            )
        if session not in self._sessions:
            return json_response(
                error(None, INVALID_REQUEST, "mock: Session not found (not one this mock gave, or ended)"),
                404,
            )
        return None

    async def post(self, request: web.Request) -> web.StreamResponse:
        msg = await read_message(request)
        if isinstance(msg, web.Response):
            return msg
        method = msg.get("method")
        if method != "initialize":
            refused = self._session_refusal(request)
            if refused is not None:
                return refused
        if not isinstance(method, str):  # the client answering one of the mock's questions
            waiter = self._waiting.get(str(msg.get("id")))
            if waiter is not None and not waiter.done():
                waiter.set_result(msg)
            return web.Response(status=202)
        if "id" not in msg:
            return web.Response(status=202)
        params = msg.get("params")
        if method == "initialize":
            return self._initialize(msg["id"], params)
        found = self.table.lookup(method, params, era="legacy")
        if isinstance(found, Miss):
            if method in ANSWERED_LOCALLY:
                return json_response(reply(msg["id"], {"result": {}}))
            get_logger().info("mock_unmatched", method=method, message=found.message)
            return json_response(error(msg["id"], found.code, found.message))
        if found.cut:
            return json_response(reply(msg["id"], cut_answer(found)))
        if not found.rounds and not played_notes(found.notes, params):
            return json_response(reply(msg["id"], found.answer))
        return await self._stream(request, msg["id"], params, found)

    def _initialize(self, msg_id: Any, params: Any) -> web.Response:
        recorded = self.table.recorded("initialize")
        if recorded is not None and "result" in recorded.answer:
            result = dict(recorded.answer["result"])
        else:
            result = {"capabilities": inferred_capabilities(self.table), "serverInfo": SERVER_INFO}
            get_logger().info("mock_handshake_made", method="initialize", hint="the capture holds none")
        asked = params.get("protocolVersion") if isinstance(params, dict) else None
        if asked in HANDSHAKE_VERSIONS:
            result["protocolVersion"] = asked
        else:
            result.setdefault("protocolVersion", LATEST_LEGACY)
        session = secrets.token_hex(16)
        self._sessions[session] = None
        while len(self._sessions) > MAX_SESSIONS:
            self._sessions.popitem(last=False)
        return json_response(reply(msg_id, {"result": result}), headers={SESSION_HEADER: session})

    async def _stream(
        self, request: web.Request, msg_id: Any, params: Any, op: Operation
    ) -> web.StreamResponse:
        """The recorded rounds as in-flight requests on this POST's SSE stream, then the recorded answer."""
        response = await start_stream(request)
        for number, round_ in enumerate(op.rounds, start=1):
            for note in played_notes(round_.notes, params):
                await send_event(response, note)
            await self._ask(response, op, number, round_)
        for note in played_notes(op.notes, params):
            await send_event(response, note)
        await send_event(response, reply(msg_id, op.answer))
        await response.write_eof()
        return response

    async def _ask(self, response: web.StreamResponse, op: Operation, number: int, round_: Round) -> None:
        ids = [f"mock-{next(self._ids)}" for _ in round_.asks]
        loop = asyncio.get_running_loop()
        waiters = {i: loop.create_future() for i in ids}
        self._waiting.update(waiters)
        try:
            for nested_id, ask in zip(ids, round_.asks, strict=True):
                request: dict[str, Any] = {"jsonrpc": "2.0", "id": nested_id, "method": ask.method}
                if ask.params is not None:
                    request["params"] = ask.params
                await send_event(response, request)
            done, _ = await asyncio.wait(waiters.values(), timeout=self.answer_timeout)
            for nested_id, ask in zip(ids, round_.asks, strict=True):
                waiter = waiters[nested_id]
                if waiter not in done:
                    get_logger().info(
                        "mock_answer_missing",
                        chain=op.chain,
                        round=number,
                        asked=ask.method,
                        waited_s=self.answer_timeout,
                        hint="the recorded result is given all the same",
                    )
                    continue
                answer = waiter.result()
                given = answer["result"] if "result" in answer else {"error": answer.get("error")}
                check_answer(op, ask, given)
        finally:
            for nested_id in ids:
                self._waiting.pop(nested_id, None)
