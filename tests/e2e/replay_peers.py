"""The demo's SDK servers as processes of their own, for the replay tests, and a changed build of them.

`python -m tests.e2e.replay_peers KIND` serves `/mcp` on 127.0.0.1 (a free port) and prints
`READY <port> h11`, as the peers of `tests.peers.serve` do:

- `legacy`, `modern`: the demo's servers (`proxy.demo.servers`), unchanged: legacy-only in flight,
  2026-07-28-only with `input_required` rounds.
- `reordered-legacy`: the demo's legacy server listing the same tools in reverse order (a build that
  fills its list from a dict or a plugin registry), answering every call as the demo does.
- `changed-legacy`, `changed-modern`: the same servers, a newer build that answers differently: `add`
  words its sum (`2 + 3 = 5`) and says so in its description, `greet` asks the user's age instead of
  their name, and a sixth tool (`divide`) is listed. Real SDK servers, so a replay meets a real server
  that changed, not a fake.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from typing import Any, Final

import mcp_types as types
import uvicorn
from mcp.server.lowlevel import Server
from starlette.types import ASGIApp

from proxy.demo import servers as demo
from tests.peers.runner import DEFAULT_START_TIMEOUT, DEFAULT_STOP_TIMEOUT, ServedPeer

AGE_QUESTION: Final = "What is your age?"
ADD_WORDED: Final = "Add two integers and word the sum."
CHANGED_TOOLS: Final = [
    demo.TOOLS[0].model_copy(update={"description": ADD_WORDED}),
    *demo.TOOLS[1:],
    types.Tool(name="divide", description="Divide two integers.", input_schema=demo.TOOLS[0].input_schema),
]
"""The newer build's tools: `add` described anew (first), `divide` added (last, after the demo's five)."""
KINDS: Final = ("legacy", "modern", "changed-legacy", "changed-modern", "reordered-legacy")


def _reordered() -> Server[Any]:
    async def list_tools(ctx: demo.Ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=demo.TOOLS[::-1])

    return Server(
        "mcp-proxy-demo-legacy", version="1.0.0", on_list_tools=list_tools, on_call_tool=demo._legacy_call
    )


def _changed(era: str) -> Server[Any]:
    base = demo._legacy_call if era == "legacy" else demo._mrtr_call

    async def call(ctx: demo.Ctx, params: types.CallToolRequestParams) -> Any:
        args = params.arguments or {}
        if params.name == "add":
            return demo._text(f"{args.get('a')} + {args.get('b')} = {args.get('a', 0) + args.get('b', 0)}")
        if params.name == "greet" and era == "legacy":
            answer = await demo._inflight(ctx, demo._ask(AGE_QUESTION, "age"), types.ElicitResult)
            return demo._text(f"You are {demo._answer(answer, 'age')}")
        if params.name == "greet":
            answer = demo._response(params, "age", types.ElicitResult)
            if answer is None:
                return demo._need({"age": demo._ask(AGE_QUESTION, "age")})
            return demo._text(f"You are {demo._answer(answer, 'age')}")
        return await base(ctx, params)

    async def list_tools(ctx: demo.Ctx, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=CHANGED_TOOLS)

    return Server(f"mcp-proxy-demo-{era}", version="1.0.0", on_list_tools=list_tools, on_call_tool=call)


def build(kind: str) -> ASGIApp:
    """The ASGI app of a peer kind."""
    if kind in ("legacy", "modern"):
        return demo.build_app(kind)
    era = kind.removeprefix("changed-").removeprefix("reordered-")
    server = _reordered() if kind.startswith("reordered-") else _changed(era)
    app: ASGIApp = server.streamable_http_app(streamable_http_path="/mcp", host="127.0.0.1")
    return demo.legacy_only(app) if era == "legacy" else demo.modern_only(app)


class DemoPeer(ServedPeer):
    """One of these servers as a subprocess of this interpreter (the project's own environment)."""

    def __init__(self, kind: str) -> None:
        super().__init__(start_timeout=DEFAULT_START_TIMEOUT, stop_timeout=DEFAULT_STOP_TIMEOUT)
        self.kind = kind
        self.label = f"demo-{kind}"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "tests.e2e.replay_peers", self.kind]


class _ReadyServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, port: int) -> None:
        super().__init__(config)
        self._port = port

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if not self.should_exit:
            sys.stdout.write(f"READY {self._port} h11\n")
            sys.stdout.flush()


def main() -> int:
    """Serve one kind until SIGTERM."""
    parser = argparse.ArgumentParser(prog="python -m tests.e2e.replay_peers")
    parser.add_argument("kind", choices=KINDS)
    kind = parser.parse_args().kind
    # IPPROTO_TCP as uvicorn's own binding has it, so asyncio sets TCP_NODELAY (tests.peers.serve says why)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(build(kind), log_config=None, access_log=False, timeout_graceful_shutdown=1)
    server = _ReadyServer(config, sock.getsockname()[1])
    asyncio.run(server.serve(sockets=[sock]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
