"""Real MCP servers built with the official Python SDK, for the proxy's end-to-end tests.

The proxy converts between the legacy in-flight style (server-to-client requests riding the
originating POST's SSE stream) and the 2026-07-28 MRTR style (``input_required`` results and
retries). To test it against real peers rather than fakes, this module builds the same set of
tools, prompts and resources twice, once per style, with identical final results given identical
client answers. A test can then run a scenario directly against one style and through the proxy
against the other, and compare the two.

Kinds (see ``KINDS``):

- ``legacy-inflight``: legacy era only (2025-11-25 and older), in-flight tools. The SDK always
  serves both eras, so ``legacy_only`` refuses 2026-07-28 requests the way a legacy-only server does.
- ``modern-mrtr``: 2026-07-28 only, MRTR tools (``modern_only`` refuses ``initialize``, GET, DELETE).
- ``dual-inflight`` / ``dual-mrtr``: the SDK's default dual-era app with either style.
- ``conformance-modern`` / ``conformance-legacy``: the conformance suite's ``input-required-result-*``
  fixtures instead of this catalogue (``tests.peers.conformance_app``), 2026-only MRTR / legacy-only
  in flight.
- ``legacy-polling``: ``legacy-inflight`` with SEP-1699 SSE polling: each tool call's stream is
  dropped after its priming event (``tests.peers.polling_app``), so only a client that resumes with
  GET + ``Last-Event-ID`` sees the rest.
- ``legacy-resumable``: ``legacy-inflight`` with an event store and streams left open: a client whose
  side cut a call's stream resumes it with GET + ``Last-Event-ID`` (``tests.peers.polling_app``).
- ``legacy-notifying``: a legacy-only server whose tool announces list changes and resource updates
  on the session's GET stream (``tests.peers.notifying_app``).
- ``legacy-announcing`` / ``modern-announcing``: an ``MCPServer`` in one era whose tool announces a
  tool-list change and a resource update it never declared (``tests.peers.announcing_app``).
- ``legacy-bearer`` / ``modern-bearer``: ``legacy-inflight`` / ``modern-mrtr`` behind the SDK's
  bearer-token check, one fixed token accepted (``tests.peers.bearer_app``).

The low-level ``mcp.server.lowlevel.Server`` is used rather than ``MCPServer`` because it puts the
wire shapes in plain sight: in-flight handlers call ``ctx.session`` with the originating request id
as related request, MRTR handlers return ``InputRequiredResult`` and read ``input_responses`` /
``request_state`` themselves. MRTR apps seal ``requestState`` with the SDK's
``RequestStateBoundary`` (as ``MCPServer`` does by default), so a tampered state gets -32602.
"""

from __future__ import annotations

import json
import uuid
import warnings
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "ASK_URL",
    "COLOR_QUESTION",
    "KINDS",
    "LLM_QUESTION",
    "NAME_QUESTION",
    "URL_MESSAGE",
    "Kind",
    "Style",
    "build_app",
    "build_server",
    "legacy_only",
    "modern_only",
]

Kind = Literal[
    "legacy-inflight",
    "modern-mrtr",
    "dual-inflight",
    "dual-mrtr",
    "conformance-modern",
    "conformance-legacy",
    "legacy-polling",
    "legacy-resumable",
    "legacy-notifying",
    "legacy-announcing",
    "modern-announcing",
    "legacy-bearer",
    "modern-bearer",
]
Style = Literal["inflight", "mrtr"]

KINDS: Final[tuple[Kind, ...]] = (
    "legacy-inflight",
    "modern-mrtr",
    "dual-inflight",
    "dual-mrtr",
    "conformance-modern",
    "conformance-legacy",
    "legacy-polling",
    "legacy-resumable",
    "legacy-notifying",
    "legacy-announcing",
    "modern-announcing",
    "legacy-bearer",
    "modern-bearer",
)
"""Every peer kind `build_app` and `python -m tests.peers.serve` accept."""

_KIND_STYLE: Final[dict[str, Style]] = {
    "legacy-inflight": "inflight",
    "modern-mrtr": "mrtr",
    "dual-inflight": "inflight",
    "dual-mrtr": "mrtr",
}

