"""The MCP conformance suite's ``input-required-result-*`` fixtures, served in both styles.

``@modelcontextprotocol/conformance@0.2.0-alpha.12`` has 14 server scenarios for SEP-2322 (MRTR,
2026-07-28) that call tools named ``test_input_required_result_*`` and the prompt
``test_input_required_result_prompt`` (see ``tests/conformance/scenarios.py`` for what each scenario
sends and checks). This module builds those fixtures twice with the official ``mcp`` SDK, with the
same questions and the same final results for the same answers:

- ``conformance-modern``: 2026-07-28 only (``modern_only``), written MRTR-style: handlers return
  ``InputRequiredResult`` with the input keys the scenarios document (``user_name``,
  ``capital_question``, ``client_roots``, ``confirm``, ``greeting``, ``step1``/``step2``,
  ``user_context``) and read ``input_responses`` / ``request_state`` on the retry. ``requestState``
  is sealed by the SDK's ``RequestStateBoundary``, so a tampered one gets -32602. The conformance
  CLI run directly against it passes every check: it is the reference that validates the harness.
- ``conformance-legacy``: 2025-11-25 and older only (``legacy_only``), written in the legacy
  in-flight style: each tool asks its questions with ``ctx.session.send_request`` and the
  originating request id as related request (so they ride that POST's SSE stream) and returns the
  same final result. It has no input keys and no ``requestState``; in front of it the proxy's
  ``mrtr_to_legacy`` bridge has to play the MRTR server.

Two fixtures need a word on how a legacy server can be "the same":

- ``test_input_required_result_multiple_inputs`` asks its three questions concurrently (a task
  group), so they arrive together and a bridge can put them in one round, as the scenario demands.
- ``test_input_required_result_capabilities`` is written the way servers usually are: it asks the
  user (elicitation) when the client can be asked, and otherwise falls back to the LLM (sampling),
  and otherwise answers without either. The legacy twin reads its session's capabilities (declared
  once, at ``initialize``), the MRTR twin the request's. Through the bridge the legacy twin takes
  the fallback only if the session the bridge opened for that client declares what the client
  declared, which is what ``input-required-result-capability-check`` shows.

The other 2026-07-28 server scenarios' tools, prompts and resources come from
``tests.peers.conformance_more`` and are served by both kinds too.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal, TypeVar

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import ServerMessageMetadata
from starlette.types import ASGIApp

from tests.peers import conformance_more as more
from tests.peers.apps import _field, _input_required, _text, legacy_only, modern_only

__all__ = [
    "CONFORMANCE_KINDS",
    "PROMPT_NAME",
    "TOOL_NAMES",
    "ConformanceKind",
    "build_conformance_app",
    "build_conformance_server",
]

ConformanceKind = Literal["conformance-modern", "conformance-legacy"]
CONFORMANCE_KINDS: Final[tuple[ConformanceKind, ...]] = ("conformance-modern", "conformance-legacy")

SERVER_NAME: Final = "mcp-debug-proxy-conformance-peer"

ELICITATION: Final = "test_input_required_result_elicitation"
SAMPLING: Final = "test_input_required_result_sampling"
LIST_ROOTS: Final = "test_input_required_result_list_roots"
REQUEST_STATE: Final = "test_input_required_result_request_state"
MULTIPLE_INPUTS: Final = "test_input_required_result_multiple_inputs"
MULTI_ROUND: Final = "test_input_required_result_multi_round"
TAMPERED_STATE: Final = "test_input_required_result_tampered_state"
CAPABILITIES: Final = "test_input_required_result_capabilities"
PROMPT_NAME: Final = "test_input_required_result_prompt"

TOOL_NAMES: Final[tuple[str, ...]] = (
    ELICITATION,
    SAMPLING,
    LIST_ROOTS,
    REQUEST_STATE,
    MULTIPLE_INPUTS,
    MULTI_ROUND,
    TAMPERED_STATE,
    CAPABILITIES,
)

Ctx = ServerRequestContext[Any, Any]
ToolResult = types.CallToolResult | types.InputRequiredResult
PromptResult = types.GetPromptResult | types.InputRequiredResult
_R = TypeVar("_R", types.ElicitResult, types.CreateMessageResult, types.ListRootsResult)

# --------------------------------------------------------------------------------------------
# The questions (identical in both styles; texts and schemas as the scenarios document them).
# --------------------------------------------------------------------------------------------


def _schema(field: str, kind: str = "string") -> dict[str, Any]:
    return {"type": "object", "properties": {field: {"type": kind}}, "required": [field]}


def _elicit(message: str, field: str, kind: str = "string") -> types.ElicitRequest:
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(message=message, requested_schema=_schema(field, kind))
    )


def _sample(text: str, max_tokens: int) -> types.CreateMessageRequest:
    return types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(
            messages=[types.SamplingMessage(role="user", content=types.TextContent(text=text))],
            max_tokens=max_tokens,
        )
    )


def ask_name() -> types.ElicitRequest:
    return _elicit("What is your name?", "name")


def ask_capital() -> types.CreateMessageRequest:
    return _sample("What is the capital of France?", 100)


def ask_greeting() -> types.CreateMessageRequest:
    return _sample("Generate a greeting", 50)


def ask_roots() -> types.ListRootsRequest:
    return types.ListRootsRequest()


def ask_confirm() -> types.ElicitRequest:
    return _elicit("Please confirm", "ok", "boolean")


def ask_step1() -> types.ElicitRequest:
    return _elicit("Step 1: What is your name?", "name")


def ask_step2() -> types.ElicitRequest:
    return _elicit("Step 2: What is your favorite color?", "color")


def ask_context() -> types.ElicitRequest:
    return _elicit("What context should the prompt use?", "context")


def ask_capability_sample() -> types.CreateMessageRequest:
    return _sample("Say something for the capability check", 50)


def ask_capability_elicit() -> types.ElicitRequest:
    return _elicit("Anything to add for the capability check?", "note")


# --------------------------------------------------------------------------------------------
# Final results (identical in both styles for identical answers).
# --------------------------------------------------------------------------------------------


def _sampled(result: types.CreateMessageResult) -> str:
    content = result.content
    return content.text if isinstance(content, types.TextContent) else f"<{content.type}>"


def _roots(result: types.ListRootsResult) -> str:
    return ",".join(str(root.uri) for root in result.roots)


def hello(answer: types.ElicitResult) -> types.CallToolResult:
    if answer.action == "accept" and answer.content is not None and "name" in answer.content:
        return _text(f"Hello, {answer.content['name']}!")
    return _text(f"No name ({answer.action})")


def capital(answer: types.CreateMessageResult) -> types.CallToolResult:
    return _text(_sampled(answer))


def roots_seen(answer: types.ListRootsResult) -> types.CallToolResult:
    return _text(f"roots: {_roots(answer)}")


def state_ok(answer: types.ElicitResult) -> types.CallToolResult:
    # "state-ok" is what request-state asks for: the requestState came back intact (here, or at the
    # bridge that sealed it in front of a legacy server).
    return _text(f"state-ok ok={_field(answer, 'ok')}")


def all_three(
    name: types.ElicitResult, greeting: types.CreateMessageResult, roots: types.ListRootsResult
) -> types.CallToolResult:
    return _text(f"name={_field(name, 'name')} greeting={_sampled(greeting)} roots={_roots(roots)}")


def two_steps(name: str, color: types.ElicitResult) -> types.CallToolResult:
    return _text(f"name={name} color={_field(color, 'color')}")


def capability_outcome(*, note: str | None = None, sampled: str | None = None) -> types.CallToolResult:
    if note is not None:
        return _text(f"note={note}")
    if sampled is not None:
        return _text(f"sampled={sampled} (fallback: no elicitation declared)")
    return _text("neither elicitation nor sampling declared")


def prompt_result(answer: types.ElicitResult) -> types.GetPromptResult:
    return types.GetPromptResult(
        description="Prompt built from the elicited context",
        messages=[
            types.PromptMessage(
                role="user", content=types.TextContent(text=f"Context: {_field(answer, 'context')}")
            )
        ],
    )


# --------------------------------------------------------------------------------------------
# Catalogue.
# --------------------------------------------------------------------------------------------

_NO_ARGS: Final[dict[str, Any]] = {"type": "object", "properties": {}}

TOOLS: Final[list[types.Tool]] = [
    types.Tool(name=name, description=description, input_schema=_NO_ARGS)
    for name, description in (
        (ELICITATION, "Asks the user's name (user_name)."),
        (SAMPLING, "Asks the LLM a question (capital_question)."),
        (LIST_ROOTS, "Asks for the client's roots (client_roots)."),
        (REQUEST_STATE, "Asks a confirmation, with requestState (confirm)."),
        (MULTIPLE_INPUTS, "Asks name, a greeting and the roots at once (user_name, greeting, client_roots)."),
        (MULTI_ROUND, "Asks name, then color (step1, step2)."),
        (TAMPERED_STATE, "Asks a confirmation, with sealed requestState (confirm)."),
        (CAPABILITIES, "Asks the user if it may, else falls back to sampling (capability_note / _sample)."),
    )
]

PROMPTS: Final[list[types.Prompt]] = [
    types.Prompt(name=PROMPT_NAME, description="A prompt built from context the user gives (user_context).")
]

# --------------------------------------------------------------------------------------------
# Legacy in-flight style.
# --------------------------------------------------------------------------------------------


def _related(ctx: Ctx) -> ServerMessageMetadata:
    return ServerMessageMetadata(related_request_id=ctx.request_id)


async def _ask_elicit(ctx: Ctx, request: types.ElicitRequest) -> types.ElicitResult:
    return await ctx.session.send_request(request, types.ElicitResult, metadata=_related(ctx))


async def _ask_sample(ctx: Ctx, request: types.CreateMessageRequest) -> types.CreateMessageResult:
    return await ctx.session.send_request(request, types.CreateMessageResult, metadata=_related(ctx))


async def _ask_roots(ctx: Ctx) -> types.ListRootsResult:
    # Not `ctx.session.list_roots()`: it takes no related request id, so it would use the GET stream.
    return await ctx.session.send_request(ask_roots(), types.ListRootsResult, metadata=_related(ctx))


async def _inflight_multiple(ctx: Ctx) -> types.CallToolResult:
    name: list[types.ElicitResult] = []
    greeting: list[types.CreateMessageResult] = []
    roots: list[types.ListRootsResult] = []

    async def get_name() -> None:
        name.append(await _ask_elicit(ctx, ask_name()))

    async def get_greeting() -> None:
        greeting.append(await _ask_sample(ctx, ask_greeting()))

    async def get_roots() -> None:
        roots.append(await _ask_roots(ctx))

    # All three go out before any answer comes back, so a bridge can offer them as one round.
    async with anyio.create_task_group() as group:
        group.start_soon(get_name)
        group.start_soon(get_greeting)
        group.start_soon(get_roots)
    return all_three(name[0], greeting[0], roots[0])


async def _inflight_capabilities(ctx: Ctx) -> types.CallToolResult:
    caps = ctx.session.client_capabilities or types.ClientCapabilities()  # the session's, from initialize
    if caps.elicitation is not None:
        return capability_outcome(note=_field(await _ask_elicit(ctx, ask_capability_elicit()), "note"))
    if caps.sampling is not None:
        return capability_outcome(sampled=_sampled(await _ask_sample(ctx, ask_capability_sample())))
    return capability_outcome()


async def _inflight_tool(ctx: Ctx, name: str) -> types.CallToolResult:
    if name == ELICITATION:
        return hello(await _ask_elicit(ctx, ask_name()))
    if name == SAMPLING:
        return capital(await _ask_sample(ctx, ask_capital()))
    if name == LIST_ROOTS:
        return roots_seen(await _ask_roots(ctx))
    if name in (REQUEST_STATE, TAMPERED_STATE):
        return state_ok(await _ask_elicit(ctx, ask_confirm()))
    if name == MULTIPLE_INPUTS:
        return await _inflight_multiple(ctx)
    if name == MULTI_ROUND:
        first = await _ask_elicit(ctx, ask_step1())
        return two_steps(_field(first, "name"), await _ask_elicit(ctx, ask_step2()))
    if name == CAPABILITIES:
        return await _inflight_capabilities(ctx)
    raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {name}")


async def _inflight_call_tool(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    other = more.tool_for(params.name, "inflight")
    return await (other(ctx, params) if other is not None else _inflight_tool(ctx, params.name))


async def _inflight_get_prompt(ctx: Ctx, params: types.GetPromptRequestParams) -> PromptResult:
    other = more.get_prompt(params.name, params.arguments)
    if other is not None:
        return other
    if params.name != PROMPT_NAME:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {params.name}")
    return prompt_result(await _ask_elicit(ctx, ask_context()))


# --------------------------------------------------------------------------------------------
# MRTR style (2026-07-28).
# --------------------------------------------------------------------------------------------


def _state(raw: str | None) -> dict[str, Any]:
    """This server's own state (already unsealed by the boundary); junk reads as no state."""
    if raw is None:
        return {}
    try:
        value = json.loads(raw)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _as(model: type[_R], value: types.InputResponse | None) -> _R | None:
    if value is None:
        return None
    if isinstance(value, model):
        return value
    try:
        return model.model_validate(value.model_dump(by_alias=True, exclude_none=True))
    except ValueError:
        return None


