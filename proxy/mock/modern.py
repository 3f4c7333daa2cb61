"""The mock server of a 2026-07-28 capture: no handshake, rounds as `input_required` results.

A recorded operation with rounds answers its first request with the first round's questions and a
`requestState` of the mock's own (the recorded one was redacted); a retry carrying it and every
answer of that round gets the next round, and the last retry the recorded result. A retry missing
some answers is asked for just those again, under the same state, as the spec has servers do.
"""

from __future__ import annotations

import secrets
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from proxy.engine.modern_client.answers import complete_result
from proxy.engine.modern_client.listen import ACKNOWLEDGED
from proxy.logs import get_logger
from proxy.mock.backend import (
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
from proxy.record.mock_table import INVALID_PARAMS, METHOD_NOT_FOUND, Ask, Miss, Operation, match_key
from proxy.wire.mcp import META_SUBSCRIPTION_ID
from proxy.wire.versions import LATEST_MODERN

LISTEN: Final = "subscriptions/listen"

MAX_STATES: Final = 1024
"""Rounds waiting for a retry that the mock remembers; the oldest is forgotten past this."""

NOT_MODERN: Final = frozenset({"initialize", "ping", "logging/setLevel"})
"""Legacy methods a 2026-07-28 server answers 404 + -32601."""


@dataclass(frozen=True)
class _Waiting:
    """An operation between rounds: which round the next retry answers."""

    op: Operation
    key: str
    round: int


_Step = tuple[tuple[dict[str, Any], ...], dict[str, Any]]
"""The notifications recorded before a message, and the message."""


class ModernMock(MockServer):
    """A 2026-07-28 Streamable HTTP server answering from the table."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._states: OrderedDict[str, _Waiting] = OrderedDict()

    def routes(self, app: web.Application) -> None:
        app.router.add_post(PATH, self.post)

    async def post(self, request: web.Request) -> web.StreamResponse:
        msg = await read_message(request)
        if isinstance(msg, web.Response):
            return msg
        method = msg.get("method")
        if not isinstance(method, str) or "id" not in msg:
            return web.Response(status=202)
        msg_id, params = msg["id"], msg.get("params")
        if method in NOT_MODERN:
            refused = error(msg_id, METHOD_NOT_FOUND, f"{method} is not a {LATEST_MODERN} method")
            return json_response(refused, 404)
        if method == "server/discover" and self.table.recorded(method) is None:
            return json_response(reply(msg_id, {"result": self._discover()}))
        state = params.get("requestState") if isinstance(params, dict) else None
        if isinstance(state, str) and isinstance(params, dict):
            return await _respond(request, params, *self._retry(msg_id, method, params, state))
        found = self.table.lookup(method, params, era="modern")
        if isinstance(found, Miss) and method == LISTEN:
            return await _no_subscriptions(request, msg_id)
        if isinstance(found, Miss):
            get_logger().info("mock_unmatched", method=method, message=found.message)
            status = 404 if found.code == METHOD_NOT_FOUND else 200
            return json_response(error(msg_id, found.code, found.message), status)
        if found.cut:
            return json_response(reply(msg_id, cut_answer(found)))
        return await _respond(request, params, *self._round(msg_id, found, match_key(method, params), 0))

    def _discover(self) -> dict[str, Any]:
        get_logger().info("mock_handshake_made", method="server/discover", hint="the capture holds none")
        return {
            "resultType": "complete",
            "supportedVersions": [LATEST_MODERN],
            "capabilities": inferred_capabilities(self.table),
            "ttlMs": 0,
            "cacheScope": "private",
            "_meta": {"io.modelcontextprotocol/serverInfo": SERVER_INFO},
        }

    def _round(self, msg_id: Any, op: Operation, key: str, number: int) -> _Step:
        """Round `number` of `op`'s questions, or its recorded answer once every round was answered."""
        if number >= len(op.rounds):
            answer = op.answer
            if "result" in answer and isinstance(answer["result"], dict):  # a legacy answer in 2026 dress
                answer = {"result": complete_result(op.method, answer["result"], None)}
            return op.notes, reply(msg_id, answer)
        token = secrets.token_urlsafe(16)
        self._states[token] = _Waiting(op, key, number)
        while len(self._states) > MAX_STATES:
            self._states.popitem(last=False)
        round_ = op.rounds[number]
        return round_.notes, _input_required(msg_id, round_.asks, token)

    def _retry(self, msg_id: Any, method: str, params: dict[str, Any], token: str) -> _Step:
        waiting = self._states.get(token)
        if waiting is None or waiting.key != match_key(method, params):
            return (), error(msg_id, INVALID_PARAMS, "Invalid or expired requestState")
        responses = params.get("inputResponses")
        responses = responses if isinstance(responses, dict) else {}
        asks = waiting.op.rounds[waiting.round].asks
        missing = tuple(a for a in asks if a.key not in responses)
        if missing:
            return (), _input_required(msg_id, missing, token)
        for ask in asks:
            check_answer(waiting.op, ask, responses[ask.key])
        del self._states[token]
        return self._round(msg_id, waiting.op, waiting.key, waiting.round + 1)


async def _respond(
    request: web.Request, params: Any, notes: tuple[dict[str, Any], ...], message: dict[str, Any]
) -> web.StreamResponse:
    """One JSON body, or an SSE stream when recorded notifications come before the message."""
    played = played_notes(notes, params)
    if not played:
        return json_response(message)
    response = await start_stream(request)
    for note in played:
        await send_event(response, note)
    await send_event(response, message)
    await response.write_eof()
    return response


async def _no_subscriptions(request: web.Request, msg_id: Any) -> web.StreamResponse:
    """A listen the capture cannot serve (nothing it recorded changes): acknowledged with no
    notification honoured, then ended gracefully, as a legacy mock answers a GET stream 405."""
    meta = {"_meta": {META_SUBSCRIPTION_ID: msg_id}}
    response = await start_stream(request)
    ack = {"jsonrpc": "2.0", "method": ACKNOWLEDGED, "params": {"notifications": {}, **meta}}
    await send_event(response, ack)
    await send_event(response, reply(msg_id, {"result": {"resultType": "complete", **meta}}))
    await response.write_eof()
    return response


def _input_required(msg_id: Any, asks: tuple[Ask, ...], token: str) -> dict[str, Any]:
    requests: dict[str, Any] = {}
    for ask in asks:
        entry: dict[str, Any] = {"method": ask.method}
        if ask.params is not None:
            entry["params"] = ask.params
        requests[ask.key] = entry
    result = {"resultType": "input_required", "inputRequests": requests, "requestState": token}
    return reply(msg_id, {"result": result})