SERVER_NAME: Final = "mcp-debug-proxy-test-peer"
NAME_QUESTION: Final = "What is your name?"
COLOR_QUESTION: Final = "What is your favorite color?"
URL_MESSAGE: Final = "Please grant consent in your browser"
ASK_URL: Final = "https://example.com/consent"
LLM_QUESTION: Final = "What is the capital of France?"
"""The sampling question `ask_two_at_once` asks (``ask_llm`` asks its own argument)."""
LLM_MAX_TOKENS: Final = 50

_NAME_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"name": {"type": "string"}},
    "required": ["name"],
}
_COLOR_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"color": {"type": "string"}},
    "required": ["color"],
}

Ctx = ServerRequestContext[Any, Any]

# --------------------------------------------------------------------------------------------
# Catalogue: identical in both styles.
# --------------------------------------------------------------------------------------------

_NO_ARGS: Final[dict[str, Any]] = {"type": "object", "properties": {}}

TOOLS: Final[list[types.Tool]] = [
    types.Tool(
        name="echo",
        description="Return the text (and log it when the client opted in to logging).",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    ),
    types.Tool(
        name="add",
        description="Add two integers.",
        input_schema={
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
        output_schema={
            "type": "object",
            "properties": {"result": {"type": "integer"}},
            "required": ["result"],
        },
    ),
    types.Tool(name="ask_name", description="Ask the user's name (form elicitation).", input_schema=_NO_ARGS),
    types.Tool(
        name="ask_url", description="Ask for consent through a URL elicitation.", input_schema=_NO_ARGS
    ),
    types.Tool(
        name="ask_llm",
        description="Ask the client's LLM a question (sampling).",
        input_schema={
            "type": "object",
            "properties": {"question": {"type": "string"}},
            "required": ["question"],
        },
    ),
    types.Tool(name="list_client_roots", description="List the client's roots.", input_schema=_NO_ARGS),
    types.Tool(name="ask_twice", description="Ask name, then color (two rounds).", input_schema=_NO_ARGS),
    types.Tool(
        name="ask_two_at_once", description="Ask name and sample the LLM concurrently.", input_schema=_NO_ARGS
    ),
    types.Tool(
        name="state_only", description="MRTR: one round carrying only requestState.", input_schema=_NO_ARGS
    ),
    types.Tool(
        name="slow_progress",
        description="Report `steps` progress notifications, then finish.",
        input_schema={"type": "object", "properties": {"steps": {"type": "integer", "default": 3}}},
    ),
    types.Tool(name="fail", description="Return a tool error result.", input_schema=_NO_ARGS),
]

PROMPTS: Final[list[types.Prompt]] = [
    types.Prompt(name="greet_prompt", description="Greets the client by the name it gives (elicitation)."),
    types.Prompt(
        name="plain_prompt",
        description="A plain prompt about a topic.",
        arguments=[types.PromptArgument(name="topic", description="What to talk about", required=True)],
    ),
]

RESOURCES: Final[list[types.Resource]] = [
    types.Resource(name="static", uri="res://static", mime_type="text/plain", description="Static text."),
    types.Resource(name="ask", uri="res://ask", mime_type="text/plain", description="Asks the name on read."),
]

# --------------------------------------------------------------------------------------------
# Result builders shared by both styles, so equal answers give equal results.
# --------------------------------------------------------------------------------------------


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)])


def _field(answer: types.ElicitResult, field: str) -> str:
    """The accepted value of `field`, or ``(<action>)`` when the user did not accept."""
    if answer.action == "accept" and answer.content is not None and field in answer.content:
        return str(answer.content[field])
    return f"({answer.action})"


def _hello(answer: types.ElicitResult) -> str:
    if answer.action == "accept" and answer.content is not None and "name" in answer.content:
        return f"Hello, {answer.content['name']}!"
    return f"No name ({answer.action})"


def _sampled_text(result: types.CreateMessageResult) -> str:
    content = result.content
    return content.text if isinstance(content, types.TextContent) else f"<{content.type}>"


def _llm_said(result: types.CreateMessageResult) -> str:
    return f"LLM said: {_sampled_text(result)}"


