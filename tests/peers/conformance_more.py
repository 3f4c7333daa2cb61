"""Fixtures for the conformance suite's other 2026-07-28 server scenarios, in both styles.

Beside the ``input-required-result-*`` fixtures (``tests.peers.conformance_app``), the CLI's
2026-07-28 server scenarios call tools, prompts and resources by name; this module serves them,
with the texts the scenarios document. Most answer the same in both styles. Where a legacy server
and a 2026 one must differ, the difference is the point of the scenario through the bridge:

- ``test_missing_capability`` (server-stateless) needs sampling. The legacy twin asks for it in
  flight whatever its session declared (a server that relies on a capability, the case the
  bridge's per-request gate exists for); the MRTR twin returns ``input_required`` and refuses with
  -32021 itself when the request did not declare sampling.
- ``test_streaming_elicitation`` asks for a name: in flight, or as ``input_required``.
- ``test_logging_tool`` logs before it answers; a 2026 request without ``_meta`` ``logLevel`` must
  not see the log (the SDK filters on its own side, the bridge on the legacy side).
- ``resources/read`` of an unknown URI fails with the era's resource-not-found code: -32002 with
  ``data.uri`` from the legacy server (2025 practice), -32602 from the 2026 one (SEP-2164), so the
  bridge's translation is what the scenario sees.

``TOOLS`` lists a question-free tool first: ``http-header-validation`` calls the first listed tool
with no arguments and wants a plain success. ``TOOLS`` ends with one tool of the proxy's own tests,
``WHOAMI``: it tells a caller which credentials, upstream session and capabilities the server saw
(so a test of the bridge's sessions asks the real server rather than the proxy).
"""

from __future__ import annotations

import base64
import json
import struct
import warnings
from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.message import ServerMessageMetadata

__all__ = [
    "PROMPTS",
    "RESOURCES",
    "RESOURCE_TEMPLATES",
    "TOOLS",
    "WHOAMI",
    "complete",
    "get_prompt",
    "name_request",
    "named",
    "read_resource",
    "said",
    "sample_request",
    "tool_for",
]

Ctx = ServerRequestContext[Any, Any]
Style = Literal["inflight", "mrtr"]
ToolResult = types.CallToolResult | types.InputRequiredResult
ToolFn = Callable[[Ctx, types.CallToolRequestParams], Awaitable[ToolResult]]

RESOURCE_NOT_FOUND_LEGACY: Final = -32002
"""What 2025-era servers answered for an unknown resource (SEP-2164 moved 2026 to -32602)."""

PNG: Final = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
)
"""A 1x1 red pixel."""


def _wav() -> str:
    """A valid WAV file of one silent 8-bit sample at 8 kHz."""
    data = b"\x80"
    fmt = struct.pack("<HHIIHH", 1, 1, 8000, 8000, 1, 8)
    body = (
        b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    )
    return base64.b64encode(b"RIFF" + struct.pack("<I", len(body)) + body).decode("ascii")


WAV: Final = _wav()

SCHEMA_2020_12: Final[dict[str, Any]] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}
"""The inputSchema json-schema-2020-12 expects back from tools/list, keyword for keyword."""

HEADER_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
    "required": ["region"],
}
"""A string argument mirrored into ``Mcp-Param-Region`` (http-custom-header-server-validation)."""

_NO_ARGS: Final[dict[str, Any]] = {"type": "object", "properties": {}}


def _tool(name: str, description: str, schema: dict[str, Any] | None = None) -> types.Tool:
    return types.Tool(name=name, description=description, input_schema=schema or _NO_ARGS)


TOOLS: Final[list[types.Tool]] = [
    _tool("test_simple_text", "Returns simple text."),
    _tool("test_image_content", "Returns an image."),
    _tool("test_audio_content", "Returns audio."),
    _tool("test_embedded_resource", "Returns an embedded resource."),
    _tool("test_multiple_content_types", "Returns text, an image and a resource."),
    _tool("test_error_handling", "Always fails with isError."),
    _tool("test_tool_with_progress", "Reports progress 0, 50, 100 of 100."),
    _tool("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features", SCHEMA_2020_12),
    _tool("test_param_header", "Echoes its region, which clients mirror in Mcp-Param-Region.", HEADER_SCHEMA),
    _tool("test_missing_capability", "Needs sampling from the client."),
    _tool("test_streaming_elicitation", "Asks the user's name."),
    _tool("test_logging_tool", "Logs a line, then answers."),
]

WHOAMI: Final = "proxy_test_whoami"
"""Not a suite fixture: reports the request's `Authorization`, `Mcp-Session-Id` and the client
capabilities the server holds for it (a legacy session's, or a 2026 request's)."""

TOOLS.append(_tool(WHOAMI, "Reports the credentials, session and client capabilities this server sees."))


