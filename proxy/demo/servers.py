"""The demo's two servers, built on the `mcp` SDK: one legacy-era, one 2026-07-28 (MRTR) only.

Both offer the same tools, written the way each era asks the client for things:

- `add`: plain arithmetic, no questions.
- `greet`: asks the user's name (elicitation).
- `ask_llm`: asks the client's model a question (sampling).
- `roots`: asks which roots the client exposes.
- `survey`: asks the name, then a colour: two rounds.

The legacy server asks *in flight* (server->client requests on the call's SSE stream) and refuses
2026-07-28 requests; the modern server answers `input_required` and reads the answers on the
client's retry, and refuses `initialize`. Each is therefore single-era, so the proxy in front of it
picks pass-through for a client of the same era and a bridge for the other.
"""

from __future__ import annotations

import json
from typing import Any, Final

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Receive, Scope, Send

Ctx = ServerRequestContext[Any, Any]
NAME_QUESTION: Final = "What is your name?"
COLOR_QUESTION: Final = "What is your favourite colour?"
LLM_QUESTION: Final = "What is the capital of France?"
_NO_ARGS: Final[dict[str, Any]] = {"type": "object", "properties": {}}

TOOLS: Final[list[types.Tool]] = [
    types.Tool(
        name="add",
        description="Add two integers.",
        input_schema={
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    ),
    types.Tool(name="greet", description="Ask the user's name, then greet them.", input_schema=_NO_ARGS),
    types.Tool(name="ask_llm", description="Ask the client's model a question.", input_schema=_NO_ARGS),
    types.Tool(name="roots", description="List the client's roots.", input_schema=_NO_ARGS),
    types.Tool(name="survey", description="Ask name, then colour (two rounds).", input_schema=_NO_ARGS),
]


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)])


def _ask(question: str, field: str) -> types.ElicitRequest:
    schema = {"type": "object", "properties": {field: {"type": "string"}}, "required": [field]}
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(message=question, requested_schema=schema)
    )


def _sampling() -> types.CreateMessageRequest:
    message = types.SamplingMessage(role="user", content=types.TextContent(text=LLM_QUESTION))
    return types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(messages=[message], max_tokens=20)
    )


def _answer(result: types.ElicitResult | None, field: str) -> str:
    if result is not None and result.action == "accept" and result.content and field in result.content:
        return str(result.content[field])
    return f"({result.action if result else 'no answer'})"


def _sampled(result: types.CreateMessageResult) -> str:
    content = result.content
    return content.text if isinstance(content, types.TextContent) else f"<{content.type}>"


def _add(params: types.CallToolRequestParams) -> types.CallToolResult:
    args = params.arguments or {}
    a, b = args.get("a"), args.get("b")
    if not isinstance(a, int) or not isinstance(b, int):
        raise MCPError(code=types.INVALID_PARAMS, message="a and b must be integers")
    return _text(str(a + b))


# -- legacy: ask in flight, on the call's own stream ------------------------------------------------


async def _inflight(ctx: Ctx, request: Any, result_type: Any) -> Any:
    metadata = ServerMessageMetadata(related_request_id=ctx.request_id)
    return await ctx.session.send_request(request, result_type, metadata=metadata)


