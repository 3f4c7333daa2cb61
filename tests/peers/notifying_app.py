"""A legacy (2025-11-25) SDK server that announces changes on its session's GET stream.

Its one tool, ``announce_changes``, sends ``notifications/tools/list_changed`` and then
``notifications/resources/updated`` for every URI the session ``resources/subscribe``d, with no
related request: the SDK puts such notifications on the session's standalone GET stream, where a
legacy server sends whatever is not part of a call. The ``announce`` resource exists to be
subscribed to. Nothing about the protocol is faked.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from starlette.types import ASGIApp

from tests.peers.apps import SERVER_NAME, legacy_only

ANNOUNCE_URI = "test://announce"
"""The resource a client subscribes to before it asks for the announcement."""

Ctx = ServerRequestContext[Any, Any]

_TOOL = types.Tool(
    name="announce_changes",
    description="Send tools/list_changed and resources/updated (subscribed URIs) on the GET stream.",
    input_schema={"type": "object", "properties": {}},
)
_RESOURCE = types.Resource(uri=ANNOUNCE_URI, name="announce")


def build_notifying_app() -> ASGIApp:
    """The legacy-only app; each server process keeps one set of subscribed URIs (tests run one session)."""
    subscribed: set[str] = set()

    async def list_tools(ctx: Ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[_TOOL])

    async def list_resources(
        ctx: Ctx, params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[_RESOURCE])

    async def subscribe(ctx: Ctx, params: types.SubscribeRequestParams) -> types.EmptyResult:
        subscribed.add(str(params.uri))
        return types.EmptyResult()

    async def call_tool(ctx: Ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name != _TOOL.name:
            raise MCPError(code=types.INVALID_PARAMS, message=f"Unknown tool: {params.name}")
        await ctx.session.send_tool_list_changed()
        for uri in sorted(subscribed):
            await ctx.session.send_resource_updated(uri)
        return types.CallToolResult(content=[types.TextContent(type="text", text="announced")])

    server: Server[Any] = Server(
        SERVER_NAME,
        version="1.0.0",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_subscribe_resource=subscribe,
    )
    app: ASGIApp = server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    return legacy_only(app)
