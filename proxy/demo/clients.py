"""The demo's scripted clients: one `mcp` SDK client per era, answering every question the same way.

Each run lists the tools and calls every one of them; a call succeeds when its result text is the
expected one. Callbacks answer elicitation with fixed values, sampling with a fixed reply and roots
with one fixed root, so a run through pass-through and a run through a bridge must agree exactly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client

ANSWERS: Final = {"name": "Ada", "color": "teal"}
SAMPLED: Final = "Paris"
ROOT: Final = "file:///home/demo/project"

SCRIPT: Final[list[tuple[str, str, dict[str, Any] | None, str]]] = [
    ("plain call", "add", {"a": 2, "b": 3}, "5"),
    ("elicitation", "greet", None, "Hello, Ada!"),
    ("sampling", "ask_llm", None, "The model says: Paris"),
    ("roots", "roots", None, ROOT),
    ("two rounds", "survey", None, "Ada likes teal"),
]
"""(what it shows, tool, arguments, expected result text) for every call of a run."""

CLIENT_MODES: Final = {"legacy": "legacy", "modern": "2026-07-28"}
"""The SDK client mode for each era."""


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """One call of a run: what it showed, whether it gave the expected result, and how long it took."""

    label: str
    tool: str
    ok: bool
    detail: str
    ms: float


async def _elicit(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
    if isinstance(params, types.ElicitRequestURLParams):
        return types.ElicitResult(action="accept")
    fields = params.requested_schema.get("properties", {})
    content: dict[str, str | int | float | bool | list[str] | None] = {
        key: value for key, value in ANSWERS.items() if key in fields
    }
    return types.ElicitResult(action="accept", content=content)


async def _sample(
    context: ClientRequestContext, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(text=SAMPLED), model="demo-model", stop_reason="endTurn"
    )


async def _roots(context: ClientRequestContext) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[types.Root(uri=ROOT, name="project")])


def _text_of(result: types.CallToolResult) -> str:
    return " ".join(b.text for b in result.content if isinstance(b, types.TextContent))


async def _call(client: Client, label: str, tool: str, args: dict[str, Any] | None, want: str) -> CallOutcome:
    started = time.perf_counter()
    try:
        result = await client.call_tool(tool, args)
    except Exception as exc:  # the demo reports every failure, whatever raised it
        detail = f"{type(exc).__name__}: {exc}"
        return CallOutcome(label, tool, False, detail, (time.perf_counter() - started) * 1000)
    took = (time.perf_counter() - started) * 1000
    text = _text_of(result)
    ok = text == want and not result.is_error
    return CallOutcome(label, tool, ok, text if ok else f"expected {want!r}, got {text!r}", took)


async def run_client(url: str, era: str, limit: float = 20.0) -> list[CallOutcome]:
    """Connect a client of `era` ("legacy" or "modern") to `url` and run the whole script.

    `limit` bounds every HTTP request and every response wait, in seconds.
    """
    outcomes: list[CallOutcome] = []
    try:
        # The demo's proxies listen on 127.0.0.1: a forward proxy from the environment (HTTP_PROXY)
        # cannot reach them.
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(limit), trust_env=False) as http:
            transport = streamable_http_client(url, http_client=http)
            client = Client(
                transport,
                mode=CLIENT_MODES[era],
                cache=None,
                read_timeout_seconds=limit,
                elicitation_callback=_elicit,
                sampling_callback=_sample,
                list_roots_callback=_roots,
            )
            async with client:
                for label, tool, args, want in SCRIPT:
                    outcomes.append(await _call(client, label, tool, args, want))
    except Exception as exc:  # could not connect or the session broke: the missing calls failed
        done = {o.tool for o in outcomes}
        detail = f"{type(exc).__name__}: {_first_line(exc)}"
        outcomes.extend(
            CallOutcome(label, tool, False, detail, 0.0) for label, tool, _, _ in SCRIPT if tool not in done
        )
    return outcomes


def _first_line(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _first_line(exc.exceptions[0])
    return (str(exc) or type(exc).__name__).splitlines()[0]
