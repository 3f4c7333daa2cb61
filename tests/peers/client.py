"""The Python SDK client as a command, run in the peers' own environment the way a user runs a client.

    python -m tests.peers.client --url URL --mode legacy|2026-07-28 SCENARIO...
    python -m tests.peers.client --url URL --mode legacy|2026-07-28 --plan JSON

With scenario names (``tests.peers.scenarios.SCENARIOS``) it runs each on a fresh client and prints
one JSON line per scenario, exactly `run_scenario`'s result (compare it with `expected_result`), or
``{"scenario", "error"}`` when the scenario raised. With ``--plan`` it runs a list of steps on ONE
connected client (a session, for a legacy server) and prints one line per step with the raw result,
for servers whose results the tests normalize themselves (server-everything); see `run_plan`.

Every scenario and step is bounded by ``--timeout`` seconds. The module imports the SDK and the test
peers' own modules only, never the proxy: it runs with the interpreter of ``.cache/peers/h11``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError

from tests.peers.scenarios import SCENARIOS, CallbackLog, Transport, client_for, run_scenario

__all__ = ["error_of", "main", "run_plan"]

DEFAULT_TIMEOUT = 15.0


def error_of(exc: BaseException) -> dict[str, Any]:
    """``{"code", "message"}`` of the JSON-RPC error inside `exc` (exception groups unwrapped).

    ``code`` is None when the failure was not a JSON-RPC error (a transport error, a timeout).
    """
    if isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        return error_of(exc.exceptions[0])
    if isinstance(exc, MCPError):
        return {"code": exc.code, "message": exc.message}
    return {"code": None, "message": f"{type(exc).__name__}: {exc}"}


def _emit(line: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(line, sort_keys=True) + "\n")
    sys.stdout.flush()


async def run_scenarios(
    url: str, mode: str, scenarios: Sequence[str], seconds: float, transport: Transport = "http"
) -> None:
    """One fresh client per scenario, one JSON line each."""
    for scenario in scenarios:
        try:
            with anyio.fail_after(seconds):
                _emit(await run_scenario(url, mode, scenario, read_timeout=seconds, transport=transport))
        except Exception as exc:
            _emit({"scenario": scenario, "error": error_of(exc)})


def _dump(result: types.CallToolResult) -> dict[str, Any]:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


async def _step(client: Any, log: CallbackLog, step: dict[str, Any]) -> Any:
    if step["op"] == "list_tools":
        return sorted(tool.name for tool in (await client.list_tools()).tools)
    if step["op"] == "call":
        progress = log.on_progress if step.get("progress") else None
        call = client.call_tool(step["tool"], step.get("arguments"), progress_callback=progress)
        if "cancelAfterMs" in step:  # the caller gives up: the SDK sends notifications/cancelled
            with anyio.move_on_after(step["cancelAfterMs"] / 1000):
                return _dump(await call)
            return "cancelled"
        return _dump(await call)
    if step["op"] == "sleep":
        await anyio.sleep(step["ms"] / 1000)
        return "slept"
    raise ValueError(f"unknown plan op {step['op']!r}")


async def run_plan(
    url: str, mode: str, plan: Sequence[dict[str, Any]], seconds: float, transport: Transport = "http"
) -> None:
    """Run `plan`'s steps in order on one client: ``{"id", "result"|"error", "callbacks", "progress"}``.

    A step is ``{"id", "op": "list_tools"}``, ``{"id", "op": "call", "tool", "arguments",
    "progress": bool, "cancelAfterMs": N, "answerAfterMs": N}`` (the caller cancels the call after N
    ms, if given; its elicitation callback answers after N ms, if given) or
    ``{"id", "op": "sleep", "ms": N}``. ``callbacks`` are the elicitation and sampling callbacks the
    step triggered; ``roots`` answers are left out, because a legacy server may ask for them at any
    time on its own stream (server-everything does, right after the handshake), not only inside a step.
    """
    log = CallbackLog()
    async with client_for(url, mode, log=log, read_timeout=seconds, transport=transport) as client:
        for step in plan:
            log.clear()
            line: dict[str, Any] = {"id": step["id"]}
            log.answer_delay = step.get("answerAfterMs", 0) / 1000
            try:
                with anyio.fail_after(seconds):
                    line["result"] = await _step(client, log, step)
            except Exception as exc:
                line["error"] = error_of(exc)
            line["callbacks"] = [c for c in log.callbacks if c != "roots"]
            line["progress"] = list(log.progress)
            _emit(line)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line, run, print JSON lines; exit 0 (failures are in the lines)."""
    parser = argparse.ArgumentParser(prog="python -m tests.peers.client", description=__doc__)
    parser.add_argument("--url", required=True, help="the MCP endpoint (stdio: the server's command line)")
    parser.add_argument("--transport", default="http", choices=("http", "sse", "stdio"))
    parser.add_argument("--mode", required=True, choices=("legacy", "2026-07-28"))
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per scenario")
    parser.add_argument("--plan", help="a JSON list of steps to run on one client (instead of scenarios)")
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help=", ".join(SCENARIOS))
    args = parser.parse_args(argv)
    unknown = [name for name in args.scenarios if name not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(SCENARIOS)}")
    if args.plan is not None:
        anyio.run(run_plan, args.url, args.mode, json.loads(args.plan), args.timeout, args.transport)
    else:
        anyio.run(run_scenarios, args.url, args.mode, args.scenarios, args.timeout, args.transport)
    return 0


if __name__ == "__main__":
    sys.exit(main())