def _text(text: str, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=error)


def _embedded(uri: str, text: str, mime: str = "text/plain") -> types.EmbeddedResource:
    return types.EmbeddedResource(resource=types.TextResourceContents(uri=uri, mime_type=mime, text=text))


CONTENT: Final[dict[str, types.CallToolResult]] = {
    "test_simple_text": _text("This is a simple text response for testing."),
    "test_image_content": types.CallToolResult(content=[types.ImageContent(data=PNG, mime_type="image/png")]),
    "test_audio_content": types.CallToolResult(content=[types.AudioContent(data=WAV, mime_type="audio/wav")]),
    "test_embedded_resource": types.CallToolResult(
        content=[_embedded("test://embedded-resource", "This is an embedded resource content.")]
    ),
    "test_multiple_content_types": types.CallToolResult(
        content=[
            types.TextContent(text="Multiple content types test:"),
            types.ImageContent(data=PNG, mime_type="image/png"),
            _embedded("test://mixed-content-resource", '{"test":"data","value":123}', "application/json"),
        ]
    ),
    "test_error_handling": _text("This tool intentionally returns an error for testing", error=True),
    "json_schema_2020_12_tool": _text("json schema 2020-12 tool called"),
}
"""Tools whose answer is a constant, the same in both styles."""

# --------------------------------------------------------------------------------------------
# Tools that do something.
# --------------------------------------------------------------------------------------------