async def _legacy_call(ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    name = params.name
    if name == "add":
        return _add(params)
    if name == "greet":
        answer = await _inflight(ctx, _ask(NAME_QUESTION, "name"), types.ElicitResult)
        return _text(f"Hello, {_answer(answer, 'name')}!")
    if name == "ask_llm":
        return _text(
            f"The model says: {_sampled(await _inflight(ctx, _sampling(), types.CreateMessageResult))}"
        )
    if name == "roots":
        roots = await _inflight(ctx, types.ListRootsRequest(), types.ListRootsResult)
        return _text(", ".join(str(root.uri) for root in roots.roots))
    if name == "survey":
        who = await _inflight(ctx, _ask(NAME_QUESTION, "name"), types.ElicitResult)
        colour = await _inflight(ctx, _ask(COLOR_QUESTION, "color"), types.ElicitResult)
        return _text(f"{_answer(who, 'name')} likes {_answer(colour, 'color')}")
    raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {name}")


# -- 2026-07-28: answer input_required, read the answers on the retry -------------------------------


def _need(requests: dict[str, Any], state: dict[str, Any] | None = None) -> types.InputRequiredResult:
    return types.InputRequiredResult(
        input_requests=requests, request_state=json.dumps(state) if state is not None else None
    )


def _response(params: types.CallToolRequestParams, key: str, kind: Any) -> Any:
    value = (params.input_responses or {}).get(key)
    if value is None or isinstance(value, kind):
        return value
    try:
        return kind.model_validate(value.model_dump(by_alias=True, exclude_none=True))
    except ValueError:
        return None


def _state(params: types.CallToolRequestParams) -> dict[str, Any]:
    try:
        value = json.loads(params.request_state or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


async def _mrtr_call(
    ctx: Ctx, params: types.CallToolRequestParams
) -> types.CallToolResult | types.InputRequiredResult:
    name = params.name
    if name == "add":
        return _add(params)
    if name == "greet":
        answer = _response(params, "name", types.ElicitResult)
        return (
            _text(f"Hello, {_answer(answer, 'name')}!")
            if answer
            else _need({"name": _ask(NAME_QUESTION, "name")})
        )
    if name == "ask_llm":
        sampled = _response(params, "llm", types.CreateMessageResult)
        return _text(f"The model says: {_sampled(sampled)}") if sampled else _need({"llm": _sampling()})
    if name == "roots":
        roots = _response(params, "roots", types.ListRootsResult)
        if roots is None:
            return _need({"roots": types.ListRootsRequest()})
        return _text(", ".join(str(root.uri) for root in roots.roots))
    if name == "survey":
        return _survey(params)
    raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {name}")


def _survey(params: types.CallToolRequestParams) -> types.CallToolResult | types.InputRequiredResult:
    state = _state(params)
    if "name" in state:
        colour = _response(params, "color", types.ElicitResult)
        if colour is None:
            return _need({"color": _ask(COLOR_QUESTION, "color")}, state)
        return _text(f"{state['name']} likes {_answer(colour, 'color')}")
    who = _response(params, "name", types.ElicitResult)
    if who is None:
        return _need({"name": _ask(NAME_QUESTION, "name")}, {"step": 1})
    return _need({"color": _ask(COLOR_QUESTION, "color")}, {"name": _answer(who, "name")})


# -- assembly ---------------------------------------------------------------------------------------


def build_server(era: str) -> Server[Any]:
    """The SDK server for `era` ("legacy" asks in flight, "modern" answers input_required)."""

    async def list_tools(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(TOOLS))

    return Server(
        f"mcp-proxy-demo-{era}",
        version="1.0.0",
        on_list_tools=list_tools,
        on_call_tool=_legacy_call if era == "legacy" else _mrtr_call,
    )


async def _refuse(send: Send, status: int, body: dict[str, Any]) -> None:
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def _header(scope: Scope, name: bytes) -> str | None:
    return next((v.decode("latin-1") for k, v in scope.get("headers", []) if k.lower() == name), None)


def _unsupported(code: int, requested: str) -> dict[str, Any]:
    error = {"code": code, "message": "Unsupported protocol version", "data": {"requested": requested}}
    return {"jsonrpc": "2.0", "id": None, "error": error}


def legacy_only(app: ASGIApp) -> ASGIApp:
    """Refuse any request naming a 2026-07-28 (non-handshake) protocol version, as a legacy server does."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        version = _header(scope, b"mcp-protocol-version") if scope["type"] == "http" else None
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            await _refuse(send, 400, _unsupported(types.INVALID_REQUEST, version))
            return
        await app(scope, receive, send)

    return wrapped


def modern_only(app: ASGIApp) -> ASGIApp:
    """Refuse the legacy era (GET/DELETE streams, requests without a 2026-07-28 version header)."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            version = _header(scope, b"mcp-protocol-version")
            if scope["method"] in ("GET", "DELETE"):
                await send({"type": "http.response.start", "status": 405, "headers": [(b"allow", b"POST")]})
                await send({"type": "http.response.body", "body": b""})
                return
            if version is None or version in HANDSHAKE_PROTOCOL_VERSIONS:
                await _refuse(send, 400, _unsupported(types.UNSUPPORTED_PROTOCOL_VERSION, version or ""))
                return
        await app(scope, receive, send)

    return wrapped


def build_app(era: str) -> ASGIApp:
    """The ASGI app of the demo server for `era`, serving MCP at `/mcp`."""
    app: ASGIApp = build_server(era).streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    return legacy_only(app) if era == "legacy" else modern_only(app)
