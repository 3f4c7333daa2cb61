"""A hand-written FAKE stdio MCP server, for faults no real server produces on demand.

Not a peer to test compatibility against (the real ones are in ``tests.e2e.channel_peers``): it
answers just enough of MCP (``initialize``, ``tools/list``, ``tools/call``) to reach its faults, by
the tool called: ``echo`` answers, ``noisy`` first prints a line that is not JSON, ``die`` exits with
status 3 before answering, ``busy`` blocks for ``seconds`` (default 30) reading nothing, as a
server busy in a long operation does, ``huge`` answers with a line of ``--huge`` bytes.
``ask_roots`` waits for the next call of another tool, then asks ``roots/list`` with no cue to whose
call the question belongs (as a stdio server asking in flight does) while both calls run, and
answers both once the question is answered or a call is cancelled: its text is what it got.
``--die-on-initialize`` makes it exit with status 3 on ``initialize``, before answering (a server
that crashes at start-up). ``--ignore-term`` makes it ignore SIGTERM and the end of its stdin (only
SIGKILL stops it); ``--grandchild`` starts a process of its own in its process group and names its
pid on stderr. Every byte it reads is appended to ``--record`` (raw), so a test can see exactly what
the proxy wrote to it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def die() -> None:
    sys.stderr.write("fake: dying on request\n")
    sys.stderr.flush()
    os._exit(3)


def answer(ident: Any, method: str, params: dict[str, Any], huge: int) -> dict[str, Any] | None:
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "fake-stdio", "version": "0"},
        }
    if method == "tools/list":
        return {
            "tools": [
                {"name": n, "inputSchema": {"type": "object"}}
                for n in ("echo", "noisy", "die", "busy", "huge", "ask_roots")
            ]
        }
    if method == "tools/call":
        name = params.get("name")
        if name == "noisy":
            sys.stdout.write("this is not json, a stray print\n")
            sys.stdout.flush()
        elif name == "die":
            die()
        elif name == "busy":  # a long operation that reads nothing meanwhile (a blocking call)
            sys.stderr.write("fake: busy\n")
            sys.stderr.flush()
            time.sleep(float(params.get("arguments", {}).get("seconds", 30)))
        elif name == "huge":
            text = "x" * huge
            return {"content": [{"type": "text", "text": text}]}
        return {"content": [{"type": "text", "text": f"echo {params.get('arguments', {})}"}]}
    return None


class RootsAsker:
    """``ask_roots``: the calls held until the question they wait on is settled."""

    QUESTION = "fake-roots-1"

    def __init__(self) -> None:
        self.asker: Any = None
        self.held: list[Any] = []

    def call(self, ident: Any, name: Any) -> bool:
        """Whether the call is held (not answered now)."""
        if name == "ask_roots":
            self.asker = ident
            return True
        if self.asker is None:
            return False
        self.held.append(ident)
        if len(self.held) == 1:
            send({"jsonrpc": "2.0", "id": self.QUESTION, "method": "roots/list", "params": {}})
        return True

    def settled(self, message: dict[str, Any]) -> None:
        """Answer the held calls once the question is answered or a call cancelled."""
        answered = message.get("id") == self.QUESTION and message.get("method") is None
        if self.asker is None or not (answered or message.get("method") == "notifications/cancelled"):
            return
        got = json.dumps(message.get("result", message.get("error", message.get("params"))))
        send({"jsonrpc": "2.0", "id": self.asker, "result": {"content": [{"type": "text", "text": got}]}})
        for ident in self.held:
            send({"jsonrpc": "2.0", "id": ident, "result": {"content": [{"type": "text", "text": "held"}]}})
        self.asker, self.held = None, []


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--record", default="")
    parser.add_argument("--huge", type=int, default=100_000)
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--die-on-initialize", action="store_true")
    parser.add_argument("--grandchild", action="store_true")
    args = parser.parse_args()
    if args.ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.grandchild:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        sys.stderr.write(f"grandchild {child.pid}\n")
        sys.stderr.flush()
    record = open(args.record, "ab") if args.record else None  # noqa: SIM115 (kept open for the run)
    roots = RootsAsker()
    for raw in sys.stdin.buffer:
        if record is not None:
            record.write(raw)
            record.flush()
        message = json.loads(raw)
        method, ident = message.get("method"), message.get("id")
        if method is None or ident is None:
            roots.settled(message)
            continue  # a notification or an answer
        if method == "tools/call" and roots.call(ident, (message.get("params") or {}).get("name")):
            continue
        if method == "initialize" and args.die_on_initialize:
            die()
        result = answer(ident, method, message.get("params") or {}, args.huge)
        if result is None:
            send({"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"no {method}"}})
        else:
            send({"jsonrpc": "2.0", "id": ident, "result": result})
    while args.ignore_term:  # stdin ended: a stubborn server lingers until SIGKILL
        time.sleep(1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
