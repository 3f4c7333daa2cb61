"""A peer mounted under a path prefix, as deployed servers often are: Starlette's `Mount`.

`Mount("/api", app)` serves the SDK app's `/mcp` at `/api/mcp`, and Starlette's slash redirect answers
`/api/mcp/` with `307 Location: .../api/mcp`: an `--upstream` given with the other trailing slash
meets a redirect, not the endpoint. The app's lifespan (its session manager) is run as is, since a
mounted app's lifespan is not run by the router that mounts it.
"""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.types import ASGIApp, Receive, Scope, Send


def mounted(app: ASGIApp, prefix: str) -> ASGIApp:
    """`app` served under `prefix` by a Starlette router, its lifespan run directly."""
    router = Starlette(routes=[Mount(prefix, app=app)])

    async def serve(scope: Scope, receive: Receive, send: Send) -> None:
        await (app if scope["type"] == "lifespan" else router)(scope, receive, send)

    return serve
