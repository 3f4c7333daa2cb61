"""A server on the SDK's last release that speaks only 2024-11-05 (mcp 1.3.0), as its users wrote one.

    .cache/peers/sdk2024/bin/python -m tests.peers.sdk2024_server --stdio
    .cache/peers/sdk2024/bin/python -m tests.peers.sdk2024_server [--port N]

Runs only in ``.cache/peers/sdk2024`` (``pip install 'mcp==1.3.0'``): ``FastMCP`` with ``echo``,
``ask_llm`` (which samples the client), ``ask_twice`` (samples it twice side by side, the second
question a moment after the first), ``count`` (reports progress) and ``slow`` (answers after a while,
asking nothing), on stdio
(``mcp.run("stdio")``) or on the HTTP+SSE transport (GET ``/sse``, POST ``/messages/``), which then
prints ``READY <port> <http>`` like every peer. This
SDK meets a method it does not know unlike later ones: its stdio server stops reading without an
answer (silent until its stdin is next read, when it exits with a traceback), and its HTTP+SSE server
ends that session's stream.
"""

# No `from __future__ import annotations`: FastMCP 1.3.0 finds a tool's Context parameter by its
# annotation's class, which a string annotation hides.
import argparse
import sys

import anyio
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.sse import SseServerTransport
from mcp.types import SamplingMessage, TextContent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount, Route

from tests.peers.uvicorn_ready import serve


def build() -> FastMCP:
    """The server: a plain tool, and one that asks the client's LLM in flight."""
    mcp = FastMCP("sdk2024-peer")

    @mcp.tool()
    def echo(text: str) -> str:
        """Echo the text."""
        return text

    @mcp.tool()
    async def ask_llm(question: str, ctx: Context) -> str:
        """Ask the client's LLM."""
        asked = SamplingMessage(role="user", content=TextContent(type="text", text=question))
        sampled = await ctx.session.create_message(messages=[asked], max_tokens=20)
        return sampled.content.text if isinstance(sampled.content, TextContent) else str(sampled.content)

    @mcp.tool()
    async def ask_twice(who: str, gap: float, ctx: Context) -> str:
        """Ask the client's LLM two questions side by side, the second `gap` seconds after the first."""
        answers: dict[int, str] = {}

        async def ask(n: int, delay: float) -> None:
            await anyio.sleep(delay)
            answers[n] = await ask_llm(f"question {n} of {who}", ctx)

        async with anyio.create_task_group() as group:
            group.start_soon(ask, 1, 0.0)
            group.start_soon(ask, 2, gap)
        return f"{who}: 1 answered by {answers[1]}, 2 answered by {answers[2]}"

    @mcp.tool()
    async def count(steps: int, ctx: Context) -> str:
        """Report progress 1..`steps` of `steps` (under the request's progressToken), then finish."""
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps)
            await anyio.sleep(0.01)
        return f"counted {steps}"

    @mcp.tool()
    async def slow(who: str, seconds: float) -> str:
        """Answer after `seconds`, asking nothing."""
        await anyio.sleep(seconds)
        return f"{who}: slow done"

    return mcp


def sse_app(mcp: FastMCP) -> Starlette:
    """The app ``mcp.run("sse")`` serves, built here so uvicorn runs on the peers' ready socket."""
    sse = SseServerTransport("/messages/")
    server = mcp._mcp_server  # FastMCP 1.3.0 builds this app inside run_sse_async only

    async def handle_sse(request: Request) -> None:
        async with sse.connect_sse(request.scope, request.receive, request._send) as (read, write):
            await server.run(read, write, server.create_initialization_options())

    return Starlette(
        routes=[Route("/sse", endpoint=handle_sse), Mount("/messages/", app=sse.handle_post_message)]
    )


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and serve until a termination signal (or, on stdio, the end of stdin)."""
    parser = argparse.ArgumentParser(prog="python -m tests.peers.sdk2024_server", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (0 = any free port)")
    parser.add_argument("--stdio", action="store_true", help="serve on stdin/stdout instead of HTTP+SSE")
    args = parser.parse_args(argv)
    mcp = build()
    if args.stdio:
        mcp.run("stdio")
        return 0
    return serve(sse_app(mcp), args.port)


if __name__ == "__main__":
    sys.exit(main())