def _roots_text(result: types.ListRootsResult) -> str:
    return ",".join(str(root.uri) for root in result.roots)


def _greeting_prompt(answer: types.ElicitResult) -> types.GetPromptResult:
    return types.GetPromptResult(
        description="Greeting",
        messages=[
            types.PromptMessage(
                role="user", content=types.TextContent(text=f"Hello, {_field(answer, 'name')}")
            )
        ],
    )


def _plain_prompt(arguments: Mapping[str, str] | None) -> types.GetPromptResult:
    topic = (arguments or {}).get("topic")
    if topic is None:
        raise MCPError(code=types.INVALID_PARAMS, message="Missing required argument: topic")
    return types.GetPromptResult(
        description="Plain prompt",
        messages=[types.PromptMessage(role="user", content=types.TextContent(text=f"Tell me about {topic}"))],
    )


def _resource(uri: str, text: str) -> types.ReadResourceResult:
    return types.ReadResourceResult(
        contents=[types.TextResourceContents(uri=uri, mime_type="text/plain", text=text)]
    )


def _name_request() -> types.ElicitRequest:
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(message=NAME_QUESTION, requested_schema=_NAME_SCHEMA)
    )


def _color_request() -> types.ElicitRequest:
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(message=COLOR_QUESTION, requested_schema=_COLOR_SCHEMA)
    )


def _sampling_request(question: str) -> types.CreateMessageRequest:
    return types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(
            messages=[types.SamplingMessage(role="user", content=types.TextContent(text=question))],
            max_tokens=LLM_MAX_TOKENS,
        )
    )


def _args(params: types.CallToolRequestParams) -> dict[str, Any]:
    return dict(params.arguments or {})


