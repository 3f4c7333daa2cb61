"""Real MCP servers on the transports a message channel carries: stdio commands and HTTP+SSE servers.

- server-everything (npm) in ``stdio`` and ``sse`` modes, from the repository's ``.cache/node`` (the
  ``sse`` one under the loopback preload, which announces its port);
- the Python SDK's in-flight catalogue server (``tests.peers.apps``) on the SDK's stdio and HTTP+SSE
  transports (``tests.peers.channel_serve``), in the peers' own environment;
- the 1.x SDK's FastMCP server (``tests.peers.sdk1_server``) on stdio, in its own environment;
- the 1.3.0 SDK's FastMCP server (``tests.peers.sdk2024_server``) on stdio and on HTTP+SSE, in its
  own environment.
"""

from __future__ import annotations

import json
import os
import shlex
from typing import Any

from tests.peers.envs import (
    LOOPBACK_PRELOAD,
    node_binary,
    node_package,
    peer_python,
    sdk1_python,
    sdk2024_python,
)
from tests.peers.runner import ANNOUNCE_ENV, ServedPeer, node_environment, python_peer_environment


def everything_entry() -> str:
    return str(node_package("@modelcontextprotocol/server-everything") / "dist" / "index.js")


def everything_stdio_command() -> str:
    """server-everything in stdio mode, as an `upstream_cmd`."""
    return shlex.join([node_binary(), everything_entry(), "stdio"])


def python_stdio_command() -> str:
    """The Python SDK's in-flight catalogue server on stdio, as an `upstream_cmd` (run from the repo)."""
    return shlex.join([str(peer_python()), "-m", "tests.peers.channel_serve", "stdio"])


def sdk1_stdio_command() -> str:
    """The 1.x SDK's FastMCP server (``tests.peers.sdk1_server``) on stdio, as an `upstream_cmd` (run
    from the repo): a handshake-era server, as most stdio servers users run are."""
    return shlex.join([str(sdk1_python()), "-m", "tests.peers.sdk1_server", "--stdio"])


def sdk2024_stdio_command() -> list[str]:
    """The 1.3.0 SDK's FastMCP server (``tests.peers.sdk2024_server``) on stdio (run from the repo): a
    handshake-era server that leaves a method it does not know unanswered and stops reading."""
    return [str(sdk2024_python()), "-m", "tests.peers.sdk2024_server", "--stdio"]


class EverythingSse(ServedPeer):
    """server-everything in HTTP+SSE mode: GET /sse, POST /message?sessionId=..."""

    label = "node-everything-sse"

    def command(self) -> list[str]:
        return [node_binary(), "--require", str(LOOPBACK_PRELOAD), everything_entry(), "sse"]

    def environment(self) -> dict[str, str]:
        return node_environment(PORT="0", **{ANNOUNCE_ENV: "1"})

    @property
    def sse_url(self) -> str:
        return f"{self.base_url}/sse"


class PythonSse(ServedPeer):
    """The Python SDK's catalogue server on HTTP+SSE: GET /sse, POST /messages/?session_id=..."""

    label = "python-sse"

    def command(self) -> list[str]:
        return [str(peer_python()), "-m", "tests.peers.channel_serve", "sse", "--port", "0"]

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        env["PYTHONUNBUFFERED"] = "1"
        return env

    @property
    def sse_url(self) -> str:
        return f"{self.base_url}/sse"


class Sdk2024Sse(ServedPeer):
    """The 1.3.0 SDK's FastMCP server on HTTP+SSE (GET /sse, POST /messages/?session_id=...), as
    ``mcp.run("sse")`` serves it: a handshake-era server that ends a session's stream at a method it
    does not know (printing a traceback), `server/discover` included."""

    label = "sdk2024-sse"

    def command(self) -> list[str]:
        return [str(sdk2024_python()), "-m", "tests.peers.sdk2024_server", "--port", "0"]

    def environment(self) -> dict[str, str]:
        return python_peer_environment()

    @property
    def sse_url(self) -> str:
        return f"{self.base_url}/sse"


class GuardedPythonSse(PythonSse):
    """`PythonSse` behind a bearer check (``channel_serve sse --bearer``): 401 with `WWW-Authenticate`
    to any request without `Authorization: Bearer TOKEN`; `heard()` lists the request heads it got."""

    label = "python-sse-bearer"
    TOKEN = "sse-upstream-bearer-2417"

    def command(self) -> list[str]:
        return [*super().command(), "--bearer", self.TOKEN]

    def heard(self) -> list[dict[str, Any]]:
        """Each request head the server got, in order: `heard` (method), `target`, `headers` (pairs)."""
        lines = (line for line in self.stderr_text().splitlines() if line.startswith('{"heard"'))
        return [json.loads(line) for line in lines]
