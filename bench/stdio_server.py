"""A minimal, fast stdio MCP server for the stdio benchmark, so the proxy's cost dominates.

Reads newline-delimited JSON-RPC on stdin, answers on stdout, standard library only:

- `initialize`: an InitializeResult (legacy 2025-11-25), so the proxy serves a legacy stdio server;
- `server/discover` (the proxy's era probe): -32601, as a legacy-only server answers;
- `tools/call` (any tool) and `tools/list`: canned results; `ping`: an empty result;
- notifications and responses: nothing.

Answers are pre-encoded bytes with the request id spliced in; it exits when stdin closes.
"""

from __future__ import annotations

import json
import sys

_INIT = json.dumps(
    {
        "protocolVersion": "2025-11-25",
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "bench-stdio", "version": "1"},
    },
    separators=(",", ":"),
).encode()
_CALL = json.dumps(
    {
        "content": [{"type": "text", "text": "ok: the canned answer of the benchmark server"}],
        "isError": False,
    },
    separators=(",", ":"),
).encode()
_LIST = json.dumps(
    {"tools": [{"name": "small", "inputSchema": {"type": "object"}}]}, separators=(",", ":")
).encode()
_RESULTS = {"initialize": _INIT, "tools/call": _CALL, "tools/list": _LIST, "ping": b"{}"}
_UNKNOWN = b'"error":{"code":-32601,"message":"Method not found"}}\n'


def main() -> int:
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    for line in stdin:
        message = json.loads(line)
        ident = message.get("id")
        method = message.get("method")
        if ident is None or method is None:
            continue  # a notification, or an answer to a request of ours (there are none)
        head = b'{"jsonrpc":"2.0","id":' + json.dumps(ident).encode() + b","
        result = _RESULTS.get(method)
        stdout.write(head + (b'"result":' + result + b"}\n" if result is not None else _UNKNOWN))
        stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