def _required_str(args: Mapping[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str):
        raise MCPError(code=types.INVALID_PARAMS, message=f"Argument {key!r} must be a string")
    return value


def _required_int(args: Mapping[str, Any], key: str) -> int:
    value = args.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise MCPError(code=types.INVALID_PARAMS, message=f"Argument {key!r} must be an integer")
    return value


async def _echo(ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    text = _required_str(_args(params), "text")
    # Logging is deprecated in 2026-07-28 but still works; the SDK gates delivery itself (always on a
    # handshake session, only with the per-request `_meta` log-level opt-in on 2026-07-28).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await ctx.session.send_log_message(
            "info", f"echo: {text}", logger="peer", related_request_id=ctx.request_id
        )
    return _text(text)


async def _add(ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    args = _args(params)
    total = _required_int(args, "a") + _required_int(args, "b")
    return types.CallToolResult(
        content=[types.TextContent(text=str(total))], structured_content={"result": total}
    )


async def _slow_progress(ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    steps = _args(params).get("steps", 3)
    if not isinstance(steps, int) or isinstance(steps, bool) or not 0 <= steps <= 1000:
        raise MCPError(code=types.INVALID_PARAMS, message="Argument 'steps' must be an integer in 0..1000")
    for step in range(1, steps + 1):
        # A no-op when the request carried no progressToken.
        await ctx.session.report_progress(step, steps, f"step {step}/{steps}")
        await anyio.sleep(0.01)
    return _text(f"done {steps}")


async def _fail(ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text="boom")], is_error=True)


_ToolFn = Callable[
    [Ctx, types.CallToolRequestParams], Awaitable[types.CallToolResult | types.InputRequiredResult]
]

_COMMON_TOOLS: Final[dict[str, _ToolFn]] = {
    "echo": _echo,
    "add": _add,
    "slow_progress": _slow_progress,
    "fail": _fail,
}

# --------------------------------------------------------------------------------------------
# Legacy in-flight style: nested requests ride the originating POST's SSE stream.
# --------------------------------------------------------------------------------------------


def _related(ctx: Ctx) -> ServerMessageMetadata:
    """Metadata tying a nested request to the request being handled (so it rides that POST's stream)."""
    return ServerMessageMetadata(related_request_id=ctx.request_id)


async def _inflight_elicit(ctx: Ctx, request: types.ElicitRequest) -> types.ElicitResult:
    return await ctx.session.send_request(request, types.ElicitResult, metadata=_related(ctx))


async def _inflight_sample(ctx: Ctx, question: str) -> types.CreateMessageResult:
    return await ctx.session.send_request(
        _sampling_request(question), types.CreateMessageResult, metadata=_related(ctx)
    )


async def _inflight_roots(ctx: Ctx) -> types.ListRootsResult:
    # Not `ctx.session.list_roots()`: that helper takes no related request id, so its request
    # would go to the standalone GET stream instead of this call's stream.
    return await ctx.session.send_request(
        types.ListRootsRequest(), types.ListRootsResult, metadata=_related(ctx)
    )


async def _inflight_ask_name(ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    answer = await ctx.session.elicit_form(NAME_QUESTION, _NAME_SCHEMA, related_request_id=ctx.request_id)
    return _text(_hello(answer))


async def _inflight_ask_url(ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    answer = await ctx.session.elicit_url(
        URL_MESSAGE, ASK_URL, elicitation_id=uuid.uuid4().hex, related_request_id=ctx.request_id
    )
    return _text(f"url:{answer.action}")


async def _inflight_ask_llm(ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    question = _required_str(_args(params), "question")
    return _text(_llm_said(await _inflight_sample(ctx, question)))


async def _inflight_roots_tool(ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    return _text(_roots_text(await _inflight_roots(ctx)))


async def _inflight_ask_twice(ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    name = await _inflight_elicit(ctx, _name_request())
    color = await _inflight_elicit(ctx, _color_request())
    return _text(f"name={_field(name, 'name')} color={_field(color, 'color')}")


async def _inflight_ask_two_at_once(ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    answers: dict[str, Any] = {}

    async def ask_name() -> None:
        answers["name"] = await _inflight_elicit(ctx, _name_request())

    async def ask_llm() -> None:
        answers["llm"] = await _inflight_sample(ctx, LLM_QUESTION)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask_name)
        tg.start_soon(ask_llm)
    return _text(f"name={_field(answers['name'], 'name')} llm={_sampled_text(answers['llm'])}")


async def _inflight_state_only(ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    return _text("state ok")


async def _session_roots_tool(ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    # `list_roots()` names no related request: the SDK sends it on the session's GET stream.
    return _text(_roots_text(await ctx.session.list_roots()))


async def _session_ask_name(ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    # No related request id either: the question goes on the session's GET stream.
    return _text(_hello(await ctx.session.elicit_form(NAME_QUESTION, _NAME_SCHEMA)))


async def _session_ask_name_later(ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
    # The same question after `wait` seconds, so several calls can be in flight when it is asked.
    await anyio.sleep(float((params.arguments or {}).get("wait", 1.0)))
    return await _session_ask_name(ctx, params)


_SESSION_STREAM_TOOLS: Final[dict[str, _ToolFn]] = {
    "session_roots": _session_roots_tool,
    "session_ask_name": _session_ask_name,
    "session_ask_name_later": _session_ask_name_later,
}
"""Tools that ask on the session's GET stream, as `ctx.session.list_roots()` and friends do; callable
by name on the in-flight style but not listed, so every peer's catalogue stays the same."""


_INFLIGHT_TOOLS: Final[dict[str, _ToolFn]] = {
    **_COMMON_TOOLS,
    "ask_name": _inflight_ask_name,
    "ask_url": _inflight_ask_url,
    "ask_llm": _inflight_ask_llm,
    "list_client_roots": _inflight_roots_tool,
    "ask_twice": _inflight_ask_twice,
    "ask_two_at_once": _inflight_ask_two_at_once,
    "state_only": _inflight_state_only,
    **_SESSION_STREAM_TOOLS,
}


async def _inflight_get_prompt(ctx: Ctx, params: types.GetPromptRequestParams) -> types.GetPromptResult:
    if params.name == "greet_prompt":
        return _greeting_prompt(await _inflight_elicit(ctx, _name_request()))
    if params.name == "plain_prompt":
        return _plain_prompt(params.arguments)
    raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {params.name}")


async def _inflight_read_resource(
    ctx: Ctx, params: types.ReadResourceRequestParams
) -> types.ReadResourceResult:
    if params.uri == "res://static":
        return _resource(params.uri, "static content")
    if params.uri == "res://ask":
        return _resource(
            params.uri, f"resource for {_field(await _inflight_elicit(ctx, _name_request()), 'name')}"
        )
    raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown resource: {params.uri}")


# --------------------------------------------------------------------------------------------
# MRTR style (2026-07-28): return InputRequiredResult, read the answers on the retry.
# --------------------------------------------------------------------------------------------


def _require_capabilities(ctx: Ctx, requests: Mapping[str, types.InputRequest]) -> None:
    """Refuse (-32021) to embed a request kind the client did not declare on this request (spec 1.6)."""
    caps = ctx.session.client_capabilities or types.ClientCapabilities()
    for request in requests.values():
        required: types.ClientCapabilities | None = None
        if isinstance(request, types.ElicitRequest):
            elicitation = caps.elicitation
            if isinstance(request.params, types.ElicitRequestURLParams):
                if elicitation is None or elicitation.url is None:
                    required = types.ClientCapabilities(
                        elicitation=types.ElicitationCapability(url=types.UrlElicitationCapability())
                    )
            elif elicitation is None or (elicitation.form is None and elicitation.url is not None):
                required = types.ClientCapabilities(
                    elicitation=types.ElicitationCapability(form=types.FormElicitationCapability())
                )
        elif isinstance(request, types.CreateMessageRequest):
            if caps.sampling is None:
                required = types.ClientCapabilities(sampling=types.SamplingCapability())
        elif caps.roots is None:
            required = types.ClientCapabilities(roots=types.RootsCapability())
        if required is not None:
            data = types.MissingRequiredClientCapabilityErrorData(required_capabilities=required)
            raise MCPError(
                code=types.MISSING_REQUIRED_CLIENT_CAPABILITY,
                message=f"Client did not declare the capability {request.method} needs",
                data=data.model_dump(by_alias=True, mode="json", exclude_none=True),
            )


def _input_required(
    ctx: Ctx, requests: dict[str, types.InputRequest] | None = None, state: dict[str, Any] | None = None
) -> types.InputRequiredResult:
    if requests:
        _require_capabilities(ctx, requests)
    return types.InputRequiredResult(
        input_requests=requests or None,
        request_state=json.dumps(state, separators=(",", ":")) if state is not None else None,
    )


def _load_state(raw: str | None) -> dict[str, Any]:
    """Decode this server's own (already unsealed) requestState; junk reads as no state."""
    if raw is None:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _as_elicit(value: types.InputResponse | None) -> types.ElicitResult | None:
    if value is None:
        return None
    if isinstance(value, types.ElicitResult):
        return value
    try:
        return types.ElicitResult.model_validate(value.model_dump(by_alias=True, exclude_none=True))
    except ValueError:
        return None


def _as_sampled(value: types.InputResponse | None) -> types.CreateMessageResult | None:
    if isinstance(value, types.CreateMessageResult):
        return value
    if value is None:
        return None
    try:
        return types.CreateMessageResult.model_validate(value.model_dump(by_alias=True, exclude_none=True))
    except ValueError:
        return None


def _as_roots(value: types.InputResponse | None) -> types.ListRootsResult | None:
    if isinstance(value, types.ListRootsResult):
        return value
    if value is None:
        return None
    try:
        return types.ListRootsResult.model_validate(value.model_dump(by_alias=True, exclude_none=True))
    except ValueError:
        return None


def _responses(params: types.InputResponseRequestParams) -> dict[str, types.InputResponse]:
    return dict(params.input_responses or {})


async def _mrtr_ask_name(
    ctx: Ctx, params: types.CallToolRequestParams
) -> types.CallToolResult | types.InputRequiredResult:
    answer = _as_elicit(_responses(params).get("name"))
    if answer is None:
        return _input_required(ctx, {"name": _name_request()})
    return _text(_hello(answer))


async def _mrtr_ask_url(
    ctx: Ctx, params: types.CallToolRequestParams
) -> types.CallToolResult | types.InputRequiredResult:
    answer = _as_elicit(_responses(params).get("consent"))
    if answer is None:
        # 2026-07-28 URL elicitation carries no elicitationId.
        request = types.ElicitRequest(params=types.ElicitRequestURLParams(message=URL_MESSAGE, url=ASK_URL))
        return _input_required(ctx, {"consent": request})
    return _text(f"url:{answer.action}")


async def _mrtr_ask_llm(
    ctx: Ctx, params: types.CallToolRequestParams
) -> types.CallToolResult | types.InputRequiredResult:
    question = _required_str(_args(params), "question")
    sampled = _as_sampled(_responses(params).get("llm"))
    if sampled is None:
        return _input_required(ctx, {"llm": _sampling_request(question)})
    return _text(_llm_said(sampled))


async def _mrtr_roots_tool(
    ctx: Ctx, params: types.CallToolRequestParams
) -> types.CallToolResult | types.InputRequiredResult:
    roots = _as_roots(_responses(params).get("roots"))
    if roots is None:
        return _input_required(ctx, {"roots": types.ListRootsRequest()})
    return _text(_roots_text(roots))


async def _mrtr_ask_twice(
    ctx: Ctx, params: types.CallToolRequestParams
) -> types.CallToolResult | types.InputRequiredResult:
    # Round 1 asks the name (state step 1); round 2 asks the color and carries the name in the state
    # (replace semantics: the final retry holds only the color answer); round 3 completes.
    state = _load_state(params.request_state)
    responses = _responses(params)
    if state.get("step") == 2 and isinstance(state.get("name"), str):
        color = _as_elicit(responses.get("color"))
        if color is None:
            return _input_required(ctx, {"color": _color_request()}, state)
        return _text(f"name={state['name']} color={_field(color, 'color')}")
    name = _as_elicit(responses.get("name")) if state.get("step") == 1 else None
    if name is None:
        return _input_required(ctx, {"name": _name_request()}, {"step": 1})
    return _input_required(ctx, {"color": _color_request()}, {"step": 2, "name": _field(name, "name")})


async def _mrtr_ask_two_at_once(
    ctx: Ctx, params: types.CallToolRequestParams
) -> types.CallToolResult | types.InputRequiredResult:
    responses = _responses(params)
    name = _as_elicit(responses.get("name"))
    sampled = _as_sampled(responses.get("llm"))
    missing: dict[str, types.InputRequest] = {}
    if name is None:
        missing["name"] = _name_request()
    if sampled is None:
        missing["llm"] = _sampling_request(LLM_QUESTION)
    if missing:
        return _input_required(ctx, missing)
    assert name is not None
    assert sampled is not None
    return _text(f"name={_field(name, 'name')} llm={_sampled_text(sampled)}")


async def _mrtr_state_only(
    ctx: Ctx, params: types.CallToolRequestParams
) -> types.CallToolResult | types.InputRequiredResult:
    if _load_state(params.request_state).get("step") == "resume":
        return _text("state ok")
    # The load-shedding form: no inputRequests, only requestState; the client just retries.
    return _input_required(ctx, None, {"step": "resume"})


_MRTR_TOOLS: Final[dict[str, _ToolFn]] = {
    **_COMMON_TOOLS,
    "ask_name": _mrtr_ask_name,
    "ask_url": _mrtr_ask_url,
    "ask_llm": _mrtr_ask_llm,
    "list_client_roots": _mrtr_roots_tool,
    "ask_twice": _mrtr_ask_twice,
    "ask_two_at_once": _mrtr_ask_two_at_once,
    "state_only": _mrtr_state_only,
}


async def _mrtr_get_prompt(
    ctx: Ctx, params: types.GetPromptRequestParams
) -> types.GetPromptResult | types.InputRequiredResult:
    if params.name == "greet_prompt":
        answer = _as_elicit(_responses(params).get("name"))
        if answer is None:
            return _input_required(ctx, {"name": _name_request()})
        return _greeting_prompt(answer)
    if params.name == "plain_prompt":
        return _plain_prompt(params.arguments)
    raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {params.name}")


async def _mrtr_read_resource(
    ctx: Ctx, params: types.ReadResourceRequestParams
) -> types.ReadResourceResult | types.InputRequiredResult:
    if params.uri == "res://static":
        return _resource(params.uri, "static content")
    if params.uri == "res://ask":
        answer = _as_elicit(_responses(params).get("name"))
        if answer is None:
            return _input_required(ctx, {"name": _name_request()})
        return _resource(params.uri, f"resource for {_field(answer, 'name')}")
    raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown resource: {params.uri}")


# --------------------------------------------------------------------------------------------
# Server assembly.
# --------------------------------------------------------------------------------------------


def build_server(style: Style, *, seal_state: bool = True, version: str = "1.0.0") -> Server[Any]:
    """Build the low-level SDK `Server` with every tool, prompt and resource written in `style`.

    `version` is the server's own (its `serverInfo.version`): a test tells a server from the one that
    replaced it on the same port by it.

    `seal_state` (MRTR only) installs the SDK's `RequestStateBoundary` under a process-local key, so
    `requestState` on the wire is an opaque AEAD token; turn it off to see the plain JSON state.
    """
    tools = _INFLIGHT_TOOLS if style == "inflight" else _MRTR_TOOLS

    async def list_tools(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(TOOLS))

    async def call_tool(
        ctx: Ctx, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        fn = tools.get(params.name)
        if fn is None:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        return await fn(ctx, params)

    async def list_prompts(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=list(PROMPTS))

    async def list_resources(
        ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=list(RESOURCES))

    async def set_logging_level(ctx: Ctx, params: types.SetLevelRequestParams) -> types.EmptyResult:
        # Handshake sessions send log messages regardless of level (SDK behaviour); accepting the
        # request lets a legacy client opt in the way it would with any server.
        return types.EmptyResult()

    with warnings.catch_warnings():
        # `on_set_logging_level` is deprecated as of 2026-07-28 but still the way to serve legacy
        # `logging/setLevel`; the SDK warns at construction.
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        server: Server[Any] = Server(
            SERVER_NAME,
            version=version,
            instructions=f"Test peer ({style} style).",
            on_list_tools=list_tools,
            on_call_tool=call_tool,
            on_list_prompts=list_prompts,
            on_get_prompt=_inflight_get_prompt if style == "inflight" else _mrtr_get_prompt,
            on_list_resources=list_resources,
            on_read_resource=_inflight_read_resource if style == "inflight" else _mrtr_read_resource,
            on_set_logging_level=set_logging_level,
        )
    if style == "mrtr" and seal_state:
        server.middleware.append(
            RequestStateBoundary(RequestStateSecurity.ephemeral(), default_audience=SERVER_NAME)
        )
    return server


# --------------------------------------------------------------------------------------------
# Era wrappers: the SDK serves both eras on one endpoint; these make single-era servers.
# --------------------------------------------------------------------------------------------


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None


async def _send_json(
    send: Send, status: int, body: dict[str, Any], headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    payload = json.dumps(body, separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ]
            + (headers or []),
        }
    )
    await send({"type": "http.response.body", "body": payload})


async def _send_405(send: Send) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 405,
            "headers": [(b"allow", b"POST"), (b"content-length", b"0")],
        }
    )
    await send({"type": "http.response.body", "body": b""})


def _error(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


def legacy_only(app: ASGIApp) -> ASGIApp:
    """Wrap the SDK app so it serves the handshake era only.

    A request whose ``MCP-Protocol-Version`` header names a version outside the handshake era
    (e.g. ``2026-07-28``, including the ``server/discover`` probe) gets HTTP 400 with JSON-RPC
    -32600 "Unsupported protocol version" and ``id: null``, as a legacy server's header check
    answers before it parses the body. Everything else reaches the SDK unchanged.
    """

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            version = _header(scope, b"mcp-protocol-version")
            if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
                data = {"supported": list(HANDSHAKE_PROTOCOL_VERSIONS), "requested": version}
                await _send_json(
                    send, 400, _error(None, types.INVALID_REQUEST, "Unsupported protocol version", data)
                )
                return
        await app(scope, receive, send)

    return wrapped


async def _read_body(receive: Receive) -> tuple[bytes, list[Message]]:
    """Drain the request body, keeping the messages so they can be replayed to the inner app."""
    messages: list[Message] = []
    chunks: list[bytes] = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks), messages


def _replaying(messages: list[Message], receive: Receive) -> Receive:
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


def modern_only(app: ASGIApp) -> ASGIApp:
    """Wrap the SDK app so it serves 2026-07-28 only.

    - ``initialize`` gets HTTP 400 with -32022 and ``data: {supported: ["2026-07-28"], requested}``
      (``requested`` = the offered ``protocolVersion``), the request id echoed.
    - GET and DELETE (the legacy SSE stream and session teardown) get 405 with ``Allow: POST``.
    - Any other POST whose ``MCP-Protocol-Version`` is absent or a handshake-era version gets
      400/-32022 too (``requested`` = that header, or ``""`` when absent): without the header the
      SDK would otherwise route it to its legacy session path.
    """
    supported = list(MODERN_PROTOCOL_VERSIONS)

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        if scope["method"] in ("GET", "DELETE"):
            await _send_405(send)
            return
        if scope["method"] != "POST":
            await app(scope, receive, send)
            return
        body, messages = await _read_body(receive)
        try:
            decoded: Any = json.loads(body)
        except ValueError:
            decoded = None
        request = decoded if isinstance(decoded, dict) else {}
        request_id = request.get("id")
        header = _header(scope, b"mcp-protocol-version")
        if request.get("method") == "initialize":
            params = request.get("params")
            offered = params.get("protocolVersion") if isinstance(params, dict) else None
            requested = offered if isinstance(offered, str) else (header or "")
            data = {"supported": supported, "requested": requested}
            await _send_json(
                send,
                400,
                _error(request_id, types.UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version", data),
            )
            return
        if header is None or header in HANDSHAKE_PROTOCOL_VERSIONS:
            data = {"supported": supported, "requested": header or ""}
            await _send_json(
                send,
                400,
                _error(request_id, types.UNSUPPORTED_PROTOCOL_VERSION, "Unsupported protocol version", data),
            )
            return
        await app(scope, _replaying(messages, receive), send)

    return wrapped


def build_app(
    kind: str,
    *,
    seal_state: bool = True,
    path: str = "/mcp",
    json_response: bool = False,
    version: str = "1.0.0",
) -> ASGIApp:
    """Build the ASGI app for `kind` (one of `KINDS`); the MCP endpoint is `path` for the SDK's own
    kinds (``/mcp`` by default, as the SDK serves it), ``/mcp`` for the others. `json_response`
    makes the SDK's own kinds answer plain JSON instead of SSE streams, and `version` is their
    `serverInfo.version`.

    The SDK app gets DNS-rebinding protection for 127.0.0.1 (its default for a loopback host).
    Its lifespan (the session manager) passes through the era wrappers untouched.
    """
    if kind.startswith("conformance-"):
        # Imported here: conformance_app builds on this module's era wrappers.
        from tests.peers.conformance_app import build_conformance_app

        return build_conformance_app(kind)
    if kind == "legacy-polling":
        from tests.peers.polling_app import build_polling_app

        return build_polling_app()
    if kind == "legacy-resumable":
        from tests.peers.polling_app import build_resumable_app

        return build_resumable_app()
    if kind == "legacy-notifying":
        from tests.peers.notifying_app import build_notifying_app

        return build_notifying_app()
    if kind.endswith("-bearer"):
        from tests.peers.bearer_app import build_bearer_app

        return build_bearer_app(kind.removesuffix("-bearer"))
    if kind.endswith("-announcing"):
        from tests.peers.announcing_app import build_announcing_app

        return build_announcing_app(kind.removesuffix("-announcing"))
    style = _KIND_STYLE.get(kind)
    if style is None:
        raise ValueError(f"unknown peer kind {kind!r}; expected one of {', '.join(KINDS)}")
    app: ASGIApp = build_server(style, seal_state=seal_state, version=version).streamable_http_app(
        streamable_http_path=path, host="127.0.0.1", json_response=json_response
    )
    if kind == "legacy-inflight":
        return legacy_only(app)
    if kind == "modern-mrtr":
        return modern_only(app)
    return app
