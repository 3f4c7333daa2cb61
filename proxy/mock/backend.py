"""What both mock servers share: the aiohttp listener, JSON-RPC replies, and checking client answers.

The mock servers sit behind the proxy's front on a loopback port no client is told about, so they
are plain aiohttp applications: their traffic is a debugging session's, never a hot path.
"""

from __future__ import annotations

import json
from typing import Any, Final

from aiohttp import web

from proxy import __version__
from proxy.logs import get_logger
from proxy.record.mock_table import Ask, MockTable, Operation

INTERNAL_ERROR: Final = -32603
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600

MAX_BODY: Final = 4 * 1024 * 1024
"""Largest request body a mock server reads (the front bounds what clients send before this)."""

CLOSE_SECONDS: Final = 2.0
"""How long stopping waits for open calls before it cuts them."""

PATH: Final = "/mcp"
"""The mock server's endpoint; the front maps whatever path clients use onto it."""


def reply(msg_id: Any, answer: dict[str, Any]) -> dict[str, Any]:
    """A JSON-RPC response carrying `answer` (`{"result": ...}` or `{"error": ...}`)."""
    return {"jsonrpc": "2.0", "id": msg_id, **answer}


def error(msg_id: Any, code: int, message: str) -> dict[str, Any]:
    """A JSON-RPC error response."""
    return reply(msg_id, {"error": {"code": code, "message": message}})


def json_response(
    body: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    """One JSON-RPC message as an application/json response."""
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def cut_answer(op: Operation) -> dict[str, Any]:
    """The error for an operation whose recording was cut at the capture's body limit."""
    return {
        "error": {
            "code": INTERNAL_ERROR,
            "message": f"mock: the recording of {op.shown()} (chain {op.chain}) was cut at the capture's "
            "body limit; record it again with a larger capture_body_limit",
        }
    }


def check_answer(op: Operation, ask: Ask, given: Any) -> None:
    """Log when the client answered a recorded question otherwise than it did in the capture."""
    if given != ask.answer:
        get_logger().info(
            "mock_answer_differs",
            chain=op.chain,
            request=op.shown(),
            asked=ask.method,
            key=ask.key,
            hint="the recorded result is given all the same",
        )


def inferred_capabilities(table: MockTable) -> dict[str, Any]:
    """Server capabilities implied by the methods the capture holds (when it holds no handshake)."""
    caps: dict[str, Any] = {}
    for method in table.methods():
        family = method.split("/", 1)[0]
        if family in ("tools", "prompts", "resources"):
            caps[family] = {}
        elif family == "completion":
            caps["completions"] = {}
    return caps


SERVER_INFO: Final = {"name": "mcp-proxy mock", "version": __version__}
"""Who the mock says it is when the capture holds no handshake to repeat."""


class MockServer:
    """A mock server's listener on a loopback port of its own; subclasses answer the requests."""

    def __init__(self, table: MockTable, *, answer_timeout: float) -> None:
        self.table = table
        self.answer_timeout = answer_timeout
        self._runner: web.AppRunner | None = None
        self.url = ""

    def routes(self, app: web.Application) -> None:
        """Add the endpoint's handlers."""
        raise NotImplementedError

    async def start(self) -> str:
        """Listen on 127.0.0.1 and a free port; returns the endpoint's URL."""
        app = web.Application(client_max_size=MAX_BODY)
        self.routes(app)
        # A client gone mid-call cancels its handler (no question waits out its timeout for nobody),
        # and stopping never waits long on a call still open.
        self._runner = web.AppRunner(
            app, access_log=None, handler_cancellation=True, shutdown_timeout=CLOSE_SECONDS
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}{PATH}"
        return self.url

    async def stop(self) -> None:
        """Close the listener and every open response."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


SSE_HEADERS: Final = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


def played_notes(notes: tuple[dict[str, Any], ...], params: Any) -> list[dict[str, Any]]:
    """Recorded notifications as this request gets them: progress under its own token, none without one."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    out: list[dict[str, Any]] = []
    for note in notes:
        if note.get("method") == "notifications/progress":
            if token is None:
                continue
            note_params = note.get("params")
            note = {
                **note,
                "params": {**(note_params if isinstance(note_params, dict) else {}), "progressToken": token},
            }
        out.append(note)
    return out


async def start_stream(request: web.Request) -> web.StreamResponse:
    """An SSE response, its head sent."""
    response = web.StreamResponse(headers=SSE_HEADERS)
    await response.prepare(request)
    return response


async def send_event(response: web.StreamResponse, message: dict[str, Any]) -> None:
    """One JSON-RPC message as an SSE event."""
    data = json.dumps(message, separators=(",", ":"))
    await response.write(f"event: message\ndata: {data}\n\n".encode())


async def read_message(request: web.Request) -> dict[str, Any] | web.Response:
    """The request's one JSON-RPC message, or the error response that refuses it."""
    try:
        msg = json.loads(await request.read())
    except ValueError as exc:
        return json_response(error(None, PARSE_ERROR, f"mock: body is not JSON: {exc}"), 400)
    if not isinstance(msg, dict):
        return json_response(error(None, INVALID_REQUEST, "mock: one JSON-RPC message per POST"), 400)
    return msg
