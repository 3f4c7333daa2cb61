"""Client side of the peer tests: run named scenarios with the official SDK client.

Each scenario drives one feature of the test peers (``tests.peers.apps``) through ``mcp.Client``
with real callbacks that give fixed answers (name "octocat", color "green", sampled text "Paris",
one root), and returns a normalized, JSON-comparable dict. Because the peers give identical final
results in both styles, a run through the proxy can be compared with a direct run, whatever era
each side speaks.

Modes: ``"legacy"`` (``initialize`` offering 2025-11-25), ``"2026-07-28"`` (no handshake),
``"auto"`` (``server/discover``, falling back to ``initialize``), or a pinned handshake version
such as ``"2025-06-18"``. The SDK's ``Client`` has no option for the last one (``mode="legacy"``
always offers its newest handshake version), so `PinnedLegacyClient` replaces the session's
``initialize`` with one that offers the pinned version.
"""

from __future__ import annotations

import shlex
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS

__all__ = [
    "ANSWERS",
    "CONCURRENT_SCENARIOS",
    "ROOT_URI",
    "SAMPLED_TEXT",
    "SCENARIOS",
    "CallbackLog",
    "ElicitAction",
    "PinnedLegacyClient",
    "client_for",
    "expected_result",
    "normalize_prompt_result",
    "normalize_resource_result",
    "normalize_tool_result",
    "run_scenario",
]

ElicitAction = Literal["accept", "decline", "cancel"]
Transport = Literal["http", "sse", "stdio"]
"""How the client reaches its server: Streamable HTTP, HTTP+SSE (2024-11-05), or stdio, where the
"url" is the command line that starts the server (split like a shell would)."""

ANSWERS: Final[dict[str, str]] = {"name": "octocat", "color": "green"}
"""What the elicitation callback fills in for each form field it recognizes."""
SAMPLED_TEXT: Final = "Paris"
SAMPLED_MODEL: Final = "test-model"
ROOT_URI: Final = "file:///home/u/proj"
ROOT_NAME: Final = "proj"

HTTP_TIMEOUT: Final = httpx2.Timeout(30.0, read=60.0)
DEFAULT_READ_TIMEOUT: Final = 30.0
"""Seconds a client waits for any one response (below pytest's 60 s per-test timeout)."""


@dataclass
class CallbackLog:
    """What the client's callbacks saw, in order: callback kinds, progress values, log lines."""

    callbacks: list[str] = field(default_factory=list)
    progress: list[float] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    answer_delay: float = 0.0
    """Seconds the elicitation callback waits before it answers (a user slow to fill in the form)."""

    def clear(self) -> None:
        """Forget everything recorded so far (between calls on one client)."""
        self.callbacks.clear()
        self.progress.clear()
        self.logs.clear()

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        """A `ProgressFnT` recording each progress value."""
        self.progress.append(progress)


