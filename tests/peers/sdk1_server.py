"""A server on the official SDK's last 1.x release, written the way its users write one.

    .cache/peers/sdk1/bin/python -m tests.peers.sdk1_server [--port N] [--stateless] [--stdio]

Runs only in ``.cache/peers/sdk1`` (``pip install 'mcp<2'``): ``mcp.server.fastmcp.FastMCP``, streamable
HTTP, tools decorated with ``@mcp.tool()``. Most servers users put behind the proxy were built this
way, and they ask their clients differently from the 2.x peers: ``ctx.elicit`` names its request,
while ``ctx.session.create_message`` and ``list_roots`` without one go out on the session's GET
stream. ``--stateless`` serves as ``stateless_http=True`` does: no session, so a question asked in
flight can never be answered. ``--oauth`` adds an authorization server on the same origin
(``tests.peers.sdk1_oauth``) and asks every MCP request for its bearer token; ``--advertise`` with it
has the server advertise its own URL (issuer, resource, the 401's ``resource_metadata``) and accept
only tokens issued for that resource, as most servers with OAuth are set up. Prints
``READY <port> <http>`` like every peer (``uvicorn_ready``). ``--stdio`` serves the same server on stdio
instead (``mcp.run("stdio")``), as a command behind ``--upstream-cmd``; it prints nothing of its own.
``--gzip`` serves the app behind Starlette's ``GZipMiddleware`` (every body a client accepts gzip for,
small ones too), as a server deployed behind compression middleware answers.
"""

from __future__ import annotations

import argparse
import sys

from mcp.server.fastmcp import Context, FastMCP
from mcp.types import SamplingMessage, TextContent
from pydantic import BaseModel

from tests.peers.uvicorn_ready import HOST, bind, serve


class Name(BaseModel):
    """What `ask_name` asks the client for."""

    name: str


def build(stateless: bool, oauth: bool = False, base: str | None = None) -> FastMCP:
    """The server: a plain tool, one that elicits in flight, one that samples on the GET stream.

    `base` (with `oauth`): the server's own origin, which it then advertises (`sdk1_oauth.settings`)."""
    if oauth:
        from tests.peers import sdk1_oauth

        mcp = FastMCP(
            "sdk1-peer",
            stateless_http=stateless,
            host="127.0.0.1",
            auth_server_provider=sdk1_oauth.MemoryProvider(),
            auth=sdk1_oauth.settings(base),
        )
    else:
        mcp = FastMCP("sdk1-peer", stateless_http=stateless, host="127.0.0.1")

    @mcp.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @mcp.tool()
    async def ask_name(ctx: Context) -> str:  # type: ignore[type-arg]
        """Ask the client for a name, in flight on the call's own stream."""
        answer = await ctx.elicit("What is your name?", schema=Name)
        return f"Hello, {answer.data.name}!" if answer.action == "accept" else f"no name: {answer.action}"

    @mcp.tool()
    async def summarize(topic: str, ctx: Context) -> str:  # type: ignore[type-arg]
        """Ask the client's LLM, naming no request: the question goes on the session's GET stream."""
        asked = SamplingMessage(role="user", content=TextContent(type="text", text=f"Summarize {topic}"))
        sampled = await ctx.session.create_message(messages=[asked], max_tokens=50)
        text = sampled.content.text if isinstance(sampled.content, TextContent) else str(sampled.content)
        return f"{topic}: {text}"

    return mcp


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and serve until a termination signal."""
    parser = argparse.ArgumentParser(prog="python -m tests.peers.sdk1_server", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0 = any free port)")
    parser.add_argument("--stateless", action="store_true", help="serve without sessions")
    parser.add_argument(
        "--oauth", action="store_true", help="serve OAuth on the same origin, bearer required"
    )
    parser.add_argument(
        "--advertise", action="store_true", help="with --oauth: advertise the server's own URL"
    )
    parser.add_argument("--stdio", action="store_true", help="serve on stdin/stdout instead of HTTP")
    parser.add_argument("--gzip", action="store_true", help="compress what clients accept gzip for")
    args = parser.parse_args(argv)
    if args.stdio:
        build(stateless=False).run("stdio")
        return 0
    sock = bind(args.port)  # bound first: an advertising server names the port it got
    base = f"http://{HOST}:{sock.getsockname()[1]}" if args.advertise else None
    app = build(args.stateless, args.oauth, base).streamable_http_app()
    if args.gzip:
        from starlette.middleware.gzip import GZipMiddleware

        app.add_middleware(GZipMiddleware, minimum_size=0)
    return serve(app, args.port, sock=sock)


if __name__ == "__main__":
    sys.exit(main())
