"""An `MCPServer` (the SDK's high-level server) whose tool announces changes it never declared.

`MCPServer` declares `tools.listChanged: false` and `resources.subscribe: false`, yet its `touch` tool
sends `notifications/resources/updated` and `notifications/tools/list_changed` all the same: through
`ctx.notify_*` (what a 2026-07-28 listen stream carries) and, on a legacy session, through
`ctx.session.send_*` with no related request, which the SDK puts on the session's standalone GET
stream. A team migrating such a server meets exactly this; nothing about it is faked.
"""

from __future__ import annotations

from mcp.server.mcpserver import Context, MCPServer
from starlette.types import ASGIApp

from tests.peers.apps import SERVER_NAME, legacy_only, modern_only

TOUCHED_URI = "res://static"
"""The resource whose update `touch` announces (and a listening client asks for)."""


def build_announcing_app(era: str) -> ASGIApp:
    """The app in one era: `legacy` (legacy sessions only) or `modern` (2026-07-28 only)."""
    server = MCPServer(SERVER_NAME, version="1.0.0")

    @server.tool()
    async def touch(ctx: Context) -> str:
        """Announce a tool-list change and an update of `TOUCHED_URI`."""
        await ctx.notify_resource_updated(TOUCHED_URI)
        await ctx.notify_tools_changed()
        if era == "legacy":
            await ctx.session.send_resource_updated(TOUCHED_URI)
            await ctx.session.send_tool_list_changed()
        return "touched"

    @server.resource(TOUCHED_URI, mime_type="text/plain")
    def static() -> str:
        return "static text"

    app: ASGIApp = server.streamable_http_app(host="127.0.0.1")
    return legacy_only(app) if era == "legacy" else modern_only(app)
