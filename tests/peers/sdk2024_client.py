"""A client that speaks only 2024-11-05: the official SDK's 1.3.0 release, as its users still run it.

    .cache/peers/sdk2024/bin/python -m tests.peers.sdk2024_client sse URL
    .cache/peers/sdk2024/bin/python -m tests.peers.sdk2024_client stdio COMMAND [ARG...]

Runs only in ``.cache/peers/sdk2024`` (``pip install 'mcp==1.3.0'``). Over HTTP+SSE
(``mcp.client.sse``) or stdio (``mcp.client.stdio``, spawning COMMAND with this environment) it
initializes, lists the tools, calls ``echo`` and ``ask_llm`` (the server samples the client's LLM,
which answers ``Paris``), and prints one JSON line per step: ``{"step", "result"}``, or
``{"step", "error"}`` for the step that failed (the run stops there). This SDK refuses an
``initialize`` answered with any version but 2024-11-05, so the first step says whether a proxy in
between negotiates the client's version. Every step is bounded.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.stdio import stdio_client
from mcp.shared.context import RequestContext

STEP_SECONDS = 15.0


def _emit(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line, sort_keys=True) + "\n")
    sys.stdout.flush()


async def _llm(
    _ctx: RequestContext[Any, Any], _params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="Paris"), model="test-llm"
    )


def _streams(transport: str, target: Sequence[str]) -> AbstractAsyncContextManager[Any]:
    if transport == "sse":
        return sse_client(target[0])
    # The command gets this process's environment (the SDK would pass only HOME, PATH and a few).
    server = StdioServerParameters(command=target[0], args=list(target[1:]), env=dict(os.environ))
    return stdio_client(server)


def _texts(result: types.CallToolResult) -> list[str]:
    return [c.text for c in result.content if isinstance(c, types.TextContent)]


@asynccontextmanager
async def _session(transport: str, target: Sequence[str]) -> AsyncIterator[ClientSession]:
    """A session whose incoming messages are read: this SDK's receive loop hands each notification
    to `incoming_messages` and waits until someone takes it, so its users drain that stream."""
    async with (
        _streams(transport, target) as (read, write),
        ClientSession(read, write, sampling_callback=_llm) as session,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(_drain, session)
        yield session
        tg.cancel_scope.cancel()


async def _drain(session: ClientSession) -> None:
    async for _message in session.incoming_messages:
        pass


async def _run(transport: str, target: Sequence[str]) -> None:
    async with _session(transport, target) as session:
        steps = (
            ("initialize", session.initialize),
            ("list_tools", session.list_tools),
            ("echo", lambda: session.call_tool("echo", {"text": "hi"})),
            ("ask_llm", lambda: session.call_tool("ask_llm", {"question": "Capital of France?"})),
        )
        for name, step in steps:
            try:
                with anyio.fail_after(STEP_SECONDS):
                    result = await step()
            except Exception as exc:
                _emit({"step": name, "error": f"{type(exc).__name__}: {exc}"})
                return
            _emit({"step": name, "result": _shown(result)})


def _shown(result: Any) -> Any:
    if isinstance(result, types.InitializeResult):
        return {"protocolVersion": result.protocolVersion}
    if isinstance(result, types.ListToolsResult):
        return sorted(tool.name for tool in result.tools)
    if isinstance(result, types.CallToolResult):
        return {"isError": result.isError, "text": _texts(result)}
    return None


def main(argv: Sequence[str]) -> int:
    """Run the steps over `argv[0]` (``sse`` or ``stdio``) against the rest (a URL or a command)."""
    if len(argv) < 2 or argv[0] not in ("sse", "stdio"):
        print(__doc__, file=sys.stderr)
        return 2
    anyio.run(_run, argv[0], argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