def _callbacks(log: CallbackLog, elicit_action: ElicitAction) -> dict[str, Any]:
    """The client callbacks: fixed answers, each invocation recorded in `log`."""

    async def elicitation(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        if isinstance(params, types.ElicitRequestURLParams):
            log.callbacks.append(f"elicitation-url:{params.url}")
            # URL mode: consent only, never content.
            return types.ElicitResult(action=elicit_action)
        log.callbacks.append(f"elicitation:{params.message}")
        if log.answer_delay:
            await anyio.sleep(log.answer_delay)
        if elicit_action != "accept":
            return types.ElicitResult(action=elicit_action)
        properties = params.requested_schema.get("properties", {})
        content: dict[str, str | int | float | bool | list[str] | None] = {
            key: value for key, value in ANSWERS.items() if key in properties
        }
        return types.ElicitResult(action="accept", content=content)

    async def sampling(
        context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.CreateMessageResultWithTools | types.ErrorData:
        first = params.messages[0].content if params.messages else None
        question = first.text if isinstance(first, types.TextContent) else ""
        log.callbacks.append(f"sampling:{question}")
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(text=SAMPLED_TEXT),
            model=SAMPLED_MODEL,
            stop_reason="endTurn",
        )

    async def roots(context: ClientRequestContext) -> types.ListRootsResult | types.ErrorData:
        log.callbacks.append("roots")
        return types.ListRootsResult(roots=[types.Root(uri=ROOT_URI, name=ROOT_NAME)])

    async def logging(params: types.LoggingMessageNotificationParams) -> None:
        log.logs.append(f"{params.level}:{params.data}")

    return {
        "elicitation_callback": elicitation,
        "sampling_callback": sampling,
        "list_roots_callback": roots,
        "logging_callback": logging,
    }


@dataclass
class PinnedLegacyClient(Client):
    """A `Client` whose ``initialize`` offers `handshake_version` instead of the SDK's newest.

    Construct with ``mode="legacy"``. The capability ad follows the pinned version: at
    2025-06-18 elicitation is the bare ``{}`` (form only), before that it is absent, as a client of
    that era declares it (its elicitation callback still answers whatever the server sends).
    """

    handshake_version: str = LATEST_HANDSHAKE_VERSION

    async def _build_session(self, exit_stack: AsyncExitStack) -> ClientSession:
        session = await super()._build_session(exit_stack)
        version = self.handshake_version

        async def initialize() -> types.InitializeResult:
            capabilities = session._build_capabilities(version)
            if version != "2025-11-25" and capabilities.elicitation is not None:
                # 2025-06-18 knows only the bare form-mode `{}`; older versions have no elicitation.
                elicitation = types.ElicitationCapability() if version == "2025-06-18" else None
                capabilities = capabilities.model_copy(update={"elicitation": elicitation})
            result = await session.send_request(
                types.InitializeRequest(
                    params=types.InitializeRequestParams(
                        protocol_version=version,
                        capabilities=capabilities,
                        client_info=session._client_info,
                    )
                ),
                types.InitializeResult,
            )
            if result.protocol_version != version:
                raise RuntimeError(f"server answered {result.protocol_version} to an offer of {version}")
            session.adopt(result)
            await session.send_notification(types.InitializedNotification())
            return result

        # Same contract as `ClientSession.initialize`, only the offered version differs.
        session.initialize = initialize  # type: ignore[method-assign]
        return session


@asynccontextmanager
async def client_for(
    url: str,
    mode: str = "legacy",
    *,
    headers: dict[str, str] | None = None,
    log: CallbackLog | None = None,
    elicit_action: ElicitAction = "accept",
    log_level: types.LoggingLevel | None = None,
    read_timeout: float | None = DEFAULT_READ_TIMEOUT,
    transport: Transport = "http",
) -> AsyncIterator[Client]:
    """A connected SDK `Client` for `url` with the recording callbacks installed.

    `transport` says how `url` is reached (`Transport`): a stdio server is started from the command
    line `url` and stopped when the client closes.

    `mode` is ``"legacy"``, ``"auto"``, a modern version (``"2026-07-28"``) or a handshake version
    to pin (``"2025-06-18"``, ...). `headers` are sent on every HTTP request. `log` (created when
    omitted; pass one to read it) records the callbacks. `log_level` opts in to log messages:
    ``logging/setLevel`` after the handshake on legacy connections, the per-request ``_meta``
    opt-in on 2026-07-28. `read_timeout` bounds each request (a hung peer or proxy fails the call
    with an error instead of stalling until the test timeout). Response caching is off so every
    call reaches the wire.
    """
    log = log if log is not None else CallbackLog()
    callbacks = _callbacks(log, elicit_action)
    async with httpx2.AsyncClient(headers=headers or {}, timeout=HTTP_TIMEOUT) as http:
        server: Any
        if transport == "stdio":
            words = shlex.split(url)
            server = StdioServerParameters(command=words[0], args=words[1:])
        elif transport == "sse":
            server = sse_client(url, headers=headers, sse_read_timeout=read_timeout or 60.0)
        else:
            server = streamable_http_client(url, http_client=http)
        client: Client
        if mode in HANDSHAKE_PROTOCOL_VERSIONS and mode != LATEST_HANDSHAKE_VERSION:
            client = PinnedLegacyClient(
                server,
                mode="legacy",
                handshake_version=mode,
                cache=None,
                log_level=log_level,
                read_timeout_seconds=read_timeout,
                **callbacks,
            )
        else:
            client_mode = "legacy" if mode == LATEST_HANDSHAKE_VERSION else mode
            client = Client(
                server,
                mode=client_mode,
                cache=None,
                log_level=log_level,
                read_timeout_seconds=read_timeout,
                **callbacks,
            )
        async with client:
            if log_level is not None and client.protocol_version not in MODERN_PROTOCOL_VERSIONS:
                with warnings.catch_warnings():
                    # logging/setLevel is deprecated in 2026-07-28, yet it is how a legacy client opts in.
                    warnings.simplefilter("ignore", MCPDeprecationWarning)
                    await client.set_logging_level(log_level)
            yield client


# --------------------------------------------------------------------------------------------
# Normalization: results as plain JSON, equal across eras and styles.
# --------------------------------------------------------------------------------------------


def _content_text(block: Any) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    return f"<{getattr(block, 'type', type(block).__name__)}>"


def normalize_tool_result(result: types.CallToolResult) -> dict[str, Any]:
    """``{"content": [texts], "isError": bool}`` plus ``structuredContent`` when present."""
    out: dict[str, Any] = {
        "content": [_content_text(block) for block in result.content],
        "isError": bool(result.is_error),
    }
    if result.structured_content is not None:
        out["structuredContent"] = result.structured_content
    return out


def normalize_prompt_result(result: types.GetPromptResult) -> dict[str, Any]:
    """``{"description": ..., "messages": [{"role", "text"}]}``."""
    return {
        "description": result.description,
        "messages": [{"role": m.role, "text": _content_text(m.content)} for m in result.messages],
    }


def normalize_resource_result(result: types.ReadResourceResult) -> list[dict[str, Any]]:
    """``[{"uri", "text"}]`` per content item (blobs as ``<blob>``)."""
    return [
        {"uri": str(c.uri), "text": c.text if isinstance(c, types.TextResourceContents) else "<blob>"}
        for c in result.contents
    ]


# --------------------------------------------------------------------------------------------
# Scenarios.
# --------------------------------------------------------------------------------------------

Scenario = Callable[[Client, CallbackLog], Awaitable[Any]]


def _tool(name: str, arguments: dict[str, Any] | None = None, *, progress: bool = False) -> Scenario:
    async def run(client: Client, log: CallbackLog) -> Any:
        result = await client.call_tool(
            name, arguments, progress_callback=log.on_progress if progress else None
        )
        return normalize_tool_result(result)

    return run


async def _list_tools(client: Client, log: CallbackLog) -> Any:
    return sorted(tool.name for tool in (await client.list_tools()).tools)


async def _prompts(client: Client, log: CallbackLog) -> Any:
    listed = await client.list_prompts()
    return {
        "list": sorted(
            ({"name": p.name, "arguments": [a.name for a in p.arguments or []]} for p in listed.prompts),
            key=lambda entry: str(entry["name"]),
        ),
        "greet_prompt": normalize_prompt_result(await client.get_prompt("greet_prompt")),
        "plain_prompt": normalize_prompt_result(await client.get_prompt("plain_prompt", {"topic": "otters"})),
    }


async def _resources(client: Client, log: CallbackLog) -> Any:
    listed = await client.list_resources()
    return {
        "list": sorted(str(r.uri) for r in listed.resources),
        "res://static": normalize_resource_result(await client.read_resource("res://static")),
        "res://ask": normalize_resource_result(await client.read_resource("res://ask")),
    }


SCENARIOS: Final[dict[str, Scenario]] = {
    "echo": _tool("echo", {"text": "hello"}),
    "add": _tool("add", {"a": 2, "b": 3}),
    "ask_name": _tool("ask_name"),
    "ask_url": _tool("ask_url"),
    "ask_llm": _tool("ask_llm", {"question": "What is the capital of France?"}),
    "list_client_roots": _tool("list_client_roots"),
    "ask_twice": _tool("ask_twice"),
    "ask_two_at_once": _tool("ask_two_at_once"),
    "state_only": _tool("state_only"),
    "slow_progress": _tool("slow_progress", {"steps": 3}),
    "fail": _tool("fail"),
    "list_tools": _list_tools,
    "prompts": _prompts,
    "resources": _resources,
    "progress": _tool("slow_progress", {"steps": 3}, progress=True),
    "logging": _tool("echo", {"text": "logged"}),
}
"""Scenario name -> coroutine driving it on a connected client, returning the normalized result."""

TOOL_CALLS: Final = (
    "echo",
    "add",
    "ask_name",
    "ask_url",
    "ask_llm",
    "list_client_roots",
    "ask_twice",
    "ask_two_at_once",
    "state_only",
    "slow_progress",
    "fail",
)
"""One call of each tool of the catalogue (the scenarios named after a tool)."""

CONCURRENT_SCENARIOS: Final = frozenset({"ask_two_at_once"})
"""Scenarios whose callbacks run concurrently: `run_scenario` sorts their callback list."""

_PROMPT_LIST: Final = [
    {"arguments": [], "name": "greet_prompt"},
    {"arguments": ["topic"], "name": "plain_prompt"},
]


def _tool_expect(*texts: str, is_error: bool = False, **extra: Any) -> dict[str, Any]:
    return {"content": list(texts), "isError": is_error, **extra}


_EXPECTED: Final[dict[str, dict[str, Any]]] = {
    "echo": {"result": _tool_expect("hello"), "callbacks": [], "progress": []},
    "add": {"result": _tool_expect("5", structuredContent={"result": 5}), "callbacks": [], "progress": []},
    "ask_name": {"result": _tool_expect("Hello, octocat!"), "callbacks": ["elicitation:What is your name?"]},
    "ask_url": {
        "result": _tool_expect("url:accept"),
        "callbacks": ["elicitation-url:https://example.com/consent"],
    },
    "ask_llm": {
        "result": _tool_expect("LLM said: Paris"),
        "callbacks": ["sampling:What is the capital of France?"],
    },
    "list_client_roots": {"result": _tool_expect(ROOT_URI), "callbacks": ["roots"]},
    "ask_twice": {
        "result": _tool_expect("name=octocat color=green"),
        "callbacks": ["elicitation:What is your name?", "elicitation:What is your favorite color?"],
    },
    "ask_two_at_once": {
        "result": _tool_expect("name=octocat llm=Paris"),
        "callbacks": sorted(["elicitation:What is your name?", "sampling:What is the capital of France?"]),
    },
    "state_only": {"result": _tool_expect("state ok"), "callbacks": []},
    "slow_progress": {"result": _tool_expect("done 3"), "callbacks": [], "progress": []},
    "fail": {"result": _tool_expect("boom", is_error=True), "callbacks": []},
    "list_tools": {
        "result": sorted(
            [
                "add",
                "ask_llm",
                "ask_name",
                "ask_twice",
                "ask_two_at_once",
                "ask_url",
                "echo",
                "fail",
                "list_client_roots",
                "slow_progress",
                "state_only",
            ]
        ),
        "callbacks": [],
    },
    "prompts": {
        "result": {
            "list": _PROMPT_LIST,
            "greet_prompt": {
                "description": "Greeting",
                "messages": [{"role": "user", "text": "Hello, octocat"}],
            },
            "plain_prompt": {
                "description": "Plain prompt",
                "messages": [{"role": "user", "text": "Tell me about otters"}],
            },
        },
        "callbacks": ["elicitation:What is your name?"],
    },
    "resources": {
        "result": {
            "list": ["res://ask", "res://static"],
            "res://static": [{"uri": "res://static", "text": "static content"}],
            "res://ask": [{"uri": "res://ask", "text": "resource for octocat"}],
        },
        "callbacks": ["elicitation:What is your name?"],
    },
    "progress": {"result": _tool_expect("done 3"), "callbacks": [], "progress": [1.0, 2.0, 3.0]},
    "logging": {"result": _tool_expect("logged"), "callbacks": [], "logs": ["info:echo: logged"]},
}


def expected_result(scenario: str, *, log_level: types.LoggingLevel | None = None) -> dict[str, Any]:
    """What `run_scenario` returns for `scenario` against any peer kind, with the default answers.

    Pass the same `log_level` as to `run_scenario` (the ``logging`` scenario implies ``"info"``).
    """
    spec = _EXPECTED[scenario]
    out: dict[str, Any] = {
        "scenario": scenario,
        "result": spec["result"],
        "callbacks": spec["callbacks"],
        "progress": spec.get("progress", []),
    }
    if log_level is not None or scenario == "logging":
        out["logs"] = spec.get("logs", ["info:echo: hello"] if scenario == "echo" else [])
    return out


async def run_scenario(
    url: str,
    mode: str,
    scenario: str,
    *,
    headers: dict[str, str] | None = None,
    elicit_action: ElicitAction = "accept",
    log_level: types.LoggingLevel | None = None,
    read_timeout: float | None = DEFAULT_READ_TIMEOUT,
    transport: Transport = "http",
) -> dict[str, Any]:
    """Run `scenario` on a fresh client for `url` (reached by `transport`) and return the normalized outcome.

    Keys: ``scenario``; ``result`` (normalized tool/prompt/resource results); ``callbacks`` (the
    callback kinds invoked, in order, e.g. ``"elicitation:What is your name?"``,
    ``"elicitation-url:<url>"``, ``"sampling:<question>"``, ``"roots"``; sorted for
    `CONCURRENT_SCENARIOS`); ``progress`` (progress values seen); and ``logs`` (``"level:data"``)
    only when a `log_level` was requested (the ``logging`` scenario requests ``"info"``), because
    legacy servers log without being asked while 2026-07-28 servers log only on request.
    """
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; expected one of {', '.join(SCENARIOS)}")
    if scenario == "logging" and log_level is None:
        log_level = "info"
    log = CallbackLog()
    async with client_for(
        url,
        mode,
        headers=headers,
        log=log,
        elicit_action=elicit_action,
        log_level=log_level,
        read_timeout=read_timeout,
        transport=transport,
    ) as client:
        result = await SCENARIOS[scenario](client, log)
    out: dict[str, Any] = {
        "scenario": scenario,
        "result": result,
        "callbacks": sorted(log.callbacks) if scenario in CONCURRENT_SCENARIOS else list(log.callbacks),
        "progress": list(log.progress),
    }
    if log_level is not None:
        out["logs"] = list(log.logs)
    return out