def _elicited(params: types.InputResponseRequestParams, key: str) -> types.ElicitResult | None:
    return _as(types.ElicitResult, (params.input_responses or {}).get(key))


def _sampled_answer(params: types.InputResponseRequestParams, key: str) -> types.CreateMessageResult | None:
    return _as(types.CreateMessageResult, (params.input_responses or {}).get(key))


def _roots_answer(params: types.InputResponseRequestParams, key: str) -> types.ListRootsResult | None:
    return _as(types.ListRootsResult, (params.input_responses or {}).get(key))


def _own_state(params: types.InputResponseRequestParams, tool: str) -> dict[str, Any] | None:
    """The state this tool minted, or None when there is none; a foreign one is -32602."""
    if params.request_state is None:
        return None
    state = _state(params.request_state)
    if state.get("tool") != tool:
        raise MCPError(code=types.INVALID_PARAMS, message="Invalid or expired requestState")
    return state


async def _mrtr_elicitation(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    # Stateless: a retry is recognised by its answer alone (the scenarios send `user_name` even on a
    # first call, with or without extra keys, and expect completion or a re-ask accordingly).
    answer = _elicited(params, "user_name")
    return hello(answer) if answer is not None else _input_required(ctx, {"user_name": ask_name()})


async def _mrtr_sampling(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    answer = _sampled_answer(params, "capital_question")
    if answer is None:
        return _input_required(ctx, {"capital_question": ask_capital()})
    return capital(answer)


async def _mrtr_list_roots(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    answer = _roots_answer(params, "client_roots")
    return roots_seen(answer) if answer is not None else _input_required(ctx, {"client_roots": ask_roots()})


async def _mrtr_confirm(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    """request-state and tampered-state: a confirmation whose retry must bring this tool's state back."""
    state = _own_state(params, params.name)
    answer = _elicited(params, "confirm")
    if state is None or answer is None:
        return _input_required(ctx, {"confirm": ask_confirm()}, {"tool": params.name})
    return state_ok(answer)


async def _mrtr_multiple(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    state = _own_state(params, MULTIPLE_INPUTS)
    name = _elicited(params, "user_name")
    greeting = _sampled_answer(params, "greeting")
    roots = _roots_answer(params, "client_roots")
    if state is None or name is None or greeting is None or roots is None:
        requests: dict[str, types.InputRequest] = {
            "user_name": ask_name(),
            "greeting": ask_greeting(),
            "client_roots": ask_roots(),
        }
        return _input_required(ctx, requests, {"tool": MULTIPLE_INPUTS})
    return all_three(name, greeting, roots)


async def _mrtr_multi_round(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    state = _own_state(params, MULTI_ROUND) or {}
    if state.get("step") == 2 and isinstance(state.get("name"), str):
        color = _elicited(params, "step2")
        if color is None:
            return _input_required(ctx, {"step2": ask_step2()}, state)
        return two_steps(state["name"], color)
    name = _elicited(params, "step1") if state.get("step") == 1 else None
    if name is None:
        return _input_required(ctx, {"step1": ask_step1()}, {"tool": MULTI_ROUND, "step": 1})
    next_state = {"tool": MULTI_ROUND, "step": 2, "name": _field(name, "name")}
    return _input_required(ctx, {"step2": ask_step2()}, next_state)


async def _mrtr_capabilities(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    caps = ctx.session.client_capabilities or types.ClientCapabilities()  # this request's
    if caps.elicitation is not None:
        note = _elicited(params, "capability_note")
        if note is None:
            return _input_required(ctx, {"capability_note": ask_capability_elicit()})
        return capability_outcome(note=_field(note, "note"))
    if caps.sampling is not None:
        sampled = _sampled_answer(params, "capability_sample")
        if sampled is None:
            return _input_required(ctx, {"capability_sample": ask_capability_sample()})
        return capability_outcome(sampled=_sampled(sampled))
    return capability_outcome()


async def _mrtr_missing_capability(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    answer = _sampled_answer(params, "sample")
    return (
        more.said(answer) if answer is not None else _input_required(ctx, {"sample": more.sample_request()})
    )


async def _mrtr_streaming_elicitation(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    answer = _elicited(params, "user_name")
    return (
        more.named(answer) if answer is not None else _input_required(ctx, {"user_name": more.name_request()})
    )


_MrtrTool = Callable[[Ctx, types.CallToolRequestParams], Awaitable[ToolResult]]

_MRTR_TOOLS: Final[dict[str, _MrtrTool]] = {
    ELICITATION: _mrtr_elicitation,
    SAMPLING: _mrtr_sampling,
    LIST_ROOTS: _mrtr_list_roots,
    REQUEST_STATE: _mrtr_confirm,
    MULTIPLE_INPUTS: _mrtr_multiple,
    MULTI_ROUND: _mrtr_multi_round,
    TAMPERED_STATE: _mrtr_confirm,
    CAPABILITIES: _mrtr_capabilities,
    "test_missing_capability": _mrtr_missing_capability,
    "test_streaming_elicitation": _mrtr_streaming_elicitation,
}


async def _mrtr_call_tool(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    fn = _MRTR_TOOLS.get(params.name) or more.tool_for(params.name, "mrtr")
    if fn is None:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
    return await fn(ctx, params)


async def _mrtr_get_prompt(ctx: Ctx, params: types.GetPromptRequestParams) -> PromptResult:
    other = more.get_prompt(params.name, params.arguments)
    if other is not None:
        return other
    if params.name != PROMPT_NAME:
        raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown prompt: {params.name}")
    answer = _elicited(params, "user_context")
    if answer is None:
        return _input_required(ctx, {"user_context": ask_context()})
    return prompt_result(answer)


# --------------------------------------------------------------------------------------------
# Assembly.
# --------------------------------------------------------------------------------------------


def build_conformance_server(style: Literal["inflight", "mrtr"]) -> Server[Any]:
    """The low-level SDK server with the conformance fixtures in `style` (MRTR seals its state)."""

    async def list_tools(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[*more.TOOLS, *TOOLS])

    async def list_prompts(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[*more.PROMPTS, *PROMPTS])

    async def list_resources(
        ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=list(more.RESOURCES))

    async def list_templates(
        ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=list(more.RESOURCE_TEMPLATES))

    async def read_resource(ctx: Ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        return more.read_resource(str(params.uri), style)

    async def complete(ctx: Ctx, params: types.CompleteRequestParams) -> types.CompleteResult:
        return more.complete(params)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        server: Server[Any] = Server(
            SERVER_NAME,
            version="1.0.0",
            instructions=f"Conformance fixtures ({style} style).",
            on_list_tools=list_tools,
            on_call_tool=_inflight_call_tool if style == "inflight" else _mrtr_call_tool,
            on_list_prompts=list_prompts,
            on_get_prompt=_inflight_get_prompt if style == "inflight" else _mrtr_get_prompt,
            on_list_resources=list_resources,
            on_list_resource_templates=list_templates,
            on_read_resource=read_resource,
            on_completion=complete,
        )
    if style == "mrtr":
        server.middleware.append(
            RequestStateBoundary(RequestStateSecurity.ephemeral(), default_audience=SERVER_NAME)
        )
    return server


def build_conformance_app(kind: str) -> ASGIApp:
    """The ASGI app for a conformance kind; the MCP endpoint is ``/mcp``."""
    if kind not in CONFORMANCE_KINDS:
        raise ValueError(f"unknown conformance kind {kind!r}; expected one of {', '.join(CONFORMANCE_KINDS)}")
    style: Literal["inflight", "mrtr"] = "mrtr" if kind == "conformance-modern" else "inflight"
    app: ASGIApp = build_conformance_server(style).streamable_http_app(
        streamable_http_path="/mcp", host="127.0.0.1"
    )
    return modern_only(app) if style == "mrtr" else legacy_only(app)