async def _progress(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    for step, value in enumerate((0, 50, 100)):
        if step:
            await anyio.sleep(0.05)
        await ctx.session.report_progress(value, 100)  # a no-op without a progressToken
    return _text("Progress reported: 0, 50, 100 of 100.")


async def _param_header(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    region = (params.arguments or {}).get("region")
    return _text(f"region={region}")


async def _logging(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    # Deprecated in 2026-07-28 but still delivered where the request asked for it.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        await ctx.session.send_log_message(
            "info", "test_logging_tool ran", logger="conformance", related_request_id=ctx.request_id
        )
    return _text("Logged one line.")


def sample_request() -> types.CreateMessageRequest:
    """What `test_missing_capability` asks the client's LLM."""
    message = types.SamplingMessage(role="user", content=types.TextContent(text="Say something"))
    return types.CreateMessageRequest(
        params=types.CreateMessageRequestParams(messages=[message], max_tokens=20)
    )


def name_request() -> types.ElicitRequest:
    """What `test_streaming_elicitation` asks the user."""
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(message="What is your name?", requested_schema=schema)
    )


def _related(ctx: Ctx) -> ServerMessageMetadata:
    return ServerMessageMetadata(related_request_id=ctx.request_id)


def said(result: types.CreateMessageResult) -> ToolResult:
    """`test_missing_capability`'s answer for a sampling result."""
    content = result.content
    return _text(f"sampled: {content.text if isinstance(content, types.TextContent) else content.type}")


def named(result: types.ElicitResult) -> ToolResult:
    """`test_streaming_elicitation`'s answer for an elicitation result."""
    name = (result.content or {}).get("name") if result.action == "accept" else None
    return _text(f"Hello, {name}!" if name else f"No name ({result.action})")


async def _inflight_missing_capability(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    sampled = await ctx.session.send_request(
        sample_request(), types.CreateMessageResult, metadata=_related(ctx)
    )
    return said(sampled)


async def _inflight_streaming_elicitation(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    answer = await ctx.session.send_request(name_request(), types.ElicitResult, metadata=_related(ctx))
    return named(answer)


async def _whoami(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
    headers = getattr(ctx.request, "headers", None)
    caps = ctx.session.client_capabilities
    seen = {
        "authorization": headers.get("authorization") if headers is not None else None,
        "cookie": headers.get("cookie") if headers is not None else None,
        "session": headers.get("mcp-session-id") if headers is not None else None,
        "capabilities": caps.model_dump(by_alias=True, mode="json", exclude_none=True) if caps else {},
    }
    return _text(json.dumps(seen, sort_keys=True))


_SHARED: Final[dict[str, ToolFn]] = {
    WHOAMI: _whoami,
    "test_tool_with_progress": _progress,
    "test_param_header": _param_header,
    "test_logging_tool": _logging,
}

_INFLIGHT: Final[dict[str, ToolFn]] = {
    "test_missing_capability": _inflight_missing_capability,
    "test_streaming_elicitation": _inflight_streaming_elicitation,
}


def tool_for(name: str, style: Style) -> ToolFn | None:
    """The handler of one of this module's tools in `style` (None: not one of them, or an MRTR twin
    that `tests.peers.conformance_app` serves with its own input helpers)."""
    constant = CONTENT.get(name)
    if constant is not None:

        async def answer(ctx: Ctx, params: types.CallToolRequestParams) -> ToolResult:
            return constant

        return answer
    own = _INFLIGHT if style == "inflight" else {}
    return _SHARED.get(name) or own.get(name)


# --------------------------------------------------------------------------------------------
# Resources.
# --------------------------------------------------------------------------------------------

RESOURCES: Final[list[types.Resource]] = [
    types.Resource(
        uri="test://static-text",
        name="static-text",
        description="A static text resource",
        mime_type="text/plain",
    ),
    types.Resource(
        uri="test://static-binary", name="static-binary", description="A 1x1 PNG", mime_type="image/png"
    ),
]

RESOURCE_TEMPLATES: Final[list[types.ResourceTemplate]] = [
    types.ResourceTemplate(
        uri_template="test://template/{id}/data",
        name="template-data",
        description="Data for an id",
        mime_type="application/json",
    )
]

_TEMPLATE_PREFIX: Final = "test://template/"
_TEMPLATE_SUFFIX: Final = "/data"


def read_resource(uri: str, style: Style) -> types.ReadResourceResult:
    """A resource's contents; an unknown URI is the era's resource-not-found error with `data.uri`."""
    if uri == "test://static-text":
        text = types.TextResourceContents(
            uri=uri, mime_type="text/plain", text="This is the content of the static text resource."
        )
        return types.ReadResourceResult(contents=[text])
    if uri == "test://static-binary":
        return types.ReadResourceResult(
            contents=[types.BlobResourceContents(uri=uri, mime_type="image/png", blob=PNG)]
        )
    if uri.startswith(_TEMPLATE_PREFIX) and uri.endswith(_TEMPLATE_SUFFIX):
        ident = uri[len(_TEMPLATE_PREFIX) : -len(_TEMPLATE_SUFFIX)]
        if ident and "/" not in ident:
            data = f'{{"id":"{ident}","templateTest":true,"data":"Data for ID: {ident}"}}'
            contents = types.TextResourceContents(uri=uri, mime_type="application/json", text=data)
            return types.ReadResourceResult(contents=[contents])
    code = RESOURCE_NOT_FOUND_LEGACY if style == "inflight" else types.INVALID_PARAMS
    raise MCPError(code=code, message="Resource not found", data={"uri": uri})


# --------------------------------------------------------------------------------------------
# Prompts and completion.
# --------------------------------------------------------------------------------------------


def _arg(name: str, description: str) -> types.PromptArgument:
    return types.PromptArgument(name=name, description=description, required=True)


PROMPTS: Final[list[types.Prompt]] = [
    types.Prompt(name="test_simple_prompt", description="A simple prompt without arguments."),
    types.Prompt(
        name="test_prompt_with_arguments",
        description="A prompt with two arguments.",
        arguments=[_arg("arg1", "First test argument"), _arg("arg2", "Second test argument")],
    ),
    types.Prompt(
        name="test_prompt_with_embedded_resource",
        description="A prompt that embeds a resource.",
        arguments=[_arg("resourceUri", "URI of the resource to embed")],
    ),
    types.Prompt(name="test_prompt_with_image", description="A prompt with an image."),
]


def _user(content: types.TextContent | types.ImageContent | types.EmbeddedResource) -> types.PromptMessage:
    return types.PromptMessage(role="user", content=content)


def get_prompt(name: str, arguments: dict[str, str] | None) -> types.GetPromptResult | None:
    """One of this module's prompts (None: not one of them)."""
    args = arguments or {}
    if name == "test_simple_prompt":
        messages = [_user(types.TextContent(text="This is a simple prompt for testing."))]
    elif name == "test_prompt_with_arguments":
        text = f"Prompt with arguments: arg1='{args.get('arg1', '')}', arg2='{args.get('arg2', '')}'"
        messages = [_user(types.TextContent(text=text))]
    elif name == "test_prompt_with_embedded_resource":
        uri = args.get("resourceUri", "test://example-resource")
        messages = [
            _user(_embedded(uri, "Embedded resource content for testing.")),
            _user(types.TextContent(text="Please process the embedded resource above.")),
        ]
    elif name == "test_prompt_with_image":
        messages = [
            _user(types.ImageContent(data=PNG, mime_type="image/png")),
            _user(types.TextContent(text="Please analyze the image above.")),
        ]
    else:
        return None
    return types.GetPromptResult(messages=messages)


_CITIES: Final = ("paris", "park", "party", "test", "testing")


def complete(params: types.CompleteRequestParams) -> types.CompleteResult:
    """Completion of prompt arguments: the known words that start with what was typed."""
    typed = params.argument.value.lower()
    values = [word for word in _CITIES if word.startswith(typed)]
    return types.CompleteResult(completion=types.Completion(values=values, total=len(values), has_more=False))
